package io.memphis.cache

import scala.collection.mutable

import io.memphis.lineage.LineageKey
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.SparkPlan

/**
 * The states of a cache entry, MEMPHIS style:
 * {{{
 *   Seen --k-th occurrence--> ToPersist --all partitions stored--> Materialized
 *     ^                          ^  \________ partition lost ________/  |
 *     |                  next occurrence                                 |
 *     |                       Evicted <-- unpersisted (budget, memphis off, outside memphis)
 *   Invalid <-- a source changed (unpersisted, with the entries built on it)
 * }}}
 * Only ToPersist and Materialized entries hold a cached relation in Spark's CacheManager.
 */
object EntryState extends Enumeration {
  val Seen = Value("seen")
  val ToPersist = Value("to-persist")
  val Materialized = Value("materialized")
  val Evicted = Value("evicted")
  val Invalid = Value("invalid")

  val Holding: Set[Value] = Set(ToPersist, Materialized)

  /** The diagram's edges: the only moves [[CacheEntry.moveTo]] allows. */
  val Edges: Map[Value, Set[Value]] = Map(
    Seen -> Set(ToPersist),
    ToPersist -> Set(Materialized, Evicted, Invalid),
    Materialized -> Set(ToPersist, Evicted, Invalid),
    Evicted -> Set(ToPersist),
    Invalid -> Set(ToPersist))
}

/**
 * The cached relation an entry holds in Spark's CacheManager while persisted: its name (unique per
 * persist: shown by explain(), and how its RDD is found), the analyzed plan Spark holds (under its
 * [[OwnerMark]]) and when it was persisted; its RDD and partitions once Spark has built it.
 */
final class CachedRelation(val name: String, val plan: LogicalPlan, val persistedAt: Long) {
  var rddId: Option[Int] = None
  var partitions = 0
  /** Bytes (memory + disk) of each stored partition. */
  val stored: mutable.Map[Int, Long] = mutable.Map.empty
  /**
   * The executors that store each stored partition: Spark posts no block update for the blocks of
   * a lost executor, so its removal must name the partitions it took with it.
   */
  val storedOn: mutable.Map[Int, Set[String]] = mutable.Map.empty

  def sizeBytes: Long = stored.values.sum
}

object CachedRelation {
  /** How memphis names the cached relations it makes (`memphis <key> #n`): what tells them from a user's. */
  val NamePrefix = "memphis "
}

/**
 * One subplan memphis has seen, for the user whose query produced it (`owner`); `id` is its name in
 * the cache: the key's hash, and the owner unless entries are shared across users. Mutable, and
 * guarded by its lineage cache's one lock (its entry table's, [[io.memphis.cache.EntryTable]]).
 */
final class CacheEntry(val id: String, val key: LineageKey, val owner: String, now: Long) {
  /** When memphis first saw it (the memphis tab shows its age). */
  val firstSeen: Long = now
  private var current: EntryState.Value = EntryState.Seen
  def state: EntryState.Value = current
  /** Its cached relation: set when persisted, and only then; dropped (one reset) when let go. */
  var relation: Option[CachedRelation] = None
  var occurrences = 1
  var hits = 0L
  /** Returns after an eviction: raises the entry's claim when it is persisted again. */
  var misses = 0L
  var lastAccess: Long = now
  var reason = "first occurrence"
  /** The measured time from its persist until all its partitions were stored. */
  var costMs = 0L
  /** SQL executions that read or fill it and have not ended: it is not evicted under them. */
  val readers: mutable.Set[Long] = mutable.Set.empty
  /**
   * Why it is never persisted (again), with the counter of that decision: refused on admission
   * ([[Admission]]), larger than the whole budget once stored, or it made a query slower.
   */
  var refusal: Option[(io.memphis.conf.CacheStats.Counter.Value, String)] = None
  /** Its output as [[Admission]] estimated it, once admitted. */
  var estimatedBytes: Option[BigInt] = None
  /**
   * While seen: the shuffles its first occurrence wrote (see [[RetainShuffle]]), for the second
   * occurrence to persist it from.
   */
  var firstShuffles: Seq[SparkPlan] = Nil

  /** Distinct queries (by key) that used it, up to [[CacheEntry.MaxConsumers]]. */
  val consumers: mutable.Set[String] = mutable.Set.empty

  def addConsumer(query: String): Unit = if (consumers.size < CacheEntry.MaxConsumers) consumers += query

  def sizeBytes: Long = relation.fold(0L)(_.sizeBytes)

  /**
   * Moves it to `state` for `reason`, along an edge of the diagram only: any other move is an
   * internal error (the rules and listeners that got here catch it and log it; the query runs on).
   * Letting go of its cached relation is the caller's, before (see `EntryTable.forget`).
   */
  def moveTo(state: EntryState.Value, reason: String): Unit = {
    if (!EntryState.Edges(current).contains(state)) {
      throw new IllegalStateException(s"memphis: entry $id cannot move from $current to $state ($reason)")
    }
    current = state
    this.reason = reason
  }
}

object CacheEntry {
  /** Bounds what an entry remembers of its consumers: beyond this, it is "many". */
  val MaxConsumers = 1000
}
