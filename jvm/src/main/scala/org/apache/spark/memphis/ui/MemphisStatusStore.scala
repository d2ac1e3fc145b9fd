package org.apache.spark.memphis.ui

import scala.annotation.meta.getter

import com.fasterxml.jackson.annotation.JsonIgnore
import io.memphis.conf.{MemphisDecisionEvent, MemphisPlanEvent, MemphisStateEvent}
import org.apache.spark.scheduler.{SparkListener, SparkListenerEvent}
import org.apache.spark.status.ElementTrackingStore
import org.apache.spark.util.kvstore.{KVIndex, KVStore, KVStoreView}

/** One decision in Spark's status store, numbered in the order it was posted (the store's key). */
final class DecisionRow(@(KVIndex @getter) val seq: Long, val event: MemphisDecisionEvent)

/** memphis's latest state in Spark's status store: one row, replaced by each state event. */
final class StateRow(val event: MemphisStateEvent) {
  @JsonIgnore @KVIndex def id: String = StateRow.Id
}

object StateRow {
  val Id = "memphis"
}

/** The plan text of a key the latest state shows. */
final class PlanRow(@(KVIndex @getter) val key: String, val plan: String)

/**
 * Builds the memphis tab's state in a status store from memphis's events: in the live UI (on Spark's
 * status queue) and in the History Server (replaying the event log), so both show the same. Keeps the
 * `retained` newest decisions, the latest state and the plans of its entries: its memory is bounded.
 */
final class MemphisStatusListener(store: ElementTrackingStore, retained: Int) extends SparkListener {
  // The listener bus calls a listener from one thread at a time.
  private var posted = 0L

  override def onOtherEvent(event: SparkListenerEvent): Unit = event match {
    case decision: MemphisDecisionEvent =>
      store.write(new DecisionRow(posted, decision))
      if (posted >= retained) store.delete(classOf[DecisionRow], posted - retained)
      posted += 1
    case plan: MemphisPlanEvent => store.write(new PlanRow(plan.key, plan.plan))
    case state: MemphisStateEvent =>
      store.write(new StateRow(state))
      // The plans of keys this state no longer shows: a plan is posted again when its key comes back.
      val shown = state.entries.map(_.key).toSet
      MemphisStatusStore.read(store.view(classOf[PlanRow]))(_.key).filterNot(shown)
        .foreach(store.delete(classOf[PlanRow], _))
    case _ =>
  }
}

/** What the memphis tab reads from a status store that a [[MemphisStatusListener]] fills. */
final class MemphisStatusStore(store: KVStore) {
  def state: Option[MemphisStateEvent] =
    try Some(store.read(classOf[StateRow], StateRow.Id).event) catch { case _: NoSuchElementException => None }

  def plan(key: String): Option[String] =
    try Some(store.read(classOf[PlanRow], key).plan) catch { case _: NoSuchElementException => None }

  /** The newest decisions, newest first. */
  def decisions: Seq[MemphisDecisionEvent] =
    MemphisStatusStore.read(store.view(classOf[DecisionRow]).reverse())(_.event)

  /** Whether memphis posted anything (an application without memphis gets no tab in the History Server). */
  def nonEmpty: Boolean = store.count(classOf[StateRow]) > 0 || store.count(classOf[DecisionRow]) > 0
}

object MemphisStatusStore {
  /** A view's rows read through `f`, in its order (by hand: Scala 2.12 has no scala.jdk converters). */
  private[ui] def read[T, R](view: KVStoreView[T])(f: T => R): List[R] = {
    val rows = view.closeableIterator()
    try {
      val out = List.newBuilder[R]
      while (rows.hasNext) out += f(rows.next())
      out.result()
    } finally rows.close()
  }
}
