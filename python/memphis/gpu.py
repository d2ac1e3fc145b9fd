"""The GPU tier: traced device arrays reused by lineage, in device memory that memphis manages.

Work on traced arrays whose values live on a device (cupy arrays, or the simulated device's) is
traced with the same opcodes and keys as numpy work, probed in the GPU tier before it runs, and
kept there from its second occurrence on. Device arrays come from the device's memory pool
(cupy's own, in C: blocks of dead arrays are recycled without Python), with memphis' budget as its
base allocator: new memory that would take the pool past the budget first gives the pool's free
blocks back, then evicts cached values (to the host tier when recomputing costs more than the
copy), and fails only when nothing is left.

Examples
--------
>>> import numpy as np, memphis, memphis.gpu
>>> gpu = memphis.gpu.configure(device="simulated", capacity_bytes="256m")
>>> X = memphis.gpu.to_device(np.ones((1000, 20)))   # a host → device copy
>>> for _ in range(3):
...     G = X.T @ X                                   # kept on its 2nd occurrence, a hit on the 3rd
>>> memphis.gpu.stats()["gpu_hits"]
1
>>> float(memphis.gpu.to_host(G).numpy()[0, 0])
1000.0
"""
from memphis.backends.device_backend import device_of
from memphis.tiers.gpu.config import NoGpuError
from memphis.tiers.gpu.cupy_device import CupyDevice, usable
from memphis.tiers.gpu.device import (CopyStream, Device, SimulatedArray, SimulatedDevice, SimulatedDeviceFull,
                                      SimulatedOutOfMemory, SimulatedPool)
from memphis.tiers.gpu.tier import GPU_COUNTERS, TRANSITIONS, DeviceBudget, GpuState, GpuTier
from memphis.tiers.runtime import default
from memphis.tracing.array import TracedArray, array

__all__ = ["CopyStream", "CupyDevice", "Device", "DeviceBudget", "GPU_COUNTERS", "GpuState", "GpuTier", "NoGpuError",
           "SimulatedArray", "SimulatedDevice", "SimulatedDeviceFull", "SimulatedOutOfMemory", "SimulatedPool",
           "TRANSITIONS", "clear", "configure", "entries", "release_free", "stats", "tier", "to_device", "to_host",
           "usable"]


def configure(*, device="auto", memory_fraction=None, budget_bytes=None, capacity_bytes=None, copy_bytes_per_s=None):
    """Replaces the GPU tier (its entries are dropped) with one on ``device``; returns it, or None.

    ``device``: ``"auto"`` (cupy when it imports and sees a CUDA device, else no GPU tier),
    ``"cupy"``, ``"simulated"`` (a :class:`SimulatedDevice` of ``capacity_bytes``, default 1g,
    copying at ``copy_bytes_per_s``), ``"none"``, or a :class:`Device`. The budget is
    ``memory_fraction`` (default: the active Spark session's ``spark.memphis.gpu.memoryFraction``,
    else 0.9) of the device's free memory now; ``budget_bytes`` sets it outright instead. A value
    of another kind raises ValueError naming the argument, the value and what is allowed, before
    anything is replaced.

    Examples
    --------
    >>> import memphis.gpu
    >>> memphis.gpu.configure(device="simulated", capacity_bytes="64m", memory_fraction=0.5).budget_bytes
    33554432
    """
    return default.configure_gpu(device=device, memory_fraction=memory_fraction, budget_bytes=budget_bytes,
                                 capacity_bytes=capacity_bytes, copy_bytes_per_s=copy_bytes_per_s)


def tier(*, required: bool = False):
    """The process's GPU tier, configured with ``device="auto"`` on first use; None without a GPU
    (``required=True``: raises :class:`NoGpuError` saying how to get one)."""
    return default.gpu_tier(required=required)


def release_free() -> int:
    """Gives the free blocks of the GPU tier's memory pool back to the device (``free_all_blocks``);
    returns the bytes released.

    Call it at a phase change (between models, before a loop over batches of another size): blocks
    of the old sizes would otherwise wait for allocations that no longer come. (An allocation that
    would exceed the budget releases them by itself first.)

    Examples
    --------
    >>> import memphis.gpu
    >>> memphis.gpu.release_free()  # doctest: +SKIP
    0
    """
    tier()  # configured with device="auto" on first use
    return default.gpu.release_free()


def stats() -> dict:
    """The GPU tier's counters (zeros without one): gpu_hits, gpu_misses, recycled_allocations,
    fresh_allocations, evicted_to_host, gpu_deleted, bytes_held_gpu, eviction_time_ms,
    copies_to_device, copies_to_host.

    ``fresh_allocations``: allocations that took new device memory (calls of the pool's base
    allocator). ``recycled_allocations``: allocations served from a free block of the pool, counted
    on the simulated device only: cupy's pool recycles in C, uncounted (0 there)."""
    return default.gpu.stats()


def entries() -> list:
    """One dict per GPU entry (tier "gpu"); see :func:`memphis.local.entries`."""
    return default.gpu.entries()


def clear():
    """Releases every GPU entry; the counters keep counting."""
    default.gpu.clear()


def to_device(x):
    """``x`` (a traced array, or anything :func:`memphis.array` takes) as a traced device array.

    The device copy has the lineage of ``x``: work on it shares keys with host work on ``x``. Like
    any result it is kept from its 2nd occurrence on (a batch that never recurs is not held), so
    from the 3rd move of the same data on nothing is copied.

    Examples
    --------
    >>> import numpy as np, memphis.gpu
    >>> X = memphis.gpu.to_device(np.eye(3))  # doctest: +SKIP
    """
    gpu = tier(required=True)
    if isinstance(x, TracedArray) and gpu.device.is_array(x.numpy()):
        return x
    x = array(x, runtime=default)
    value, _ = gpu.get_or_compute(x.lineage.key, lambda: gpu.device.copy_to_device(x.numpy()), item=x.lineage,
                                  opcode="to_device")
    return TracedArray(value, x.lineage, x.runtime)


def to_host(x):
    """A traced device array as a traced numpy array of the same lineage (one counted copy, none when
    the host tier holds that key)."""
    device = device_of(x.numpy()) if isinstance(x, TracedArray) else None
    if device is None:
        return x
    found = x.runtime.host().peek(x.lineage.key, item=x.lineage)
    return TracedArray(found[0] if found is not None else device.copy_to_host(x.numpy()), x.lineage, x.runtime)
