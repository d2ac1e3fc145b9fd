package io.memphis.reuse

import scala.util.control.NonFatal

import io.memphis.conf.{CacheStats, MemphisConf}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.internal.SQLConf

/**
 * Cuts loop-carried lineage: in a query whose analyzed plan is deeper than
 * `spark.memphis.checkpoint.minHeight`, a deep subplan that an earlier query also held (the
 * previous iteration's result inside this iteration's plan) is replaced by a lazily materialized
 * local checkpoint, and a subplan already checkpointed by its lineage key is replaced by that
 * checkpoint (see [[Checkpoints]]).
 *
 * Why at plan normalization, before [[ReuseRule]]: it runs on the analyzed plan of each query just
 * before Spark's CacheManager and optimizer see it, so the optimizer, the planner and the job all
 * see a plan of bounded depth, and the checkpoint is filled by this query's own job. The user's
 * DataFrames keep their analyzed plans: only what runs is cut.
 *
 * It runs for every query with memphis enabled, but not for memphis's own calls (`ReuseRule.suspended`),
 * and never raises into the user's query: on an internal failure it logs why and leaves the plan as it is.
 */
final class CheckpointRule(session: SparkSession) extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    if (ReuseRule.isSuspended || !MemphisConf.Enabled.get(SQLConf.get)) plan
    else ReuseRule.suspended {
      try LineageCache.forContext(session.sparkContext).checkpoints.cut(session, plan)
      catch {
        case NonFatal(e) =>
          CacheStats.log.warn(s"memphis: no checkpoint for this query after an internal error: $e", e)
          plan
      }
    }
  }
}
