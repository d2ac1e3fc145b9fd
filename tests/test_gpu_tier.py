"""GPU tier policies on the simulated device (always) and on cupy (where a GPU is): reuse, pressure,
recycling, eviction to host, the allocator hook."""
import time

import numpy as np
import pytest

import memphis
import memphis.gpu
import memphis.local as ml
from memphis.gpu import GpuState, SimulatedDevice, to_device, to_host

MB = 1 << 20


def host(x):
    return to_host(x).numpy()


def relu(x):
    return (x > 0) * x


def score(X, W1, b1, W2):
    return relu(X @ W1 + b1) @ W2


def test_repeated_minibatches_are_served_from_the_gpu_tier(gpu_tier):
    gpu = gpu_tier(64 * MB)
    rng = np.random.default_rng(0)
    W1, b1, W2 = rng.standard_normal((32, 64)), rng.standard_normal(64), rng.standard_normal((64, 10))
    recurring = [rng.standard_normal((128, 32)) for _ in range(4)]
    # 40% of 30 batches repeat one of 4 recurring batches; the rest are fresh.
    batches = [recurring[i % 4] if i % 5 in (1, 3) else rng.standard_normal((128, 32)) for i in range(30)]
    weights = [to_device(w) for w in (W1, b1, W2)]
    for X in batches:
        got = host(score(to_device(X), *weights))
        np.testing.assert_allclose(got, score(X, W1, b1, W2), rtol=1e-10, atol=1e-12)
    occurrences = {id(r): sum(b is r for b in batches) for r in recurring}
    # Delayed caching: a batch's 5 ops (matmul, add, greater, multiply, matmul) are kept on its 2nd
    # occurrence and hit on every later one; so is its transfer.
    assert gpu.stats()["gpu_hits"] == sum(6 * (n - 2) for n in occurrences.values())
    # A batch crosses to the device at most twice, the weights once.
    distinct = len({id(b) for b in batches})
    assert gpu.stats()["copies_to_device"] == distinct + len(occurrences) + 3


def test_pressure_never_exceeds_the_budget_and_evicts_by_score(gpu_tier, device):
    budget = 6 * MB
    gpu = gpu_tier(budget)
    rng = np.random.default_rng(1)
    A = to_device(rng.standard_normal((256, 256)))  # 512 KiB per intermediate

    def check():
        assert gpu.allocator.bytes_allocated <= budget
        assert gpu.bytes_held <= budget
        if isinstance(device, SimulatedDevice):
            assert device.bytes_in_use <= budget

    expected = {}
    for round_ in range(3):  # each intermediate recurs: kept from round 2 on, 40 × 512 KiB ≫ budget
        for k in range(40):
            value = host(np.tanh(A * float(k)) + 1.0)
            expected.setdefault(k, value)
            np.testing.assert_array_equal(value, expected[k])
            check()
    stats = gpu.stats()
    assert stats["evicted_to_host"] + stats["gpu_deleted"] > 0

    # The next eviction takes the lowest scores: hit one entry often, then force one eviction.
    scores = {e["key"]: e["score"] for e in gpu.entries() if e["state"] == "cached"}
    lowest = min(scores, key=scores.get)
    before = set(scores)
    gpu.allocator.release(gpu.allocator.malloc(budget - gpu.allocator.bytes_allocated + gpu.allocator.bytes_free + 1))
    gone = before - {e["key"] for e in gpu.entries() if e["state"] == "cached"}
    assert lowest in gone
    assert max(scores[k] for k in gone) <= min(scores[k] for k in before - gone)
    check()


def test_steady_allocations_are_recycled(gpu_tier):
    gpu = gpu_tier(64 * MB)
    rng = np.random.default_rng(2)
    W = to_device(rng.standard_normal((64, 64)))

    def step():
        X = to_device(rng.standard_normal((256, 64)))  # fresh data: nothing to reuse, only to recycle
        return float(host(relu(X @ W).sum()))

    for _ in range(5):  # warm-up: the free lists fill with the sizes of this loop
        step()
    warm = gpu.stats()
    for _ in range(50):
        step()
    stats = gpu.stats()
    recycled = stats["recycled_allocations"] - warm["recycled_allocations"]
    fresh = stats["fresh_allocations"] - warm["fresh_allocations"]
    assert recycled / (recycled + fresh) > 0.8, (recycled, fresh)
    assert fresh <= 5


def test_async_eviction_to_host_is_bit_exact_after_reload(gpu_tier, device):
    gpu = gpu_tier(4 * MB)
    rng = np.random.default_rng(3)
    original = rng.standard_normal((256, 256))  # 512 KiB

    def expensive():
        time.sleep(0.02)  # recomputing costs far more than a copy: eviction copies to the host
        return device.copy_to_device(original)

    value, held = gpu.get_or_compute("e" * 32, expensive, opcode="expensive", delayed=False)
    assert held
    del value
    gpu.allocator.release(gpu.allocator.malloc(4 * MB - 1024))  # nearly all the budget: the entry must leave
    assert gpu.state_of("e" * 32) is GpuState.SEEN
    assert gpu.stats()["evicted_to_host"] == 1
    assert ml.tier().state_of("e" * 32) is ml.State.CACHED

    def recompute():
        raise AssertionError("the host tier holds it: no recomputation")
    copies = gpu.stats()["copies_to_device"]
    reloaded, held = gpu.get_or_compute("e" * 32, recompute, opcode="expensive")
    assert held and gpu.stats()["copies_to_device"] == copies + 1  # kept at once: it was evicted before
    assert device.copy_to_host(reloaded).tobytes() == original.tobytes()


def test_allocator_hook_evicts_entries_then_free_lists_then_succeeds():
    # Smaller than the budget: the device itself fails. Copies so slow that evicted entries are dropped.
    device = SimulatedDevice(capacity_bytes=4 * MB, copy_bytes_per_s=1.0)
    try:
        gpu = memphis.gpu.configure(device=device, budget_bytes=16 * MB)
        kept = [gpu.get_or_compute(f"{i:032x}", lambda: device.copy_to_device(np.full(MB // 8, float(i))),
                                   delayed=False)[0] for i in range(2)]
        del kept  # two cached 1 MiB entries, referenced by the tier only
        loose = [device.adopt(np.zeros(MB // 16)) for _ in range(4)]
        del loose  # four dead 512 KiB buffers on the free lists
        assert gpu.allocator.bytes_free == 2 * MB and device.bytes_in_use == 4 * MB
        buffer = gpu.allocator.malloc(3 * MB)  # neither fits nor matches a free-listed size
        assert buffer.nbytes == 3 * MB
        # One entry (the lowest score) was evicted: with the free lists released, 3 MiB fit.
        assert gpu.stats()["gpu_deleted"] == 1 and gpu.bytes_held == MB
        assert gpu.allocator.bytes_free == 0 and device.counts["frees"] == 5
        gpu.allocator.release(buffer)
        assert memphis.gpu.release_free() == 3 * MB and gpu.allocator.bytes_free == 0
        assert device.bytes_in_use == MB
        with pytest.raises(memphis.gpu.SimulatedOutOfMemory):  # more than the device: all evicted, in vain
            gpu.allocator.malloc(5 * MB)
        assert gpu.bytes_held == 0 and device.bytes_in_use == 0
    finally:
        memphis.gpu.configure(device="none")


def test_device_and_host_serve_each_other(gpu_tier, device):
    gpu = gpu_tier(64 * MB)
    X = np.random.default_rng(4).standard_normal((500, 40))
    Xd = to_device(X)
    hits = gpu.stats()["gpu_hits"]
    for _ in range(2):
        on_device = Xd.T @ Xd  # kept on the GPU on its 2nd occurrence
    copies = gpu.stats()["copies_to_host"]
    Xh = memphis.array(X)
    on_host = Xh.T @ Xh  # the same key: copied from the GPU, not recomputed
    assert gpu.stats()["copies_to_host"] == copies + 1 and gpu.stats()["gpu_hits"] == hits + 1
    np.testing.assert_array_equal(on_host.numpy(), host(on_device))

    Y = np.random.default_rng(5).standard_normal((300, 30))
    Yh = memphis.array(Y)
    product = Yh.T @ Yh  # computed and cached on the host
    copies_in = gpu.stats()["copies_to_device"]
    Yd = to_device(Y)
    from_host = Yd.T @ Yd  # a GPU miss that the host tier answers with one copy
    assert gpu.stats()["copies_to_device"] == copies_in + 2  # Y itself, then the product
    np.testing.assert_array_equal(host(from_host), product.numpy())


def test_stats_and_entries_join_the_local_ones(gpu_tier):
    gpu_tier(64 * MB)
    X = to_device(np.ones((100, 10)))
    for _ in range(3):
        X.T @ X
    stats = ml.stats()
    assert stats["gpu_hits"] == 1 and stats["bytes_held_gpu"] == 10 * 10 * 8  # X itself occurred once
    assert set(memphis.gpu.GPU_COUNTERS) <= set(stats)
    rows = ml.entries()
    assert list(rows[rows.tier == "gpu"].state) == ["cached"]
    ml.clear()
    assert ml.stats()["bytes_held_gpu"] == 0


def test_without_a_gpu_the_error_says_how_to_simulate(local_tier):
    memphis.gpu.configure(device="none")
    with pytest.raises(memphis.gpu.NoGpuError, match="device='simulated'"):
        to_device(np.ones(3))
    assert memphis.gpu.release_free() == 0 and memphis.gpu.stats()["gpu_hits"] == 0


def test_simulated_arrays_do_not_mix_with_host_arrays():
    device = SimulatedDevice(capacity_bytes=MB)
    x = device.copy_to_device(np.arange(4.0))
    with pytest.raises(TypeError, match="copy it to the device"):
        x + np.ones(4)
    with pytest.raises(TypeError, match="get"):
        np.asarray(x)
    assert device.counts["copies_to_device"] == 1 and (x.T + 1).get().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_collected_matrix_is_stacked_from_its_columns_in_one_counted_copy(device):
    import pyarrow as pa

    from memphis.collect import _convert, _float_columns

    rows = 100_000
    table = pa.table({"a": np.arange(rows), "b": pa.array([None if i % 7 == 0 else i / 3 for i in range(rows)]),
                      "c": np.ones(rows, dtype=np.float32)})
    copies = device.counts["copies_to_device"]
    matrix = device.stack_columns(_float_columns(table), table.num_rows)
    assert device.counts["copies_to_device"] == copies + 1 and matrix.shape == (rows, 3)
    np.testing.assert_array_equal(device.copy_to_host(matrix), _convert(table, "numpy"))  # NaN for nulls too
    assert device.copy_to_host(device.stack_columns([], 5)).shape == (5, 0)
    if device.name == "cupy":
        assert matrix.flags.c_contiguous  # row-major, like the host's
