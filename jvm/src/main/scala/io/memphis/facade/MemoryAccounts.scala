package io.memphis.facade

import io.memphis.cache.HeapPressure
import io.memphis.conf.MemphisConf
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkRuntime

/**
 * What memphis holds in each place of the Spark application, and what it may hold there; every
 * budget is derived from what the process has, as Spark and the JVM report it, never a fixed size.
 * Read when asked (`memphis_stats()`, an admission, an eviction): each figure is measured then.
 *
 *  - executors' storage memory: cached relations and local checkpoints; `storage.fraction` of the
 *    executors' storage memory (the driver's in local mode, where it is the executor), capped by
 *    `storage.maxBytes`. Cached relations are evicted by score beyond it.
 *  - the driver heap: join broadcasts memphis keeps referenced, collected results it keeps and its
 *    own entries; `driver.heapFraction` of the driver's maximum heap. Broadcasts and collected
 *    results are let go by score beyond it, and everything on the heap when it stays full after a
 *    collection ([[HeapPressure]]).
 *  - local disk: the first occurrences' kept shuffles and reliable checkpoint files on this
 *    machine; `localDisk.fraction` of the free space of Spark's local directory (with what memphis
 *    holds there counted as free). The oldest kept shuffles go first beyond it.
 * The Python host tier keeps its own account (`memphis.local`), in the driver's Python process.
 */
final class MemoryAccounts(cache: LineageCache, conf: SQLConf) {
  lazy val storageHeld: Long = cache.heldBytes + cache.checkpoints.storageBytes

  /**
   * `storage.fraction` of the executors' storage memory: what admission measures estimates against.
   * Estimates come from file and row statistics and overshoot the compressed cache many times, so
   * they are held to the storage memory itself; an explicit `storage.maxBytes` bounds what is
   * stored, measured, by eviction.
   */
  lazy val storageShare: Long = {
    val sc = cache.sparkContext
    val driver = SparkRuntime.driverBlockManagerHostPort
    val storage = sc.statusTracker.getExecutorInfos.toSeq
      .filter(e => sc.isLocal || !driver.contains((e.host, e.port)))
      .map(e => e.totalOnHeapStorageMemory + e.totalOffHeapStorageMemory).sum
    (storage * MemphisConf.StorageFraction.get(conf)).toLong
  }

  lazy val storageBudget: Long = {
    val cap = MemphisConf.StorageMaxBytes.get(conf)
    if (cap > 0) math.min(storageShare, cap) else storageShare
  }

  lazy val collectedHeld: Long = cache.collected.heldBytes

  lazy val driverHeapHeld: Long = cache.driverHeapHeld

  lazy val driverHeapBudget: Long = (HeapPressure.maxBytes * MemphisConf.DriverHeapFraction.get(conf)).toLong

  /**
   * What join broadcasts may take: the driver heap's budget less memphis's own structures and the
   * collected results it keeps, capped by `broadcast.joinMaxBytes`.
   */
  lazy val joinBroadcastBudget: Long = {
    val room = math.max(0L, driverHeapBudget - cache.structureBytes - collectedHeld)
    MemphisConf.BroadcastJoinMaxBytes.get(conf).fold(room)(math.min(_, room))
  }

  /**
   * What kept collected results may take: the driver heap's budget less memphis's own structures. Join
   * broadcasts worth less per byte give way to them ([[PressureValve.fit]]), not the other way round.
   */
  lazy val collectedResultsBudget: Long = math.max(0L, driverHeapBudget - cache.structureBytes)

  lazy val localDiskHeld: Long = cache.retainedShuffleBytes + cache.checkpoints.localFileBytes

  lazy val localDiskBudget: Long = {
    val free = SparkRuntime.localDirs.map(_.getUsableSpace).foldLeft(0L)(math.max)
    ((free + localDiskHeld) * MemphisConf.LocalDiskFraction.get(conf)).toLong
  }

  /** Each place, what memphis holds there and its budget (the memphis tab's table of places). */
  def places: Seq[(String, Long, Long)] = Seq(("Spark storage", storageHeld, storageBudget),
    ("driver heap", driverHeapHeld, driverHeapBudget), ("local disk", localDiskHeld, localDiskBudget))

  /** `memphis_stats()` rows: held and budget per place. */
  def rows: Seq[(String, Long)] = Seq(
    "bytes_held_storage" -> storageHeld, "storage_budget_bytes" -> storageBudget,
    "bytes_held_driver_heap" -> driverHeapHeld, "driver_heap_budget_bytes" -> driverHeapBudget,
    "join_broadcast_budget_bytes" -> joinBroadcastBudget, "bytes_held_results" -> collectedHeld,
    "bytes_held_local_disk" -> localDiskHeld, "local_disk_budget_bytes" -> localDiskBudget)
}
