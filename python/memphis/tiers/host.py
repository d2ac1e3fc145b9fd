"""The host tier: driver-memory cache of local values under a byte budget, with cost/size eviction."""
import collections
import enum
import logging
import sys
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

from memphis.backends import numpy_backend
from memphis.tiers.core import MISSING, OWN, REFUSED, Entry, check_move, kept_form, remember, wait_for
from memphis.tiers import durable as durable_tier
from memphis.tiers.disk import NO_DISK, DiskTier, spill_format
from memphis.tiers.durable import DurableTier

log = logging.getLogger("memphis.local")

MAX_SIGNATURES = 10_000  # measured costs kept per operation signature; forgotten all at once beyond
MIN_SPILL_SECONDS = 0.010  # below this, estimates of disk time are noise (LIMA): spill only what costs more
INITIAL_OVERHEAD_S = 50e-6  # a first guess of the probe+store time of a miss, replaced by what is measured
OVERHEAD_SMOOTHING = 0.1  # weight of the latest miss in the moving average of that time
OVERHEAD_SPIKE_FACTOR = 4  # a miss counts at most this many times the average so far

COUNTERS = ("hits", "partial_hits", "misses", "computed", "evicted", "spilled", "reloaded", "refused",
            "started_early", "internal_errors", "compute_saved_ms")


class State(enum.Enum):
    """Where an entry's value is.

    COMPUTING: a placeholder; one thread computes (or reloads) the value, others asking wait.
    CACHED: the value is in memory and counts against the budget.
    SPILLED: the value is only on disk; the next asker reloads it.
    An entry that is dropped, or whose computation fails, leaves the table (no state).
    """

    COMPUTING = "computing"
    CACHED = "cached"
    SPILLED = "spilled"

    __hash__ = object.__hash__  # members are singletons: checking a move then hashes in C, not in enum's Python


# The only moves an entry makes; None is "not in the table".
TRANSITIONS = {
    None: {State.COMPUTING},
    State.COMPUTING: {State.CACHED, None},
    State.CACHED: {State.SPILLED, None},
    State.SPILLED: {State.COMPUTING, None},
}


def size_of(value) -> Optional[int]:
    """Bytes ``value`` holds, or None for a kind of value the tier does not measure (never cached)."""
    if isinstance(value, numpy_backend.ARRAY_TYPES):
        return numpy_backend.nbytes(value) if value.dtype != object else None
    module = type(value).__module__  # pandas and pyarrow are imported only for their own values
    if module.startswith("pandas"):
        import pandas as pd

        if isinstance(value, (pd.DataFrame, pd.Series)):
            usage = value.memory_usage(deep=True)
            return int(usage.sum() if isinstance(value, pd.DataFrame) else usage)
    if module.startswith("pyarrow"):
        import pyarrow as pa

        if isinstance(value, pa.Table):
            return int(value.nbytes)
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        return sys.getsizeof(value)
    if isinstance(value, (tuple, list)):
        sizes = [size_of(v) for v in value]
        return None if None in sizes else sum(sizes) + sys.getsizeof(value)
    if isinstance(value, dict):
        sizes = [size_of(v) for v in (*value.keys(), *value.values())]
        return None if None in sizes else sum(sizes) + sys.getsizeof(value)
    return None


def pinned(value) -> bool:
    """Scalars are never evicted (LIMA): a few bytes each, and cached only when they took a while
    (a loss, a norm, a score), so evicting one frees nothing and costs a recomputation."""
    return isinstance(value, (bool, int, float, complex, np.generic))


def freeze(value):
    """``value`` with its arrays read-only: a cached value is shared by every asker."""
    if isinstance(value, numpy_backend.ARRAY_TYPES):
        return numpy_backend.freeze(value)
    if isinstance(value, (tuple, list)):
        frozen = [freeze(v) for v in value]
        return type(value)(frozen) if type(value) in (tuple, list) else type(value)(*frozen)
    if isinstance(value, dict):
        return {k: freeze(v) for k, v in value.items()}
    return value


def hand_out(value):
    """What an asker receives: containers and frames are copied so that changing them spares the cache."""
    if type(value) is np.ndarray:  # the common case, first: this runs on every hit
        return value
    if type(value).__module__.startswith("pandas"):
        return value.copy(deep=True)
    if type(value) in (list, tuple):
        return type(value)(hand_out(v) for v in value)
    if type(value) is dict:
        return {k: hand_out(v) for k, v in value.items()}
    return value


def _serves(entry, item) -> bool:
    """Whether ``entry`` holds a value for ``item``: CACHED, under the same lineage (or none recorded)."""
    return entry is not None and entry.state is State.CACHED and (entry.item is None or entry.item == item)


class HostTier:
    """Local values in driver memory under ``max_bytes``, spilled to ``disk`` when that pays, kept
    across processes in ``durable`` when asked to and worth it.

    Each entry has a measured compute cost, a size, hits, misses and a last access; when a new value
    does not fit, CACHED entries leave lowest score ``(1+hits+misses)·cost/size`` first. A leaving
    entry is spilled when recomputing it would take longer than writing and reading it back (from
    the disk tier's learned bandwidths, at least 10 ms), else dropped. A value larger than the budget
    is never cached. Scalars are pinned (never evicted).
    States and moves: see :class:`State` and ``TRANSITIONS``.

    Examples
    --------
    >>> tier = HostTier(max_bytes=1 << 20)
    >>> tier.get_or_compute("ab" * 16, lambda: np.arange(3.0))
    array([0., 1., 2.])
    >>> tier.stats()["misses"], tier.get_or_compute("ab" * 16, lambda: None) is not None
    (1, True)
    """

    def __init__(self, *, max_bytes: int, disk: DiskTier = NO_DISK, durable: Optional[DurableTier] = None,
                 min_cost_s: Optional[float] = None):
        self.max_bytes = int(max_bytes)
        self.disk = disk
        self.durable = durable
        self.min_cost_s = min_cost_s  # traced results cheaper than this are not held; None: see worth_caching_s
        self.overhead_s = INITIAL_OVERHEAD_S  # measured probe+store time of a miss (moving average)
        self.first_touch_s = numpy_backend.first_touch_seconds_per_byte()
        # Operation signature -> (seconds, result bytes) of its last run (see traced): read and written without the
        # lock, as a dict is under the GIL; a lost or stale figure only picks the slower path once.
        self._costs = {}
        # One lock guards everything below. Invariants while it is free: bytes_held is the sum of the
        # sizes of CACHED entries and never above max_bytes; a COMPUTING entry has an owner thread and
        # no value; a SPILLED entry has no value and its file is in self.disk.
        # _lock is _cond's own lock, taken directly on the hot paths (a Condition's `with` runs in Python).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._entries = {}
        self._history = collections.OrderedDict()  # dropped key -> its hits + misses
        self.bytes_held = 0
        self._counts = dict.fromkeys(COUNTERS, 0)

    # --- the one way in -----------------------------------------------------------------------

    def get_or_compute(self, key: str, compute: Callable[[], Any], *, item=None, opcode: str = "",
                       cost_hint: Optional[float] = None, min_cost_s: Optional[float] = 0.0, signature=None,
                       durable: bool = False):
        """The value under ``key`` (32 hex digits): cached, reloaded, awaited, read from the durable tier or computed now.

        A second thread asking for a key being computed waits for the first; if the first raises,
        nothing is stored and a waiter computes it itself. The computed value is cached when it fits
        and took at least ``min_cost_s`` (None: :meth:`worth_caching_s` of its size; ``cost_hint``
        replaces the measured seconds, e.g. the time of a Spark job that produced it). Arrays in it
        are made read-only. ``signature``: the operation's, whose measured cost :meth:`traced` learns.
        ``durable``: whether ``item``'s lineage means the same in every process (content hashes and
        literals, not a secret or an object of this process), so that the durable tier may serve
        the value before it is computed and keep it when computed.

        Examples
        --------
        >>> tier = HostTier(max_bytes=1 << 20)
        >>> tier.get_or_compute("0" * 32, lambda: 42)
        42
        """
        me = threading.get_ident()
        entered = time.perf_counter()
        with self._cond:
            entry, found = wait_for(self._cond, self._entries, key, item, ready=(State.CACHED, State.SPILLED),
                                    computing=State.COMPUTING)
            reload = False
            if found is MISSING:
                entry = Entry(key, kept_form(item), opcode or getattr(item, "opcode", ""), State.COMPUTING, owner=me,
                              misses=self._history.pop(key, 0) + 1)
                self._check(None, entry)
                self._entries[key] = entry
                self._counts["misses"] += 1
            elif found is REFUSED:
                self._counts["refused"] += 1
                log.debug("refused %s: same hash, different lineage (%s vs %s)", key, item, entry.item)
                entry = None
            elif found is OWN:
                entry = None
            elif entry.state is State.CACHED:
                return hand_out(self._hit(entry))
            else:
                self._move(entry, State.COMPUTING)  # SPILLED: this thread reloads it
                entry.owner = me
                reload = True
        if entry is None:
            return compute()
        # Whatever fails from here on takes the placeholder out first: waiters wake up and compute
        # it themselves, and nothing half-made is ever stored.
        try:
            value = self.disk.read(key) if reload else None
            if value is not None:
                self.disk.remove(key)  # back in memory: a second copy on disk would only take room
                with self._cond:
                    self._counts["reloaded"] += 1
                    log.debug("reloaded %s from disk", key)
                    self._hit(entry)
                    return hand_out(self._store(entry, freeze(value), entry.cost_s, 0.0))
            if reload:
                with self._cond:
                    entry.misses += 1
                    self._counts["misses"] += 1
            durable = durable and self.durable is not None and item is not None
            found = self.durable.read(key, item) if durable else None
            if found is not None:
                value, cost = found
                with self._cond:
                    self._counts["compute_saved_ms"] += cost * 1000
                    return hand_out(self._store(entry, freeze(value), cost, min_cost_s))
            start = time.perf_counter()
            value = freeze(compute())
        except BaseException:
            with self._cond:
                if entry.state is State.COMPUTING:
                    self._drop(entry, "its computation failed")
            raise
        computed = time.perf_counter()
        cost = cost_hint if cost_hint is not None else computed - start
        if signature is not None:
            self._learn(signature, computed - start, size_of(value))
        with self._cond:
            self._counts["computed"] += 1
            value = self._store(entry, value, cost, min_cost_s)
            size = entry.size
            if not reload:  # a reload's probe includes a disk read: not the tier's own cost
                spent = (start - entered) + (time.perf_counter() - computed)
                # Clipped: a one-off stall (first imports, a collection pause) must not raise the floor.
                spent = min(spent, OVERHEAD_SPIKE_FACTOR * self.overhead_s)
                self.overhead_s += OVERHEAD_SMOOTHING * (spent - self.overhead_s)
        if durable:
            self.durable.offer(key, item, value, cost_s=cost, size=size, opcode=opcode or getattr(item, "opcode", ""))
        return hand_out(value)

    def traced(self, key: str, item, compute: Callable[[], Any], *, signature: Callable[[], Any] = None):
        """(value, the item it is kept under or None): the lean path of a traced operation.

        A hit is a probe under the lock. An operation that its last run with the same signature
        (``signature()``: opcode, literals, input shapes) showed not worth keeping (:meth:`worth_caching_s`) runs
        without a placeholder, and is kept only if this run turns out worth it; two threads may then
        both compute it, which costs less than making one wait. Any other operation goes through
        :meth:`get_or_compute` (one thread computes it, the others wait), kept by the same rule.
        """
        with self._lock:
            entry = self._entries.get(key)
            if _serves(entry, item):
                return hand_out(self._hit(entry)), entry.item
            computed = self._history.get(key, 0) if entry is None else 0
        signature = signature() if entry is None and signature is not None else None
        expected = self._costs.get(signature) if signature is not None else None
        if expected is None or expected[1] is None or \
                expected[0] >= self.worth_caching_s(expected[1], computed + 1):
            value = self.get_or_compute(key, compute, item=item, min_cost_s=None, signature=signature, durable=True)
            with self._lock:
                entry = self._entries.get(key)
                return value, entry.item if entry is not None and entry.state is not State.COMPUTING else None
        start = time.perf_counter()
        value = compute()
        cost = time.perf_counter() - start
        size = size_of(value)
        self._learn(signature, cost, size)
        with self._lock:
            counts = self._counts
            counts["misses"] += 1
            counts["computed"] += 1
            if size is None or cost < self.worth_caching_s(size, computed + 1):
                remember(self._history, key, computed + 1)
                return value, None
            if key in self._entries:  # another thread kept it meanwhile
                return value, None
            entry = self._adopt(key, value, item, "", cost, computed + 1)  # slower this time: worth keeping
            return (entry.value, entry.item) if entry.state is State.CACHED else (value, None)

    def hit(self, key: str, item):
        """(value, the item it is kept under) when ``key`` is CACHED with ``item``'s lineage, counted as
        a hit; else None (nothing is counted). A traced call's first probe (calls.known_call), and a
        product's before its rewrites are asked."""
        if key not in self._entries:  # the common miss, told without the lock: its computation probes under it
            return None
        with self._lock:
            entry = self._entries.get(key)
            if _serves(entry, item):
                return hand_out(self._hit(entry)), entry.item
        return None

    def _learn(self, signature, seconds: float, size: Optional[int]):
        if len(self._costs) >= MAX_SIGNATURES:
            self._costs.clear()
        self._costs[signature] = (seconds, size)

    def worth_caching_s(self, size: int = 0, computations: int = 1) -> float:
        """Traced results that took less are not cached: ``min_cost_s`` when set; else what keeping
        one costs, shared by the ``computations`` of it so far (LIMA: what recurs is worth more): the
        measured overhead_s (recomputing costs less than a probe and a store) plus what fresh memory
        of ``size`` bytes costs to fault in (the next result gets fresh pages while this one is held)."""
        if self.min_cost_s is not None:
            return self.min_cost_s
        return (self.overhead_s + size * self.first_touch_s) / computations

    def state_of(self, key: str) -> Optional[State]:
        """The state of ``key``'s entry, None when there is none (a probe that counts nothing)."""
        if key not in self._entries:  # told without the lock, as with it: it may change right after either
            return None
        with self._lock:
            entry = self._entries.get(key)
            return entry.state if entry else None

    def peek(self, key: str, *, item=None):
        """(value, cost in seconds) when ``key`` is CACHED here (counted as a hit), else None.

        For another tier that would otherwise compute the value (the GPU tier copies it instead);
        nothing is reloaded, awaited or computed.
        """
        with self._cond:
            entry = self._entries.get(key)
            if entry is None or entry.state is not State.CACHED or (item is not None and entry.item not in (None, item)):
                return None
            return hand_out(self._hit(entry)), entry.cost_s

    def put(self, key: str, value, *, item=None, opcode: str = "", cost_s: float):
        """Holds ``value``, computed elsewhere in ``cost_s`` seconds (e.g. evicted from the GPU), unless
        ``key`` has an entry already; it is cached as a computed value would be (budget, eviction)."""
        with self._cond:
            if key not in self._entries:
                self._adopt(key, value, item, opcode, cost_s, self._history.pop(key, 0))

    def _adopt(self, key: str, value, item, opcode: str, cost_s: float, misses: int) -> Entry:
        """A new entry for a value computed outside get_or_compute, cached or dropped by the rules."""
        entry = Entry(key, kept_form(item), opcode or getattr(item, "opcode", ""), State.COMPUTING,
                      owner=threading.get_ident(), misses=misses)
        self._history.pop(key, None)
        self._entries[key] = entry
        self._store(entry, freeze(value), cost_s, 0.0)
        return entry

    def count(self, counter: str, amount=1):
        with self._cond:
            self._counts[counter] += amount

    # --- moves, all with the lock held ---------------------------------------------------------

    def _check(self, old, entry_or_new):
        new = entry_or_new.state if isinstance(entry_or_new, Entry) else entry_or_new
        check_move(TRANSITIONS, old, new)

    def _move(self, entry: Entry, state: Optional[State]):
        self._check(entry.state, state)
        entry.state = state

    def _hit(self, entry: Entry):
        entry.hits += 1
        entry.last_access = time.monotonic()
        self._counts["hits"] += 1
        self._counts["compute_saved_ms"] += entry.cost_s * 1000
        log.debug("hit %s (%s)", entry.key, entry.opcode)
        return entry.value

    def _store(self, entry: Entry, value, cost_s: float, min_cost_s: Optional[float]):
        """Caches ``value`` in ``entry`` or drops the entry; returns ``value`` either way."""
        try:
            self._place(entry, value, cost_s, min_cost_s)
        except Exception as error:  # a bug or a broken disk must not fail the caller, who has the value
            self._counts["internal_errors"] += 1
            log.warning("memphis.local: could not cache %s (%s: %s); it is recomputed when asked for again",
                        entry.key, type(error).__name__, error)
            if entry.state is State.COMPUTING:
                self._drop(entry, "caching it failed")
        return value

    def _place(self, entry: Entry, value, cost_s: float, min_cost_s: Optional[float]):
        entry.cost_s, entry.size = cost_s, size_of(value)
        if entry.size is not None and min_cost_s is None:  # the rule of traced results
            min_cost_s = self.worth_caching_s(entry.size, max(entry.misses, 1))
        if entry.size is None:
            self._drop(entry, "its value is of a kind whose size is unknown")
        elif entry.size > self.max_bytes:
            self._drop(entry, f"{entry.size} bytes exceed the budget of {self.max_bytes}")
        elif cost_s < min_cost_s:
            self._drop(entry, f"it took {cost_s * 1000:.3f} ms, cheaper to recompute than to hold")
        elif not self._make_space(entry.size):
            self._drop(entry, "no room: what the tier holds is pinned")
        else:
            entry.value = value
            self._move(entry, State.CACHED)
            self.bytes_held += entry.size
            self._cond.notify_all()
            log.debug("cached %s (%s): %d bytes, %.3f ms", entry.key, entry.opcode, entry.size, cost_s * 1000)

    def _drop(self, entry: Entry, reason: str):
        """Removes ``entry`` from the table, keeping its access counts; waiters wake up."""
        if entry.state is State.CACHED:
            self.bytes_held -= entry.size
        self.disk.remove(entry.key)  # a spilled value's file, or one left by a reload that failed
        self._move(entry, None)
        entry.value = None
        del self._entries[entry.key]
        remember(self._history, entry.key, entry.hits + entry.misses)
        self._cond.notify_all()
        log.debug("dropped %s (%s): %s", entry.key, entry.opcode, reason)

    def _make_space(self, size: int) -> bool:
        """Evicts CACHED entries that are not pinned, lowest score first, until ``size`` more bytes
        fit; says whether they do."""
        if self.bytes_held + size <= self.max_bytes:
            return True
        victims = sorted((e for e in self._entries.values() if e.state is State.CACHED and not pinned(e.value)),
                         key=lambda e: (e.score, e.last_access))
        for victim in victims:
            if self.bytes_held + size <= self.max_bytes:
                break
            self._counts["evicted"] += 1
            if not self._spill(victim):
                self._drop(victim, "evicted; recomputing is cheaper than a disk round trip")
        return self.bytes_held + size <= self.max_bytes

    def _spill(self, entry: Entry) -> bool:
        if entry.cost_s <= max(self.disk.transfer_seconds(entry.size), MIN_SPILL_SECONDS):
            return False
        if spill_format(entry.value) is None:
            return False
        stored, evicted = self.disk.write(entry.key, entry.value, score=entry.score)
        for key in evicted:
            gone = self._entries.get(key)
            if gone is not None and gone.state is State.SPILLED:
                self._move(gone, None)
                del self._entries[key]
                remember(self._history, key, gone.hits + gone.misses)
                log.debug("dropped %s: evicted from disk", key)
        if not stored:
            return False
        self._move(entry, State.SPILLED)
        entry.value = None
        self.bytes_held -= entry.size
        self._counts["spilled"] += 1
        log.debug("spilled %s (%s): recompute %.1f ms > disk round trip", entry.key, entry.opcode, entry.cost_s * 1000)
        return True

    # --- reading the tier ----------------------------------------------------------------------

    def stats(self) -> dict:
        with self._cond:
            counts = dict(self._counts)
            counts["bytes_held_host"] = self.bytes_held
            counts["host_budget_bytes"] = self.max_bytes
        counts["compute_saved_ms"] = round(counts["compute_saved_ms"], 3)
        counts["corrupt"] = self.disk.corrupt
        counts["spill_failed"] = self.disk.failed_writes
        counts["bytes_held_disk"] = self.disk.bytes_held
        counts["disk_budget_bytes"] = self.disk.max_bytes
        if self.durable is not None:
            counts.update(self.durable.stats())
        else:
            counts.update(dict.fromkeys(durable_tier.COUNTERS, 0), bytes_held_durable=0, durable_budget_bytes=0)
        return counts

    def entries(self) -> list:
        """One dict per entry: key, tier, state, opcode, hits, misses, cost_ms, size_bytes, score; and one
        per durable file (tier ``durable``, with its path and age_s)."""
        with self._cond:
            rows = [e.row("disk" if e.state is State.SPILLED else "host") for e in self._entries.values()]
        return rows + (self.durable.entries() if self.durable is not None else [])

    def clear(self, *, durable: bool = False):
        """Drops every entry that is not being computed and the disk files, and with ``durable=True``
        the durable tier's files too; counters go on counting, as the Spark tier's do."""
        with self._cond:
            for entry in [e for e in self._entries.values() if e.state is not State.COMPUTING]:
                self._drop(entry, "cleared")
            self._history.clear()
            self.disk.clear()
        if durable and self.durable is not None:
            self.durable.clear()

    def close(self):
        """Clears the tier and removes its disk directory; the durable tier's queued writes finish, its files stay."""
        self.clear()
        self.disk.close()
        if self.durable is not None:
            self.durable.close()
