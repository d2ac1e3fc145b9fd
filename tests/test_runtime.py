"""A Runtime is one cache: its traced arrays work in it alone, and its clear() empties all it holds,
the rewrites' memory and sklearn's handed-out arrays included."""
import numpy as np
import pytest

from memphis.sklearn import results_of
from memphis.tiers.runtime import Runtime
from memphis.tracing import array as traced
from memphis.tracing.lineage import LineageItem
from memphis.tracing.partial import MAX_PREFIX_BYTES, rewrites_of


@pytest.fixture
def runtime(tmp_path):
    """A Runtime of its own, beside the process's: 64 MiB host, no disk, no durable tier, keeping all."""
    cache = Runtime()
    cache.configure_host(host_max_bytes=64 << 20, disk_max_bytes=0, durable_max_bytes=0, min_cost_s=0.0)
    return cache


def test_two_runtimes_trace_independently(runtime, tmp_path):
    other = Runtime()
    other.configure_host(host_max_bytes=64 << 20, disk_max_bytes=0, durable_max_bytes=0, min_cost_s=0.0)
    data = np.random.default_rng(0).standard_normal((200, 10))
    X = traced.array(data, runtime=runtime)
    for _ in range(3):
        gram = X.T @ X
    assert gram.runtime is runtime and runtime.stats()["hits"] == 2
    assert other.stats()["hits"] == other.stats()["misses"] == 0 and not other.entries()
    Y = traced.array(data, runtime=other)  # the same data: the same key, another cache
    np.testing.assert_array_equal((Y.T @ Y).numpy(), gram.numpy())
    assert (Y.T @ Y).runtime is other and other.stats()["misses"] == 1 and other.stats()["hits"] == 1
    assert runtime.stats()["hits"] == 2
    runtime.clear()  # one cache's clear leaves the other's entries
    assert not runtime.entries() and len(other.entries()) == 1


def test_clear_empties_the_rewrites_memory_and_the_handed_out_arrays(runtime):
    rng = np.random.default_rng(1)
    X = traced.array(rng.standard_normal((400, 8)), runtime=runtime)
    S = X[:, [1, 3, 5]]  # a column selection, remembered while S lives
    (S.T @ S).numpy()
    A = traced.array(rng.standard_normal((2048, 64)), runtime=runtime)
    A @ traced.array(rng.standard_normal((64, 16)), runtime=runtime)  # a projection: its right operand is kept
    handed_out = np.ones(3)
    results_of(runtime).remember(handed_out, LineageItem("leaf"))
    rewrites = rewrites_of(runtime)
    assert rewrites.selections and rewrites.products and rewrites.prefix_bytes > 0
    assert results_of(runtime).lineage_of(handed_out) is not None

    runtime.clear()
    assert not rewrites.selections and not rewrites.selections_by_key and not rewrites.compositions
    assert not rewrites.products and rewrites.prefix_bytes == 0
    assert results_of(runtime).lineage_of(handed_out) is None and not runtime.entries()


def test_the_right_operands_kept_for_prefix_rewrites_stay_within_their_budget(runtime):
    rng = np.random.default_rng(2)
    right = traced.array(rng.standard_normal((128, 1024)), runtime=runtime)  # 1 MiB, the most one may take
    offered = 0
    for _ in range(3 * MAX_PREFIX_BYTES // right.nbytes):  # three budgets' worth, each of another left operand
        left = traced.array(rng.standard_normal((129, 128)), runtime=runtime)
        left @ right
        offered += right.nbytes
        rewrites = rewrites_of(runtime)
        assert rewrites.prefix_bytes <= MAX_PREFIX_BYTES
        assert rewrites.prefix_bytes == sum(p.right.nbytes for ps in rewrites.products.values() for p in ps)
    assert offered > MAX_PREFIX_BYTES and rewrites_of(runtime).prefix_bytes >= MAX_PREFIX_BYTES - right.nbytes


def total(X):
    return X.sum(axis=0)


def test_a_sklearn_memory_keeps_its_results_in_its_own_runtime(runtime):
    from memphis.sklearn import Memory
    from memphis.tiers.runtime import default

    cached = Memory(runtime).cache(total)
    X = np.arange(12.0).reshape(4, 3)
    in_default = default.stats()["hits"], default.stats()["misses"]
    np.testing.assert_array_equal(cached(X), cached(X))
    assert runtime.stats()["misses"] == runtime.stats()["hits"] == 1
    assert (default.stats()["hits"], default.stats()["misses"]) == in_default
