"""Which device the GPU tier manages and its budget: configure(), else the Spark conf and "auto"."""
import threading

from memphis.gpu import cupy_device
from memphis.gpu.device import Device, SimulatedDevice
from memphis.gpu.tier import GpuTier
from memphis.local import config as local_config
from memphis.local import device_backend

DEVICES = ("auto", "cupy", "simulated", "none")
SIMULATED_CAPACITY_BYTES = 1 << 30  # what configure(device="simulated") gets without capacity_bytes

_lock = threading.Lock()
_resolved = False  # whether the process's tier (device_backend.active) was configured, or "auto" resolved


class NoGpuError(RuntimeError):
    """GPU work was asked for, and no GPU tier is configured or usable."""


def _device(device, capacity_bytes, copy_bytes_per_s):
    if isinstance(device, Device):
        return device
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: expected one of {', '.join(DEVICES)} or a memphis.gpu.Device")
    if device == "simulated":
        extra = {} if copy_bytes_per_s is None else {
            "copy_bytes_per_s": local_config.checked("copy_bytes_per_s", copy_bytes_per_s, _rate)}
        capacity = local_config.checked("capacity_bytes", capacity_bytes or SIMULATED_CAPACITY_BYTES,
                                        local_config.parse_bytes)
        return SimulatedDevice(capacity_bytes=capacity, **extra)
    if device == "none":
        return None
    usable, why = cupy_device.usable()
    if usable:
        return cupy_device.CupyDevice()
    if device == "cupy":
        raise NoGpuError(f"device='cupy': {why}")
    return None


def _rate(value) -> float:
    """A positive, finite number of bytes per second."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError("expected a positive number of bytes per second, such as 12e9")
    return float(value)


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
    global _resolved
    fraction = local_config.resolved(local_config.GPU_MEMORY_FRACTION, "memory_fraction", memory_fraction,
                                     local_config.fraction)
    if budget_bytes is not None:
        budget_bytes = local_config.checked("budget_bytes", budget_bytes, local_config.parse_bytes)
    chosen = _device(device, capacity_bytes, copy_bytes_per_s)
    with _lock:
        old, device_backend.active = device_backend.active, None
    if old is not None:  # first: the new tier may manage the same device
        old.close()
    tier = None
    if chosen is not None:
        budget = budget_bytes if budget_bytes is not None else int(fraction * chosen.free_bytes())
        tier = GpuTier(device=chosen, budget_bytes=budget, host=local_config.tier)
    with _lock:
        device_backend.active, _resolved = tier, True
    return tier


def tier(*, required: bool = False):
    """The process's GPU tier, configured with ``device="auto"`` on first use; None without a GPU
    (``required=True``: raises :class:`NoGpuError` saying how to get one)."""
    if not _resolved:
        with _lock:
            needed = not _resolved
        if needed:
            configure()
    found = device_backend.active
    if found is None and required:
        raise NoGpuError("no GPU is available: cupy is not importable or sees no CUDA device "
                         f"({cupy_device.usable()[1] or 'the GPU tier is configured off'}). Install "
                         "memphis-spark[gpu-cuda12] on a machine with a GPU, or for tests use the simulated "
                         "device: memphis.gpu.configure(device='simulated')")
    return found
