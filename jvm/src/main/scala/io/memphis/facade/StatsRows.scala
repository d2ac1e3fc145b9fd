package io.memphis.facade

import io.memphis.cache.HeapPressure
import org.apache.spark.sql.internal.SQLConf

/** What `memphis_stats()` shows, apart from the facade because it reads every store: the counters, then, per place, what is held and the budget. */
object StatsRows {
  def of(cache: LineageCache, conf: SQLConf): Seq[(String, Long)] =
    cache.stats.snapshot ++ Seq("bytes_held" -> cache.heldBytes, "bytes_held_join_broadcasts" -> cache.broadcasts.heldBytes,
      "durable_writes_pending" -> cache.durable.pendingWrites.toLong) ++
      cache.budgets(conf).rows ++ Seq("driver_heap_used_bytes" -> HeapPressure.usedBytes, "driver_heap_max_bytes" -> HeapPressure.maxBytes)
}
