package io.memphis.facade

import io.memphis.cache.{EntryTable, Eviction, EvictionPolicy, HeapPressure}
import io.memphis.conf.CacheStats.Counter
import io.memphis.conf.MemphisConf
import org.apache.spark.SparkContext

/**
 * The driver heap's pressure valve, apart from the facade because it reaches every store that holds
 * data on the heap: when the heap stays above its threshold after a collection ([[HeapPressure]]),
 * lets go of join broadcasts, kept collected results and, in local mode, where executors' storage is
 * the driver heap, idle materialized entries, lowest value per byte first (see [[Eviction.relieve]]).
 * Spark would otherwise run out of memory with them referenced.
 */
final class PressureValve(sparkContext: SparkContext, table: EntryTable, eviction: Eviction, stores: Stores) {
  private val pressure = new HeapPressure(MemphisConf.DriverPressureThreshold.parse(sparkContext.getConf.get(
    MemphisConf.DriverPressureThreshold.key, MemphisConf.DriverPressureThreshold.default)).getOrElse(0.8))

  def relieve(): Unit = if (pressure.crossed()) table.locked {
    val why = s"heap pressure (${pressure.describe})"
    val (broadcasts, collected) = (stores.broadcasts, stores.collected)
    eviction.relieve(why, broadcasts.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
      () => broadcasts.release(r, Counter.PressureReleases, why))) ++
      collected.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
        () => collected.release(r, Counter.PressureReleases, why))), onDriverHeap = sparkContext.isLocal)
  }
}
