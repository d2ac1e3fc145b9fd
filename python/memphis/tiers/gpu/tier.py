"""The GPU tier: device values by lineage key under a budget, with recycled buffers, an allocator
hook that evicts before an allocation fails, and eviction to the host tier or a drop."""
import collections
import enum
import logging
import threading
import time
from typing import Callable, Optional

from memphis.tiers.core import MISSING, OWN, REFUSED, Entry, check_move, remember, wait_for

log = logging.getLogger("memphis.gpu")

GPU_COUNTERS = ("gpu_hits", "gpu_misses", "recycled_allocations", "fresh_allocations", "evicted_to_host",
                "gpu_deleted", "bytes_held_gpu", "eviction_time_ms", "copies_to_device", "copies_to_host")


class GpuState(enum.Enum):
    """Where a GPU entry stands.

    SEEN: met once (delayed caching): the key is remembered, the value was not kept.
    COMPUTING: a placeholder; one thread computes (or copies in from the host) the value, others wait.
    CACHED: the value is on the device and counts in bytes_held_gpu.
    EVICTING: being copied to the host tier on the copy stream; askers wait, then find it on the host.
    An entry that leaves (evicted, dropped, cleared) is released: its buffer goes to the free lists
    once nobody holds the array, and the key is remembered as SEEN.
    """

    SEEN = "seen"
    COMPUTING = "computing"
    CACHED = "cached"
    EVICTING = "evicting-to-host"


# The only moves an entry makes; None is "released" (not in the table, nor remembered).
TRANSITIONS = {
    None: {GpuState.SEEN, GpuState.COMPUTING},
    GpuState.SEEN: {GpuState.COMPUTING, None},
    GpuState.COMPUTING: {GpuState.CACHED, GpuState.SEEN},
    GpuState.CACHED: {GpuState.EVICTING, GpuState.SEEN},
    GpuState.EVICTING: {GpuState.SEEN},
}


class Allocator:
    """Device memory for every array of the device, under ``limit_bytes``; buffers are recycled.

    ``malloc(nbytes)``: (1) a buffer of exactly that size from the free lists (recycled); (2) a fresh
    one from the device if it stays within the limit; else (3) the failure hook ``evict(need)``
    evicts cached entries by score until ``need`` bytes can come back, (4) the free lists are
    released to the device, and it retries; an error of the device's out-of-memory kind only when
    nothing is left to evict or release. ``release(buffer)`` takes back the buffer of an array that
    died: it is only queued (no lock), since it runs in finalizers at any point of any thread.
    """

    def __init__(self, *, device, limit_bytes: int, cond: threading.Condition, evict: Callable[[int], bool]):
        self.device = device
        self.limit_bytes = int(limit_bytes)
        self._cond = cond  # the tier's: one lock for the tier and its allocator
        self._evict = evict
        # Guarded by the lock: bytes_allocated = bytes of every buffer taken from the device and not
        # given back (in arrays, in the free lists, or queued), never above limit_bytes; _bytes_free =
        # bytes in the free lists. _returned is appended to without the lock and drained under it.
        self._free = collections.defaultdict(list)  # size -> buffers nobody uses
        self._returned = collections.deque()
        self.bytes_allocated = 0
        self._bytes_free = 0
        self.recycled = 0
        self.fresh = 0
        self.closed = False

    def malloc(self, nbytes: int):
        with self._cond:
            self._drain()
            device_full = False
            while True:
                if self._free.get(nbytes):
                    self._bytes_free -= nbytes
                    self.recycled += 1
                    return self._free[nbytes].pop()
                if self.bytes_allocated + nbytes <= self.limit_bytes:
                    try:
                        buffer = self.device.allocate(nbytes)
                    except self.device.out_of_memory_errors:
                        device_full = True  # others use the device too, or it is smaller than the budget
                    else:
                        self.bytes_allocated += nbytes
                        self.fresh += 1
                        return buffer
                over = self.bytes_allocated + nbytes - self.limit_bytes
                need = (max(over, nbytes) if device_full else over) - self._bytes_free
                if need > 0 and self._evict(need):  # their buffers come back unless someone holds them
                    self._drain()
                    continue
                if self._bytes_free:
                    self.release_free()
                    device_full = False
                    continue
                raise self.device.out_of_memory(nbytes, f"{self.bytes_allocated} of {self.limit_bytes} budget bytes "
                                                        "are held by live arrays; nothing left to evict or release")

    @property
    def bytes_free(self) -> int:
        """Bytes in the free lists (buffers of dead arrays, ready to be recycled)."""
        with self._cond:
            self._drain()
            return self._bytes_free

    def release(self, buffer):
        if self.closed:
            self.device.free(buffer)
        else:
            self._returned.append(buffer)

    def _drain(self):
        while self._returned:
            buffer = self._returned.popleft()
            size = _buffer_size(buffer)
            self._free[size].append(buffer)
            self._bytes_free += size

    def release_free(self) -> int:
        """Gives every free-listed buffer back to the device; returns the bytes released."""
        with self._cond:
            self._drain()
            released = self._bytes_free
            for buffers in self._free.values():
                for buffer in buffers:
                    self.device.free(buffer)
            self._free.clear()
            self.bytes_allocated -= released
            self._bytes_free = 0
            if released:
                log.debug("released %d free-listed bytes to the device", released)
            return released

    def close(self):
        with self._cond:
            self.release_free()
            self.closed = True


def _buffer_size(buffer) -> int:
    return int(buffer.nbytes if hasattr(buffer, "nbytes") else buffer.size)  # numpy buffer, cupy Memory


def device_nbytes(value) -> Optional[int]:
    """Bytes a device value holds (an array, a frame, a tuple of them), None for other values."""
    if type(value) is tuple:
        sizes = [device_nbytes(v) for v in value]
        return None if not sizes or None in sizes else sum(sizes)
    if type(value).__module__.startswith("cudf"):
        return int(value.memory_usage(deep=True).sum())
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) and hasattr(value, "shape") else None


class GpuTier:
    """Device values under the lineage keys of the host tier, within ``budget_bytes`` of device memory.

    Delayed caching: a key's first occurrence is remembered (SEEN), its value is not kept; the 2nd
    occurrence caches it; later ones hit. A key evicted before, and transfers (``delayed=False``),
    are cached at once. On a miss the host tier is asked first: a value it holds is copied in
    rather than recomputed. All device arrays are allocated through :class:`Allocator`: buffers of
    arrays that died (released entries among them) are recycled for allocations of the same size,
    and an allocation that would exceed the budget first evicts entries, lowest score
    ``(1+hits+misses)·cost/size`` first: copied to the host tier on the copy stream when recomputing
    costs more than the copy, else dropped. ``release_free()`` drops the free lists (phase changes).
    States and moves: :class:`GpuState` and ``TRANSITIONS``.

    Examples
    --------
    >>> import numpy as np
    >>> from memphis.tiers.gpu.device import SimulatedDevice
    >>> tier = GpuTier(device=SimulatedDevice(capacity_bytes=1 << 20), budget_bytes=1 << 19)
    >>> make = lambda: tier.device.copy_to_device(np.ones(4))
    >>> [tier.get_or_compute("0" * 32, make)[1] for _ in range(3)]  # seen, kept, hit
    [False, True, True]
    """

    def __init__(self, *, device, budget_bytes: int, host: Callable = lambda: None):
        self.device = device
        self.budget_bytes = int(budget_bytes)
        self._host = host  # the host tier (a function: it can be reconfigured), None: drop on eviction
        # One lock guards the tier and its allocator. Invariants while it is free: bytes_held is the
        # sum of the sizes of CACHED and EVICTING entries; a COMPUTING entry has an owner thread and
        # no value; _evicting counts EVICTING entries, each with one copy queued on the copy stream;
        # a key is in _history (SEEN) or in _entries, never both.
        self._cond = threading.Condition(threading.RLock())
        self.allocator = Allocator(device=device, limit_bytes=budget_bytes, cond=self._cond, evict=self._evict)
        self._entries = {}
        self._history = collections.OrderedDict()  # SEEN key -> its hits + misses so far
        self.bytes_held = 0
        self._evicting = 0
        self._counts = dict.fromkeys(("gpu_hits", "gpu_misses", "evicted_to_host", "gpu_deleted", "refused"), 0)
        self.eviction_s = 0.0
        device.tier = self
        device.use_allocator(self.allocator)

    # --- the one way in -----------------------------------------------------------------------

    def get_or_compute(self, key: str, compute: Callable, *, item=None, opcode: str = "", delayed: bool = True):
        """(value, held): the device value under ``key``, cached, copied in from the host or computed;
        ``held`` says whether the tier keeps it (the caller then cuts its trace there)."""
        with self._cond:
            # It waits while the entry is COMPUTING elsewhere, or EVICTING: then it is found on the host.
            entry, found = wait_for(self._cond, self._entries, key, item, ready=(GpuState.CACHED,),
                                    computing=GpuState.COMPUTING)
            if found is MISSING:
                self._counts["gpu_misses"] += 1
                seen = self._history.get(key)
                if seen is None and delayed:
                    remember(self._history, key, 1)
                    log.debug("seen %s once (%s): not kept until it recurs", key, opcode)
                else:
                    check_move(TRANSITIONS, GpuState.SEEN if seen is not None else None, GpuState.COMPUTING)
                    self._history.pop(key, None)
                    entry = Entry(key, item, opcode or getattr(item, "opcode", ""), GpuState.COMPUTING,
                                  owner=threading.get_ident(), misses=(seen or 0) + 1)
                    self._entries[key] = entry
            elif found is REFUSED:
                self._counts["refused"] += 1
                entry = None
            elif found is OWN:
                entry = None  # asked again inside its own computation
            else:
                entry.hits += 1
                entry.last_access = time.monotonic()
                self._counts["gpu_hits"] += 1
                return entry.value, True
        try:
            value, cost = self._produce(key, item, compute, timed=entry is not None)
        except BaseException:
            if entry is not None:
                with self._cond:
                    self._release(entry, "its computation failed")
            raise
        if entry is None:
            return value, False
        with self._cond:
            return value, self._store(entry, value, cost)

    def _produce(self, key, item, compute, *, timed: bool):
        """The value from the host tier (one copy in) or computed; the seconds it took to compute."""
        host = self._host()
        found = host.peek(key, item=item) if host is not None else None
        if found is not None and device_nbytes(found[0]) is not None:
            log.debug("copied %s in from the host tier", key)
            return self.device.copy_to_device(found[0]), found[1]
        start = time.perf_counter()
        value = compute()
        if timed:  # kernels run asynchronously: only a value about to be kept is waited for and timed
            self.device.synchronize()
        return value, time.perf_counter() - start

    def copy_out(self, key: str, *, item=None):
        """A host copy of the device value under ``key`` (counted as a GPU hit), None when not here."""
        with self._cond:
            entry = self._entries.get(key)
            if entry is None or entry.state not in (GpuState.CACHED, GpuState.EVICTING) or \
                    (item is not None and entry.item not in (None, item)) or not self.device.is_array(entry.value):
                return None
            entry.hits += 1
            self._counts["gpu_hits"] += 1
            value = entry.value
        return self.device.copy_to_host(value)

    def serving_host(self, item, compute: Callable) -> Callable:
        """``compute`` for the host tier, that copies the value from this tier when it holds it."""
        def produce():
            value = self.copy_out(item.key, item=item)
            return compute() if value is None else value
        return produce

    def state_of(self, key: str) -> Optional[GpuState]:
        with self._cond:
            entry = self._entries.get(key)
            return entry.state if entry else (GpuState.SEEN if key in self._history else None)

    # --- moves, all with the lock held ---------------------------------------------------------

    def _move(self, entry: Entry, state):
        check_move(TRANSITIONS, entry.state, state)
        entry.state = state

    def _store(self, entry: Entry, value, cost_s: float) -> bool:
        size = device_nbytes(value)
        if size is None:
            self._release(entry, "its value is not a device array")
            return False
        entry.value, entry.size, entry.cost_s = value, size, cost_s
        self._move(entry, GpuState.CACHED)
        self.bytes_held += size
        self._cond.notify_all()
        log.debug("cached %s (%s) on %s: %d bytes, %.3f ms", entry.key, entry.opcode, self.device.name, size,
                  cost_s * 1000)
        return True

    def _release(self, entry: Entry, reason: str):
        """Takes ``entry`` out (its buffer is freed into the free lists when no array holds it) and
        remembers the key as SEEN with its access counts; waiters wake up."""
        if entry.state in (GpuState.CACHED, GpuState.EVICTING):
            self.bytes_held -= entry.size
        self._move(entry, GpuState.SEEN)
        entry.value = None
        del self._entries[entry.key]
        remember(self._history, entry.key, entry.hits + entry.misses)
        self._cond.notify_all()
        log.debug("released %s (%s): %s", entry.key, entry.opcode, reason)

    def _evict(self, need: int) -> bool:
        """The allocator's failure hook: evicts CACHED entries, lowest score first, until their sizes
        add up to ``need`` bytes, and waits for their copies to the host; says whether any left."""
        start = time.perf_counter()
        victims = sorted((e for e in self._entries.values() if e.state is GpuState.CACHED),
                         key=lambda e: (e.score, e.last_access))
        freed = 0
        for victim in victims:
            if freed >= need:
                break
            freed += victim.size
            self._evict_entry(victim)
        self._cond.wait_for(lambda: self._evicting == 0)
        self.eviction_s += time.perf_counter() - start
        return freed > 0

    def _evict_entry(self, entry: Entry):
        host = self._host()
        if (host is None or not self.device.is_array(entry.value) or entry.size > host.max_bytes
                or entry.cost_s <= self.device.transfer_seconds(entry.size)):
            self._counts["gpu_deleted"] += 1
            self._release(entry, "evicted: recomputing is cheaper than a copy to the host")
            return
        self._move(entry, GpuState.EVICTING)
        self._evicting += 1
        self.device.copy_stream.submit(entry.value, lambda result, error: self._evicted(entry, host, result, error))

    def _evicted(self, entry: Entry, host, result, error):
        """On the copy stream: the copy of an evicting entry is over; the host tier takes the value."""
        # Only the text of a failure is kept: a kept exception would hold the copy's frames, and with
        # them the device array, until the garbage collector breaks the cycle.
        failure = None if error is None else repr(error)
        if failure is None:
            try:
                host.put(entry.key, result, item=entry.item, opcode=entry.opcode, cost_s=entry.cost_s)
            except Exception as failed:  # the entry leaves all the same, or _evict would wait forever
                failure = repr(failed)
        with self._cond:
            self._evicting -= 1
            self._counts["evicted_to_host" if failure is None else "gpu_deleted"] += 1
            self._release(entry, "evicted to the host tier" if failure is None else f"copy to host failed: {failure}")

    # --- reading and resetting the tier --------------------------------------------------------

    def stats(self) -> dict:
        with self._cond:
            counts = dict(self._counts)
            counts.pop("refused")
            counts.update(recycled_allocations=self.allocator.recycled, fresh_allocations=self.allocator.fresh,
                          bytes_held_gpu=self.bytes_held, eviction_time_ms=round(self.eviction_s * 1000, 3))
        counts["copies_to_device"] = self.device.counts["copies_to_device"]
        counts["copies_to_host"] = self.device.counts["copies_to_host"]
        return counts

    def entries(self) -> list:
        """One dict per entry: key, tier ("gpu"), state, opcode, hits, misses, cost_ms, size_bytes, score."""
        with self._cond:
            return [e.row("gpu") for e in self._entries.values()]

    def release_free(self) -> int:
        """Gives the free lists back to the device (between phases whose sizes differ); returns the bytes."""
        return self.allocator.release_free()

    def clear(self):
        """Releases every entry that is not being computed and forgets seen keys; counters go on."""
        with self._cond:
            self._cond.wait_for(lambda: self._evicting == 0)
            for entry in [e for e in self._entries.values() if e.state is GpuState.CACHED]:
                self._release(entry, "cleared")
            self._history.clear()

    def close(self):
        """Clears the tier, gives all its memory back and hands allocation back to the device."""
        self.clear()
        self.allocator.close()
        self.device.close()
        self.device.tier = None
