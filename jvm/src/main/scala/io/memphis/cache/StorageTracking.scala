package io.memphis.cache

import scala.collection.mutable

import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.memphis.SparkRuntime

/**
 * What Spark's block managers store of the entries' cached relations, as its listener reports it
 * ([[io.memphis.facade.StorageListener]]): "materialized" is confirmed, not assumed; partitions lost
 * to Spark's own LRU or a lost executor are noticed; which running jobs read an entry (it is not
 * evicted under them); relations unpersisted outside memphis. Every method runs under the table's lock.
 * `materialized` is told of each entry that becomes materialized (the durable tier writes it).
 */
final class StorageTracking(sc: SparkContext, table: EntryTable, spark: SparkCache, eviction: Eviction, stats: CacheStats,
    materialized: CacheEntry => Unit) {
  /**
   * The plans of entries whose RDD was unpersisted outside memphis, newest last. Spark may hold a new
   * relation for such a plan: its CacheManager re-caches the plans over a path a writer refreshes
   * (Delta 3 on Spark 3.5 does at each commit), and memphis, which no longer tracks it, uncaches it
   * at a later query (not while Spark re-caches: the relation returns only at the end). Changes only
   * under the table's lock.
   */
  private val replacedOutside = mutable.LinkedHashSet.empty[LogicalPlan]

  def blockUpdated(rddId: Int, partition: Int, isStored: Boolean, bytes: Long, executor: String): Unit =
    table.byRddId(rddId).orElse(adopt(rddId)).foreach { e =>
      val r = e.relation.get
      // A partition is stored while some executor stores it (a recomputed one may sit on two).
      val on = r.storedOn.getOrElse(partition, Set.empty[String])
      if (isStored) {
        r.stored(partition) = bytes
        r.storedOn(partition) = on + executor
      } else if ((on - executor).isEmpty) {
        r.stored.remove(partition)
        r.storedOn.remove(partition)
      } else r.storedOn(partition) = on - executor
      if (e.state == EntryState.ToPersist && r.stored.size == r.partitions) {
        e.costMs = System.currentTimeMillis() - r.persistedAt
        e.moveTo(EntryState.Materialized, s"all ${r.partitions} partitions stored; computed in ${e.costMs} ms")
        stats.record(Counter.Materialized, s"materialized ${e.key.hash}: ${e.reason}")
        materialized(e)
        eviction.enforceBudget()
      } else if (e.state == EntryState.Materialized && !r.stored.contains(partition)) {
        partitionsLost(e, s"partition $partition lost")
      } else if (e.state == EntryState.Materialized && isStored) {
        // A block stored again (recomputed after a loss, moved from memory to disk) may be larger
        // than before: the budget holds for what the entry takes now.
        eviction.enforceBudget()
      }
    }

  /** The to-persist entry whose cached relation's RDD this is, now that Spark has built it. */
  private def adopt(rddId: Int): Option[CacheEntry] =
    SparkRuntime.persistedRdd(sc, rddId).flatMap { case (name, partitions) =>
      table.all.find(e => e.state == EntryState.ToPersist && e.relation.exists(r => r.rddId.isEmpty && r.name == name))
        .map { e =>
          table.adopt(e, rddId, partitions)
          e
        }
    }

  /**
   * An executor (its block manager) is gone, and with it the partitions only it stored: Spark
   * recomputes them through lineage when read, and stores them again, which materializes the
   * entry again.
   */
  def executorRemoved(executor: String): Unit = table.withRdd.foreach { e =>
    val r = e.relation.get
    val lost = r.storedOn.collect { case (p, on) if on.contains(executor) => p -> (on - executor) }
    lost.foreach { case (p, rest) =>
      if (rest.isEmpty) {
        r.stored.remove(p)
        r.storedOn.remove(p)
      } else r.storedOn(p) = rest
    }
    val gone = lost.count(_._2.isEmpty)
    if (gone > 0 && e.state == EntryState.Materialized) partitionsLost(e, s"$gone partition(s) lost with executor $executor")
  }

  private def partitionsLost(e: CacheEntry, what: String): Unit = {
    e.moveTo(EntryState.ToPersist, s"$what; Spark recomputes them when read")
    CacheStats.log.debug(s"memphis: ${e.key.hash}: ${e.reason}")
  }

  /**
   * A job reads the cached RDDs among `rdds` (id, name): their entries are protected until its SQL
   * execution ends (or the job, outside SQL). This covers plans made before their action ran (e.g.
   * an explained or re-collected DataFrame), which planning could not tie to an execution.
   */
  def jobStarted(jobId: Int, executionId: Option[Long], rdds: Seq[(Int, String)]): Unit = {
    val reader = executionId.getOrElse(StorageTracking.jobReader(jobId))
    rdds.foreach { case (id, name) =>
      val relation = SparkRuntime.cachedTableName(name)
      table.byRddId(id).orElse(table.all.find(e => relation.isDefined && e.relation.map(_.name) == relation))
        .filter(e => EntryState.Holding.contains(e.state))
        .foreach(_.readers += reader)
    }
  }

  /** A SQL execution (or a job, see [[jobStarted]]) ended: what only it read may be evicted now. */
  def readerEnded(reader: Long): Unit = {
    val read = table.all.count(_.readers.remove(reader))
    if (read > 0) eviction.enforceBudget()
  }

  def rddUnpersisted(rddId: Int): Unit = table.byRddId(rddId).foreach { e =>
    e.relation.foreach { r =>
      replacedOutside += r.plan
      if (replacedOutside.size > StorageTracking.MaxReplaced) replacedOutside -= replacedOutside.head
    }
    table.forget(e)
    e.moveTo(EntryState.Evicted, "unpersisted outside memphis")
    stats.record(Counter.Evicted, s"evicted ${e.key.hash}: ${e.reason}")
  }

  /** Lets go of the relations Spark re-cached for entries unpersisted outside memphis ([[replacedOutside]]). */
  def uncacheReplaced(session: SparkSession): Unit = if (replacedOutside.nonEmpty) {
    if (spark.isEmpty(session)) replacedOutside.clear()
    replacedOutside.filter(spark.holds(session, _)).toSeq.foreach { p =>
      eviction.uncache(session, p, "a relation unpersisted outside memphis")
      CacheStats.log.debug("memphis: uncached a relation Spark re-cached for a plan memphis let go")
      replacedOutside -= p
    }
  }
}

object StorageTracking {
  /** The reader id of a job outside any SQL execution: negative, so it never equals an execution id. */
  def jobReader(jobId: Int): Long = -1L - jobId

  /** How many plans unpersisted outside memphis are looked for among Spark's cached relations. */
  val MaxReplaced = 16
}
