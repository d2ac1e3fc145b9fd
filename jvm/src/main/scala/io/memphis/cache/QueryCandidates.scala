package io.memphis.cache

import java.util.IdentityHashMap

import scala.collection.mutable

import io.memphis.cache.ReusePolicy.{Candidate, Past}
import io.memphis.conf.MemphisConf
import io.memphis.lineage.{InlineCtes, LineageKey, ServedSubplan}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{OuterReference, PythonUDF, SubqueryExpression}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}

/**
 * One query's candidate subplans with their keys (`results`: every subplan's, root first), and the
 * reuse policy's input made of them: what the plan and the cache say of each.
 */
final class QueryCandidates(val plan: LogicalPlan, val results: Seq[(LogicalPlan, LineageKey.Result)], val user: String) {
  /** The candidate subplans, outermost first, with their keys or why they have none. */
  val subplans: IndexedSeq[(LogicalPlan, LineageKey.Result)] =
    results.filter { case (p, _) => QueryCandidates.isCandidate(p, plan) }.toIndexedSeq

  /** The query that consumes each subplan: its own key, or its plan's shape when it has none. */
  lazy val consumer: String = results.collectFirst { case (p, Right(k)) if p eq plan => k.hash }
    .getOrElse(plan.semanticHash().toHexString)

  def subplan(i: Int): LogicalPlan = subplans(i)._1

  /** The key of candidate `i`, which has one. */
  def key(i: Int): LineageKey = subplans(i)._2.fold(reason => throw new IllegalStateException(reason), identity)

  /**
   * The policy's input, read under the table's lock: the candidates, what the table knew of their
   * entries and of the recent aggregates', and those aggregates' ids. Asks Spark's CacheManager whether it substitutes a
   * held entry's relation. `heldInside` is looked at only when a first-met aggregate may be
   * persisted ahead and something is held.
   */
  def policyInput(table: EntryTable, spark: SparkCache, session: SparkSession,
      persistAhead: Boolean): (IndexedSeq[Candidate], Map[String, Past], Seq[String]) = {
    val within = this.within
    val held = persistAhead && table.holding.nonEmpty
    lazy val heldInside = heldInsideOf(table)
    val past = mutable.Map.empty[String, Past]
    recent(table).zip(table.recent.items).foreach { case (id, e) => past(id) = Past(e.state, e.occurrences) }
    val candidates = subplans.indices.map { i =>
      val (subplan, result) = subplans(i)
      result match {
        case Left(reason) => Candidate(Left(reason))
        case Right(key) =>
          val id = table.scoped(key.hash, user)
          val entry = table.get(id)
          val known = entry.filter(_.key.sameLineage(key))
          known.foreach(e => past(id) = Past(e.state, e.occurrences))
          val holds = (e: CacheEntry) => EntryState.Holding.contains(e.state)
          Candidate(Right(id), within(i), collides = entry.isDefined && known.isEmpty,
            cached = known.exists(e => holds(e) && spark.relationName(session,
              QueryCandidates.owned(subplan, user, java.util.Collections.emptySet(), table.shared))
              .contains(e.relation.map(_.name))),
            othersHold = !table.shared && table.all.exists(o => o.key.hash == key.hash && o.owner != user && holds(o)),
            keepsShuffle = QueryCandidates.keepsShuffle(subplan), answer = answer.exists(_ eq subplan),
            heldInside = held && QueryCandidates.keepsShuffle(subplan) && heldInside(subplan))
      }
    }
    (candidates, past.toMap, recent(table))
  }

  /**
   * The ids of the recent aggregates, oldest first. One the table has forgotten since still counts
   * (as it was), under an id no entry has (ids start with a hex hash): a new entry of its key is not it.
   */
  private def recent(table: EntryTable): Seq[String] =
    table.recent.items.map(e => if (table.get(e.id).exists(_ eq e)) e.id else s"forgotten ${e.id}")

  /** The query's answer up to its presentation (order, limit, columns): not persisted ahead, since it is rarely asked for again as it is. */
  private lazy val answer: Seq[LogicalPlan] = {
    val chain = mutable.ArrayBuffer(plan)
    while (QueryCandidates.presents(chain.last)) chain += chain.last.children.head
    chain.toSeq
  }

  /** For each candidate, the positions of the candidates whose subplan holds its node (by identity), itself elsewhere included. */
  private def within: IndexedSeq[Set[Int]] = {
    val at = new IdentityHashMap[LogicalPlan, List[Int]]
    subplans.indices.foreach(i => at.put(subplan(i), i :: Option(at.get(subplan(i))).getOrElse(Nil)))
    val holders = new IdentityHashMap[LogicalPlan, Set[Int]]
    def walk(p: LogicalPlan, above: Set[Int]): Unit = {
      val here = above ++ Option(at.get(p)).getOrElse(Nil)
      holders.put(p, Option(holders.get(p)).fold(here)(_ ++ here))
      p.children.foreach(walk(_, here))
    }
    walk(plan, Set.empty)
    subplans.indices.map(i => holders.get(subplan(i)) - i)
  }

  /**
   * Whether a held entry's subplan (for this user) is inside a subplan (a shared aggregate, a loop's
   * last result): one-off questions about a held result are many, and caching each of them ahead
   * would nest cached relations, whose plans grow with every level (a loop's, exponentially).
   */
  private def heldInsideOf(table: EntryTable): LogicalPlan => Boolean = {
    val keys = new IdentityHashMap[LogicalPlan, LineageKey]
    results.foreach { case (p, Right(k)) => keys.put(p, k); case _ => }
    val below = new IdentityHashMap[LogicalPlan, java.lang.Boolean]
    def heldAt(p: LogicalPlan) = Option(keys.get(p)).flatMap(k => table.get(table.scoped(k.hash, user)))
      .exists(e => EntryState.Holding.contains(e.state))
    def inside(p: LogicalPlan): Boolean = Option(below.get(p)).map(_.booleanValue).getOrElse {
      val found = p.children.exists(c => heldAt(c) || inside(c))
      below.put(p, found)
      found
    }
    inside
  }
}

object QueryCandidates {
  // Python operators by name: their classes moved between Spark versions.
  private val PythonOperators = Set("MapInPandas", "MapInArrow", "FlatMapGroupsInPandas", "FlatMapGroupsInArrow",
    "FlatMapCoGroupsInPandas", "FlatMapCoGroupsInArrow", "ArrowEvalPython", "BatchEvalPython")

  /**
   * The candidate subplans of `analyzed` (its WITH clauses inlined) with a key, root first: (key, the keys of the candidate
   * subplans that contain it). What is worth sharing between queries submitted together.
   */
  def candidateKeys(session: SparkSession, analyzed: LogicalPlan): Seq[(LineageKey, Seq[String])] = {
    val plan = InlineCtes.inlined(analyzed)
    val found = LineageKey.ofSubplans(plan, SessionKeyContext(session)).collect {
      case (subplan, Right(key)) if isCandidate(subplan, plan) => key
    }
    val hashes = mutable.Set.empty[String]
    val keyed = found.filter(k => hashes.add(k.hash))
    keyed.map(k => k -> keyed.filter(o => (o ne k) && o.contains(k.hash)).map(_.hash))
  }

  /**
   * Subplans worth keeping: rooted at an expensive operator, or a query's root over one. Scans of
   * columnar files and cheap row operators are not: re-reading them costs about what the cache would.
   */
  def isCandidate(subplan: LogicalPlan, root: LogicalPlan): Boolean = subplan match {
    case _: Command => false
    case s: Sort if s.global && heldOnDriver(s.child) => false // the driver evaluates it (SortCollectedRows)
    case _: Aggregate | _: Join | _: Window | _: Sort | _: Distinct | _: Deduplicate | _: Generate => true
    case l: LogicalRelation => l.relation match {
      case fs: HadoopFsRelation => Set("CSVFileFormat", "JsonFileFormat").contains(fs.fileFormat.getClass.getSimpleName)
      case _ => false
    }
    case p if PythonOperators.contains(p.nodeName) => true
    case p if p.expressions.exists(_.exists(_.isInstanceOf[PythonUDF])) => true
    case p => (p eq root) && !p.isInstanceOf[LeafNode] && p.exists(c => (c ne p) && isCandidate(c, root))
  }

  /**
   * A subplan served from rows the driver holds (a query collected them), or projections and filters
   * of them, which Spark evaluates on the driver too: a sort above is done there (SortCollectedRows).
   */
  private def heldOnDriver(p: LogicalPlan): Boolean = p match {
    case served: ServedSubplan => served.child.isInstanceOf[LocalRelation]
    case _: Project | _: Filter => heldOnDriver(p.children.head)
    case _ => false
  }

  /**
   * Candidates whose first occurrence keeps its shuffle: aggregates, whose shuffle holds their
   * partial results (small, and all the second occurrence must still combine). Joins are left to
   * plain planning: filters pushed through them matter more than what a shuffle would save.
   */
  def keepsShuffle(subplan: LogicalPlan): Boolean = subplan match {
    case _: Aggregate | _: Distinct => true
    case _ => false
  }

  /** The plans of `plan`'s subqueries (IN, EXISTS, scalar, lateral), nested ones too; not `plan` itself. */
  def subqueryPlans(plan: LogicalPlan): Seq[LogicalPlan] = {
    val found = mutable.ArrayBuffer.empty[LogicalPlan]
    def visit(p: LogicalPlan): Unit = p.foreach(_.expressions.foreach(_.foreach {
      case s: SubqueryExpression =>
        found += s.plan
        visit(s.plan)
      case _ =>
    }))
    visit(plan)
    found.toSeq
  }

  /** Whether `plan` reads a column of an outer query (a correlated subquery's part): its rows depend on the outer row. */
  def correlated(plan: LogicalPlan): Boolean = plan.exists(_.expressions.exists(_.exists(_.isInstanceOf[OuterReference])))

  /** Operators that only present their child's rows: order, limit, columns, a name. */
  def presents(plan: LogicalPlan): Boolean = plan match {
    case _: Sort | _: GlobalLimit | _: LocalLimit | _: Offset | _: Project | _: SubqueryAlias => true
    case _ => false
  }

  /**
   * `subplan` as memphis caches it and looks it up for `user`: under the user's mark unless entries
   * are shared, with the subplans in `inner` (held for the same user) marked too, so that Spark
   * substitutes their cached relations into it and its job reads them.
   */
  def owned(subplan: LogicalPlan, user: String, inner: java.util.Set[LogicalPlan], shared: Boolean): LogicalPlan = {
    def mark(p: LogicalPlan): LogicalPlan = {
      val marked = p.mapChildren(mark)
      if (inner.contains(p)) OwnerMark(user, marked) else marked
    }
    if (shared) subplan else OwnerMark(user, subplan.mapChildren(mark))
  }
}
