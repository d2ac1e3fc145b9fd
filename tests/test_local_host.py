import os
import stat
import tempfile
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memphis.local as ml
from memphis.tiers.disk import DiskTier
from memphis.tiers.host import TRANSITIONS, HostTier, State


def key(i):
    return f"{i:032x}"


@pytest.fixture
def tier(tmp_path):
    return HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path / "spill"), max_bytes=1 << 20))


def test_budget_holds_under_pressure(tier):
    for i in range(50):
        # cheap values: dropped, not spilled, when they leave
        tier.get_or_compute(key(i), lambda: np.full(100, float(i)), cost_hint=1e-6)
        assert tier.bytes_held <= tier.max_bytes
    assert tier.stats()["evicted"] >= 38 and tier.stats()["spilled"] == 0
    assert tier.get_or_compute(key(99), lambda: np.zeros(2_000)).size == 2_000  # bigger than the budget
    assert tier.state_of(key(99)) is None


def test_lowest_score_leaves_first(tier):
    tier.get_or_compute(key(1), lambda: np.zeros(500), cost_hint=1e-6)  # cheap
    tier.get_or_compute(key(2), lambda: np.zeros(500), cost_hint=1e-3)  # dear (below the spill floor)
    tier.get_or_compute(key(3), lambda: np.zeros(500), cost_hint=1e-3)
    assert tier.state_of(key(1)) is None and tier.state_of(key(2)) is State.CACHED


def test_spill_and_reload_round_trip_bit_exactly(tier):
    values = {1: np.random.default_rng(0).standard_normal(1000),
              2: pa.table({"a": [1, 2, None], "b": ["x", "y", "z"]}),
              3: (np.arange(5), np.eye(3, dtype=np.float32)),
              4: pd.DataFrame({"a": [1.5, np.nan], "b": ["p", "q"]})}
    for i, value in values.items():
        tier.get_or_compute(key(i), lambda v=value: v, cost_hint=10.0)  # dear: worth a disk round trip
    tier.get_or_compute(key(9), lambda: np.zeros(1250), cost_hint=10.0)  # the whole budget: the others leave
    assert tier.stats()["spilled"] == 4
    for i, value in values.items():
        state = tier.state_of(key(i))
        got = tier.get_or_compute(key(i), lambda: pytest.fail("recomputed"))
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.tobytes() == value.tobytes()
        elif isinstance(value, tuple):
            assert all(g.dtype == v.dtype and g.tobytes() == v.tobytes() for g, v in zip(got, value))
        elif isinstance(value, pa.Table):
            assert got.equals(value)
        else:
            pd.testing.assert_frame_equal(got, value)
        assert state in (State.CACHED, State.SPILLED)
    assert tier.stats()["reloaded"] >= 3  # the last reload may have pushed the first one out again


def test_corrupt_spill_file_is_detected_and_recomputed(tier):
    value = np.arange(1000.0)
    tier.get_or_compute(key(1), lambda: value, cost_hint=10.0)
    tier.get_or_compute(key(2), lambda: np.zeros(1000), cost_hint=10.0)
    assert tier.state_of(key(1)) is State.SPILLED
    path = tier.disk.path_of(key(1))
    with open(path, "r+b") as f:
        f.seek(-20, os.SEEK_END)
        f.write(b"\xff" * 8)
    recomputed = []
    got = tier.get_or_compute(key(1), lambda: recomputed.append(1) or value.copy())
    assert recomputed == [1] and np.array_equal(got, value)
    assert tier.stats()["corrupt"] == 1 and not os.path.exists(path)


def test_spill_files_are_private(tier):
    tier.get_or_compute(key(1), lambda: np.arange(1000.0), cost_hint=10.0)
    tier.get_or_compute(key(2), lambda: np.arange(1000.0), cost_hint=10.0)
    path = tier.disk.path_of(key(1))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(os.path.dirname(path))).st_mode) == 0o700
    assert os.path.basename(path) == key(1) + ".npy"


def test_a_full_disk_drops_instead(tier, monkeypatch, caplog):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tempfile, "mkstemp", full)
    for i in range(4):
        tier.get_or_compute(key(i), lambda: np.arange(1000.0), cost_hint=10.0)
    assert tier.state_of(key(0)) is None and tier.stats()["spilled"] == 0
    assert sum("cannot spill" in r.message for r in caplog.records) == 1  # logged once


def test_threads_asking_for_an_inflight_key_compute_it_once(tier):
    calls, barrier = [], threading.Barrier(8)

    def compute():
        calls.append(1)
        time.sleep(0.2)
        return np.arange(10.0)

    results = []

    def ask():
        barrier.wait()
        results.append(tier.get_or_compute(key(7), compute))
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 8
    assert all(np.array_equal(r, np.arange(10.0)) for r in results)


def test_a_failed_computation_stores_nothing_and_waiters_compute(tier):
    started, calls, results, errors = threading.Event(), [], [], []

    def failing():
        calls.append("fail")
        started.set()
        time.sleep(0.2)
        raise RuntimeError("boom")

    def first():
        try:
            tier.get_or_compute(key(3), failing)
        except RuntimeError as error:
            errors.append(error)

    def other():
        started.wait()
        results.append(tier.get_or_compute(key(3), lambda: calls.append("ok") or np.ones(3)))
    threads = [threading.Thread(target=first)] + [threading.Thread(target=other) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1 and calls[0] == "fail" and calls.count("ok") == 1
    assert len(results) == 4 and all(np.array_equal(r, np.ones(3)) for r in results)
    assert tier.state_of(key(3)) is State.CACHED


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["get", "clear"]), st.integers(0, 15), st.integers(1, 4000),
                          st.sampled_from([1e-6, 1e-3, 10.0])), max_size=60))
def test_random_operations_keep_the_budget_and_valid_states(tmp_path_factory, operations):
    tier = HostTier(max_bytes=8_000, disk=DiskTier(root=str(tmp_path_factory.mktemp("spill")), max_bytes=20_000))
    moves = []
    original = tier._move

    def checked_move(entry, state):
        moves.append((entry.state, state))
        original(entry, state)
    tier._move = checked_move
    for op, i, size, cost in operations:
        if op == "clear":
            tier.clear()
            continue
        value = tier.get_or_compute(key(i), lambda: np.full(size // 8, float(i)), cost_hint=cost)
        assert np.all(value == float(i))
        assert 0 <= tier.bytes_held <= tier.max_bytes
        assert tier.bytes_held == sum(e.size for e in tier._entries.values() if e.state is State.CACHED)
        assert tier.disk.bytes_held <= tier.disk.max_bytes
    assert all(new in TRANSITIONS[old] for old, new in moves)
    assert all(e.state is not State.COMPUTING for e in tier._entries.values())


def test_module_functions_report_entries(local_tier):
    tier = ml.tier()
    tier.get_or_compute(key(5), lambda: np.zeros(10), opcode="test")
    frame = ml.entries()
    assert list(frame.columns) == ["tier", "key", "state", "hits", "misses", "size_bytes", "cost_ms", "score",
                                   "path", "age_s", "opcode"]
    assert frame.loc[0, "state"] == "cached" and frame.loc[0, "opcode"] == "test"
    assert set(ml.stats()) >= {"hits", "partial_hits", "misses", "computed", "evicted", "spilled", "reloaded",
                               "refused", "corrupt", "bytes_held_host", "bytes_held_disk", "compute_saved_ms"}
    ml.clear()
    assert ml.entries().empty and ml.stats()["bytes_held_host"] == 0 and ml.stats()["misses"] == 1
