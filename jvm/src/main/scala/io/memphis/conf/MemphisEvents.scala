package io.memphis.conf

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.SparkListenerEvent
import org.apache.spark.sql.memphis.SparkRuntime

// The events memphis posts on Spark's listener bus. Spark writes them to the event log as JSON (by
// their fields, through Jackson) and reads them back by class name, so they are plain case classes of
// strings, longs and sequences of such: the memphis tab builds its state from them, live and in the
// History Server alike.

/** One decision, as [[CacheStats.record]] counts it: its counter's name and the reason in words. */
final case class MemphisDecisionEvent(time: Long, decision: String, reason: String, executionId: Long)
  extends SparkListenerEvent

/** One `memphis_stats()` row. */
final case class MemphisStat(name: String, value: Long)

/** What memphis holds in one place (Spark storage, the driver heap, local disk) against its budget. */
final case class MemphisPlace(place: String, heldBytes: Long, budgetBytes: Long)

/** One cache entry as the tab shows it: `tables` and `shape` say in words what it stands for. */
final case class MemphisEntry(key: String, tables: String, shape: String, state: String, owner: String,
    sizeBytes: Long, hits: Long, savedMs: Long, firstSeen: Long, lastAccess: Long, reason: String)

/**
 * The canonical plan text of key `key`, which only who may read its entries sees (see the tab's page):
 * posted once, before the first state that shows an entry of that key (a key's plan never changes).
 */
final case class MemphisPlanEvent(key: String, plan: String) extends SparkListenerEvent

/**
 * The state after a SQL execution: the `memphis_stats()` rows (`counters`, then the rest as `stats`),
 * the places, and the most recently used entries (`entriesTotal` of them in all).
 */
final case class MemphisStateEvent(time: Long, executionId: Long, counters: Seq[MemphisStat], stats: Seq[MemphisStat],
    places: Seq[MemphisPlace], entries: Seq[MemphisEntry], entriesTotal: Long) extends SparkListenerEvent

/**
 * Posts one SparkContext's memphis events, when anyone can read them (the UI or the event log is on)
 * and `spark.memphis.ui.retained` is not 0; otherwise posting costs one boolean test.
 */
final class MemphisEvents(sc: Option[SparkContext]) {
  val retained: Int = sc.fold(0)(c => MemphisConf.UiRetained.get(c.getConf))

  val enabled: Boolean = retained > 0 && sc.exists(c =>
    c.getConf.getBoolean("spark.ui.enabled", true) || c.getConf.getBoolean("spark.eventLog.enabled", false))

  def post(event: => SparkListenerEvent): Unit = if (enabled) sc.foreach(SparkRuntime.post(_, event))

  // Guarded by this: the keys of the entries of the last state posted, whose plans were posted.
  private var plansPosted = Set.empty[String]

  /** Posts `state`, after the plan text (`plan(key)`) of each of its entries' keys the last state did not show. */
  def postState(state: => MemphisStateEvent, plan: String => String): Unit = if (enabled) synchronized {
    val posted = state
    val keys = posted.entries.map(_.key).toSet
    (keys -- plansPosted).foreach(k => post(MemphisPlanEvent(k, plan(k))))
    plansPosted = keys
    post(posted)
  }

  /**
   * The SQL execution the calling thread runs, or -1. Spark sets it on the thread before planning an
   * action; a listener's thread inherited the one of the thread that started it, which says nothing.
   */
  def executionId: Long =
    if (SparkRuntime.onListenerThread) -1L
    else sc.flatMap(c => Option(c.getLocalProperty("spark.sql.execution.id"))).fold(-1L)(_.toLong)
}
