package io.memphis.collected

import scala.collection.mutable

import io.memphis.cache.{EvictionPolicy, Store}
import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.{HeldKeys, LineageKey, SourceFingerprint}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.types.DataType

/**
 * The rows a query returned to the driver, standing for the subplan of `key` (registered as `id`:
 * the key's hash, and the user whose query collected them unless entries are shared across users).
 * `rows` are copies in the subplan's column order and `types`; `bytes` what they and the result's
 * own fields take on the heap (its key is held with memphis's entries' keys, see [[HeldKeys]]);
 * `costMs` what the query that collected them took.
 */
final class KeptResult(val id: String, val key: LineageKey, val types: Seq[DataType], val rows: IndexedSeq[InternalRow],
    val bytes: Long, val costMs: Long, var lastUse: Long) {
  var uses = 0L
}

/**
 * What a query's collect is to keep ([[KeepResult]]): the subplan its rows stand for (`id`, `key`),
 * the user whose query it is (`owner`), where that subplan's columns are in the rows the query
 * returns (`ordinals`, their `types`), the largest result to keep (`collected.maxBytes`), and when
 * the query was planned.
 */
final case class KeepRequest(id: String, key: LineageKey, owner: String, ordinals: Seq[Int], types: Seq[DataType],
    maxBytes: Long, plannedMs: Long) {
  def describe: String = s"memphis ${key.hash}"
}

/**
 * The results of queries collected to the driver (`collect()`, `count()`: an action whose rows come
 * back through `executeCollect`) that later queries read instead of computing their subplan again;
 * one per [[io.memphis.reuse.LineageCache]] (per SparkContext). MEMPHIS reuses Spark actions' results on
 * the driver in the same way.
 *
 * Kept at their first collect, since the rows are on the driver already and keeping them costs no
 * job: a result no larger than `spark.memphis.collected.maxBytes`, of a subplan with a lineage key
 * (deterministic, every source fingerprinted). A later query that holds a subplan of the same
 * lineage (same canonical forms, same source fingerprints taken afresh) reads the rows as a local
 * relation ([[CollectedResultRule]]). Bounded by the driver heap's budget less memphis's entries and
 * join broadcasts ([[io.memphis.reuse.MemoryAccounts]]); beyond it the one of least value per byte (the
 * collecting query's time × (1 + reads) / bytes) goes first, and under heap pressure by the same
 * order. A kept result over a source that a query reads with another fingerprint is let go. Its key
 * is held in `keys`, with the entries' (a query's result and its entry share one key).
 */
final class CollectedResults(stats: CacheStats, scoped: (String, String) => String, keys: HeldKeys) extends Store[KeptResult] {
  // Invariant: `entries` (id -> kept result, least recently used first) changes only under this object's lock.
  private val entries = mutable.LinkedHashMap.empty[String, KeptResult]

  def heldBytes: Long = synchronized(entries.values.map(_.bytes).sum)

  def held: Int = synchronized(entries.size)

  def isEmpty: Boolean = synchronized(entries.isEmpty)

  /** The results kept now. */
  def retained: Seq[KeptResult] = synchronized(entries.values.toList)

  /**
   * The kept result of `id` whose lineage is `key`'s, if its columns have `types`. One of the same
   * id and another lineage cannot serve (a hash collision, or another source state): it stays until
   * a query shows its sources changed ([[dropStale]]).
   */
  def lookup(id: String, key: LineageKey, types: Seq[DataType]): Option[KeptResult] = synchronized {
    entries.get(id).filter(r => r.key.sameLineage(key) && r.types == types)
  }

  /** Counts `r` read by a query that runs. */
  def read(r: KeptResult): Unit = synchronized {
    if (entries.get(r.id).exists(_ eq r)) {
      entries.remove(r.id)
      entries(r.id) = r // least recently used first: a read one moves to the end
    }
    r.lastUse = System.currentTimeMillis()
    r.uses += 1
  }

  /**
   * Lets go of the kept results over a source that `plan` reads and whose fingerprint in this
   * query's keys (`results`) differs: the rows are of the source's former state.
   */
  def dropStale(plan: LogicalPlan, results: Seq[(LogicalPlan, LineageKey.Result)]): Unit = synchronized {
    if (entries.nonEmpty) {
      val stale = SourceFingerprint.staleIn(plan, results)
      entries.values.filter(_.key.allSources.exists(stale)).toList
        .foreach(release(_, Counter.ResultsReleased, "invalidated: a source it was computed from changed"))
    }
  }

  /**
   * The rows a query returned for `request`: kept when they take at most its `maxBytes` and, with
   * the others kept, at most `budget` bytes (the others of least value per byte go first to make room).
   * Returns the result kept, if a new one is.
   */
  def offer(request: KeepRequest, rows: Array[InternalRow], budget: Long): Option[KeptResult] = {
    // Too many rows, or (when they are the subplan's own) too many bytes: refused without a copy.
    val same = request.ordinals == request.types.indices &&
      rows.forall { case u: UnsafeRow => u.numFields == request.types.size; case _ => false }
    val least = CollectedResults.EntryBytes + rows.length * CollectedResults.RowBytes +
      (if (same) rows.iterator.map(_.asInstanceOf[UnsafeRow].getSizeInBytes.toLong).sum else 0L)
    val kept = mutable.ArrayBuffer.empty[InternalRow]
    var bytes = CollectedResults.EntryBytes
    if (least <= request.maxBytes) {
      val project = UnsafeProjection.create(request.ordinals.zip(request.types).map { case (i, t) => BoundReference(i, t, true) })
      val all = rows.iterator
      while (all.hasNext && bytes <= request.maxBytes) {
        val row = project(all.next()).copy()
        bytes += row.getSizeInBytes + CollectedResults.RowBytes
        kept += row
      }
    }
    val why = s"result of ${request.key.hash} (${rows.length} rows)"
    if (least > request.maxBytes || bytes > request.maxBytes) {
      stats.record(Counter.ResultsRefused, s"not kept: $why, more than collected.maxBytes (${request.maxBytes} bytes)")
      None
    } else {
      val costMs = math.max(0L, System.currentTimeMillis() - request.plannedMs)
      keep(new KeptResult(request.id, keys.hold(request.key), request.types, kept.toIndexedSeq, bytes, costMs, System.currentTimeMillis()),
        budget, why)
    }
  }

  /**
   * Rows of `key`'s subplan (UnsafeRows of `types`) that another process collected in `costMs`, read
   * from the durable tier: kept as `id` as if this process had collected them, within `budget`.
   * Returns the result to serve (not kept when over the budget).
   */
  def adopt(id: String, key: LineageKey, types: Seq[DataType], rows: IndexedSeq[InternalRow], costMs: Long,
      budget: Long): KeptResult = {
    val bytes = CollectedResults.EntryBytes + rows.iterator.map(_.asInstanceOf[UnsafeRow].getSizeInBytes + CollectedResults.RowBytes).sum
    val r = new KeptResult(id, keys.hold(key), types, rows, bytes, costMs, System.currentTimeMillis())
    keep(r, budget, s"result of ${key.hash} (${rows.size} rows, read from the durable tier)").getOrElse(r)
  }

  /**
   * Keeps `r` (`why`: what it is) unless its lineage is kept already or it exceeds `budget`; the others
   * of least value per byte make room. Its key, held by the caller, is let go when it is not kept.
   */
  private def keep(r: KeptResult, budget: Long, why: String): Option[KeptResult] = synchronized {
    val known = entries.get(r.id).filter(_.key.sameLineage(r.key))
    val others = entries.values.filterNot(o => known.exists(_ eq o)).toSeq
    if (r.bytes > budget) {
      stats.record(Counter.ResultsRefused, s"not kept: $why, ${r.bytes} bytes, more than the budget of $budget")
      keys.release(r.key)
      None
    } else if (known.isEmpty) {
      entries.get(r.id).foreach(release(_, Counter.ResultsReleased, "replaced by a newer result of the same key"))
      entries(r.id) = r
      stats.record(Counter.ResultsKept, s"kept $why: ${r.bytes} bytes on the driver, for later queries that hold its subplan")
      val order = others.sortBy(o => (EvictionPolicy.valuePerByte(o.costMs, o.uses, o.bytes), o.lastUse))
      order.iterator.takeWhile(_ => entries.values.map(_.bytes).sum > budget)
        .foreach(release(_, Counter.ResultsReleased, s"over the budget of $budget bytes (least value per byte)"))
      Some(r)
    } else {
      keys.release(r.key)
      None
    }
  }

  /** Lets go of `r`, counted as released; the plans that read it keep their own copy of the rows. */
  def release(r: KeptResult, counter: Counter.Value, why: String): Unit = synchronized {
    if (entries.get(r.id).exists(_ eq r)) {
      entries.remove(r.id)
      keys.release(r.key)
      stats.record(counter, s"released the kept result of ${r.key.hash}: $why")
    }
  }

  /** Lets go of the results kept for `user` (their last Spark Connect session closed). */
  def releaseOf(user: String, why: String): Unit = synchronized {
    entries.values.filter(r => r.id == scoped(r.key.hash, user)).toList.foreach(release(_, Counter.ResultsReleased, why))
  }

  /** Lets go of every kept result (`memphis.clear`, or memphis turned off). */
  def releaseAll(why: String): Unit = synchronized(entries.values.toList.foreach(release(_, Counter.ResultsReleased, why)))
}

object CollectedResults {
  /** What a kept result takes besides its rows and its key: its own fields and its entry in the map. */
  val EntryBytes = 1024L

  /** What a row takes besides its bytes: the row object and its array's header. */
  val RowBytes = 56L
}
