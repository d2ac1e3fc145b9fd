package io.memphis.facade

import io.memphis.cache.HeapPressure
import io.memphis.conf.{MemphisEntry, MemphisPlace, MemphisStat, MemphisStateEvent}
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.internal.SQLConf

/**
 * What `memphis_stats()` shows, apart from the facade because it reads every store: the counters, then, per place, what
 * is held and the budget; and the state the memphis tab shows, made of the same rows.
 */
object StatsRows {
  def of(cache: LineageCache, conf: SQLConf): Seq[(String, Long)] = cache.stats.snapshot ++ beyondCounters(cache, cache.budgets(conf))

  private def beyondCounters(cache: LineageCache, accounts: MemoryAccounts): Seq[(String, Long)] =
    Seq("bytes_held" -> cache.heldBytes, "bytes_held_join_broadcasts" -> cache.broadcasts.heldBytes,
      "durable_writes_pending" -> cache.durable.pendingWrites.toLong) ++
      accounts.rows ++ Seq("driver_heap_used_bytes" -> HeapPressure.usedBytes, "driver_heap_max_bytes" -> HeapPressure.maxBytes)

  /** Characters of an entry's shape and plan text the tab keeps: enough to recognize it, bounded per entry. */
  private val ShapeChars = 400
  private val PlanChars = 8000

  /**
   * Posts the state after SQL execution `executionId` for the memphis tab: the rows of [[of]] and the
   * `retained` most recently used entries, after the plans of their keys not posted yet.
   */
  def postState(cache: LineageCache, conf: SQLConf, executionId: Long): Unit = {
    val events = cache.stats.events
    val keys = scala.collection.mutable.Map.empty[String, LineageKey]
    events.postState({
      def stats(rows: Seq[(String, Long)]) = rows.map { case (name, value) => MemphisStat(name, value) }
      val entries = cache.entryRows(e => (e.lastAccess, e)).sortBy(-_._1)
      val shown = entries.take(events.retained).map { case (_, e) =>
        keys(e.key.hash) = e.key
        MemphisEntry(e.key.hash, e.key.tables.mkString(", "), e.key.shape(ShapeChars), e.state.toString, e.owner,
          e.sizeBytes, e.hits, e.hits * e.costMs, e.firstSeen, e.lastAccess, e.reason)
      }
      val accounts = cache.budgets(conf)
      val places = accounts.places.map { case (place, held, budget) => MemphisPlace(place, held, budget) }
      MemphisStateEvent(System.currentTimeMillis(), executionId, stats(cache.stats.snapshot),
        stats(beyondCounters(cache, accounts)), places, shown, entries.size)
    }, key => { val plan = keys(key).explain; if (plan.length <= PlanChars) plan else plan.take(PlanChars) + "…" })
  }
}
