package io.memphis.reuse

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * Cuts loop-carried lineage: in a query whose analyzed plan is deeper than
 * `spark.memphis.checkpoint.minHeight`, a deep subplan that an earlier query also held (the
 * previous iteration's result inside this iteration's plan) is replaced by a lazily materialized
 * local checkpoint, and a subplan already checkpointed by its lineage key is replaced by that
 * checkpoint (see [[Checkpoints]]).
 *
 * Why a phase of memphis's plan normalization ([[io.memphis.QueryNormalization]]), before the reuse
 * phase: it runs on the analyzed plan of each query just before Spark's CacheManager and optimizer
 * see it, so the optimizer, the planner and the job all see a plan of bounded depth, and the
 * checkpoint is filled by this query's own job. The user's DataFrames keep their analyzed plans:
 * only what runs is cut.
 */
object CheckpointRule {
  def apply(query: QueryContext, plan: LogicalPlan): LogicalPlan =
    query.cache.checkpoints.cut(query.session, plan, query.keys(plan))
}
