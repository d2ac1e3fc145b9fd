package io.memphis.cache

import scala.collection.mutable

import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
/**
 * The guard on queries memphis made slower: per query (consumer), how long it takes when memphis
 * serves and persists nothing for it, and, when it only reads entries, whether it took much
 * longer; those entries are then let go and refused. An execution that fills an entry is not
 * judged: the fill is paid once, and its clock also covers admitting and persisting the subplan
 * (where Delta rebuilds a pinned version's snapshot). Runs under the table's lock.
 */
final class SlowerQueries(eviction: Eviction, stats: CacheStats) {
  /**
   * SQL executions memphis planned and that have not ended: the query (consumer), when it was
   * planned, the entries it reads or fills, and whether it fills one.
   */
  private val running = mutable.LinkedHashMap.empty[Long, (String, Long, Set[CacheEntry], Boolean)]
  /** Per query (consumer): how long it took, latest, when memphis served and persisted nothing for it. */
  private val plainMs = mutable.LinkedHashMap.empty[String, Long]

  /**
   * SQL execution `id` runs query `consumer`, planned at `since`, reading or filling `used`: it
   * fills those not stored yet (persisted by it, or ahead of it).
   */
  def executionPlanned(id: Long, consumer: String, since: Long, used: Set[CacheEntry]): Unit = {
    val (_, first, before, filled) = running.getOrElse(id, (consumer, since, Set.empty[CacheEntry], false))
    running(id) = (consumer, first, before ++ used, filled || used.exists(_.state == EntryState.ToPersist))
    while (running.size > SlowerQueries.MaxRunning) running.remove(running.head._1)
  }

  /**
   * A SQL execution memphis planned ended: when it neither read nor filled an entry its duration is
   * the query's plain time; when it only read entries and took longer than the plain time by more
   * than [[SlowerQueries.SlowerBound]], they made it slower (reading a cached relation costs more
   * than the plan it stands for): they are let go and refused.
   */
  def executionEnded(id: Long, endMs: Long, failed: Boolean): Unit =
    running.remove(id).filter { case (_, _, _, fills) => !failed && !fills }.foreach { case (consumer, since, used, _) =>
      val took = endMs - since
      if (used.isEmpty) {
        plainMs.remove(consumer)
        plainMs(consumer) = took
        while (plainMs.size > EntryTable.MaxRemembered) plainMs.remove(plainMs.head._1)
      } else plainMs.get(consumer).foreach { plain =>
        val (factor, slackMs) = SlowerQueries.SlowerBound
        if (took > plain * factor + slackMs) used.filter(_.refusal.isEmpty).foreach { e =>
          val why = s"not persisted again: query $consumer took $took ms reading it, $plain ms without"
          e.refusal = Some(Counter.RefusedSlower -> why)
          if (EntryState.Holding.contains(e.state)) eviction.session.foreach(eviction.release(_, e, EntryState.Evicted, Counter.RefusedSlower, why))
          else stats.record(Counter.RefusedSlower, s"${e.key.hash}: $why")
        }
      }
    }

  def clear(): Unit = {
    running.clear()
    plainMs.clear()
  }
}

object SlowerQueries {
  /** How many running SQL executions are followed (more are not judged). */
  val MaxRunning = 1000

  /**
   * A query memphis read entries for is slower than without when it takes more than
   * this factor of its plain time plus this many ms: the slack covers a shared machine's noise.
   */
  val SlowerBound: (Double, Long) = (1.5, 1000L)
}
