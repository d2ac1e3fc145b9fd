"""Faults on the driver side: a disk that is full, unwritable or gone, spill files that are corrupt or
foreign, and exceptions inside computations; memphis answers right, says so once and counts it."""
import logging
import os
import shutil
import threading
import time

import numpy as np
import pytest

import memphis
import memphis.local as ml
from memphis.gpu import GpuState, GpuTier, SimulatedDevice
from memphis.tiers import disk as disk_module
from memphis.tiers.disk import DiskTier
from memphis.tiers.host import HostTier, State

JOIN_TIMEOUT_S = 20  # a thread still alive after this is hung


def key(i):
    return f"{i:032x}"


def dear(tier, i, size=1000):
    """Asks ``tier`` for key ``i``: an array worth a disk round trip (10 s to compute)."""
    return tier.get_or_compute(key(i), lambda: np.full(size, float(i)), cost_hint=10.0)


def warnings_about(caplog, text):
    return [r for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def run_threads(targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a thread hung"


# --- the disk tier ----------------------------------------------------------------------------

def test_an_unusable_disk_directory_drops_instead_says_so_once_and_counts(tmp_path, caplog):
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    tier = ml.configure(host_max_bytes=10_000, disk_dir=str(not_a_directory), min_cost_s=0.0)
    try:
        for i in range(6):  # 8 KB each, 10 KB budget: every new one evicts the one before
            np.testing.assert_array_equal(dear(tier, i), np.full(1000, float(i)))
        stats = ml.stats()
        assert stats["spilled"] == 0 and stats["evicted"] == 5 and stats["spill_failed"] == 5
        assert len(warnings_about(caplog, "cannot spill")) == 1
        np.testing.assert_array_equal(dear(tier, 0), np.full(1000, 0.0))  # dropped, so recomputed
        assert ml.stats()["computed"] == 7
    finally:
        ml.configure()


def test_a_disk_full_in_mid_write_leaves_no_file_and_drops(tmp_path, monkeypatch, caplog):
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path), max_bytes=1 << 20))
    dear(tier, 0)
    real_write = disk_module._write_payload

    def write_then_fail(fmt, value, out):
        real_write(fmt, value[: len(value) // 2], out)  # half the payload is on disk when space runs out
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(disk_module, "_write_payload", write_then_fail)
    for i in range(1, 4):
        dear(tier, i)
    assert tier.stats()["spill_failed"] == 3 and tier.stats()["spilled"] == 0
    assert os.listdir(tier.disk.directory) == []  # the half-written temp files are gone
    assert [tier.state_of(key(i)) for i in range(4)] == [None, None, None, State.CACHED]
    assert len(warnings_about(caplog, "No space left on device")) == 1
    monkeypatch.setattr(disk_module, "_write_payload", real_write)  # the disk has room again
    dear(tier, 4)
    assert tier.state_of(key(3)) is State.SPILLED and tier.stats()["spill_failed"] == 3


def test_a_vanished_directory_counts_as_corrupt_and_failed_and_recomputes(tmp_path):
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path), max_bytes=1 << 20))
    dear(tier, 0)
    dear(tier, 1)
    assert tier.state_of(key(0)) is State.SPILLED
    shutil.rmtree(tier.disk.directory)  # e.g. a temp cleaner
    dear(tier, 2)  # evicting 1 cannot spill now
    assert tier.stats()["spill_failed"] == 1 and tier.state_of(key(1)) is None
    computed = tier.stats()["computed"]
    np.testing.assert_array_equal(dear(tier, 0), np.full(1000, 0.0))
    assert tier.stats()["corrupt"] == 1 and tier.stats()["computed"] == computed + 1


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "another key's file", "foreign file", "empty"])
def test_a_corrupt_or_foreign_spill_file_is_ignored_and_recomputed(tmp_path, damage):
    tier = HostTier(max_bytes=10_000, disk=DiskTier(root=str(tmp_path), max_bytes=1 << 20))
    dear(tier, 0)
    dear(tier, 1)
    dear(tier, 2)
    path, other = tier.disk.path_of(key(0)), tier.disk.path_of(key(1))
    data = open(path, "rb").read()
    replacement = {
        "flipped byte": data[:-100] + bytes([data[-100] ^ 1]) + data[-99:],
        "truncated": data[: len(data) // 2],
        "another key's file": open(other, "rb").read(),  # valid header and checksum, but of key 1
        "foreign file": b"PK\x03\x04" + os.urandom(64),
        "empty": b"",
    }[damage]
    with open(path, "wb") as f:
        f.write(replacement)
    got = tier.get_or_compute(key(0), lambda: np.full(1000, 0.0), cost_hint=10.0)
    np.testing.assert_array_equal(got, np.full(1000, 0.0))
    assert tier.stats()["corrupt"] == 1 and tier.stats()["reloaded"] == 0


# --- exceptions inside computations ---------------------------------------------------------------

def test_an_exception_in_a_traced_operation_leaves_no_entry(local_tier):
    singular = memphis.array(np.zeros((4, 4)))
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.inv(singular)
    assert ml.entries().empty and ml.stats()["computed"] == 0 and ml.stats()["misses"] == 1
    regular = memphis.array(np.eye(4) * 2)
    np.testing.assert_array_equal(np.linalg.inv(regular).numpy(), np.eye(4) / 2)


# Module-level, so that the reused functions below do not hold them in their closures (which are
# part of a function's identity).
CALLS = []
STARTED = threading.Event()


@pytest.fixture
def calls():
    CALLS.clear()
    STARTED.clear()
    return CALLS


@memphis.reuse
def flaky(x):
    CALLS.append(1)
    if len(CALLS) == 1:
        partial = x * 2  # half done when it fails: nothing of it may be served later
        raise RuntimeError(f"failed after {partial.sum()}")
    return x + 1


@memphis.reuse
def slow_then_fails_once(x):
    CALLS.append(1)
    if len(CALLS) == 1:
        STARTED.set()
        time.sleep(0.3)  # the others arrive while this one is in flight
        raise ValueError("the first computation fails")
    return x * 3


def test_an_exception_in_a_reused_function_is_not_remembered(local_tier, calls):
    x = np.arange(5.0)
    with pytest.raises(RuntimeError):
        flaky(x)
    np.testing.assert_array_equal(flaky(x), x + 1)
    np.testing.assert_array_equal(flaky(x), x + 1)
    assert len(calls) == 2 and ml.stats()["hits"] == 1


def test_waiters_of_a_failing_reused_function_recompute_and_never_hang(local_tier, calls):
    x = np.arange(4.0)
    results, errors = [], []

    def first():
        try:
            slow_then_fails_once(x)
        except ValueError as error:
            errors.append(error)

    def waiter():
        STARTED.wait()
        results.append(slow_then_fails_once(x))
    run_threads([first] + [waiter] * 6)
    assert len(errors) == 1 and len(results) == 6
    assert all(np.array_equal(r, x * 3) for r in results)
    assert len(calls) == 2  # the failed one and one recomputation; the other waiters were served


def test_waiters_of_a_failing_gpu_computation_recompute_and_never_hang(local_tier):
    device = SimulatedDevice(capacity_bytes=1 << 20)
    gpu = GpuTier(device=device, budget_bytes=1 << 19)
    started, calls, results, errors = threading.Event(), [], [], []

    def compute():
        calls.append(1)
        if len(calls) == 1:
            started.set()
            time.sleep(0.3)
            raise RuntimeError("kernel failed")
        return device.copy_to_device(np.arange(8.0))

    def first():
        try:
            gpu.get_or_compute(key(1), compute, delayed=False)
        except RuntimeError as error:
            errors.append(error)

    def waiter():
        started.wait()
        results.append(gpu.get_or_compute(key(1), compute, delayed=False)[0])
    try:
        run_threads([first] + [waiter] * 4)
        assert len(errors) == 1 and len(calls) == 2 and len(results) == 4
        assert all(np.array_equal(r.get(), np.arange(8.0)) for r in results)
        assert gpu.state_of(key(1)) is GpuState.CACHED
    finally:
        gpu.close()


def test_an_internal_failure_while_caching_gives_the_value_and_counts_it(tmp_path, monkeypatch, caplog):
    from memphis.tiers import host

    tier = HostTier(max_bytes=10_000)

    def broken(value):
        raise RuntimeError("size_of is broken")
    monkeypatch.setattr(host, "size_of", broken)
    for _ in range(2):
        np.testing.assert_array_equal(tier.get_or_compute(key(1), lambda: np.ones(3)), np.ones(3))
    assert tier.stats()["internal_errors"] == 2 and tier.state_of(key(1)) is None
    assert len(warnings_about(caplog, "could not cache")) == 2


def test_a_failed_copy_to_the_host_drops_the_gpu_entry_without_hanging(local_tier, monkeypatch):
    device = SimulatedDevice(capacity_bytes=1 << 20)
    gpu = GpuTier(device=device, budget_bytes=3000, host=lambda: local_tier)

    def refuse(*args, **kwargs):
        raise RuntimeError("host tier unavailable")
    monkeypatch.setattr(local_tier, "put", refuse)
    try:
        for i in range(4):  # 1600 bytes each: each one evicts the one before, with a copy to the host
            value, held = gpu.get_or_compute(key(i), lambda i=i: device.copy_to_device(np.full(200, float(i))),
                                             delayed=False)
            gpu._entries[key(i)].cost_s = 10.0  # dearer than the copy: evicted to the host, not dropped
            np.testing.assert_array_equal(value.get(), np.full(200, float(i)))
            del value  # a live array keeps its buffer: the next one could not evict it away
        assert gpu.stats()["gpu_deleted"] == 3 and gpu.stats()["evicted_to_host"] == 0
        assert gpu.bytes_held <= 3000 and [gpu.state_of(key(i)) for i in range(4)][-1] is GpuState.CACHED
    finally:
        gpu.close()
