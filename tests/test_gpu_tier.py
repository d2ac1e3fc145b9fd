"""GPU tier policies on the simulated device (always) and on cupy (where a GPU is): reuse, pressure,
recycling by the device's memory pool, eviction to host, the budget as the pool's base allocator."""
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


def allocate(gpu, nbytes):
    """Takes ``nbytes`` from the tier's memory pool, as an array of that size would, and gives them back."""
    block = gpu.budget.pool.malloc(nbytes)
    if isinstance(gpu.device, SimulatedDevice):  # cupy's block goes back when its pointer dies
        gpu.budget.pool.free(block)


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


def test_traced_device_work_is_seen_then_kept_then_served_by_a_probe(gpu_tier, device):
    gpu = gpu_tier(64 * MB)
    X = to_device(np.arange(1000.0).reshape(100, 10))
    Y = to_device(np.ones((100, 10)))
    before = gpu.stats()
    products = [X.T @ Y for _ in range(4)]
    stats = gpu.stats()
    assert stats["gpu_misses"] - before["gpu_misses"] == 2  # seen, then kept
    assert stats["gpu_hits"] - before["gpu_hits"] == 2
    key = products[0].lineage.key
    assert gpu.state_of(key) is GpuState.CACHED
    # A kept result carries the entry's cut item: its trace stops there; the first one's does not.
    assert [p.lineage.height for p in products] == [3, 2, 2, 2]
    assert products[2].numpy() is products[3].numpy()  # the same device array, not a recomputation
    expected = np.arange(1000.0).reshape(100, 10).T @ np.ones((100, 10))
    for p in products:
        np.testing.assert_array_equal(host(p), expected)


def test_pressure_never_exceeds_the_budget_and_evicts_by_score(gpu_tier, device):
    budget = 6 * MB
    gpu = gpu_tier(budget)
    rng = np.random.default_rng(1)
    A = to_device(rng.standard_normal((256, 256)))  # 512 KiB per intermediate

    def check():
        assert gpu.budget.bytes_in_pool <= budget
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
    allocate(gpu, budget - gpu.budget.bytes_in_pool + gpu.budget.bytes_free + 1)  # over even with the free blocks gone
    gone = before - {e["key"] for e in gpu.entries() if e["state"] == "cached"}
    assert lowest in gone
    assert max(scores[k] for k in gone) <= min(scores[k] for k in before - gone)
    check()


def test_steady_allocations_are_recycled(gpu_tier, device):
    gpu = gpu_tier(64 * MB)
    rng = np.random.default_rng(2)
    W = to_device(rng.standard_normal((64, 64)))

    def step():
        X = to_device(rng.standard_normal((256, 64)))  # fresh data: nothing to reuse, only to recycle
        return float(host(relu(X @ W).sum()))

    for _ in range(5):  # warm-up: the pool fills with free blocks of the sizes of this loop
        step()
    warm = gpu.stats()
    for _ in range(50):
        step()
    stats = gpu.stats()
    recycled = stats["recycled_allocations"] - warm["recycled_allocations"]
    fresh = stats["fresh_allocations"] - warm["fresh_allocations"]
    assert fresh <= 5  # new memory (the budget's base allocator) almost never
    if isinstance(device, SimulatedDevice):
        assert recycled / (recycled + fresh) > 0.8, (recycled, fresh)
    else:
        assert recycled == 0  # cupy's pool recycles in C, uncounted


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
    allocate(gpu, 4 * MB - 1024)  # nearly all the budget: the entry must leave
    assert gpu.state_of("e" * 32) is GpuState.SEEN
    assert gpu.stats()["evicted_to_host"] == 1
    assert ml.tier().state_of("e" * 32) is ml.State.CACHED

    def recompute():
        raise AssertionError("the host tier holds it: no recomputation")
    copies = gpu.stats()["copies_to_device"]
    reloaded, held = gpu.get_or_compute("e" * 32, recompute, opcode="expensive")
    assert held and gpu.stats()["copies_to_device"] == copies + 1  # kept at once: it was evicted before
    assert device.copy_to_host(reloaded).tobytes() == original.tobytes()


def cached_entries(gpu, device, costs):
    """One cached 1 MiB entry per cost (the tier holds its array alone), that cost as its measured one."""
    for i, cost in enumerate(costs):
        gpu.get_or_compute(f"{i:032x}", lambda: device.copy_to_device(np.full(MB // 8, float(i))), delayed=False)
        gpu._entries[f"{i:032x}"].cost_s = cost
    return [f"{i:032x}" for i in range(len(costs))]


def dead_blocks(device, count):
    """``count`` arrays of 512 KiB that die at once: their blocks wait in the pool."""
    loose = [device.copy_to_device(np.zeros(MB // 16)) for _ in range(count)]
    del loose


def test_the_budget_releases_free_blocks_then_evicts_by_score_then_fails():
    device = SimulatedDevice(capacity_bytes=64 * MB, copy_bytes_per_s=1.0)  # copies so slow that evictions drop
    try:
        gpu = memphis.gpu.configure(device=device, budget_bytes=4 * MB)
        pool = gpu.budget.pool
        cheap, dear = cached_entries(gpu, device, [0.001, 0.5])
        dead_blocks(device, 4)
        assert pool.total_bytes() == 4 * MB and pool.free_bytes() == 2 * MB and device.counts["frees"] == 0
        fresh = gpu.stats()["fresh_allocations"]

        # 1.5 MiB more: the free blocks go back to the device, and that is enough: no entry leaves.
        first = pool.malloc(3 * MB // 2)
        assert device.counts["frees"] == 4 and pool.free_bytes() == 0
        assert gpu.stats()["gpu_deleted"] == 0 and gpu.bytes_held == 2 * MB
        assert device.bytes_in_use == pool.total_bytes() == 7 * MB // 2
        assert gpu.stats()["fresh_allocations"] == fresh + 1

        # 2.5 MiB more with the 1.5 MiB block free: released, then the cheaper entry is evicted.
        pool.free(first)
        second = pool.malloc(5 * MB // 2)
        assert gpu.state_of(cheap) is GpuState.SEEN and gpu.state_of(dear) is GpuState.CACHED
        assert gpu.stats()["gpu_deleted"] == 1 and pool.total_bytes() == 7 * MB // 2 <= 4 * MB

        # 3 MiB more while the 2.5 MiB block is in use: the last entry leaves, in vain.
        with pytest.raises(memphis.gpu.SimulatedOutOfMemory, match=f"{4 * MB}-byte budget"):
            pool.malloc(3 * MB)
        assert gpu.bytes_held == 0 and gpu.stats()["gpu_deleted"] == 2
        assert pool.total_bytes() == device.bytes_in_use == 5 * MB // 2  # the failed request is not counted
        pool.free(second)
        assert memphis.gpu.release_free() == 5 * MB // 2 and device.bytes_in_use == 0
    finally:
        memphis.gpu.configure(device="none")


def test_a_full_device_is_handled_like_the_budget():
    # Smaller than the budget: the device itself refuses. Copies so slow that evicted entries are dropped.
    device = SimulatedDevice(capacity_bytes=4 * MB, copy_bytes_per_s=1.0)
    try:
        gpu = memphis.gpu.configure(device=device, budget_bytes=16 * MB)
        pool = gpu.budget.pool
        cached_entries(gpu, device, [0.001, 0.5])
        dead_blocks(device, 4)
        assert pool.free_bytes() == 2 * MB and device.bytes_in_use == 4 * MB
        block = pool.malloc(3 * MB)  # the device is full: free blocks go back, then one entry
        assert block.nbytes == 3 * MB
        assert gpu.stats()["gpu_deleted"] == 1 and gpu.bytes_held == MB
        assert pool.free_bytes() == 0 and device.counts["frees"] == 5
        pool.free(block)
        assert memphis.gpu.release_free() == 3 * MB and pool.free_bytes() == 0
        assert device.bytes_in_use == MB
        with pytest.raises(memphis.gpu.SimulatedOutOfMemory, match="device is full"):
            pool.malloc(5 * MB)  # more than the device: all evicted, in vain
        assert gpu.bytes_held == 0 and device.bytes_in_use == 0 and pool.total_bytes() == 0
    finally:
        memphis.gpu.configure(device="none")


def test_the_copy_stream_lets_go_of_a_value_before_it_reports_the_copy():
    import threading
    import weakref

    device = SimulatedDevice(capacity_bytes=MB)
    gate = threading.Event()  # the copy starts once the caller has let go of the value too
    stream = memphis.gpu.CopyStream(lambda value: gate.wait() and device.copy_to_host(value))
    value = device.copy_to_device(np.arange(8.0))
    ref, seen = weakref.ref(value), []
    future = stream.submit(value, lambda result, error: seen.append((ref() is None, result, error)))
    del value
    gate.set()
    future.result()
    stream.close()
    [(dead, result, error)] = seen
    assert dead and error is None and result.tolist() == list(range(8))
    assert device.default_pool.free_bytes() == 64  # its block is back in the pool


def test_the_simulated_pool_behaves_like_cupys():
    device = SimulatedDevice(capacity_bytes=MB)
    calls = []

    def base(nbytes):
        calls.append((nbytes, pool.total_bytes()))  # cupy counts the bytes before it calls the base
        return device.allocate(nbytes)
    pool = device.memory_pool(base)
    a = pool.malloc(1000)
    pool.free(a)
    b = pool.malloc(1000)  # recycled: the base is not called
    c = pool.malloc(2000)
    assert b is a and calls == [(1000, 1000), (2000, 3000)] and (pool.recycled, pool.fresh) == (1, 2)
    pool.free(c)
    assert (pool.used_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (1000, 2000, 1)
    pool.free_all_blocks()
    assert pool.total_bytes() == device.bytes_in_use == 1000

    # The device is full: the pool gives its free blocks back and tries again, as cupy's does.
    pool.free(b)
    filler = device.allocate(MB - 1000)
    assert pool.malloc(500).nbytes == 500 and device.counts["frees"] == 2
    with pytest.raises(memphis.gpu.SimulatedDeviceFull):
        pool.malloc(1000)
    assert pool.total_bytes() == 500  # the failed request is taken out again
    device.free(filler)

    # Arrays of a device come from the pool it uses: their blocks go back to it when they die.
    x = device.copy_to_device(np.ones(16))
    default = device.default_pool
    assert default.used_bytes() == 128
    del x
    assert default.free_bytes() == 128 and device.copy_to_device(np.zeros(16)) is not None
    assert default.recycled == 1


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

    from memphis.spark.collect import _convert, _float_columns

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
