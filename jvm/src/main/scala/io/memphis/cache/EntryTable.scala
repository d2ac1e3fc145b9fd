package io.memphis.cache

import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable

import io.memphis.lineage.{HeldKeys, LineageKey}
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.memphis.PhysicalPlans

/**
 * The lineage cache's entries: by id (key hash, and user unless shared), by cached RDD, the kept
 * shuffles of first occurrences, the recent aggregates persisting ahead looks at, and what the
 * entries take on the driver heap. `shared`: whether an entry serves every user's queries, or only
 * those of the user whose query produced it. `keys`: where the entries' keys are held, each distinct
 * node once (shared with the kept results').
 *
 * Its lock is the lineage cache's one lock: every piece of the cache (storage tracking, eviction,
 * the slower-query guard) changes its own state and the entries' fields only under it.
 */
final class EntryTable(val shared: Boolean, val recentSize: Int, keys: HeldKeys = new HeldKeys) {
  // Invariant: `entries`, `byRdd`, `retaining`, `recent`, `recentlyDue`, `recentPersists` and `queries` change only under this object's lock,
  // together with the entries' own fields; an entry is in `byRdd` only while it holds a cached
  // relation (to-persist or materialized) whose RDD Spark has built.
  private val entries = mutable.LinkedHashMap.empty[String, CacheEntry]
  private val byRdd = mutable.Map.empty[Int, CacheEntry]
  /** Seen entries that keep their first occurrence's shuffles, oldest first (bounded by a conf). */
  private val retaining = mutable.LinkedHashSet.empty[CacheEntry]
  /**
   * Aggregates first met inside a query (not as its root), newest last: when at least half of them
   * recurred, the next such one is persisted at its first occurrence (see [[ReusePolicy]]).
   */
  val recent = new RecentRecurrence[CacheEntry](recentSize, _.occurrences > 1)
  /** Executed queries the policy decided on: a due subplan is given [[EntryTable.DueSettlesAfter]] of them to come back. */
  private var queries = 0L
  /**
   * Subplans due on their `minOccurrences`-th occurrence, newest last, each with that count and the
   * query it was due in: whether they came back decides whether the next due one is persisted
   * ([[ReusePolicy]]). One not back counts only after a few more queries, so that a loop whose body
   * asks several queries has its next iteration to show that they recur.
   */
  val recentlyDue = new RecentRecurrence[EntryTable.Due](recentSize, d => d.entry.occurrences > d.occurrences,
    d => queries - d.query >= EntryTable.DueSettlesAfter)

  /**
   * Subplans persisted, and those held back as persisting did not pay, newest last: whether the
   * persisted ones were read again, and the held-back ones came back, decides whether the next due
   * one is persisted ([[ReusePolicy]], [[RecentRecurrence.pays]]). Judged after as many queries as
   * the due ones.
   */
  val recentPersists = new RecentRecurrence[EntryTable.Outcome](recentSize, _.paid,
    o => queries - o.query >= EntryTable.DueSettlesAfter)

  /** `e` was persisted now: it pays once read again. */
  def persisted(e: CacheEntry): Unit = recentPersists.add(EntryTable.Outcome(e, persisted = true, e.hits, queries))

  /**
   * `e` was held back now, as persisting did not pay or as its fill would compute more than its query
   * needs ([[ReuseActions]]): a bet not taken, which would have paid had it come back.
   */
  def heldBack(e: CacheEntry): Unit =
    recentPersists.add(EntryTable.Outcome(e, persisted = false, e.occurrences, queries))

  /** Counts a query the policy decided on and that runs. */
  def queryObserved(): Unit = queries += 1

  /** `e` is due now, on its `e.occurrences`-th occurrence. */
  def due(e: CacheEntry): Unit = recentlyDue.add(EntryTable.Due(e, e.occurrences, queries))
  /**
   * How many entries there are, read without the lock with the keys' bytes ([[structureBytes]]): the
   * broadcast rule reads them while Spark plans a cached relation under that relation's own lock,
   * which an uncache under this lock also takes.
   */
  private val count = new AtomicLong

  def locked[T](f: => T): T = synchronized(f)

  /** The id of `user`'s entry (or checkpoint, or broadcast) of key `hash`: per user unless shared. */
  def scoped(hash: String, user: String): String = if (shared) hash else s"$hash $user"

  def get(id: String): Option[CacheEntry] = entries.get(id)

  def contains(id: String): Boolean = entries.contains(id)

  def all: Iterable[CacheEntry] = entries.values

  def holding: Seq[CacheEntry] = entries.values.filter(e => EntryState.Holding.contains(e.state)).toSeq

  def holdsAny: Boolean = synchronized(entries.values.exists(e => EntryState.Holding.contains(e.state)))

  def heldBytes: Long = synchronized(holding.map(_.sizeBytes).sum)

  /** Bytes of the entries and of the keys held (the kept results' too) on the driver heap, approximately. */
  def structureBytes: Long = EntryTable.EntryBytes * count.get + keys.bytes

  /** The entry whose cached relation's RDD this is, once adopted. */
  def byRddId(rddId: Int): Option[CacheEntry] = byRdd.get(rddId)

  def withRdd: Iterable[CacheEntry] = byRdd.values

  /** `e`'s cached relation's RDD is `rddId`, of `partitions` partitions. */
  def adopt(e: CacheEntry, rddId: Int, partitions: Int): Unit = e.relation.foreach { r =>
    r.rddId = Some(rddId)
    r.partitions = partitions
    byRdd(rddId) = e
  }

  /**
   * A new seen entry for `key`. The entries that only remember (seen, evicted, invalid) are kept to
   * a bounded number, oldest out.
   */
  def remember(id: String, key: LineageKey, user: String, now: Long): CacheEntry = {
    val e = new CacheEntry(id, keys.hold(key), user, now)
    entries.put(e.id, e) match {
      case Some(replaced) => keys.release(replaced.key)
      case None => count.incrementAndGet()
    }
    val remembered = entries.values.filterNot(e => EntryState.Holding.contains(e.state))
    if (remembered.size > EntryTable.MaxRemembered) {
      val oldest = remembered.minBy(_.lastAccess)
      dropShuffles(oldest)
      entries.remove(oldest.id)
      keys.release(oldest.key)
      count.decrementAndGet()
    }
    e
  }

  /** Drops what `e` holds: its kept shuffles and its cached relation (Spark's side is the caller's). */
  def forget(e: CacheEntry): Unit = {
    dropShuffles(e)
    e.relation.flatMap(_.rddId).foreach(byRdd.remove)
    e.relation = None
  }

  /**
   * Keeps `shuffles`, written by the first occurrence of seen entry `id`, for its second; at most
   * `bound` entries keep theirs, oldest let go first, and while `overDisk` more than the newest.
   * Says whether they are kept now.
   */
  def retainShuffles(id: String, shuffles: Seq[SparkPlan], bound: Int, overDisk: () => Boolean): Option[CacheEntry] = {
    // A plan run again (a DataFrame collected twice) offers the same shuffles again: nothing new.
    val fresh = (e: CacheEntry) => e.firstShuffles.length != shuffles.length || e.firstShuffles.zip(shuffles).exists(p => p._1 ne p._2)
    entries.get(id).filter(e => e.state == EntryState.Seen && shuffles.nonEmpty && fresh(e)).map { e =>
      dropShuffles(e)
      e.firstShuffles = shuffles
      retaining += e
      while (retaining.size > bound) dropShuffles(retaining.head)
      // Bytes on local disk are known once the shuffles are written: the older ones already are.
      while (retaining.size > 1 && overDisk()) dropShuffles(retaining.head)
      e
    }
  }

  def dropShuffles(e: CacheEntry): Unit = {
    e.firstShuffles = Nil
    retaining -= e
  }

  /** The shuffles first occurrences keep now. */
  def retainedShuffles: Seq[SparkPlan] = synchronized(retaining.toSeq).flatMap(_.firstShuffles)

  /** Bytes the first occurrences' kept shuffles take on local disk. */
  def retainedShuffleBytes: Long = retainedShuffles.map(PhysicalPlans.shuffleBytes).sum

  /** Forgets every entry (after their relations were let go). */
  def clear(): Unit = {
    entries.values.foreach { e =>
      dropShuffles(e)
      keys.release(e.key)
    }
    entries.clear()
    count.set(0)
    recent.clear()
    recentlyDue.clear()
    recentPersists.clear()
  }
}

object EntryTable {
  /** A subplan found due on its `occurrences`-th occurrence, in the `query`-th query observed. */
  final case class Due(entry: CacheEntry, occurrences: Int, query: Long)

  /**
   * A bet on a subplan's next occurrence: persisted (`mark`: its reads then) or held back (`mark`:
   * its occurrences then), in the `query`-th query observed; `paid` once it was read again, or came back.
   */
  final case class Outcome(entry: CacheEntry, persisted: Boolean, mark: Long, query: Long) {
    def paid: Boolean = if (persisted) entry.hits > mark else entry.occurrences > mark
  }

  /** Queries after which a due subplan not met again counts as not recurring. */
  val DueSettlesAfter = 8

  /** How many entries that hold nothing are remembered; each keeps only its key. */
  val MaxRemembered = 10000

  /** Bytes of an entry's own fields on the driver heap, besides its key (measured order of magnitude). */
  val EntryBytes = 1024L
}
