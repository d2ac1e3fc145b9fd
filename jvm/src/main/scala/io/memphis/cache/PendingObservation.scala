package io.memphis.cache

import java.util.concurrent.atomic.AtomicBoolean

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.trees.TreeNodeTag

/**
 * What the reuse policy observed of a query only planned, not executed ([[Executions]]): counted
 * only if that very plan runs. It travels on the normalized plan, as a tag on its root, and the
 * end of a SQL execution that ran the plan counts it ([[io.memphis.LineageCache.executed]]).
 *
 * Counted at most once: Spark plans a query once however often it runs, and a query normalized
 * inside its execution counts once too (a DataFrame collected twice is one occurrence).
 */
final class PendingObservation(val query: QueryCandidates, val decisions: ReusePolicy.Decisions) {
  private val pending = new AtomicBoolean(true)

  /** Whether the caller is the first to take it, and so the one to count it. */
  def take(): Boolean = pending.getAndSet(false)
}

object PendingObservation {
  private val Tag = TreeNodeTag[PendingObservation]("memphis.pendingObservation")

  /** The observation waiting on `plan` (a normalized plan, or a copy of one), if any. */
  def on(plan: LogicalPlan): Option[PendingObservation] = plan.getTagValue(Tag)

  def attach(plan: LogicalPlan, observation: PendingObservation): Unit = plan.setTagValue(Tag, observation)
}
