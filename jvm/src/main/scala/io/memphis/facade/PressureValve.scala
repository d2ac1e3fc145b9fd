package io.memphis.facade

import io.memphis.cache.{EntryTable, Eviction, EvictionPolicy, HeapPressure}
import io.memphis.conf.CacheStats.Counter
import io.memphis.conf.MemphisConf
import org.apache.spark.SparkContext

/**
 * What memphis holds on the driver heap, apart from the facade because it reaches every store that
 * holds data there: join broadcasts and kept collected results, one budget and one score (value per
 * byte) for both.
 *  - The pressure valve: when the heap stays above its threshold after a collection
 *    ([[HeapPressure]]), lets go of them and, in local mode, where executors' storage is the driver
 *    heap, of idle materialized entries, lowest value per byte first (see [[Eviction.relieve]]).
 *    Spark would otherwise run out of memory with them referenced. While the heap stays there, no
 *    join broadcast is kept and, in local mode, no subplan persisted ([[heapCrowded]]): memphis would
 *    refill what it let go, and Spark's next broadcast build would find no room.
 *  - The budget: a result kept may take the room of join broadcasts worth less per byte (a query's
 *    rows are a few KiB standing for seconds of work; a broadcast hash relation tens of MiB standing
 *    for its build), so after one is kept the least valuable of both stores go until they fit.
 */
final class PressureValve(sparkContext: SparkContext, table: EntryTable, eviction: Eviction, stores: Stores) {
  private val pressure = new HeapPressure(MemphisConf.DriverPressureThreshold.parse(sparkContext.getConf.get(
    MemphisConf.DriverPressureThreshold.key, MemphisConf.DriverPressureThreshold.default)).getOrElse(0.8))

  def relieve(): Unit = if (pressure.crossed()) table.locked {
    val why = s"heap pressure (${pressure.describe})"
    eviction.relieve(why, held(Counter.PressureReleases, Counter.PressureReleases, why), onDriverHeap = sparkContext.isLocal)
  }

  /**
   * Why a cached relation filled now would crowd out Spark's own work, if it would: in local mode the
   * executors' storage memory is the driver heap, and while that stays above its threshold after a
   * collection, a broadcast that Spark builds there next may find no room ("Not enough memory to
   * build and broadcast the table": TPC-DS' edited pass with a 640 MiB driver, where plain Spark
   * answered). The valve lets go of what memphis holds; persisting more then would refill it.
   */
  def storageCrowdsHeap: Option[String] =
    if (sparkContext.isLocal) heapCrowded.map(why => s"$why; local mode stores cached relations there") else None

  /** Why the driver heap has no room for more of memphis's holdings, if it has none: it stays above its threshold after a collection. */
  def heapCrowded: Option[String] =
    if (pressure.above) Some(s"the driver heap stays above driver.pressureThreshold after a collection (${pressure.describe})")
    else None

  /** Lets go of the broadcasts and kept results of least value per byte until they take at most `budget` bytes. */
  def fit(budget: Long): Unit = {
    def over = stores.broadcasts.heldBytes + stores.collected.heldBytes - budget
    // Asked after every SQL execution: the lock and the sort only when something has to go.
    if (over > 0) table.locked {
      val why = s"over the driver heap's budget of $budget bytes (least value per byte)"
      held(Counter.BroadcastsReleased, Counter.ResultsReleased, why).sortBy(_._1).iterator.takeWhile(_ => over > 0)
        .foreach { case (_, _, let) => let() }
    }
  }

  /** Each broadcast and kept result: its value per byte, its bytes, and how to let it go (counted as given). */
  private def held(broadcastCounter: Counter.Value, resultCounter: Counter.Value, why: String) = {
    val (broadcasts, collected) = (stores.broadcasts, stores.collected)
    broadcasts.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
      () => broadcasts.release(r, broadcastCounter, why))) ++
      collected.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
        () => collected.release(r, resultCounter, why)))
  }
}
