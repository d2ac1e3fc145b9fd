"""The durable tier: results of traced work and ``@memphis.reuse`` calls that outlive the process.

A host-tier miss asks here before it computes (host → spill → durable → compute); a computed value
that took longer than writing and reading it back is written here in the background. The files
are the disk tier's entry files (checksummed ``.npy``/``.npz``/Arrow payloads, never pickle) with
a manifest inside the checksummed part, so that one rename commits an entry whole.
"""
import concurrent.futures
import getpass
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from typing import Mapping, Optional

from memphis import jar_facts
from memphis.tiers.core import value_per_byte
from memphis.tiers.disk import (HEADER_BYTES, KEY_PATTERN, Bandwidths, checked_body, checked_key, private_dir,
                                read_payload, spill_format, write_entry_file)

log = logging.getLogger("memphis.local")

# The entry-file magic of this tier; its last two bytes are the format version, so a file of
# another version (or a spill file) is foreign here. Version 2: items and files hashed by xxh3-128, not
# blake2b. Version 3: int lists and shapes in items' literals as packed int64s (other keys).
MAGIC = b"MEMPHD\x00\x03"
MANIFEST_LENGTH_BYTES = 4  # the manifest's length, first in the checksummed body
MIN_DURABLE_SECONDS = 0.010  # as for spilling: below this, estimates of disk time are noise
ORPHAN_AGE_S = 3600.0  # a temp file this old is a killed writer's: no live write takes an hour
MAX_PENDING_BYTES = 1 << 30  # values queued for writing; beyond it new ones are refused, not queued

COUNTERS = ("durable_hits", "durable_misses", "durable_writes", "durable_refused", "durable_evicted",
            "durable_corrupt", "durable_foreign", "durable_write_failed", "durable_orphans_removed")


def user_name() -> str:
    """The user name Spark gives this process (``Utils.getCurrentUserName``): $SPARK_USER, else
    Hadoop's ($HADOOP_USER_NAME, else the login name); the JVM's tier names its folder by the same."""
    return os.environ.get("SPARK_USER") or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def user_folder(user: str, shared: bool = False) -> str:
    """The folder of ``user``'s entries under the durable root, as the JVM's ``DurableLayout.userFolder``
    names it (the jar's durable layout): the shared folder when entries are shared across users; else
    the name itself when it is plain and not the shared folder's, otherwise a hash of it."""
    layout = jar_facts.durable_layout()
    if shared:
        return layout["shared_folder"]
    rule = layout["user_folder"]
    if re.fullmatch(rule["plain"], user) and user != layout["shared_folder"]:
        return user
    digest = hashlib.sha256(user.encode("utf-8", "replace")).hexdigest()
    return rule["hashed_prefix"] + digest[:rule["hashed_hex_digits"]]


def default_root(environ: Mapping = os.environ, home: Optional[str] = None) -> str:
    """``$XDG_CACHE_HOME/memphis/durable``, else ``~/.cache/memphis/durable`` (of ``environ`` and
    ``home``, this process's by default), as the JVM's ``DurableLayout.defaultRoot``: a relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG Base Directory spec says."""
    rule = jar_facts.durable_layout()["root_default"]
    cache = environ.get(rule["cache_home_variable"]) or ""
    if not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~") if home is None else home, rule["cache_home_default"])
    return os.path.abspath(os.path.join(cache, rule["path"]))


def shared_dir(path: str) -> str:
    """Creates ``path`` (0770, for the users of its group) or checks that an existing one is a directory, not a link."""
    os.makedirs(path, mode=0o770, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{path} is not a directory")
    return path


class DurableTier:
    """Values kept across processes in ``<root>/<user>/driver`` under ``max_bytes``.

    One file per entry, named by its 32-hex-digit key alone, 0600 in a 0700 folder of this user
    (with ``shared=True``: ``<root>/shared/driver``, 0660 in 0770, and files of every user are
    read). A file is the disk tier's header and checksum over a manifest (key, the lineage item's
    identity, owner uid, value bytes, measured compute cost, opcode) and the payload. It is written
    under a temp name and renamed into place, so a reader never sees part of one.

    A hit needs the file to be whole (checksum), of this format version, owned by this user in its
    file system and manifest, and of the asked lineage item's identity (so a hash collision, or a
    file copied in under another key, is never served). Anything else is a miss, counted: removed
    when it is ours and broken (``durable_corrupt``), left when it is another user's or another
    lineage's (``durable_foreign``). Nothing here raises into the caller.

    Admission by measurement: a value is written when its compute time exceeds the estimated time to
    write and read it back (bandwidths learned as the disk tier learns them; at least 10 ms), in one
    background thread, so the computing thread only queues it (``min_cost_s``, when set, is the
    floor instead, as for the host tier). Queued writes finish before the
    interpreter exits; a killed writer leaves a temp file, removed by a later writer once it is an
    hour old. When a write would exceed ``max_bytes``, the files of lowest score (compute ms per
    byte, the least recently used first among equals) leave, but only those worth less than the new
    one; else it is refused.

    Examples
    --------
    >>> durable = DurableTier(root="/tmp/memphis-durable", max_bytes=1 << 30)  # doctest: +SKIP
    >>> durable.read("0" * 32, item) is None  # doctest: +SKIP
    True
    """

    def __init__(self, *, root: str, max_bytes: int, shared: bool = False, min_cost_s: Optional[float] = None):
        self.root = root
        self.shared = shared
        driver_folder = jar_facts.durable_layout()["tier_folders"]["driver"]
        self.folder = os.path.join(root, user_folder(user_name(), shared), driver_folder)
        self.max_bytes = int(max_bytes)
        self.min_cost_s = min_cost_s  # a fixed admission floor (configure(min_cost_s=...)); None: measured
        self.bandwidths = Bandwidths()
        self._uid = os.getuid()
        # Within the process, _lock guards _counts, _pending_bytes and _writer. Across processes
        # nothing is locked, and the folder's invariant stands instead: a file named by a key is
        # always whole (written under a unique temp name, then os.replace), and any file may vanish
        # at any moment (another process evicts or clears), so a reader that finds none, or loses
        # it while opening it, has a miss and recomputes. Two writers of one key both rename; the
        # last rename wins and both files hold the value of the same lineage.
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._pending_bytes = 0
        # One background thread, made on the first write of each process: a child forked from this
        # one inherits the executor without its thread, so a write queued there would never run.
        self._writer = None
        self._writer_pid = None

    # --- reading ------------------------------------------------------------------------------

    def read(self, key: str, item):
        """(value, its measured compute seconds) stored for ``item`` under ``key``, or None."""
        identity = item.identity()
        if identity is None:  # a cut item: nothing to check a file against
            self._count("durable_misses")
            return None
        path = os.path.join(self.folder, checked_key(key))
        start = time.perf_counter()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # no file (the common miss), or one that vanished, or a link
            self._count("durable_misses")
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                owner = os.fstat(f.fileno()).st_uid
                if not self.shared and owner != self._uid:
                    return self._reject(key, path, f"its file belongs to uid {owner}", ours=False)
                data = f.read()
        except OSError as error:
            self._count("durable_misses")
            log.debug("durable file of %s unreadable (%s): recomputed", key, error)
            return None
        try:
            manifest, fmt, payload = _parsed(data, key)
        except Exception as error:  # corrupt, truncated, another format version: never the caller's problem
            return self._reject(key, path, f"its file is corrupt or foreign ({error})", ours=owner == self._uid)
        if not self.shared and manifest.get("owner") != self._uid:
            return self._reject(key, path, f"its manifest names owner {manifest.get('owner')!r}", ours=True)
        if manifest.get("lineage") != identity.hex():
            return self._reject(key, path, "it holds another lineage under the same hash", ours=False)
        try:
            value = read_payload(fmt, payload)
        except Exception as error:
            return self._reject(key, path, f"its payload does not load ({error})", ours=owner == self._uid)
        self.bandwidths.read(len(data), time.perf_counter() - start)
        try:
            os.utime(path)  # its last use: the eviction order among equal scores
        except OSError:
            pass
        self._count("durable_hits")
        log.debug("durable hit %s (%s): %d bytes, computed in %.1f ms", key, manifest.get("opcode"), len(data),
                  manifest["cost_s"] * 1000)
        return value, float(manifest["cost_s"])

    def _reject(self, key, path, reason, *, ours):
        """Counts a file that is not served: removed when it is ours and broken, else left."""
        self._count("durable_corrupt" if ours else "durable_foreign")
        if ours:
            _unlink(path)
        log.debug("durable file of %s not served: %s; %s, the value is recomputed", key, reason,
                  "removed" if ours else "left")
        return None

    # --- writing ------------------------------------------------------------------------------

    def offer(self, key: str, item, value, *, cost_s: float, size: Optional[int], opcode: str = ""):
        """Queues ``value`` (read-only: the writer reads it later) for writing when it is worth it; never raises."""
        fmt = spill_format(value)
        identity = item.identity()
        if fmt is None or size is None:
            return self._refuse(key, "a kind of value without a file format")
        if identity is None:
            return self._refuse(key, "its lineage is known by hash only (cut), so a hit could not be checked")
        if self.min_cost_s is not None and cost_s < self.min_cost_s:
            return self._refuse(key, f"it took {cost_s * 1000:.3f} ms, less than min_cost_s")
        transfer_s = max(self.bandwidths.transfer_seconds(size), MIN_DURABLE_SECONDS)
        if self.min_cost_s is None and cost_s <= transfer_s:
            return self._refuse(key, f"recomputing ({cost_s * 1000:.1f} ms) is cheaper than writing and "
                                     f"reading {size} bytes ({transfer_s * 1000:.1f} ms)")
        if size > self.max_bytes:
            return self._refuse(key, f"{size} bytes exceed the budget of {self.max_bytes}")
        with self._lock:
            if self._pending_bytes + size > MAX_PENDING_BYTES:
                behind = self._pending_bytes
            else:
                behind = None
                self._pending_bytes += size
                if self._writer is None or self._writer_pid != os.getpid():
                    self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="memphis-durable")
                    self._writer_pid = os.getpid()
                writer = self._writer
        if behind is not None:
            return self._refuse(key, f"{behind} bytes are queued for writing already")
        manifest = {"key": key, "lineage": identity.hex(), "owner": self._uid, "value_bytes": size,
                    "cost_s": float(cost_s), "opcode": opcode, "written": time.time()}
        try:
            writer.submit(self._write, key, value, fmt, manifest)
        except RuntimeError as error:  # the interpreter is shutting down: nothing more is written
            self._write_failed(key, error, size)

    def _refuse(self, key, reason):
        self._count("durable_refused")
        log.debug("not written to the durable tier %s: %s", key, reason)

    def _write(self, key, value, fmt, manifest):
        """Writes one entry (in the writer thread): temp file, room under the budget, rename."""
        start = time.perf_counter()
        temp = None
        try:
            self._made_folder()
            path = os.path.join(self.folder, key)
            if os.path.exists(path):
                log.debug("not written to the durable tier %s: another process wrote it meanwhile", key)
                return
            text = json.dumps(manifest).encode()
            temp, size = write_entry_file(self.folder, key, value, fmt, magic=MAGIC,
                                          prefix=len(text).to_bytes(MANIFEST_LENGTH_BYTES, "little") + text)
            if self.shared:
                os.chmod(temp, 0o660)
            if not self._make_room(size, _score(manifest["cost_s"], size)):
                self._refuse(key, f"no room: {size} bytes, and what the folder holds is worth more")
                return
            os.replace(temp, path)
            temp = None
            self._count("durable_writes")
            self.bandwidths.wrote(size, time.perf_counter() - start)
            log.debug("written to the durable tier %s (%s): %d bytes, computed in %.1f ms", key,
                      manifest["opcode"], size, manifest["cost_s"] * 1000)
        except Exception as error:  # a full or unwritable disk, a serializer's error: the value is simply not kept
            self._write_failed(key, error, None)
        finally:
            if temp is not None:
                _unlink(temp)
            with self._lock:
                self._pending_bytes -= manifest["value_bytes"]

    def _write_failed(self, key, error, size):
        with self._lock:
            self._counts["durable_write_failed"] += 1
            first = self._counts["durable_write_failed"] == 1
            if size is not None:
                self._pending_bytes -= size
        # Once as a warning: an unwritable folder would otherwise log on every write.
        log.log(logging.WARNING if first else logging.DEBUG, "memphis.local: cannot write %s to the durable tier "
                "in %s (%s: %s); values are kept for this process only", key, self.folder, type(error).__name__, error)

    def _made_folder(self):
        """Makes ``<root>/<user>/driver`` (0700 each, refused when a link or another user's) or its shared form."""
        os.makedirs(self.root, exist_ok=True)  # the root may be shared, as a cache directory is
        make = shared_dir if self.shared else private_dir
        make(os.path.dirname(self.folder))
        make(self.folder)

    def _make_room(self, size: int, score: float) -> bool:
        """Removes files of lower score than ``score`` until ``size`` more bytes fit the budget: whether they do.

        Another process may evict at the same time; a file it removed first is simply gone.
        """
        files = self._scan()
        held = sum(f[2] for f in files)
        if held + size <= self.max_bytes:
            return True
        ranked = sorted((_score(_manifest_of(path).get("cost_s", 0.0), bytes_), modified, key, path, bytes_)
                        for key, path, bytes_, modified in files)
        for victim_score, _, key, path, bytes_ in ranked:
            if held + size <= self.max_bytes or victim_score > score:
                break
            if _unlink(path):
                self._count("durable_evicted")
                log.debug("evicted from the durable tier %s: %.3g ms per byte, less than the new entry's", key,
                          victim_score)
            held -= bytes_
        return held + size <= self.max_bytes

    def _scan(self) -> list:
        """(key, path, bytes, last modified) of each entry in the folder; killed writers' old temp files are removed."""
        files, now = [], time.time()
        try:
            listing = list(os.scandir(self.folder))
        except OSError:
            return files
        for found in listing:
            try:
                info = found.stat(follow_symlinks=False)
            except OSError:  # removed meanwhile
                continue
            if KEY_PATTERN.fullmatch(found.name) and stat.S_ISREG(info.st_mode):
                files.append((found.name, found.path, info.st_size, info.st_mtime))
            elif found.name.endswith(".tmp") and now - info.st_mtime > ORPHAN_AGE_S and info.st_uid == self._uid:
                if _unlink(found.path):
                    self._count("durable_orphans_removed")
                    log.debug("removed %s from the durable tier: a writer's temp file %.0f s old", found.name,
                              now - info.st_mtime)
        return files

    # --- reading the tier ---------------------------------------------------------------------

    def flush(self):
        """Waits for the writes this process queued so far."""
        with self._lock:
            writer = self._writer if self._writer_pid == os.getpid() else None
        if writer is not None:
            writer.submit(lambda: None).result()

    def stats(self) -> dict:
        with self._lock:
            counts = dict(self._counts)
        counts["bytes_held_durable"] = sum(f[2] for f in self._scan())
        counts["durable_budget_bytes"] = self.max_bytes
        return counts

    def entries(self) -> list:
        """One dict per file: key, tier ``durable``, state ``stored``, opcode, cost_ms, size_bytes, score, path, age_s."""
        rows, now = [], time.time()
        for key, path, bytes_, modified in self._scan():
            manifest = _manifest_of(path)
            cost_s = manifest.get("cost_s", 0.0)
            rows.append({"key": key, "tier": "durable", "state": "stored", "opcode": manifest.get("opcode", ""),
                         "hits": None, "misses": None, "cost_ms": cost_s * 1000, "size_bytes": bytes_,
                         "score": _score(cost_s, bytes_), "path": path, "age_s": now - manifest.get("written", modified)})
        return rows

    def clear(self):
        """Removes this user's entries (or, shared, the ones this user may remove) after the queued writes."""
        self.flush()
        for key, path, _, _ in self._scan():
            _unlink(path)
        log.debug("cleared the durable tier in %s", self.folder)

    def close(self):
        """Waits for the queued writes and stops the writer thread; the files stay."""
        with self._lock:
            writer, self._writer = (self._writer if self._writer_pid == os.getpid() else None), None
        if writer is not None:
            writer.shutdown(wait=True)

    def _count(self, counter):
        with self._lock:
            self._counts[counter] += 1


def _parsed(data: bytes, key: str):
    """(manifest, format, payload) of an entry file's bytes; ValueError when they are not one of this tier's."""
    checked = checked_body(data, key, magic=MAGIC)
    if checked is None:
        raise ValueError("header, length, key or checksum does not match: truncated, damaged or another version")
    fmt, body = checked
    length = int.from_bytes(body[:MANIFEST_LENGTH_BYTES], "little")
    manifest = json.loads(bytes(body[MANIFEST_LENGTH_BYTES:MANIFEST_LENGTH_BYTES + length]))
    if not isinstance(manifest, dict) or manifest.get("key") != key or not isinstance(manifest.get("cost_s"), float):
        raise ValueError("the manifest is not this entry's")
    return manifest, fmt, body[MANIFEST_LENGTH_BYTES + length:]


def _manifest_of(path: str) -> dict:
    """The manifest of an entry file, read without its checksum (for eviction scores and listings); {} when unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES + MANIFEST_LENGTH_BYTES)
            length = int.from_bytes(head[HEADER_BYTES:], "little")
            manifest = json.loads(f.read(min(length, 1 << 20)))
        return manifest if isinstance(manifest, dict) else {}
    except (OSError, ValueError):
        return {}


def _score(cost_s, size: int) -> float:
    """The eviction score of a file of a manifest's ``cost_s`` (0 when it is no number), no uses
    counted: uses in other processes are not known here."""
    return value_per_byte((cost_s if isinstance(cost_s, (int, float)) else 0.0) * 1000, 0, size)


def _unlink(path: str) -> bool:
    """Removes ``path``: whether this call removed it (another process may have first)."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
