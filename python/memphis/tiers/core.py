"""What every driver tier shares: entries by lineage key, their moves, the access history of
dropped keys, and the wait for a key that another thread is computing."""
import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

HISTORY_SIZE = 10_000  # how many dropped keys keep their access counts, so a returning entry keeps its score

# What wait_for found under a key.
MISSING = "missing"  # no entry: the caller makes one and computes it
READY = "ready"  # an entry in one of the states asked for
REFUSED = "refused"  # an entry of the same hash and another lineage: never served
OWN = "own"  # the caller's own computation asks for it again: waiting would be waiting on oneself


def value_per_byte(cost_ms: float, uses: int, size: int) -> float:
    """LIMA's cost-and-size score, as every memphis tier computes it (the JVM's
    ``EvictionPolicy.valuePerByte``): ms of compute per byte held, times (1 + uses); the lowest is
    evicted first."""
    return cost_ms * (1 + uses) / max(size, 1)


@dataclass(eq=False)
class Entry:
    key: str
    item: Any  # the LineageItem, when the caller has one: checked on a hit against hash collisions
    opcode: str
    state: Any  # a tier's state enum
    owner: int  # thread that computes it while COMPUTING
    value: Any = None
    cost_s: float = 0.0
    size: int = 0
    hits: int = 0
    misses: int = 0
    last_access: float = field(default_factory=time.monotonic)

    @property
    def score(self) -> float:
        """The entry's eviction score (:func:`value_per_byte`), its hits and misses its uses."""
        return value_per_byte(self.cost_s * 1000, self.hits + self.misses, self.size)

    def row(self, tier: str) -> dict:
        """The entry as a row of ``entries()``: key, tier, state, opcode, hits, misses, cost_ms, size_bytes, score."""
        return {"key": self.key, "tier": tier, "state": self.state.value, "opcode": self.opcode, "hits": self.hits,
                "misses": self.misses, "cost_ms": self.cost_s * 1000, "size_bytes": self.size, "score": self.score}


def kept_form(item):
    """What an entry keeps of its lineage item: the cut form when it has one (``LineageItem.cut``).
    Its hash and one level of structure tell a collision; the trace below need not stay alive."""
    cut = getattr(item, "cut", None)
    return cut() if cut is not None else item


def check_move(transitions: dict, old, new):
    """Raises unless ``old -> new`` is one of ``transitions`` (a tier's state machine)."""
    if new not in transitions[old]:
        raise RuntimeError(f"memphis: invalid entry move {old} -> {new}")


def remember(history: collections.OrderedDict, key: str, accesses: int):
    """Keeps the access count of a key that left, the oldest forgotten beyond HISTORY_SIZE."""
    history[key] = accesses
    while len(history) > HISTORY_SIZE:
        history.popitem(last=False)


def wait_for(cond: threading.Condition, entries: dict, key: str, item, *, ready, computing):
    """(entry, what was found) under ``key``, with ``cond`` held: MISSING, REFUSED, OWN or READY.

    While the entry is in a state outside ``ready`` (another thread computes it, or it is moving
    between places) this waits on ``cond``, which the tier notifies whenever an entry settles or
    leaves; a computation that fails takes its entry out, so a waiter then finds it MISSING and
    computes it itself.
    """
    me = threading.get_ident()
    while True:
        entry = entries.get(key)
        if entry is None:
            return None, MISSING
        if item is not None and entry.item is not None and entry.item != item:
            return entry, REFUSED
        if entry.state in ready:
            return entry, READY
        if entry.state is computing and entry.owner == me:
            return entry, OWN
        cond.wait()
