package io.memphis

import org.apache.spark.SparkContext
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShim

/**
 * The driver's lineage cache of Spark subplans. One per SparkContext, shared by its sessions, as
 * Spark's own CacheManager is. It holds the counters now; entries and policies arrive with reuse.
 */
final class LineageCache private (val sparkContext: SparkContext) {
  val stats = new CacheStats

  /**
   * Bytes of Spark storage memphis may fill: `storage.fraction` of the executors' storage memory
   * (the driver's too in local mode, where it is the executor), capped by `storage.maxBytes`.
   */
  def storageBudgetBytes(conf: SQLConf): Long = {
    val driver = SparkShim.driverBlockManagerHostPort
    val storage = sparkContext.statusTracker.getExecutorInfos.toSeq
      .filter(e => sparkContext.isLocal || !driver.contains((e.host, e.port)))
      .map(e => e.totalOnHeapStorageMemory + e.totalOffHeapStorageMemory).sum
    val byFraction = (storage * MemphisConf.StorageFraction.get(conf)).toLong
    val cap = MemphisConf.StorageMaxBytes.get(conf)
    if (cap > 0) math.min(byFraction, cap) else byFraction
  }

  /** What `memphis_stats()` shows: the counters, then the budget. */
  def statsRows(conf: SQLConf): Seq[(String, Long)] =
    stats.snapshot :+ ("storage_budget_bytes" -> storageBudgetBytes(conf))
}

object LineageCache {
  // Invariant: `current` belongs to the live SparkContext; a new context gets a new, empty cache.
  // Guarded by the object's lock.
  private var current: Option[LineageCache] = None

  def forContext(sc: SparkContext): LineageCache = synchronized {
    current.filter(_.sparkContext eq sc).getOrElse {
      val cache = new LineageCache(sc)
      current = Some(cache)
      cache
    }
  }
}
