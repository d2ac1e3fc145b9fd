"""What memphis needs to know about numpy arrays; a cupy backend will sit beside it (GPU issue)."""
import hashlib

import numpy as np

ARRAY_TYPES = (np.ndarray,)


def content_digest(array: np.ndarray) -> str:
    """SHA-256 (hardware-accelerated on most CPUs), truncated to 128 bits, of shape, dtype and data."""
    h = hashlib.sha256(repr((array.shape, array.dtype.str)).encode())
    data = np.ascontiguousarray(array)
    h.update(memoryview(data).cast("B") if data.size else b"")
    return h.hexdigest()[:32]


def nbytes(value) -> int:
    return int(value.nbytes)


def _has_writeable_base(array: np.ndarray) -> bool:
    base = array.base
    while base is not None:
        if not isinstance(base, np.ndarray) or base.flags.writeable:
            return True  # unknown or writeable owner: its bytes may change under the view
        base = base.base
    return False


def freeze(array: np.ndarray) -> np.ndarray:
    """A read-only array with this content whose bytes nobody can change: cached values are shared."""
    if _has_writeable_base(array):
        array = array.copy()
    array.flags.writeable = False
    return array
