package io.memphis.reuse

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
}

/**
 * One subplan memphis has seen, for the user whose query produced it (`owner`); `id` is its name in
 * the cache: the key's hash, and the owner unless entries are shared across users. Mutable, and
 * guarded by its [[io.memphis.LineageCache]]'s lock.
 */
final class CacheEntry(val id: String, val key: LineageKey, val owner: String, now: Long) {
  /** The analyzed subplan Spark's CacheManager holds (under its [[OwnerMark]]), while the entry is persisted. */
  var plan: Option[LogicalPlan] = None
  var state: EntryState.Value = EntryState.Seen
  var occurrences = 1
  var hits = 0L
  /** Returns after an eviction: raises the entry's claim when it is persisted again. */
  var misses = 0L
  var lastAccess: Long = now
  var reason = "first occurrence"
  /** The name of its cached relation, unique per persist: shown by explain(), and how its RDD is found. */
  var relationName: Option[String] = None
  /** The cached RDD that holds the data, while the entry is persisted. */
  var rddId: Option[Int] = None
  var partitions = 0
  /** When it was persisted, and the measured time from then until all its partitions were stored. */
  var persistedAt = 0L
  var costMs = 0L
  /** SQL executions that read or fill it and have not ended: it is not evicted under them. */
  val readers: mutable.Set[Long] = mutable.Set.empty
  /**
   * Why it is never persisted (again), with the counter of that decision: refused on admission
   * ([[Admission]]), larger than the whole budget once stored, or it made a query slower.
   */
  var refusal: Option[(io.memphis.CacheStats.Counter.Value, String)] = None
  /** Its output as [[Admission]] estimated it, once admitted. */
  var estimatedBytes: Option[BigInt] = None
  /** Bytes (memory + disk) of each stored partition. */
  val stored: mutable.Map[Int, Long] = mutable.Map.empty
  /**
   * The executors that store each stored partition: Spark posts no block update for the blocks of
   * a lost executor, so its removal must name the partitions it took with it.
   */
  val storedOn: mutable.Map[Int, Set[String]] = mutable.Map.empty

  /**
   * While seen: the shuffles its first occurrence wrote (see [[RetainShuffle]]), for the second
   * occurrence to persist it from.
   */
  var firstShuffles: Seq[SparkPlan] = Nil

  /** Distinct queries (by key) that used it, up to [[CacheEntry.MaxConsumers]]. */
  val consumers: mutable.Set[String] = mutable.Set.empty

  def addConsumer(query: String): Unit = if (consumers.size < CacheEntry.MaxConsumers) consumers += query

  def sizeBytes: Long = stored.values.sum
}

object CacheEntry {
  /** Bounds what an entry remembers of its consumers: beyond this, it is "many". */
  val MaxConsumers = 1000
}
