package io.memphis.reuse

import java.util.IdentityHashMap

import io.memphis.cache.{Executions, QueryCandidates}
import io.memphis.conf.{CacheStats, ConnectSessions, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.durable.{DurableResult, DurableTier}
import io.memphis.lineage.{LineageKey, StandsFor}
import org.apache.spark.sql.catalyst.plans.logical.{CollectMetrics, LeafNode, LogicalPlan}
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * Serves subplans from the durable tier ([[DurableTier]]): a phase of memphis's plan normalization
 * ([[io.memphis.QueryNormalization]]), after the collected results' and before the checkpoint and
 * reuse phases, so that they see the plan with the durable reads in it (a served subplan keeps its
 * key, [[StandsFor]]).
 *
 * When: a query with a candidate subplan (an expensive operator: see [[QueryCandidates.isCandidate]])
 * while the durable tier is on and holds entries of the query's user (never of an unknown user's,
 * [[DurableTier.refuses]]: a run counts `refused_unknown_user` instead): one listing of the user's
 * folder per such query, then the query's keys (computed once for all phases). The outermost
 * candidates whose shape has an entry are looked up, unless memphis holds them in Spark storage
 * (a read from memory is cheaper) or Spark holds a cached relation of them, they read an outer
 * query's columns, or observe metrics (reported by running them). A valid entry replaces the subplan
 * by a Parquet scan of its files ([[DurableResult]]): no job computes it.
 *
 * A query only planned (an explain) is served too, so its plan shows what a run reads, but counts
 * no hit; a plan Spark's CacheManager normalizes (a `cache()`) is not, so that what it caches matches
 * the user's plans. Subqueries are not served.
 */
object DurableReadRule {
  def apply(query: QueryContext, plan: LogicalPlan): LogicalPlan = {
    val tier = query.cache.durable
    if (!tier.enabled) plan
    else {
      tier.session = Some(query.session)
      if (!plan.exists(QueryCandidates.isCandidate(_, plan))) plan
      else if (tier.refuses(query.user)) {
        if (query.executing) query.cache.stats.record(Counter.RefusedUnknownUser,
          s"the durable tier not read for a query: ${DurableTier.unknownUser(query.user)}")
        plan
      } else new Query(query, plan).run()
    }
  }

  /** One query: the shapes its user has entries of, its keys, the subplans it reads from the tier. */
  private final class Query(query: QueryContext, plan: LogicalPlan) {
    private val session = query.session
    private val cache = query.cache
    private val tier = cache.durable
    private val user = query.user
    private def executing = query.executing
    private lazy val sparkHolds = !SparkShimImpl.cacheManager(session).isEmpty
    private lazy val keys = {
      val found = new IdentityHashMap[LogicalPlan, LineageKey]()
      query.keys(plan).foreach { case (p, r) => r.foreach(found.put(p, _)) }
      found
    }

    def run(): LogicalPlan = {
      val shapes = tier.shapes(user)
      if (shapes.isEmpty || (!executing && Executions.byCacheManager)) plan else serve(plan, shapes)
    }

    private def serve(p: LogicalPlan, shapes: Set[String]): LogicalPlan = Option(keys.get(p))
      .filter(k => shapes.contains(k.shapeHash) && servable(p, k))
      .flatMap(k => tier.lookup(user, k, p.output).map(k -> _)) match {
      case Some((k, (entry, m))) =>
        if (executing) {
          cache.stats.add(Counter.ComputeSavedMs, m.costMs)
          cache.stats.record(Counter.DurableHits, s"${k.hash}: read from the durable tier ($entry, ${m.bytes} bytes, " +
            s"computed in ${m.costMs} ms), not computed")
        } else CacheStats.log.debug(s"memphis: ${k.hash} planned to read the durable tier ($entry)")
        DurableResult(session, k, p, entry, m)
      case None => if (p.isInstanceOf[StandsFor]) p else p.mapChildren(serve(_, shapes))
    }

    private def servable(p: LogicalPlan, k: LineageKey): Boolean =
      QueryCandidates.isCandidate(p, plan) && !p.isInstanceOf[LeafNode] && !QueryCandidates.correlated(p) &&
        !p.exists(_.isInstanceOf[CollectMetrics]) && !cache.holds(k, user) &&
        !(sparkHolds && SparkShimImpl.lookupCachedData(session, p).isDefined)
  }
}
