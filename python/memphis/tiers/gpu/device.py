"""The device interface of the GPU tier, and a simulated device that tests every policy without a GPU."""
import collections
import concurrent.futures
import gc
import threading
import weakref

import numpy as np

from memphis.backends import device_backend
from memphis.backends.numpy_backend import float_matrix
from memphis.tiers.gpu.tier import NO_GPU

COPY_COUNTERS = ("allocations", "frees", "copies_to_device", "copies_to_host", "bytes_to_device", "bytes_to_host")


class CopyStream:
    """Device → host copies off the caller's thread, one after another in submission order (a stream).

    ``copy(value) -> numpy`` is the device's copy on its own stream (cupy: a ``cupy.cuda.Stream``);
    ``done(result, error)`` runs on the stream's thread when the copy is over, the stream no longer
    holding ``value``: an eviction that waits for it finds the block back in the pool.
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

        held = [value]
        del value

        def run():
            try:
                result = self._copy(held.pop())
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

    Raw memory: ``allocate(nbytes)``, what a memory pool's base allocator returns (when the device
    is full it raises an error that ``is_full(error)`` recognizes; the pool frees it). Arrays that
    the device's operations create come from a memory pool, as cupy's do: ``memory_pool(base)``
    makes one (cupy: ``cupy.cuda.MemoryPool(allocator=base)``) that recycles the blocks of dead
    arrays itself and calls ``base(nbytes)`` only for new memory, after adding ``nbytes`` to its
    ``total_bytes()``; ``free_all_blocks()`` gives its free blocks back to the device.
    ``use_pool(pool)`` makes it the pool the device's arrays come from; ``close()`` goes back to
    the device's default one. Arrays: ``copy_to_device(host)``, ``stack_columns(columns, rows)``
    and ``copy_to_host(value)`` (all counted), ``is_array(value)``. Memory: ``free_bytes()``,
    ``total_bytes()``. ``copy_stream``: asynchronous device → host copies (:class:`CopyStream`).
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
        self.tier = NO_GPU  # the GpuTier that manages this device, set by it
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

    def out_of_memory(self, nbytes: int, *, held: int, limit: int) -> MemoryError:
        """The device's out-of-memory error for an allocation of ``nbytes`` that the pool, holding
        ``held`` bytes under a budget of ``limit`` (0: the device itself is full), cannot make."""
        why = f"{held} bytes held of a {limit}-byte budget" if limit else f"the device is full; {held} bytes held"
        return self.out_of_memory_errors[0](f"{self.name}: cannot allocate {nbytes} bytes: {why}, and nothing "
                                            "is left to evict or release")

    def is_full(self, error: BaseException) -> bool:
        """Whether ``error``, raised by ``allocate``, says that the device has no room left."""
        return isinstance(error, self.out_of_memory_errors)

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
    """An allocation on the simulated device failed: it is full, or the GPU tier's budget is spent."""


class SimulatedDeviceFull(SimulatedOutOfMemory):
    """The simulated device is full: an allocation would exceed its ``capacity_bytes`` (cupy's
    ``CUDARuntimeError`` of ``cudaErrorMemoryAllocation``)."""


class SimulatedPool:
    """What ``cupy.cuda.MemoryPool(allocator=base)`` does, for the simulated device.

    ``malloc(nbytes)`` takes a free block of exactly that size (``recycled``; cupy's pool also
    splits a larger one); else it adds ``nbytes`` to ``total_bytes()`` and calls ``base(nbytes)``
    (``fresh``; default: the device's ``allocate``). When the base raises the device-full error,
    the free blocks go back to the device and it tries again, the second time after a garbage
    collection; any other error propagates, the bytes taken out of the total again. ``free(block)``
    takes the block of a dead array back: it only queues it (no lock), since it runs in finalizers
    at any point of any thread. ``free_all_blocks()`` gives every free block back to the device.

    Examples
    --------
    >>> device = SimulatedDevice(capacity_bytes=1 << 20)
    >>> pool = device.memory_pool()
    >>> pool.free(pool.malloc(64)); block = pool.malloc(64)
    >>> pool.recycled, pool.fresh, pool.total_bytes(), pool.free_bytes()
    (1, 1, 64, 0)
    """

    def __init__(self, device: "SimulatedDevice", base=None):
        self.device = device
        self._base = base if base is not None else device.allocate
        # Guarded by the lock: _total = bytes taken from the base and not given back (in arrays, in
        # the free lists or queued), and the sizes of base calls under way; _free_bytes = bytes in
        # the free lists. _returned is appended to without the lock and drained under it.
        self._lock = threading.Lock()
        self._free = collections.defaultdict(list)  # size -> blocks of dead arrays
        self._returned = collections.deque()
        self._total = 0
        self._free_bytes = 0
        self.recycled = 0
        self.fresh = 0
        self.closed = False

    def malloc(self, nbytes: int) -> np.ndarray:
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)  # as cupy: no memory, not pooled
        with self._lock:
            self._drain()
            blocks = self._free.get(nbytes)
            if blocks:
                self._free_bytes -= nbytes
                self.recycled += 1
                return blocks.pop()
            self._total += nbytes
        try:
            block = self._new(nbytes)
        except BaseException:
            with self._lock:
                self._total -= nbytes
            raise
        with self._lock:
            self.fresh += 1
        return block

    def _new(self, nbytes: int) -> np.ndarray:
        for attempt in range(3):
            try:
                return self._base(nbytes)
            except Exception as error:
                if attempt == 2 or not self.device.is_full(error):
                    raise
                if attempt == 1:
                    gc.collect()
                self.free_all_blocks()

    def free(self, block: np.ndarray):
        if not block.nbytes:
            return
        if self.closed:  # a pool no longer in use: the block goes straight back to the device
            with self._lock:
                self._total -= block.nbytes
            self.device.free(block)
        else:
            self._returned.append(block)

    def _drain(self):
        while self._returned:
            block = self._returned.popleft()
            self._free[block.nbytes].append(block)
            self._free_bytes += block.nbytes

    def free_all_blocks(self):
        with self._lock:
            self._drain()
            blocks = [block for same_size in self._free.values() for block in same_size]
            self._free.clear()
            self._total -= self._free_bytes
            self._free_bytes = 0
        for block in blocks:
            self.device.free(block)

    def total_bytes(self) -> int:
        with self._lock:
            return self._total

    def free_bytes(self) -> int:
        with self._lock:
            self._drain()
            return self._free_bytes

    def used_bytes(self) -> int:
        with self._lock:
            self._drain()
            return self._total - self._free_bytes

    def n_free_blocks(self) -> int:
        with self._lock:
            self._drain()
            return sum(len(blocks) for blocks in self._free.values())

    def close(self):
        """Gives the free blocks back; blocks of arrays that die later go straight to the device."""
        self.closed = True
        self.free_all_blocks()


class SimulatedDevice(Device):
    """A stand-in for a GPU, for tests and CI: numpy arrays play device buffers.

    It has a byte capacity (an allocation beyond it raises :class:`SimulatedDeviceFull`), counts
    allocations, frees, host↔device copies and bytes copied, and accounts each copy's time at
    ``copy_bytes_per_s`` (nothing sleeps: ``copy_seconds`` adds up). Its arrays come from a
    :class:`SimulatedPool` (by default one of its own, as cupy's come from its default pool) and are
    :class:`SimulatedArray`, a thin wrapper that tests can tell from numpy arrays; like cupy's, they
    refuse to mix with host arrays implicitly.

    Examples
    --------
    >>> device = SimulatedDevice(capacity_bytes=1 << 20)
    >>> x = device.copy_to_device(np.arange(4.0))
    >>> float(np.sum(x * 2)), device.counts["copies_to_device"]
    (12.0, 1)
    >>> device.bytes_in_use, device.default_pool.used_bytes()  # its pool keeps the blocks of dead arrays
    (72, 32)
    """

    name = "simulated"
    simulated = True
    out_of_memory_errors = (SimulatedOutOfMemory,)

    def __init__(self, *, capacity_bytes: int, copy_bytes_per_s: float = 12e9):
        super().__init__(copy_bytes_per_s=copy_bytes_per_s)
        self.capacity_bytes = int(capacity_bytes)
        self.bytes_in_use = 0  # guarded by _counts_lock; never above capacity_bytes
        self.default_pool = self._pool = SimulatedPool(self)
        # Registered with the first device, not at import: until then no traced call looks for devices.
        device_backend.register(SimulatedArray, lambda array: array.device)

    def allocate(self, nbytes: int) -> np.ndarray:
        with self._counts_lock:
            if self.bytes_in_use + nbytes > self.capacity_bytes:
                raise SimulatedDeviceFull(f"simulated device: {nbytes} bytes do not fit; "
                                           f"{self.bytes_in_use} of {self.capacity_bytes} in use")
            self.bytes_in_use += nbytes
            self.counts["allocations"] += 1
        return np.empty(nbytes, dtype=np.uint8)

    def free(self, buffer: np.ndarray):
        with self._counts_lock:
            self.bytes_in_use -= buffer.nbytes
            self.counts["frees"] += 1

    def is_full(self, error) -> bool:
        return isinstance(error, SimulatedDeviceFull)

    def free_bytes(self) -> int:
        return self.capacity_bytes - self.bytes_in_use

    def total_bytes(self) -> int:
        return self.capacity_bytes

    def memory_pool(self, base=None) -> SimulatedPool:
        return SimulatedPool(self, base)

    def use_pool(self, pool: SimulatedPool):
        self._pool = pool

    def close(self):
        super().close()
        self._pool = self.default_pool

    def is_array(self, value) -> bool:
        return isinstance(value, SimulatedArray)

    def adopt(self, host: np.ndarray) -> "SimulatedArray":
        """``host``'s values in a fresh device buffer (how a simulated kernel's output is allocated)."""
        host = np.asarray(host)
        pool = self._pool
        block = pool.malloc(host.nbytes)
        data = block[:host.nbytes].view(host.dtype).reshape(host.shape)
        data[...] = host
        array = SimulatedArray(data, self)
        # The block goes back to its pool when the array (and every view of it, which holds it) is gone.
        weakref.finalize(array, pool.free, block)
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
    buffer (from the device's memory pool); views of it share its buffer. It does not
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

