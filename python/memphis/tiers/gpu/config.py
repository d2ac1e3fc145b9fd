"""Which device the GPU tier manages and its budget: configure()'s arguments, else the Spark conf and "auto"."""
from memphis.tiers import config
from memphis.tiers.gpu import cupy_device
from memphis.tiers.gpu.device import Device, SimulatedDevice

DEVICES = ("auto", "cupy", "simulated", "none")
SIMULATED_CAPACITY_BYTES = 1 << 30  # what configure(device="simulated") gets without capacity_bytes


class NoGpuError(RuntimeError):
    """GPU work was asked for, and no GPU tier is configured or usable."""


def _device(device, capacity_bytes, copy_bytes_per_s):
    if isinstance(device, Device):
        return device
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: expected one of {', '.join(DEVICES)} or a memphis.gpu.Device")
    if device == "simulated":
        extra = {} if copy_bytes_per_s is None else {
            "copy_bytes_per_s": config.checked("copy_bytes_per_s", copy_bytes_per_s, _rate)}
        capacity = config.checked("capacity_bytes", capacity_bytes or SIMULATED_CAPACITY_BYTES, config.parse_bytes)
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


def chosen(*, device="auto", memory_fraction=None, budget_bytes=None, capacity_bytes=None, copy_bytes_per_s=None):
    """(the Device or None, the memory fraction, budget_bytes or None) of :func:`memphis.gpu.configure`'s
    arguments, checked: a value of another kind raises ValueError naming the argument."""
    fraction = config.resolved(config.GPU_MEMORY_FRACTION, "memory_fraction", memory_fraction, config.fraction)
    if budget_bytes is not None:
        budget_bytes = config.checked("budget_bytes", budget_bytes, config.parse_bytes)
    return _device(device, capacity_bytes, copy_bytes_per_s), fraction, budget_bytes


def no_gpu() -> NoGpuError:
    """The error of GPU work asked for without a GPU tier, saying how to get one."""
    return NoGpuError("no GPU is available: cupy is not importable or sees no CUDA device "
                      f"({cupy_device.usable()[1] or 'the GPU tier is configured off'}). Install "
                      "memphis-spark[gpu-cuda12] on a machine with a GPU, or for tests use the simulated "
                      "device: memphis.gpu.configure(device='simulated')")
