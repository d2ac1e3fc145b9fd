"""The GPU tier: device values by lineage key under a budget that the device's memory pool keeps
(its base allocator evicts before an allocation fails), and eviction to the host tier or a drop."""
import collections
import enum
import logging
import threading
import time
from typing import Callable, Optional

from memphis.tiers.core import MISSING, OWN, READY, REFUSED, Entry, check_move, kept_form, remember, wait_for

log = logging.getLogger("memphis.gpu")

GPU_COUNTERS = ("gpu_hits", "gpu_misses", "recycled_allocations", "fresh_allocations", "evicted_to_host",
                "gpu_deleted", "bytes_held_gpu", "eviction_time_ms", "copies_to_device", "copies_to_host")


class GpuState(enum.Enum):
    """Where a GPU entry stands.

    SEEN: met once (delayed caching): the key is remembered, the value was not kept.
    COMPUTING: a placeholder; one thread computes (or copies in from the host) the value, others wait.
    CACHED: the value is on the device and counts in bytes_held_gpu.
    EVICTING: being copied to the host tier on the copy stream; askers wait, then find it on the host.
    An entry that leaves (evicted, dropped, cleared) is released: its block goes back to the memory
    pool once nobody holds the array, and the key is remembered as SEEN.
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


class NoGpuTier:
    """The GPU tier of a cache, or of a device, without one (a null object): it holds nothing, counts
    nothing, and hands the work back as it is."""

    device = None
    budget_bytes = 0

    def traced(self, key: str, item, compute: Callable):
        return compute(), None

    def serving_host(self, item, compute: Callable) -> Callable:
        return compute

    def stats(self) -> dict:
        return dict.fromkeys(GPU_COUNTERS, 0)

    def entries(self) -> list:
        return []

    def release_free(self) -> int:
        return 0

    def clear(self):
        pass

    def close(self):
        pass


NO_GPU = NoGpuTier()


class DeviceBudget:
    """memphis' budget over the device's memory pool: the pool's base allocator.

    The pool (``device.memory_pool(self.allocate)``: cupy's ``MemoryPool``, in C, or the simulated
    device's :class:`~memphis.tiers.gpu.device.SimulatedPool`) serves every allocation of the
    device's arrays, recycling the blocks of dead arrays without memphis; only an allocation that
    needs new memory reaches :meth:`allocate`, with its size already counted in the pool's
    ``total_bytes()``. There, while the pool would hold more than ``limit_bytes`` (or the device
    refuses the memory): (1) the pool's free blocks go back to the device (``free_all_blocks``);
    (2) the failure hook ``evict(need)`` evicts cached entries, lowest score first, whose arrays
    then die and give their blocks back to the pool, and (1) again; and when nothing is left to
    release or evict, (3) the device's out-of-memory error names the bytes and the budget.
    ``pool.total_bytes()`` never exceeds ``limit_bytes`` once an allocation returns.

    ``fresh``: allocations that took new memory (base calls). ``recycled``: allocations the pool
    served from a free block, counted by the simulated pool only (cupy's pool recycles in C,
    uncounted: None).
    """

    def __init__(self, *, device, limit_bytes: int, cond: threading.Condition, evict: Callable[[int], bool]):
        self.device = device
        self.limit_bytes = int(limit_bytes)
        self._cond = cond  # the tier's: eviction and the budget's counters under one lock
        self._evict = evict
        self.fresh = 0
        self.pool = device.memory_pool(self.allocate)

    def allocate(self, nbytes: int):
        """The pool's base allocator: new device memory for ``nbytes`` (already in the pool's total)."""
        with self._cond:
            while True:
                held = self.pool.total_bytes()
                if held <= self.limit_bytes:
                    try:
                        memory = self.device.allocate(nbytes)
                    except Exception as error:
                        if not self.device.is_full(error):
                            raise  # others use the device too, or it is smaller than the budget: go on
                    else:
                        self.fresh += 1
                        return memory
                if self.release_free():
                    continue
                # Over the budget by what the pool would hold too much; or the device lacks room.
                need = held - self.limit_bytes if held > self.limit_bytes else nbytes - self.device.free_bytes()
                if self._evict(max(need, 1)):
                    self.release_free()  # the evicted entries' blocks, back in the pool once their arrays died
                    continue
                raise self.device.out_of_memory(nbytes, held=held - nbytes,
                                                limit=self.limit_bytes if held > self.limit_bytes else 0)

    @property
    def bytes_in_pool(self) -> int:
        """Bytes the pool holds: live arrays, cached values and free blocks (≤ ``limit_bytes``)."""
        return self.pool.total_bytes()

    @property
    def bytes_free(self) -> int:
        """Bytes in the pool's free blocks (of dead arrays, ready to be recycled)."""
        return self.pool.free_bytes()

    @property
    def recycled(self) -> Optional[int]:
        return getattr(self.pool, "recycled", None)

    def release_free(self) -> int:
        """Gives the pool's free blocks back to the device; returns the bytes released (cupy keeps
        the free parts of a block that is partly in use)."""
        before = self.pool.total_bytes()
        self.pool.free_all_blocks()
        released = before - self.pool.total_bytes()
        if released > 0:
            log.debug("released %d bytes of free blocks to the device", released)
        return max(released, 0)

    def close(self):
        """Gives the free blocks back; on the simulated device blocks of arrays that die later too."""
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()
        else:
            self.pool.free_all_blocks()  # cupy: blocks of arrays that die later return to it, freed when it goes


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
    rather than recomputed. The device's arrays come from its memory pool (cupy's, in C), which
    recycles the blocks of dead arrays (released entries among them); :class:`DeviceBudget` is the
    pool's base allocator: new memory that would take the pool past the budget first releases the
    pool's free blocks, then evicts entries, lowest score ``(1+hits+misses)·cost/size`` first:
    copied to the host tier on the copy stream when recomputing costs more than the copy, else
    dropped. ``release_free()`` gives the free blocks back (phase changes). :meth:`traced` is the
    lean way in of traced operations. States and moves: :class:`GpuState` and ``TRANSITIONS``.

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
        # One lock guards the tier and its budget. Invariants while it is free: bytes_held is the
        # sum of the sizes of CACHED and EVICTING entries; a COMPUTING entry has an owner thread and
        # no value; _evicting counts EVICTING entries, each with one copy queued on the copy stream;
        # a key is in _history (SEEN) or in _entries, never both.
        self._cond = threading.Condition(threading.RLock())
        self.budget = DeviceBudget(device=device, limit_bytes=budget_bytes, cond=self._cond, evict=self._evict)
        self._entries = {}
        self._history = collections.OrderedDict()  # SEEN key -> its hits + misses so far
        self.bytes_held = 0
        self._evicting = 0
        self._counts = dict.fromkeys(("gpu_hits", "gpu_misses", "evicted_to_host", "gpu_deleted", "refused"), 0)
        self.eviction_s = 0.0
        device.tier = self
        device.use_pool(self.budget.pool)

    # --- the ways in ---------------------------------------------------------------------------

    def traced(self, key: str, item, compute: Callable):
        """(value, the item it is kept under or None): the way in of a traced device operation.

        One pass under the lock: a hit is a probe; a miss is remembered (its first occurrence) or
        computed and kept (delayed caching), as in :meth:`get_or_compute`."""
        value, entry = self._get(key, compute, item, "", True)
        return value, entry.item if entry is not None else None

    def get_or_compute(self, key: str, compute: Callable, *, item=None, opcode: str = "", delayed: bool = True):
        """(value, held): the device value under ``key``, cached, copied in from the host or computed;
        ``held`` says whether the tier keeps it (the caller then cuts its trace there)."""
        value, entry = self._get(key, compute, item, opcode, delayed)
        return value, entry is not None

    def _get(self, key, compute, item, opcode, delayed):
        """(value, the entry that holds it or None)."""
        with self._cond:
            entry = self._entries.get(key)
            if entry is None:
                found = MISSING
            elif entry.state is GpuState.CACHED and (item is None or entry.item is None or entry.item == item):
                found = READY
            else:  # it waits while the entry is COMPUTING elsewhere, or EVICTING: then it is found on the host
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
                    entry = Entry(key, kept_form(item), opcode or getattr(item, "opcode", ""), GpuState.COMPUTING,
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
                return entry.value, entry
        try:
            value, cost = self._produce(key, item, compute, timed=entry is not None)
        except BaseException:
            if entry is not None:
                with self._cond:
                    self._release(entry, "its computation failed")
            raise
        if entry is None:
            return value, None
        with self._cond:
            return value, entry if self._store(entry, value, cost) else None

    def _produce(self, key, item, compute, *, timed: bool):
        """The value from the host tier (one copy in) or computed; the seconds it took to compute."""
        host = self._host()
        found = host.peek(key, item=item) if host is not None else None
        if found is not None and device_nbytes(found[0]) is not None:
            log.debug("copied %s in from the host tier", key)
            return self.device.copy_to_device(found[0]), found[1]
        if not timed:  # kernels run asynchronously: only a value about to be kept is waited for and timed
            return compute(), 0.0
        start = time.perf_counter()
        value = compute()
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
        """Takes ``entry`` out (its block goes back to the pool when no array holds it) and
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
        """The budget's failure hook: evicts CACHED entries, lowest score first, until their sizes
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
            counts.update(recycled_allocations=self.budget.recycled or 0, fresh_allocations=self.budget.fresh,
                          bytes_held_gpu=self.bytes_held, eviction_time_ms=round(self.eviction_s * 1000, 3))
        counts["copies_to_device"] = self.device.counts["copies_to_device"]
        counts["copies_to_host"] = self.device.counts["copies_to_host"]
        return counts

    def entries(self) -> list:
        """One dict per entry: key, tier ("gpu"), state, opcode, hits, misses, cost_ms, size_bytes, score."""
        with self._cond:
            return [e.row("gpu") for e in self._entries.values()]

    def release_free(self) -> int:
        """Gives the pool's free blocks back to the device (between phases whose sizes differ); returns the bytes."""
        with self._cond:
            return self.budget.release_free()

    def clear(self):
        """Releases every entry that is not being computed and forgets seen keys; counters go on."""
        with self._cond:
            self._cond.wait_for(lambda: self._evicting == 0)
            for entry in [e for e in self._entries.values() if e.state is GpuState.CACHED]:
                self._release(entry, "cleared")
            self._history.clear()

    def close(self):
        """Clears the tier, gives its free blocks back and the device's arrays to its default pool."""
        self.clear()
        self.budget.close()
        self.device.close()
        self.device.tier = NO_GPU
