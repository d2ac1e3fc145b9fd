package io.memphis.reuse

import java.util.IdentityHashMap

import scala.util.control.NonFatal

import io.memphis.broadcasts.{JoinBroadcasts, PlannedBroadcast}
import io.memphis.cache.SessionKeyContext
import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.facade.LineageCache
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkRuntime, SparkShimImpl}

/**
 * Lets a broadcast join read the broadcast an earlier query built ([[JoinBroadcasts]]) instead
 * of collecting and broadcasting its build side again.
 *
 * Why two hooks, as [[ShuffleReuseRule]]: under adaptive execution it runs as a query-stage
 * preparation rule, before stages are created, so that the reused broadcast is a materialized stage
 * (a dynamic partition pruning subquery's broadcast is planned as its own adaptive plan, and this
 * rule sees it there); without adaptive execution, as a columnar pre-transition rule, the last
 * physical rule that sees the exchanges, including those of pruning subqueries. Spark's own
 * exchange reuse runs after it and leaves the reused broadcasts alone.
 *
 * Only build sides whose lineage key exists are reused or registered: every source fingerprinted,
 * every expression deterministic. It never raises into the user's query.
 */
final class BroadcastReuseRule(session: SparkSession, asQueryStage: Boolean) extends Rule[SparkPlan] {
  override def apply(plan: SparkPlan): SparkPlan = {
    val conf = SparkShimImpl.sqlConf(session)
    // Under adaptive execution the columnar hook runs inside each stage, where an exchange is being
    // made a stage and must stay one: the query-stage hook did the work before.
    val active = MemphisConf.Enabled.get(conf) && SparkRuntime.exchangeReuseEnabled(conf) &&
      asQueryStage == conf.adaptiveExecutionEnabled
    if (!active || MemphisConf.BroadcastJoinMaxBytes.get(conf).contains(0L)) plan
    else {
      try substitute(plan, conf)
      catch {
        case NonFatal(e) =>
          CacheStats.log.warn(s"memphis: skipped broadcast reuse for this query after an internal error: $e", e)
          plan
      }
    }
  }

  private def substitute(plan: SparkPlan, conf: SQLConf): SparkPlan = {
    val exchanges = PhysicalPlans.broadcastsToBuild(plan)
    if (exchanges.isEmpty) return plan
    val cache = LineageCache.forContext(session.sparkContext)
    // Read only for plans with broadcasts: it sums memphis's entries.
    val budget = cache.budgets(conf).joinBroadcastBudget
    if (budget <= 0) return plan
    val context = SessionKeyContext(session)
    val reuses = new IdentityHashMap[SparkPlan, SparkPlan]
    exchanges.foreach { exchange =>
      val key = PhysicalPlans.broadcastBuildSide(exchange).map(LineageKey.of(_, context))
        .getOrElse(Left("its build side's operators are not all planned from one logical plan"))
      key match {
        case Left(reason) => cache.stats.record(Counter.Refused, s"no reuse of a broadcast: $reason")
        case Right(k) =>
          val identity = PhysicalPlans.exchangeIdentity(exchange)
          val scope = cache.broadcasts.scopeOf(session)
          cache.broadcasts.lookup(identity, scope, k, budget).flatMap(r => PhysicalPlans.reuseBroadcast(r.plan, exchange, asQueryStage)) match {
            case Some(reuse) =>
              reuses.put(exchange, reuse)
              cache.stats.record(Counter.BroadcastsReused, s"reuse broadcast ${k.hash}")
            case None =>
              PhysicalPlans.broadcastExchange(exchange).setTagValue(JoinBroadcasts.KeyTag, PlannedBroadcast(k, scope))
              cache.broadcasts.planned(k)
          }
      }
    }
    if (reuses.isEmpty) plan
    else plan.transformUpWithSubqueries { case p if reuses.containsKey(p) => reuses.get(p) }
  }
}
