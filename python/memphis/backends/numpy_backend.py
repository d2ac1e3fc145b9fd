"""What memphis needs to know about numpy arrays; device arrays have device_backend beside it."""
import functools
import mmap
import os
import sys
import threading
import time

import numpy as np
import xxhash

ARRAY_TYPES = (np.ndarray,)
# A non-contiguous array is hashed in C-order blocks of about this size: bounded extra memory.
HASH_BLOCK_BYTES = 8 << 20


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def blas_threads() -> int:
    """The threads numpy's BLAS runs a product on, as this process first asks: threadpoolctl's answer
    where it is installed, else the usual environment variables, else one per core (OpenBLAS's and
    MKL's default)."""
    try:
        from threadpoolctl import threadpool_info

        found = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        if found:
            return max(found)
    except Exception:  # not installed, or a library it cannot read: the variables below
        pass
    for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return cores()


def _bytes_of(block: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a flat uint8 view (any dtype, 0-d and empty included)."""
    return block.reshape(-1).view(np.uint8)


def content_digest(array: np.ndarray) -> str:
    """xxh3-128 of shape, dtype and the data in C order: 32 hex digits, at memory speed, no copy.

    Arrays of equal shape, dtype and values have equal digests whatever their memory layout
    (a view is read in blocks, so it hashes like its contiguous copy).
    """
    h = xxhash.xxh3_128(repr((array.shape, array.dtype.str)).encode())
    if array.flags.c_contiguous:
        h.update(_bytes_of(array))
    else:
        rows = max(1, HASH_BLOCK_BYTES // max(array[0].nbytes, 1)) if array.ndim and len(array) else 1
        for start in range(0, len(array), rows):
            h.update(_bytes_of(np.ascontiguousarray(array[start:start + rows])))
    return h.hexdigest()


def nbytes(value) -> int:
    return int(value.nbytes)


def immutable(array: np.ndarray) -> bool:
    """True when nobody can change the bytes of ``array`` through numpy: it and every base are read-only."""
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            return False
        array = array.base
    return array is None  # a foreign owner (a buffer, mmap) may be writeable


def read_only_view(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that cannot be written through; ``array`` itself stays as it is."""
    view = array.view()
    view.flags.writeable = False
    return view


def freeze(array: np.ndarray) -> np.ndarray:
    """A read-only array with this content whose bytes nobody can change: cached values are shared."""
    # A base held by this array alone (numpy builds some results, e.g. X[:, columns], as views of a
    # fresh buffer; 2 = array.base + getrefcount's argument): freezing it too is enough, no copy.
    if isinstance(array.base, np.ndarray) and array.base.base is None and sys.getrefcount(array.base) == 2:
        array.base.flags.writeable = False
    elif array.base is not None and not immutable(array.base):
        array = array.copy()
    array.flags.writeable = False
    return array


def float_matrix(columns, rows: int) -> np.ndarray:
    """A row-major (rows, len(columns)) float64 matrix of 1-d host columns."""
    out = np.empty((rows, len(columns)), dtype=np.float64)
    for i, column in enumerate(columns):
        out[:, i] = column
    return out


_first_touch = []  # [seconds per byte], measured once per process
_first_touch_lock = threading.Lock()
FIRST_TOUCH_PROBE_BYTES = 16 << 20


def first_touch_seconds_per_byte() -> float:
    """What fresh memory costs per byte when first written (page faults), measured once on 16 MiB.

    A kept result keeps its memory, so the next result of its size is written to fresh pages
    instead of reusing the freed ones: at about 0.2 ns per byte here, more than many cheap
    operations cost (an elementwise sum of 10⁵ doubles takes 0.1 ns per byte of its result).
    Measured on anonymous memory mapped for the purpose (always fresh, whatever the allocator
    recycles), as the first write's time less a second write's.
    """
    with _first_touch_lock:
        if not _first_touch:
            with mmap.mmap(-1, FIRST_TOUCH_PROBE_BYTES) as fresh:
                block = np.frombuffer(fresh, dtype=np.float64)
                start = time.perf_counter()
                block.fill(1.0)
                touched = time.perf_counter()
                block.fill(2.0)
                again = time.perf_counter()
                del block
            _first_touch.append(max((touched - start) - (again - touched), 0.0) / FIRST_TOUCH_PROBE_BYTES)
        return _first_touch[0]
