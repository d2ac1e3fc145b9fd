"""A bounded concurrency soak of the driver tiers: many threads asking for overlapping work on small
budgets. No deadlock, no second computation of an entry in flight, right answers, budgets held.

MEMPHIS_SOAK_SECONDS sets how long each soak runs (default 8; longer runs for a release check)."""
import collections
import os
import random
import threading
import time

import numpy as np

import memphis
import memphis.local as ml
from memphis.gpu import GpuTier, SimulatedDevice

SOAK_SECONDS = min(float(os.environ.get("MEMPHIS_SOAK_SECONDS", "8")), 30.0)
THREADS = 8
INPUTS = [np.random.default_rng(i).standard_normal((64 + 8 * i, 16)) for i in range(6)]
JOIN_GRACE_S = 30  # past the soak's end, a thread still running is hung


class InFlight:
    """Counts computations per key and the most that ever ran at once for one key."""

    def __init__(self):
        self._lock = threading.Lock()
        self.running = collections.Counter()
        self.total = collections.Counter()
        self.most_at_once = 0

    def __enter__(self):
        return self

    def start(self, key):
        with self._lock:
            self.running[key] += 1
            self.total[key] += 1
            self.most_at_once = max(self.most_at_once, self.running[key])

    def end(self, key):
        with self._lock:
            self.running[key] -= 1


FLIGHT = InFlight()  # module-level: the reused functions must not hold it in their closures


@memphis.reuse
def gram(X):
    FLIGHT.start(("gram", X.shape))
    try:
        time.sleep(0.002)  # long enough for others to arrive while it is in flight
        return X.T @ X
    finally:
        FLIGHT.end(("gram", X.shape))


@memphis.reuse
def ridge(X, lam):
    FLIGHT.start(("ridge", X.shape, lam))
    try:
        return np.linalg.solve(gram(X) + lam * np.eye(X.shape[1]), X.T @ np.ones(len(X)))
    finally:
        FLIGHT.end(("ridge", X.shape, lam))


def recording_peak(tier):
    """Wraps ``tier._store`` (called with the tier's lock held) to record the bytes held after each."""
    peak, original = [0], tier._store

    def store(*args):
        value = original(*args)
        peak[0] = max(peak[0], tier.bytes_held)
        return value
    tier._store = store
    return peak


def soak(work, seed):
    """Runs ``work(rng)`` in THREADS threads until SOAK_SECONDS pass; returns (operations, errors)."""
    deadline = time.monotonic() + SOAK_SECONDS
    operations, errors = [0] * THREADS, []

    def loop(t):
        rng = random.Random(seed * 100 + t)
        try:
            while time.monotonic() < deadline:
                work(rng)
                operations[t] += 1
        except BaseException as error:  # reported below: a soak must not hide a failure in a thread
            errors.append(error)
    threads = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOAK_SECONDS + JOIN_GRACE_S)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"
    return sum(operations), errors


def test_host_tier_soak(tmp_path):
    tier = ml.configure(host_max_bytes="16k", disk_dir=str(tmp_path), disk_max_bytes="256k", min_cost_s=0.0)
    FLIGHT.__init__()
    peak = recording_peak(tier)
    traced = [memphis.array(X) for X in INPUTS]
    expected_gram = [X.T @ X for X in INPUTS]
    expected_ridge = {(i, lam): np.linalg.solve(X.T @ X + lam * np.eye(16), X.T @ np.ones(len(X)))
                      for i, X in enumerate(INPUTS) for lam in (0.1, 1.0, 10.0)}

    def work(rng):
        i, lam = rng.randrange(len(INPUTS)), rng.choice((0.1, 1.0, 10.0))
        kind = rng.random()
        if kind < 0.4:
            got = ridge(INPUTS[i], lam)
            np.testing.assert_allclose(got, expected_ridge[i, lam], rtol=1e-9)
        elif kind < 0.7:
            np.testing.assert_allclose(gram(INPUTS[i]), expected_gram[i], rtol=1e-12)
        else:  # traced operations, with fine-grained reuse of Xᵀ X
            X = traced[i]
            np.testing.assert_allclose((X.T @ X + lam).numpy(), expected_gram[i] + lam, rtol=1e-12)
        if rng.random() < 0.01:
            ml.clear()  # invalidations in the middle of everything
    try:
        operations, errors = soak(work, seed=1)
        assert errors == []
        stats = ml.stats()
        assert FLIGHT.most_at_once == 1  # never a second computation of a key in flight
        assert peak[0] <= tier.max_bytes and tier.bytes_held <= tier.max_bytes
        assert stats["hits"] > 0 and stats["evicted"] > 0 and stats["internal_errors"] == 0
        assert all(e["state"] != "computing" for e in tier.entries())
        print(f"\nhost soak: {THREADS} threads, {SOAK_SECONDS:.0f} s, {operations} operations, "
              f"{sum(FLIGHT.total.values())} computations of {len(FLIGHT.total)} keys, hits {stats['hits']}, "
              f"evicted {stats['evicted']}, spilled {stats['spilled']}, reloaded {stats['reloaded']}, "
              f"peak {peak[0]} of {tier.max_bytes} bytes")
    finally:
        ml.configure()


def test_gpu_tier_soak(local_tier):
    device = SimulatedDevice(capacity_bytes=1 << 20)
    budget = 128 << 10  # the threads' live arrays (80 KiB at most) and a cache smaller than all values
    gpu = GpuTier(device=device, budget_bytes=budget, host=lambda: local_tier)
    flight = InFlight()
    peak = recording_peak(gpu)
    device_peak, allocate = [0], device.allocate

    def allocate_recording(nbytes):  # the budget's only way to new memory: the bytes taken, after each
        buffer = allocate(nbytes)
        device_peak[0] = max(device_peak[0], device.bytes_in_use)
        return buffer
    device.allocate = allocate_recording
    values = {k: np.full(256 * (1 + k % 5), float(k)) for k in range(24)}  # 2 .. 10 KiB each

    def work(rng):
        k = rng.randrange(len(values))
        key = f"{k:032x}"

        def compute():
            flight.start(key)
            try:
                time.sleep(0.001)
                return device.copy_to_device(values[k])
            finally:
                flight.end(key)
        got, _ = gpu.get_or_compute(key, compute, delayed=False)
        np.testing.assert_array_equal(got.get(), values[k])
        if rng.random() < 0.01:
            gpu.clear()
    try:
        operations, errors = soak(work, seed=2)
        assert errors == []
        stats = gpu.stats()
        assert flight.most_at_once == 1
        assert peak[0] <= budget and device_peak[0] <= budget and gpu.budget.bytes_in_pool <= budget
        assert stats["gpu_hits"] > 0 and stats["evicted_to_host"] + stats["gpu_deleted"] > 0
        print(f"\ngpu soak: {THREADS} threads, {SOAK_SECONDS:.0f} s, {operations} operations, "
              f"{sum(flight.total.values())} computations, hits {stats['gpu_hits']}, evicted to host "
              f"{stats['evicted_to_host']}, dropped {stats['gpu_deleted']}, peak {peak[0]} of {budget} bytes "
              f"cached, {device_peak[0]} taken from the device")
    finally:
        gpu.close()
