"""The disk tier: spilled values in a private directory, checksummed, never unpickled."""
import atexit
import io
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import threading
import time

import numpy as np
import xxhash

log = logging.getLogger("memphis.local")

MAGIC = b"MEMPHIS\x02"  # version 2: the checksum is xxh3-128 (at memory speed; blake2b ran at about 0.8 GB/s)
HEADER_BYTES = 8 + 8 + 8 + 16 + 16  # magic, format, payload length, key, xxh3-128 of payload
KEY_PATTERN = re.compile(r"[0-9a-f]{32}")
# Conservative first guesses so that spilling starts early; replaced by what the disk shows.
INITIAL_WRITE_BYTES_PER_S = 200e6
INITIAL_READ_BYTES_PER_S = 400e6
MIN_MEASURED_BYTES = 2 << 20  # smaller transfers say more about latency than bandwidth


class _HashingWriter:
    """A file wrapper that hashes what passes through it, so a payload is written and hashed once."""

    def __init__(self, f):
        self.f, self.hash, self.length = f, xxhash.xxh3_128(), 0

    def write(self, data):
        self.hash.update(data)
        self.length += len(memoryview(data).cast("B"))
        return self.f.write(data)


def spill_format(value):
    """The file format that holds ``value`` exactly, or None when it cannot be spilled."""
    # Plain arrays only: a subclass (a masked array, np.matrix) would come back as a plain array.
    if type(value) is np.ndarray and value.dtype != object:
        return "npy"
    if type(value) is tuple and value and all(type(v) is np.ndarray and v.dtype != object for v in value):
        return "npz"
    module = type(value).__module__  # pandas and pyarrow are imported only for their own values (~0.2 s)
    if module.startswith("pyarrow"):
        import pyarrow as pa

        return "arrow" if isinstance(value, pa.Table) else None
    if module.startswith("pandas"):
        import pandas as pd

        return "pandas" if isinstance(value, pd.DataFrame) else None
    return None


def _write_payload(fmt, value, out):
    if fmt == "npy":
        np.save(out, value, allow_pickle=False)
        return
    if fmt == "npz":
        buffer = io.BytesIO()  # zip needs to seek; these tuples are small (eigh, svd, lstsq results)
        np.savez(buffer, *value)
        out.write(buffer.getvalue())
        return
    import pyarrow as pa  # here, not above: importing it takes about 0.15 s that arrays never need

    table = pa.Table.from_pandas(value) if fmt == "pandas" else value
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    out.write(sink.getvalue())


FORMATS = ("npy", "npz", "arrow", "pandas")


def read_payload(fmt, payload):
    """The value of an entry file's payload (bytes or a memoryview) in format ``fmt``; never unpickles."""
    if fmt == "npy":
        return np.load(io.BytesIO(payload), allow_pickle=False)  # BytesIO copies a memoryview: the value owns its bytes
    if fmt == "npz":
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            return tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
    import pyarrow as pa  # as in _write_payload

    table = pa.ipc.open_file(pa.py_buffer(payload)).read_all()
    return table.to_pandas() if fmt == "pandas" else table


def checked_key(key: str) -> str:
    """``key`` when it is 32 lowercase hex digits, the only names entry files have: nothing can point
    outside their directory."""
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise ValueError(f"disk key {key!r}: expected 32 lowercase hex digits")
    return key


def write_entry_file(directory: str, key: str, value, fmt: str, *, magic: bytes = MAGIC, prefix: bytes = b""):
    """(temp path, bytes): ``value`` written as an entry file to a fresh temp file (0600) in
    ``directory``, named ``<key>.*.tmp``, for the caller to rename into place; nothing is left
    behind when it fails.

    The file is a header (``magic``, format, length, key, xxh3-128 of what follows) and then
    ``prefix`` (a tier's own fields, covered by the checksum) and the payload, hashed as written.
    """
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f"{checked_key(key)}.", suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(HEADER_BYTES))
            writer = _HashingWriter(f)
            writer.write(prefix)
            _write_payload(fmt, value, writer)
            f.seek(0)
            f.write(magic + fmt.encode().ljust(8) + writer.length.to_bytes(8, "little")
                    + bytes.fromhex(key) + writer.hash.digest())
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    return temp, HEADER_BYTES + writer.length


def checked_body(data: bytes, key: str, *, magic: bytes = MAGIC):
    """(format, body) of an entry file's bytes ``data`` (see :func:`write_entry_file`): the body is
    the prefix and the payload; None when the magic, length, key or checksum does not match (a
    corrupt, truncated or foreign file)."""
    header, body = data[:HEADER_BYTES], memoryview(data)[HEADER_BYTES:]
    fmt = header[8:16].decode("ascii", "replace").strip()
    valid = (header[:8] == magic and fmt in FORMATS
             and int.from_bytes(header[16:24], "little") == len(body)
             and header[24:40] == bytes.fromhex(key)
             and xxhash.xxh3_128(body).digest() == header[40:56])  # releases the GIL; xxh3_128_digest() does not
    return (fmt, body) if valid else None


def private_dir(path: str) -> str:
    """Creates ``path`` (0700) or checks that an existing one is ours, not a link, and private."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a directory owned by this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


class Bandwidths:
    """A disk's write and read bandwidths, learned from the transfers a tier makes; conservative
    first guesses so that spilling starts early. Updated without a lock: a lost update only delays learning.

    Examples
    --------
    >>> Bandwidths().transfer_seconds(200_000_000)
    1.5
    """

    def __init__(self):
        self.write_bytes_per_s = INITIAL_WRITE_BYTES_PER_S
        self.read_bytes_per_s = INITIAL_READ_BYTES_PER_S

    def transfer_seconds(self, size: int) -> float:
        """Estimated time to write ``size`` bytes and read them back."""
        return size / self.write_bytes_per_s + size / self.read_bytes_per_s

    def wrote(self, size: int, seconds: float):
        self.write_bytes_per_s = self._learn(self.write_bytes_per_s, size, seconds)

    def read(self, size: int, seconds: float):
        self.read_bytes_per_s = self._learn(self.read_bytes_per_s, size, seconds)

    @staticmethod
    def _learn(bytes_per_s, size, seconds):
        """Moves a bandwidth halfway to what a transfer of at least MIN_MEASURED_BYTES showed (LIMA's EMA)."""
        if size < MIN_MEASURED_BYTES or seconds <= 0:
            return bytes_per_s
        return (bytes_per_s + size / seconds) / 2


class DiskTier:
    """Spilled values, one file per key, under a budget.

    Files live in a fresh per-process directory (0700, made on the first write) under ``root``
    (itself made 0700, and refused when it is a link or another user's), are 0600, and are named by
    the key only (32 hex digits plus the
    format: ``.npy`` for arrays, ``.npz`` for tuples of arrays, ``.arrow`` for Arrow tables and
    pandas frames). Each file is a header (magic, format, length, key, xxh3-128 of the payload)
    followed by the payload; writes go to a temp file in the same directory, then ``os.replace``.
    A file whose header or checksum does not match is deleted and counted in ``corrupt``; the
    caller recomputes. A write that fails for any reason (directory full, gone or unwritable, a
    key that is not 32 hex digits) stores nothing, is counted in ``failed_writes`` and the value is
    dropped; the first failure is logged as a warning, later ones at debug level.

    Examples
    --------
    >>> disk = DiskTier(root="/tmp/memphis-me", max_bytes=1 << 30)  # doctest: +SKIP
    >>> disk.write("0" * 32, np.arange(3.0), score=1.0)  # doctest: +SKIP
    (True, [])
    """

    def __init__(self, *, root: str, max_bytes: int):
        self.root = root
        self.directory = None  # made on the first write, so that an unusable root fails like a full disk
        self.max_bytes = int(max_bytes)
        self.bandwidths = Bandwidths()
        self.corrupt = 0  # files found corrupt or foreign on read; guarded by _lock
        self.failed_writes = 0  # guarded by _lock
        self._lock = threading.Lock()
        self._files = {}  # key -> (path, size in bytes, eviction score); guarded by _lock
        self.bytes_held = 0  # sum of the sizes in _files; guarded by _lock

    def _made_directory(self) -> str:
        """The spill directory, made now when it is not yet (holds _lock)."""
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=private_dir(self.root))  # 0700
            atexit.register(shutil.rmtree, self.directory, True)
        return self.directory

    def close(self):
        """Deletes the directory and its files (also at exit)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        with self._lock:
            self._files.clear()
            self.bytes_held = 0

    def transfer_seconds(self, size: int) -> float:
        """Estimated time to write ``size`` bytes and read them back."""
        return self.bandwidths.transfer_seconds(size)

    @staticmethod
    def _path(directory: str, key: str, fmt: str) -> str:
        return os.path.join(directory, f"{checked_key(key)}.{'arrow' if fmt == 'pandas' else fmt}")

    def write(self, key: str, value, *, score: float):
        """Stores ``value``; returns (stored, keys evicted to make room). Never raises: a failed write
        stores nothing and leaves no file behind."""
        fmt = spill_format(value)
        if fmt is None:
            return False, []
        start = time.perf_counter()
        temp, evicted = None, []
        try:
            with self._lock:
                directory = self._made_directory()
            path = self._path(directory, key, fmt)
            temp, size = write_entry_file(directory, key, value, fmt)
            with self._lock:
                fits, evicted = self._make_room(size, score)
                if not fits:
                    os.unlink(temp)
                    return False, evicted
                os.replace(temp, path)
                self._files[key] = (path, size, score)
                self.bytes_held += size
        except Exception as error:  # a full or vanished disk, a serializer's error: drop, never fail the caller
            if temp:
                try:
                    os.unlink(temp)
                except OSError:
                    pass
            with self._lock:
                self.failed_writes += 1
                first = self.failed_writes == 1
            # Once as a warning: a full disk would otherwise log on every eviction.
            log.log(logging.WARNING if first else logging.DEBUG, "memphis.local: cannot spill to %s (%s: %s); "
                    "evicted values are dropped and recomputed when asked for again", self.directory or self.root,
                    type(error).__name__, error)
            return False, evicted  # files evicted before the failure are gone all the same
        self.bandwidths.wrote(size, time.perf_counter() - start)
        log.debug("spilled %s (%d bytes) to disk", key, size)
        return True, evicted

    def _make_room(self, size, score):
        """Evicts lower-scored files until ``size`` fits: (fits, evicted keys). Holds _lock."""
        if size > self.max_bytes:
            return False, []
        victims = sorted(self._files.items(), key=lambda kv: kv[1][2])
        evicted = []
        while self.bytes_held + size > self.max_bytes:
            victim, (path, victim_size, victim_score) = victims.pop(0)
            if victim_score > score:
                return False, evicted  # only files worth less than this one may leave for it
            self._unlink(victim)
            evicted.append(victim)
        return True, evicted

    def _unlink(self, key):
        path, size, _ = self._files.pop(key)
        self.bytes_held -= size
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def read(self, key: str):
        """The value spilled under ``key``, or None when its file is gone, foreign or corrupt."""
        with self._lock:
            known = self._files.get(key)
        if known is None:
            return None
        path = known[0]
        start = time.perf_counter()
        try:
            with open(path, "rb") as f:
                data = f.read()
            checked = checked_body(data, key)
            valid = checked is not None and path.endswith("." + ("arrow" if checked[0] == "pandas" else checked[0]))
            value = read_payload(*checked) if valid else None
        except Exception as error:  # any unreadable file is treated as corrupt: recompute, never fail
            log.debug("spill file of %s unreadable: %s", key, error)
            value = None
        with self._lock:
            if key in self._files and value is None:
                self._unlink(key)
                self.corrupt += 1
                log.debug("spill file of %s is corrupt: deleted, the value is recomputed", key)
        if value is not None:
            self.bandwidths.read(len(data), time.perf_counter() - start)
        return value

    def remove(self, key: str):
        with self._lock:
            if key in self._files:
                self._unlink(key)

    def clear(self):
        with self._lock:
            for key in list(self._files):
                self._unlink(key)

    def path_of(self, key: str):
        """The file that holds ``key``, or None (for tests and diagnostics)."""
        with self._lock:
            known = self._files.get(key)
        return known[0] if known else None


class NoDisk:
    """The disk tier of a host tier that spills nothing (``disk.maxBytes`` 0; a null object): it holds
    nothing, so an evicted entry is dropped."""

    max_bytes = bytes_held = corrupt = failed_writes = 0

    def transfer_seconds(self, size: int) -> float:
        return math.inf  # never worth a write: there is nowhere to write

    def read(self, key: str):
        return None

    def remove(self, key: str):
        pass

    def clear(self):
        pass

    def close(self):
        pass


NO_DISK = NoDisk()
