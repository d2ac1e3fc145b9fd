package org.apache.spark.memphis.ui

import io.memphis.conf.{MemphisConf, MemphisDecisionEvent, MemphisEntry, MemphisEvents, MemphisPlace, MemphisPlanEvent, MemphisStat,
  MemphisStateEvent}
import org.apache.spark.{SecurityManager, SparkConf}
import org.apache.spark.scheduler.SparkListenerEvent
import org.apache.spark.status.ElementTrackingStore
import org.apache.spark.util.JsonProtocol
import org.apache.spark.util.kvstore.InMemoryStore
import org.scalatest.funsuite.AnyFunSuite

/** The memphis tab's state from memphis's events, as the live UI and the History Server build it. */
class MemphisUiSuite extends AnyFunSuite {
  private def decision(i: Int) = MemphisDecisionEvent(1000L + i, "hits", s"reuse key$i", i.toLong)

  // Each user's entry has a key of its own (their queries read other tables). The users are accounts
  // every Debian system has: Spark looks up their groups for its ACLs, and logs an error for unknown users.
  private def entry(owner: String) = MemphisEntry(owner.take(2) * 16, "lineitem", "Aggregate ← files",
    "materialized", owner, 2048L, 3L, 300L, 0L, 0L, "second occurrence")

  private def plan(owner: String) = MemphisPlanEvent(entry(owner).key, s"plan of $owner")

  private def state(entries: MemphisEntry*) = MemphisStateEvent(5000L, 7L, Seq(MemphisStat("hits", 3)),
    Seq(MemphisStat("bytes_held", 2048)), Seq(MemphisPlace("Spark storage", 2048, 4096)), entries, entries.size.toLong)

  private val both = state(entry("daemon"), entry("nobody"))

  private def filled(retained: Int, decisions: Int, events: Seq[SparkListenerEvent] = Seq(plan("daemon"), plan("nobody"), both)) = {
    val kvstore = new ElementTrackingStore(new InMemoryStore, new SparkConf)
    val listener = new MemphisStatusListener(kvstore, retained)
    (0 until decisions).foreach(i => listener.onOtherEvent(decision(i)))
    events.foreach(listener.onOtherEvent)
    new MemphisStatusStore(kvstore)
  }

  test("the store keeps the newest `retained` decisions, newest first, and the latest state") {
    val store = filled(retained = 3, decisions = 5)
    assert(store.decisions.map(_.reason) == Seq("reuse key4", "reuse key3", "reuse key2"))
    assert(store.state.contains(both))
    assert(store.plan(entry("nobody").key).contains("plan of nobody"))
    assert(store.nonEmpty)
    assert(!new MemphisStatusStore(new InMemoryStore).nonEmpty)
  }

  test("a plan is kept while the latest state shows its key") {
    val store = filled(10, 0, Seq(plan("daemon"), plan("nobody"), both, state(entry("nobody"))))
    assert(store.plan(entry("daemon").key).isEmpty && store.plan(entry("nobody").key).contains("plan of nobody"))
  }

  test("the events survive Spark's event log: written as JSON and read back equal") {
    for (event <- Seq(decision(1), plan("daemon"), both)) {
      assert(JsonProtocol.sparkEventFromJson(JsonProtocol.sparkEventToJsonString(event)) == event)
    }
  }

  test("with UI ACLs on, only an entry's owner and the admins read its plan text") {
    val conf = new SparkConf().set("spark.acls.enable", "true").set("spark.ui.view.acls", "daemon,nobody")
      .set("spark.admin.acls", "root")
    val security = new SecurityManager(conf)
    def page(viewer: Option[String]) = MemphisPage.content(filled(10, 1), viewer, security, identity, 6000L).toString
    assert(page(Some("daemon")).contains("plan of daemon") && !page(Some("daemon")).contains("plan of nobody"))
    assert(page(Some("nobody")).contains("plan of nobody") && !page(Some("nobody")).contains("plan of daemon"))
    assert(page(Some("root")).contains("plan of daemon") && page(Some("root")).contains("plan of nobody"))
    assert(!page(None).contains("plan of"))
    // ACLs off: the whole UI is open, and so is every plan.
    val open = MemphisPage.content(filled(10, 1), None, new SecurityManager(new SparkConf), identity, 6000L).toString
    assert(open.contains("plan of daemon") && open.contains("plan of nobody"))
  }

  test("the page links each decision's query to the SQL tab's execution") {
    val html = MemphisPage.content(filled(10, 1), None, new SecurityManager(new SparkConf), p => s"/base$p", 6000L).toString
    assert(html.contains("""href="/base/SQL/execution/?id=0""""))
    assert(html.contains("""href="/base/SQL/execution/?id=7""""))
  }

  test("spark.memphis.ui.retained takes whole numbers from 0; with no SparkContext nothing is posted") {
    assert(!new MemphisEvents(None).enabled)
    assert(MemphisConf.problem(MemphisConf.UiRetained.key, "-1").isDefined)
    assert(MemphisConf.UiRetained.get(new SparkConf().set(MemphisConf.UiRetained.key, "0")) == 0)
  }
}
