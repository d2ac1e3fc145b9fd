"""The device interface of the GPU tier, and a simulated device that tests every policy without a GPU."""
import concurrent.futures
import threading
import weakref

import numpy as np

from memphis.backends import device_backend
from memphis.backends.numpy_backend import float_matrix

COPY_COUNTERS = ("allocations", "frees", "copies_to_device", "copies_to_host", "bytes_to_device", "bytes_to_host")


class CopyStream:
    """Device → host copies off the caller's thread, one after another in submission order (a stream).

    ``copy(value) -> numpy`` is the device's copy on its own stream (cupy: a ``cupy.cuda.Stream``);
    ``done(result, error)`` runs on the stream's thread when the copy is over.
    """

    def __init__(self, copy):
        self._copy = copy
        self._worker = None  # its thread, started on the first copy (again after close)
        self._lock = threading.Lock()

    def submit(self, value, done) -> concurrent.futures.Future:
        with self._lock:
            if self._worker is None:
                self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="memphis-copy")
            worker = self._worker

        def run():
            try:
                result = self._copy(value)
            except BaseException as error:  # the waiter decides; the stream goes on
                done(None, error)
                return
            done(result, None)
        return worker.submit(run)

    def synchronize(self):
        """Returns when every copy submitted so far is over."""
        with self._lock:
            worker = self._worker
        if worker is not None:
            worker.submit(lambda: None).result()

    def close(self):
        """Waits for the copies submitted so far and stops the thread."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True)


class Device:
    """What the GPU tier needs of an accelerator.

    Raw buffers: ``allocate(nbytes)`` (raises one of ``out_of_memory_errors`` when the device is
    full) and ``free(buffer)``. Arrays: ``copy_to_device(host)``, ``stack_columns(columns, rows)``
    and ``copy_to_host(value)`` (all counted), ``is_array(value)``. Memory: ``free_bytes()``,
    ``total_bytes()``. Allocation of the arrays the device's operations create goes through
    ``use_allocator(allocator)``: the allocator's ``malloc(nbytes)`` hands out buffers (recycled or
    fresh) and runs its failure hook before it gives up; ``release(buffer)`` takes back the buffer of
    an array that died. ``copy_stream``: asynchronous device → host copies (:class:`CopyStream`).
    ``copy_bytes_per_s``: the estimated copy bandwidth the eviction policy weighs against
    recomputation.
    """

    name = "device"
    simulated = False
    out_of_memory_errors = (MemoryError,)

    def __init__(self, *, copy_bytes_per_s: float):
        self.copy_bytes_per_s = float(copy_bytes_per_s)
        self.counts = dict.fromkeys(COPY_COUNTERS, 0)
        self.copy_seconds = 0.0  # time spent in counted copies (simulated: bytes / copy_bytes_per_s)
        self.tier = None  # the GpuTier that manages this device, set by it
        self._counts_lock = threading.Lock()
        self.copy_stream = CopyStream(self._copy_to_host_on_stream)

    def _count(self, counter: str, nbytes: int = 0, seconds: float = 0.0):
        with self._counts_lock:
            self.counts[counter] += 1
            if counter.startswith("copies_to_"):
                self.counts["bytes_to_" + counter[len("copies_to_"):]] += nbytes
                self.copy_seconds += seconds

    def transfer_seconds(self, nbytes: int) -> float:
        """Estimated time to copy ``nbytes`` between host and device."""
        return nbytes / self.copy_bytes_per_s

    def out_of_memory(self, nbytes: int, why: str) -> MemoryError:
        return self.out_of_memory_errors[0](f"{self.name}: cannot allocate {nbytes} bytes: {why}")

    def _copy_to_host_on_stream(self, value) -> np.ndarray:
        return self.copy_to_host(value)

    def synchronize(self):
        """Waits for the work queued on the device (so that a measured time includes it)."""

    def stack_columns(self, columns, rows: int):
        """A (rows, len(columns)) matrix on the device from 1-d host columns, counted as one copy.

        Here the host builds the matrix and copies it; a real device copies each column as it is
        and stacks them on the device (``CupyDevice``), since the host's row-major fill is slow."""
        return self.copy_to_device(float_matrix(columns, rows))

    def frame_from_arrow(self, table):
        raise TypeError(f"{self.name} has no data frames on the device; collect with as_='numpy'")

    def close(self):
        """Stops the copy stream and hands array allocation back to the device's default."""
        self.copy_stream.close()


class SimulatedOutOfMemory(MemoryError):
    """The simulated device is full: an allocation would exceed its ``capacity_bytes``."""


class SimulatedDevice(Device):
    """A stand-in for a GPU, for tests and CI: numpy arrays play device buffers.

    It has a byte capacity (an allocation beyond it raises :class:`SimulatedOutOfMemory`), counts
    allocations, frees, host↔device copies and bytes copied, and accounts each copy's time at
    ``copy_bytes_per_s`` (nothing sleeps: ``copy_seconds`` adds up). Its arrays are
    :class:`SimulatedArray`, a thin wrapper that tests can tell from numpy arrays; like cupy's, they
    refuse to mix with host arrays implicitly.

    Examples
    --------
    >>> device = SimulatedDevice(capacity_bytes=1 << 20)
    >>> x = device.copy_to_device(np.arange(4.0))
    >>> float(np.sum(x * 2)), device.counts["copies_to_device"], device.bytes_in_use
    (12.0, 1, 32)
    """

    name = "simulated"
    simulated = True
    out_of_memory_errors = (SimulatedOutOfMemory,)

    def __init__(self, *, capacity_bytes: int, copy_bytes_per_s: float = 12e9):
        super().__init__(copy_bytes_per_s=copy_bytes_per_s)
        self.capacity_bytes = int(capacity_bytes)
        self.bytes_in_use = 0  # guarded by _counts_lock; never above capacity_bytes
        self._malloc, self._release = self.allocate, self.free

    def allocate(self, nbytes: int) -> np.ndarray:
        with self._counts_lock:
            if self.bytes_in_use + nbytes > self.capacity_bytes:
                raise SimulatedOutOfMemory(f"simulated device: {nbytes} bytes do not fit; "
                                           f"{self.bytes_in_use} of {self.capacity_bytes} in use")
            self.bytes_in_use += nbytes
            self.counts["allocations"] += 1
        return np.empty(nbytes, dtype=np.uint8)

    def free(self, buffer: np.ndarray):
        with self._counts_lock:
            self.bytes_in_use -= buffer.nbytes
            self.counts["frees"] += 1

    def free_bytes(self) -> int:
        return self.capacity_bytes - self.bytes_in_use

    def total_bytes(self) -> int:
        return self.capacity_bytes

    def use_allocator(self, allocator):
        self._malloc, self._release = allocator.malloc, allocator.release

    def close(self):
        super().close()
        self._malloc, self._release = self.allocate, self.free

    def is_array(self, value) -> bool:
        return isinstance(value, SimulatedArray)

    def adopt(self, host: np.ndarray) -> "SimulatedArray":
        """``host``'s values in a fresh device buffer (how a simulated kernel's output is allocated)."""
        host = np.asarray(host)
        buffer = self._malloc(host.nbytes)
        data = buffer[:host.nbytes].view(host.dtype).reshape(host.shape)
        data[...] = host
        array = SimulatedArray(data, self)
        # The buffer goes back when the array (and every view of it, which holds it) is gone.
        weakref.finalize(array, self._release, buffer)
        return array

    def copy_to_device(self, host) -> "SimulatedArray":
        host = np.asarray(host)
        self._count("copies_to_device", host.nbytes, self.transfer_seconds(host.nbytes))
        return self.adopt(host)

    def copy_to_host(self, value: "SimulatedArray") -> np.ndarray:
        self._count("copies_to_host", value.nbytes, self.transfer_seconds(value.nbytes))
        return np.array(value._data, copy=True)


def _raw(value, device):
    """The numpy value behind simulated arrays; a host array here would be an implicit copy: refused."""
    if isinstance(value, SimulatedArray):
        return value._data
    if isinstance(value, np.ndarray):
        raise TypeError("a host (numpy) array cannot mix with a simulated device array; copy it to the "
                        "device first (device.copy_to_device, or memphis.gpu.to_device for traced arrays)")
    if type(value) in (tuple, list):
        return type(value)(_raw(v, device) for v in value)
    if type(value) is dict:
        return {k: _raw(v, device) for k, v in value.items()}
    return value


class SimulatedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """An array on a :class:`SimulatedDevice`: numpy values in a device buffer.

    numpy functions and operators on it compute with numpy and put the result in a new device
    buffer (allocated through the device's allocator); views of it share its buffer. It does not
    convert to numpy implicitly (``np.asarray`` raises, as with cupy): use ``.get()``.
    """

    __slots__ = ("_data", "device", "_owner", "__weakref__")

    def __init__(self, data: np.ndarray, device: SimulatedDevice, owner=None):
        self._data = data
        self.device = device
        self._owner = owner  # the array whose buffer this view shares: it stays alive as long as this

    def _wrap(self, result, sources):
        if isinstance(result, (np.ndarray, np.generic)):
            result = np.asarray(result)
            for source in sources:
                if isinstance(source, SimulatedArray) and np.may_share_memory(result, source._data):
                    return SimulatedArray(result, self.device, owner=source)
            return self.device.adopt(result)
        if isinstance(result, tuple):
            parts = [self._wrap(r, sources) for r in result]
            return type(result)(*parts) if hasattr(result, "_fields") else tuple(parts)
        return result

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            raise TypeError("out= is not supported on simulated device arrays")
        result = getattr(ufunc, method)(*_raw(inputs, self.device), **_raw(kwargs, self.device))
        return self._wrap(result, inputs)

    def __array_function__(self, function, types, args, kwargs):
        result = function(*_raw(args, self.device), **_raw(kwargs, self.device))
        flat = [a for a in args if isinstance(a, SimulatedArray)]
        flat += [a for arg in args if type(arg) in (tuple, list) for a in arg if isinstance(a, SimulatedArray)]
        return self._wrap(result, flat)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("implicit conversion of a simulated device array to numpy is not allowed; use .get()")

    def get(self) -> np.ndarray:
        """A host copy (counted as a device → host copy)."""
        return self.device.copy_to_host(self)

    def __getitem__(self, index):
        return self._wrap(self._data[_raw(index, self.device)], (self,))

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    T = property(lambda self: np.transpose(self))

    def reshape(self, *shape):
        return np.reshape(self, shape[0] if len(shape) == 1 else shape)

    def __len__(self):
        return len(self._data)

    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __bool__(self):
        return bool(self._data)

    def __repr__(self):
        return f"SimulatedArray({self._data!r})"


device_backend.register(SimulatedArray, lambda array: array.device)
