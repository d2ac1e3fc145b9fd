"""A real GPU through cupy (and cudf for frames, when it is installed). Runs only where a GPU is."""
import time

import numpy as np

from memphis.backends import device_backend
from memphis.tiers.gpu.device import Device

INITIAL_COPY_BYTES_PER_S = 1.5e9  # MEMPHIS' first guess of device → host bandwidth, then learned
MIN_MEASURED_BYTES = 2 << 20  # smaller copies say more about latency than bandwidth


def usable():
    """(True, "") when cupy imports and sees a CUDA device, else (False, why)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # ImportError, or a CUDA runtime error without a driver
        return False, f"cupy not importable or no CUDA device ({type(error).__name__}: {error})"
    return (count > 0, "" if count else "no CUDA device")


class CupyDevice(Device):
    """A CUDA device through cupy.

    Arrays come from a ``cupy.cuda.MemoryPool``: ``memory_pool(base)`` makes one whose new memory
    comes from ``base`` (memphis' budget: :class:`memphis.tiers.gpu.tier.DeviceBudget`), and
    ``use_pool`` installs its C-level ``malloc`` as cupy's allocator (``cupy.cuda.set_allocator``):
    an allocation that a free block serves never reaches Python. Eviction copies run on their own
    ``cupy.cuda.Stream``.
    Frames (``collect(..., as_="arrow")``) become cudf DataFrames when cudf imports.

    Examples
    --------
    >>> device = CupyDevice()  # doctest: +SKIP
    >>> device.copy_to_host(device.copy_to_device(np.ones(3)))  # doctest: +SKIP
    array([1., 1., 1.])
    """

    name = "cupy"

    def __init__(self, *, device_id: int = 0):
        import cupy

        self._cupy = cupy
        self.device_id = device_id
        self.out_of_memory_errors = (cupy.cuda.memory.OutOfMemoryError,)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        super().__init__(copy_bytes_per_s=INITIAL_COPY_BYTES_PER_S)
        device_backend.register(cupy.ndarray, lambda array: self)

    def out_of_memory(self, nbytes, *, held, limit):
        """cupy's own error: "Out of memory allocating N bytes (allocated so far: H bytes, limit set
        to: the budget)", without the limit when the device itself is full."""
        return self._cupy.cuda.memory.OutOfMemoryError(nbytes, held, limit)

    def is_full(self, error) -> bool:
        runtime = self._cupy.cuda.runtime
        return isinstance(error, runtime.CUDARuntimeError) and error.status == runtime.errorMemoryAllocation

    def allocate(self, nbytes: int):
        """cudaMalloc on the current device, as a pool's base allocator returns it (a ``MemoryPointer``);
        freed when the pool lets go of it (cupy's ``Memory``)."""
        pointer = self._cupy.cuda.MemoryPointer(self._cupy.cuda.memory.Memory(nbytes), 0)
        self._count("allocations")
        return pointer

    def free_bytes(self) -> int:
        with self._cupy.cuda.Device(self.device_id):
            return int(self._cupy.cuda.runtime.memGetInfo()[0])

    def total_bytes(self) -> int:
        with self._cupy.cuda.Device(self.device_id):
            return int(self._cupy.cuda.runtime.memGetInfo()[1])

    def memory_pool(self, base=None):
        """A ``cupy.cuda.MemoryPool`` whose new memory comes from ``base(nbytes) -> MemoryPointer``
        (default: cudaMalloc). cupy adds ``nbytes`` to the pool's ``total_bytes()`` before it calls
        ``base``; ``base`` runs only when no free block serves an allocation."""
        return self._cupy.cuda.MemoryPool(allocator=base)

    def use_pool(self, pool):
        self._cupy.cuda.set_allocator(pool.malloc)  # the pool's C-level malloc: no Python per allocation

    def close(self):
        super().close()
        self._cupy.cuda.set_allocator(self._cupy.get_default_memory_pool().malloc)

    def is_array(self, value) -> bool:
        return isinstance(value, self._cupy.ndarray)

    def copy_to_device(self, host):
        host = np.ascontiguousarray(host)
        start = time.perf_counter()
        value = self._cupy.asarray(host)
        self._count("copies_to_device", host.nbytes, time.perf_counter() - start)
        return value

    def stack_columns(self, columns, rows: int):
        """Each column copied as it is, then stacked on the device: filling a row-major matrix on the
        host writes with a stride and took 1.8 s per GiB on an H200 machine; this took 0.18 s
        (``benchmarks/gpu_tier.py --device cupy``)."""
        if not columns:
            return self.copy_to_device(np.empty((rows, 0)))
        start = time.perf_counter()
        value = self._cupy.stack([self._cupy.asarray(column) for column in columns], axis=1)
        self._count("copies_to_device", sum(column.nbytes for column in columns), time.perf_counter() - start)
        return value

    def copy_to_host(self, value) -> np.ndarray:
        start = time.perf_counter()
        host = self._cupy.asnumpy(value)
        self._learn(value.nbytes, time.perf_counter() - start)
        return host

    def _copy_to_host_on_stream(self, value) -> np.ndarray:
        start = time.perf_counter()
        host = value.get(stream=self._stream)
        self._stream.synchronize()
        self._learn(value.nbytes, time.perf_counter() - start)
        return host

    def _learn(self, nbytes, seconds):
        """Counts a device → host copy and moves the bandwidth halfway to what it showed (MEMPHIS' EMA)."""
        self._count("copies_to_host", nbytes, seconds)
        if nbytes >= MIN_MEASURED_BYTES and seconds > 0:
            self.copy_bytes_per_s = (self.copy_bytes_per_s + nbytes / seconds) / 2

    def synchronize(self):
        self._cupy.cuda.get_current_stream().synchronize()

    def frame_from_arrow(self, table):
        try:
            import cudf
        except ImportError:
            raise TypeError("frames on the GPU need cudf (pip install 'memphis-spark[gpu-cuda12]'); "
                            "or collect with as_='numpy'") from None
        return cudf.DataFrame.from_arrow(table)
