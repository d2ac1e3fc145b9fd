package io.memphis.reuse

import java.util.IdentityHashMap

import io.memphis.cache.{Executions, QueryCandidates, SessionKeyContext}
import io.memphis.collected.{CollectedResult, KeepRequest, KeptResult}
import io.memphis.conf.{CacheStats, ConnectSessions, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, ExprId, SubqueryExpression}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * Serves subplans from the rows earlier queries collected to the driver, and asks for this query's
 * rows to be kept when they stand for a subplan: the first phase of memphis's plan normalization
 * after WITH clauses are inlined ([[io.memphis.QueryNormalization]]).
 *
 * Why: a loop that collects its state every iteration (k-means collects its centroids) and builds
 * the next iteration on the DataFrame it collected carries a plan that grows by an iteration each
 * time, and every query computes all iterations again. The best hand-written loop rebuilds the
 * state from the collected rows, or checkpoints it. MEMPHIS reuses Spark actions' results on the
 * driver; here, a later query that holds a subplan whose rows an earlier query collected (same
 * lineage key: same canonical forms, same source fingerprints, taken afresh) reads those rows as a
 * local relation ([[CollectedResult]]): no job recomputes it, and the plan stays as deep as one
 * iteration.
 *
 * Which rows stand for which subplan: a collect returns every row of the subplan below the query's
 * presentation, that is below orderings, names, repartitioning and projections that keep every one of
 * its columns (renamed, reordered or with computed ones added): `df.orderBy("k").collect()` returns
 * the rows of `df`. Only a subplan with a lineage key (deterministic, every source fingerprinted)
 * that is not a leaf; its rows are kept when the query's `executeCollect` returns them
 * ([[KeepResult]], put at the root in the last phase, by [[KeepResultRule]], so that the other phases
 * see the plan without it), when they take at most `spark.memphis.collected.maxBytes`.
 *
 * Why first: the checkpoint and reuse phases then see the plan with the served rows in it, as shallow
 * as one iteration; their keys are unchanged (a served result has its subplan's key). A query only
 * planned (an explain) is served too, so that its plan shows what a run reads, but counts nothing;
 * a plan Spark's CacheManager normalizes (a `cache()`) is not, so that what it caches matches the
 * user's plans whether or not the rows are still kept; nor is anything inside a subplan Spark holds
 * a cached relation of, nor a subplan that observes metrics (`Dataset.observe`: they are reported by
 * running it). Commands are left alone.
 */
object CollectedResultRule {
  /** `plan` with the kept rows it may read in it, and the ask to keep its own rows, if any. */
  def apply(query: QueryContext, plan: LogicalPlan): (LogicalPlan, Option[KeepResultRule.Asked]) =
    new Query(query, plan).run()

  /** One query: the kept results it reads, the rows it keeps. */
  private final class Query(query: QueryContext, plan: LogicalPlan) {
    private val session = query.session
    private val cache = query.cache
    private val results = cache.collected
    private val conf = query.conf
    private val maxBytes = MemphisConf.CollectedMaxBytes.get(conf)
    private def executing = query.executing
    private def user = query.user
    private lazy val keyed = query.keys(plan)
    private lazy val keys = byPlan(keyed)
    private lazy val sparkHolds = !SparkShimImpl.cacheManager(session).isEmpty
    /** The shapes of the user's collected rows in the durable tier: one listing per query that may read them. */
    private lazy val durableShapes =
      if (cache.durable.enabled && !plan.isInstanceOf[LeafNode]) cache.durable.collectedShapes(user) else Set.empty[String]

    def run(): (LogicalPlan, Option[KeepResultRule.Asked]) = {
      val keep = (if (maxBytes > 0) rowsOf(plan) else None).filter(_ => executing)
      if (results.isEmpty && keep.isEmpty && durableShapes.isEmpty) (plan, None)
      else {
        if (!results.isEmpty) results.dropStale(plan, keyed)
        val nothingKept = results.isEmpty && durableShapes.isEmpty
        val served = if (nothingKept || (!executing && Executions.byCacheManager)) plan else serve(plan)
        (served, keep.flatMap { case (subplan, ordinals) => keepRows(subplan, ordinals) })
      }
    }

    private def byPlan(results: Seq[(LogicalPlan, LineageKey.Result)]): IdentityHashMap[LogicalPlan, LineageKey.Result] = {
      val found = new IdentityHashMap[LogicalPlan, LineageKey.Result]()
      results.foreach { case (p, r) => found.put(p, r) }
      found
    }

    private def types(p: LogicalPlan) = p.output.map(_.dataType)

    private def serve(root: LogicalPlan): LogicalPlan = serve(root, keys)

    /**
     * `p` with its outermost subplans whose rows are kept replaced by them (see the class comment),
     * in its subqueries too (their own subplans keyed apart; not those that read an outer query's columns).
     */
    private def serve(p: LogicalPlan, keys: IdentityHashMap[LogicalPlan, LineageKey.Result]): LogicalPlan =
      if (sparkHolds && SparkShimImpl.lookupCachedData(session, p).isDefined) p
      else Option(keys.get(p)).flatMap(_.toOption).filter(_ => !p.isInstanceOf[LeafNode] && !QueryCandidates.correlated(p))
        .flatMap(k => results.lookup(cache.scoped(k.hash, user), k, types(p)).orElse(durableRows(k, p)).map(k -> _))
        .filter { case (k, _) => !p.exists(_.isInstanceOf[CollectMetrics]) || { // its metrics are reported by running it
          CacheStats.log.debug(s"memphis: ${k.hash} not read from kept rows: it observes metrics (Dataset.observe)")
          false
        } } match {
        case Some((k, r)) =>
          if (executing) {
            results.read(r)
            cache.stats.add(Counter.ComputeSavedMs, r.costMs)
            cache.stats.record(Counter.ResultsReused, s"${k.hash}: read from the ${r.rows.size} rows an earlier " +
              s"query collected (read ${r.uses} times), not computed again")
          } else CacheStats.log.debug(s"memphis: ${k.hash} planned to read the rows an earlier query collected")
          CollectedResult(k, p, r.rows, r.costMs)
        case None =>
          val served = p.mapChildren(serve(_, keys))
          if (!served.expressions.exists(_.exists(_.isInstanceOf[SubqueryExpression]))) served
          else served.transformExpressions {
            case s: SubqueryExpression => s.withNewPlan(serve(s.plan, byPlan(LineageKey.ofSubplans(s.plan, context))))
          }
      }

    private lazy val context = SessionKeyContext(session)

    /**
     * The rows of `p` (of key `k`) an earlier process collected, from the durable tier: kept from now
     * on as if this process had collected them, when the query runs.
     */
    private def durableRows(k: LineageKey, p: LogicalPlan): Option[KeptResult] =
      if (!durableShapes.contains(k.shapeHash)) None
      else cache.durable.lookupRows(user, k, types(p)).map { case (rows, m) =>
        val id = cache.scoped(k.hash, user)
        if (executing) {
          cache.stats.record(Counter.DurableHits, s"${k.hash}: the ${rows.size} rows a query collected in ${m.costMs} ms " +
            s"read from the durable tier, not computed")
          cache.adoptCollected(id, k, types(p), rows, m.costMs, conf)
        } else new KeptResult(id, k, types(p), rows, 0L, m.costMs, System.currentTimeMillis())
      }

    /** The ask to [[KeepResultRule]] to keep this query's rows for `subplan`, unless they are kept already. */
    private def keepRows(subplan: LogicalPlan, ordinals: Seq[Int]): Option[KeepResultRule.Asked] = keys.get(subplan) match {
      case null => None
      case Left(reason) =>
        CacheStats.log.debug(s"memphis: the rows of this query will not be kept: $reason")
        None
      case Right(k) =>
        val id = cache.scoped(k.hash, user)
        if (results.lookup(id, k, types(subplan)).isDefined) None
        else Some(KeepResultRule.Asked(plan.output.map(_.exprId),
          KeepRequest(id, k, user, ordinals, types(subplan), maxBytes, System.currentTimeMillis())))
    }
  }

  /**
   * The subplan whose every row a collect of `plan` returns, and the position of each of its
   * columns in the returned rows: down through orderings, names, repartitioning and projections
   * that keep every column of their child. None when that subplan is a leaf or has no columns.
   */
  private[reuse] def rowsOf(plan: LogicalPlan): Option[(LogicalPlan, Seq[Int])] = {
    def positions(attrs: Seq[Attribute]): Map[ExprId, Int] =
      attrs.zipWithIndex.reverse.map { case (a, i) => a.exprId -> i }.toMap
    @scala.annotation.tailrec
    def down(node: LogicalPlan, at: Map[ExprId, Int]): (LogicalPlan, Map[ExprId, Int]) = node match {
      case s: Sort => down(s.child, at)
      case s: SubqueryAlias => down(s.child, at)
      case v: View => down(v.child, at)
      case r: RepartitionOperation => down(r.child, at)
      case r: RebalancePartitions => down(r.child, at)
      case p: Project =>
        val inner: Seq[(ExprId, ExprId)] = p.projectList.collect {
          case a: Attribute => a.exprId -> a.exprId
          case alias @ Alias(a: Attribute, _) => a.exprId -> alias.exprId
        }
        val mapped = p.child.output.map(c => inner.collectFirst { case (from, to) if from == c.exprId && at.contains(to) => at(to) })
        if (mapped.forall(_.isDefined)) down(p.child, p.child.output.map(_.exprId).zip(mapped.flatten).toMap)
        else (node, at)
      case _ => (node, at)
    }
    val (subplan, at) = down(plan, positions(plan.output))
    if (subplan.isInstanceOf[LeafNode] || subplan.output.isEmpty || !subplan.output.forall(a => at.contains(a.exprId))) None
    else Some(subplan -> subplan.output.map(a => at(a.exprId)))
  }
}
