"""Spark broadcasts of driver-side values, reused while the value's lineage is the same."""
import logging
import pickle
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy as np

from memphis.spark import background, jvm_access
from memphis.tiers import config
from memphis.tiers.host import size_of
from memphis.tiers.runtime import Runtime, default
from memphis.tracing.array import TracedArray
from memphis.tracing.lineage import LineageItem, Untraceable, encode

log = logging.getLogger("memphis.local")
COUNTERS = ("broadcast_hits", "broadcasts", "broadcasts_early", "broadcasts_evicted", "broadcasts_refused",
            "bytes_held_broadcast")


@dataclass
class _Held:
    broadcast: object  # pyspark.Broadcast
    size: int
    context: object  # the SparkContext it belongs to
    item: LineageItem  # the value's lineage: compared on a hit, so equal hashes alone serve nothing


class Broadcasts:
    """The Spark broadcasts of driver values that one cache holds, by the lineage key of their value,
    least recently used first, within a byte budget (:func:`broadcasts_of` a Runtime).

    A broadcast that leaves by the budget is unpersisted, not destroyed: one handed out earlier may
    still be in use, and Spark re-sends it if a job reads it again (its driver copy goes when no
    one holds it, through Spark's cleaner). :meth:`clear` destroys them.
    """

    def __init__(self, runtime: Runtime = default):
        self._runtime = runtime  # whose background threads build early broadcasts
        self._lock = threading.Lock()
        self._held = OrderedDict()  # key -> _Held; guarded by _lock
        self._counts = Counter({name: 0 for name in COUNTERS if not name.startswith("bytes_held_")})

    def broadcast(self, spark, value, wait=True):
        if jvm_access.is_connect(spark):
            raise TypeError(
                "memphis.broadcast needs a classic SparkSession: a Spark Connect client has no SparkContext to "
                "broadcast with. Over Spark Connect, make the value a DataFrame (spark.createDataFrame) and join "
                "with it: memphis on the server keeps that join's broadcast for the later queries that build it again")
        if not (hasattr(spark, "sparkContext") and hasattr(spark, "conf")):
            raise TypeError(f"memphis.broadcast: spark={spark!r} (type {type(spark).__name__}); expected a "
                            "pyspark.sql.SparkSession (classic, with a SparkContext)")
        item = _item_of(value)  # here, in the caller's thread: the lineage of the value as it was passed
        if wait:
            return self._broadcast(spark, value, item)
        if isinstance(value, np.ndarray) and value.flags.writeable:
            value = value.copy()  # the caller may change its array while the broadcast is built
        log.debug("broadcast %s started in the background (wait=False)", item.key if item else None)
        return background.submit(self._broadcast, spark, value, item, early=True, runtime=self._runtime)

    def _broadcast(self, spark, value, item, early=False):
        key = item.key if item is not None else None
        context = spark.sparkContext
        with self._lock:
            self._counts["broadcasts_early"] += early
            held = self._held.get(key) if key else None
            if held is not None and held.item != item:
                # Same hash, another lineage: never serve it; this value is broadcast without being kept.
                self._counts["broadcasts_refused"] += 1
                log.warning("memphis.broadcast: key %s collides with another value's lineage; broadcast "
                            "without reuse", key)
                key = held = None
            if held is not None and held.context is context and held.broadcast._jbroadcast.isValid():
                self._held.move_to_end(key)
                self._counts["broadcast_hits"] += 1
                return held.broadcast
            if held is not None:  # of a stopped context, or destroyed by its user
                del self._held[key]
            # Under the lock: a second thread asking for the same value waits and gets this one.
            payload = value.numpy() if isinstance(value, TracedArray) else value  # executors get plain numpy
            bc = context.broadcast(payload)
            self._counts["broadcasts"] += 1
            if key is None:
                return bc
            size = _size_of(payload)
            budget = config.checked(config.BROADCAST_MAX_BYTES, spark.conf.get(
                config.BROADCAST_MAX_BYTES, config.default(config.BROADCAST_MAX_BYTES)), config.parse_bytes)
            if size > budget:
                log.debug("broadcast %s not kept: %d bytes exceed the budget of %d", key, size, budget)
                return bc
            self._held[key] = _Held(bc, size, context, item)
            while sum(h.size for h in self._held.values()) > budget:
                _, oldest = self._held.popitem(last=False)
                self._counts["broadcasts_evicted"] += 1
                oldest.broadcast.unpersist(blocking=False)
            return bc

    def stats(self) -> dict:
        with self._lock:
            return {**self._counts, "bytes_held_broadcast": sum(h.size for h in self._held.values())}

    def clear(self):
        """Destroys every held broadcast of a running context and forgets them all."""
        with self._lock:
            held, self._held = list(self._held.values()), OrderedDict()
        for h in held:
            if h.context._jsc is not None:  # a stopped context destroyed its broadcasts already
                h.broadcast.destroy()


def _item_of(value):
    """The lineage item of ``value`` (traced arrays by their item, raw data by content), or None."""
    inputs = []
    try:
        form = encode(value, inputs)
    except Untraceable as reason:
        log.debug("broadcast without reuse: %s", reason)
        return None
    item = LineageItem("broadcast", inputs=inputs, literals=(form,))
    return item if item.deterministic else None


def _size_of(value) -> int:
    size = size_of(value)
    return size if size is not None else len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def broadcasts_of(runtime: Runtime = default) -> Broadcasts:
    """The broadcasts that ``runtime`` holds (none until the first broadcast)."""
    return runtime.part("broadcasts", lambda: Broadcasts(runtime))


def broadcast(spark, value, *, wait=True):
    """A Spark broadcast of the driver-side ``value``, the same one while ``value``'s lineage is.

    The key is the value's local lineage: a traced array's (:func:`memphis.array`) item, a numpy
    array's content hash, a pandas or Arrow object's content hash, and for containers (lists,
    tuples, dicts) and plain values their exact literal form with data inside keyed the same way.
    In an iterative loop the loop-invariant value is therefore broadcast once, and a changed value
    (new content, new lineage) is broadcast anew. A value without a key (an arbitrary object) is
    broadcast each time. Held broadcasts stay within ``spark.memphis.broadcast.maxBytes`` (default
    1g), least recently used out first; ``local_broadcast_hits``, ``local_broadcasts`` and
    ``bytes_held_broadcast`` in :func:`memphis.stats` count them. A held broadcast is served only
    when its lineage equals the value's structurally (opcode, literals and inputs, not the hash
    alone); a value whose hash collides with another's is broadcast without reuse and counted in
    ``local_broadcasts_refused``. :func:`memphis.clear` destroys
    them: do not destroy one yourself while memphis holds it, nor use one after a clear.

    With ``wait=False`` (early broadcast) the value is keyed now and the broadcast is built in a
    background thread: a ``concurrent.futures.Future`` of it is returned at once, so the driver goes
    on (building a DataFrame, collecting another) while Spark takes the value in. A broadcast of the
    same value asked meanwhile waits for that one and builds nothing; ``local_broadcasts_early``
    counts them. A writable numpy array is copied first; do not change other values in place until
    the future is done.

    A Spark Connect session has no SparkContext to broadcast with: this raises ``TypeError`` saying
    so. Over Connect, make the value a DataFrame and join with it; memphis on the server keeps that
    join's broadcast for later queries.

    Examples
    --------
    >>> centroids = np.zeros((8, 16))  # doctest: +SKIP
    >>> bc = memphis.broadcast(spark, centroids)  # doctest: +SKIP
    >>> memphis.broadcast(spark, centroids.copy()) is bc  # same content: the same broadcast  # doctest: +SKIP
    True
    >>> future = memphis.broadcast(spark, centroids + 1, wait=False)  # returns at once  # doctest: +SKIP
    >>> bc = future.result()  # doctest: +SKIP
    """
    return broadcasts_of().broadcast(spark, value, wait)
