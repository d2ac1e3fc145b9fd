package org.apache.spark.memphis.ui

import scala.xml.Node

import io.memphis.conf.{MemphisConf, MemphisDecisionEvent, MemphisEntry, MemphisStateEvent}
import org.apache.spark.{SecurityManager, SparkConf, SparkContext}
import org.apache.spark.scheduler.SparkListener
import org.apache.spark.status.{AppHistoryServerPlugin, ElementTrackingStore}
import org.apache.spark.ui.{SparkUI, SparkUITab, UIUtils, WebUIPage}
import org.apache.spark.util.Utils

/** The memphis tab of a Spark UI (live or the History Server's), over a status store its listener fills. */
final class MemphisTab(val store: MemphisStatusStore, ui: SparkUI) extends SparkUITab(ui, MemphisTab.Prefix) {
  override val name = "memphis"
  val security: SecurityManager = ui.securityManager
  attachPage(new MemphisPage(this))
}

object MemphisTab {
  val Prefix = "memphis"

  /**
   * Adds the tab and its listener to `sc`'s live UI, once per SparkContext; nothing when the UI is
   * off or memphis posts no events (`spark.memphis.ui.retained=0`).
   */
  def attach(sc: SparkContext): Unit = synchronized {
    val retained = MemphisConf.UiRetained.get(sc.getConf)
    sc.ui.filter(ui => retained > 0 && !ui.getTabs.exists(_.prefix == Prefix)).foreach { ui =>
      val kvstore = sc.statusStore.store.asInstanceOf[ElementTrackingStore]
      sc.listenerBus.addToStatusQueue(new MemphisStatusListener(kvstore, retained))
      ui.attachTab(new MemphisTab(new MemphisStatusStore(kvstore), ui))
    }
  }
}

/** The History Server's memphis tab, rebuilt from an application's event log (named in the jar's service file). */
final class MemphisHistoryServerPlugin extends AppHistoryServerPlugin {
  override def createListeners(conf: SparkConf, store: ElementTrackingStore): Seq[SparkListener] = {
    val retained = MemphisConf.UiRetained.get(conf)
    if (retained > 0) Seq(new MemphisStatusListener(store, retained)) else Nil
  }

  override def setupUI(ui: SparkUI): Unit = {
    val store = new MemphisStatusStore(ui.store.store)
    if (store.nonEmpty) ui.attachTab(new MemphisTab(store, ui))
  }
}

/** The tab's one page: places, counters, entries, per-query lines and the newest decisions. */
final class MemphisPage(tab: MemphisTab) extends WebUIPage("") {
  override def render(request: Servlet.Request): Seq[Node] = {
    val content = MemphisPage.content(tab.store, Option(request.getRemoteUser), tab.security,
      path => UIUtils.prependBaseUri(request, tab.basePath, path), System.currentTimeMillis())
    UIUtils.headerSparkPage(request, "memphis", content, tab)
  }
}

object MemphisPage {
  /**
   * Whether `viewer` may read the plan text of an entry `owner`'s query made: anyone when Spark's UI
   * ACLs are off (the whole UI is open then), else its owner and the UI's admins; an unknown viewer not.
   */
  def mayReadPlan(security: SecurityManager, viewer: Option[String], owner: String): Boolean =
    !security.aclsEnabled() || viewer.exists(v => v == owner || security.checkAdminPermissions(v))

  /** The page's content; `link` makes a path of the UI an address (the SQL tab's executions). */
  def content(store: MemphisStatusStore, viewer: Option[String], security: SecurityManager, link: String => String,
      now: Long): Seq[Node] = {
    val decisions = store.decisions
    store.state match {
      case None => <p>memphis has made no decision yet.</p> ++ decisionsSection(decisions, link)
      case Some(state) =>
        <p>State after SQL execution {executionLink(state.executionId, link)}, at {UIUtils.formatDate(state.time)}:
          {state.entriesTotal} entries{if (state.entries.size < state.entriesTotal) s", the ${state.entries.size} most recently used shown" else ""}.</p> ++
          placesSection(state) ++ entriesSection(state.entries,
            e => if (mayReadPlan(security, viewer, e.owner)) Right(store.plan(e.key)) else Left(()), now) ++
          queriesSection(decisions, link) ++ decisionsSection(decisions, link) ++ countersSection(state)
    }
  }

  private def executionLink(id: Long, link: String => String): Node =
    if (id < 0) <span>none</span> else <a href={link(s"/SQL/execution/?id=$id")}>{id}</a>

  private def table(id: String, headers: Seq[String], rows: Seq[Node]): Node =
    <table id={id} class="table table-bordered table-sm table-striped">
      <thead><tr>{headers.map(h => <th>{h}</th>)}</tr></thead>
      <tbody>{rows}</tbody>
    </table>

  private def bytes(n: Long): Node = <span title={s"$n bytes"}>{Utils.bytesToString(n)}</span>

  private def placesSection(state: MemphisStateEvent): Seq[Node] =
    <h4>Places</h4> ++ table("memphis-places", Seq("Place", "Held", "Budget", "Used"), state.places.map(p =>
      <tr data-place={p.place}>
        <td>{p.place}</td><td>{bytes(p.heldBytes)}</td><td>{bytes(p.budgetBytes)}</td>
        <td>{if (p.budgetBytes > 0) f"${100.0 * p.heldBytes / p.budgetBytes}%.1f %%" else "-"}</td>
      </tr>))

  // Every memphis_stats() row with its exact value: counters first, then what is held and the budgets.
  private def countersSection(state: MemphisStateEvent): Seq[Node] =
    <h4>Counters (memphis_stats())</h4> ++ table("memphis-stats", Seq("Name", "Value"),
      (state.counters ++ state.stats).map(s => <tr data-stat={s.name}><td>{s.name}</td><td class="memphis-value">{s.value}</td></tr>))

  /** The entries, each with its plan text (Left where the viewer may not read it). */
  private def entriesSection(entries: Seq[MemphisEntry], plan: MemphisEntry => Either[Unit, Option[String]], now: Long): Seq[Node] =
    <h4>Entries</h4> ++ table("memphis-entries",
      Seq("Key", "Tables", "Subplan", "State", "Owner", "Size", "Hits", "Time saved", "Age", "Reason", "Plan"),
      entries.map(e =>
        <tr data-key={e.key}>
          <td title={e.key}>{e.key.take(12)}</td><td>{e.tables}</td><td>{e.shape}</td><td>{e.state}</td><td>{e.owner}</td>
          <td>{bytes(e.sizeBytes)}</td><td>{e.hits}</td><td>{UIUtils.formatDuration(e.savedMs)}</td>
          <td>{UIUtils.formatDuration(math.max(0L, now - e.firstSeen))}</td><td>{e.reason}</td>
          <td>{plan(e) match {
            case Left(_) => <span class="memphis-plan-hidden">only its owner may read it</span>
            case Right(text) => text.toSeq.map(t => <details><summary>plan</summary><pre class="memphis-plan">{t}</pre></details>)
          }}</td>
        </tr>))

  private def queriesSection(decisions: Seq[MemphisDecisionEvent], link: String => String): Seq[Node] = {
    val byQuery = decisions.filter(_.executionId >= 0).groupBy(_.executionId).toSeq.sortBy(-_._1)
    <h4>Queries</h4> ++ table("memphis-queries", Seq("SQL execution", "Decisions"), byQuery.map { case (id, ds) =>
      val counts = ds.groupBy(_.decision).toSeq.sortBy(_._1).map { case (d, n) => s"$d ${n.size}" }
      <tr data-execution={id.toString}><td>{executionLink(id, link)}</td><td>{counts.mkString(", ")}</td></tr>
    })
  }

  private def decisionsSection(decisions: Seq[MemphisDecisionEvent], link: String => String): Seq[Node] =
    <h4>Newest decisions</h4> ++ table("memphis-decisions", Seq("Time", "Decision", "SQL execution", "Reason"), decisions.map(d =>
      <tr data-decision={d.decision}>
        <td>{UIUtils.formatDate(d.time)}</td><td>{d.decision}</td><td>{executionLink(d.executionId, link)}</td><td>{d.reason}</td>
      </tr>))
}
