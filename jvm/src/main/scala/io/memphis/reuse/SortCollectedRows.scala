package io.memphis.reuse

import io.memphis.collected.CollectedResult
import io.memphis.conf.CacheStats
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, InterpretedOrdering, SortOrder, Unevaluable}
import org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LocalRelation, LogicalPlan, Project, Sort}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreePattern.{LOCAL_RELATION, SORT}

/**
 * An optimizer rule: a global sort of a [[CollectedResult]]'s rows, or of projections and filters of
 * them, is done on the driver, which holds them, and the served result carries them in that order.
 *
 * Why: most collected questions end in an `orderBy`, and an ordered question over a served result
 * (`per_region.orderBy("region")` once `per_region`'s rows are kept, or read from the durable tier
 * after a restart) would otherwise run Spark's sort of a local relation: a job that samples its range,
 * a shuffle and a sort, three jobs for a few rows the driver holds. Spark evaluates a projection,
 * a filter and a limit over a local relation on the driver (its `ConvertToLocalRelation`), but not a
 * sort. The rows' order is the sort's; the result stands for the same subplan (same rows, in an order
 * a relation does not promise). Only orderings Spark can evaluate here (no Python UDF, nothing
 * non-deterministic), with Spark's own ordering (nulls and NaN as Spark sorts them).
 */
object SortCollectedRows extends Rule[LogicalPlan] {
  // It runs on every query's optimization: the tree's pattern bits (kept per node) skip plans with no
  // sort over a local relation without visiting them.
  override def apply(plan: LogicalPlan): LogicalPlan = plan.transformUpWithPruning(_.containsAllPatterns(SORT, LOCAL_RELATION)) {
    case sort: Sort if sort.global && evaluable(sort.order) => sort.child match {
      // Column pruning may have put a projection over its rows that Spark evaluates later: done here first.
      case served: CollectedResult => ConvertToLocalRelation(served.child) match {
        case local: LocalRelation =>
          val rows = local.data.sorted(new InterpretedOrdering(sort.order, local.output))
          CacheStats.log.debug(s"memphis: ${served.hash}: its ${rows.size} kept rows sorted on the driver, no job")
          served.copy(child = local.copy(data = rows), orderedBy = sort.order.map(_.sql).mkString(", "))(
            served.standsForKey, served.replaced, served.savedMs)
        case _ => sort
      }
      // A projection or filter of them (a ratio of two kept aggregates, say): Spark would evaluate it on
      // the driver; evaluated here, the sort is too, over plain local rows.
      case above @ (_: Project | _: Filter) if above.exists(_.isInstanceOf[CollectedResult]) =>
        ConvertToLocalRelation(above.transformUp { case served: CollectedResult => served.child }) match {
          case local: LocalRelation if local.output == above.output =>
            CacheStats.log.debug(s"memphis: ${local.data.size} rows computed from kept rows sorted on the driver, no job")
            local.copy(data = local.data.sorted(new InterpretedOrdering(sort.order, local.output)))
          case _ => sort
        }
      case _ => sort
    }
  }

  /** Whether the driver evaluates `order` as a sort in Spark would. */
  private def evaluable(order: Seq[SortOrder]): Boolean = order.forall(o => o.deterministic && !o.child.exists {
    case _: AttributeReference => false
    case _: Unevaluable => true
    case _ => false
  })
}
