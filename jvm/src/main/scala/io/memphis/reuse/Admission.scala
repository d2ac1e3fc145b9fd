package io.memphis.reuse

import scala.util.control.NonFatal

import io.memphis.CacheStats.Counter
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys
import org.apache.spark.sql.catalyst.plans.{Cross, ExistenceJoin, Inner, LeftAnti, LeftSemi}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * Whether a due candidate subplan may be persisted: the last check before memphis registers it with
 * Spark's CacheManager, run once per entry (the verdict is kept on it).
 *
 * Why: candidates are matched on the analyzed plan, so that different filters share an aggregate,
 * but what is persisted is computed on its own, as the optimizer plans the subplan alone. Two kinds
 * of subplan are then far dearer than the query they serve:
 *  - a join without a condition whose predicates sit above it (a comma join, `CROSS JOIN … WHERE`):
 *    the optimizer moves them into the join, so the query never computes the join as written, but
 *    the subplan alone is a Cartesian product;
 *  - a subplan whose output, estimated on its optimized form, is larger than its share of the
 *    storage memory memphis may use ([[Admission.MaxShare]] of `storage.fraction` of it): it would
 *    fill storage for one entry and evict everything else.
 * An estimate that cannot be made refuses too: unknown means recompute.
 */
object Admission {
  /** The most of the storage memory memphis may use that one entry may be expected to take. */
  val MaxShare = 0.5

  /** Either the refusal (its counter and why) or the estimated output in bytes. */
  def verdict(session: SparkSession, subplan: LogicalPlan, budgetBytes: Long): Either[(Counter.Value, String), BigInt] =
    if (isConditionlessJoin(subplan)) {
      Left(Counter.RefusedCrossJoin -> ("not persisted: a join without a condition; the predicates above it move " +
        "into it when the query is optimized, so on its own it is a cross product"))
    } else {
      try {
        val estimate = estimatedBytes(SparkShimImpl.optimize(session, subplan))
        val share = BigInt((budgetBytes * MaxShare).toLong)
        if (estimate > share) {
          Left(Counter.RefusedEstimatedSize -> (s"not persisted: estimated output of $estimate bytes exceeds its share " +
            s"($share bytes, $MaxShare of the $budgetBytes bytes of storage memory memphis may use)"))
        } else Right(estimate)
      } catch {
        case NonFatal(e) => Left(Counter.RefusedEstimatedSize -> s"not persisted: its output could not be estimated ($e)")
      }
    }

  /** An inner or cross join with no condition of its own (under the nodes that only name or pick columns). */
  def isConditionlessJoin(plan: LogicalPlan): Boolean = plan match {
    case j: Join => j.condition.isEmpty && (j.joinType == Inner || j.joinType == Cross)
    case p @ (_: Project | _: SubqueryAlias) => isConditionlessJoin(p.children.head)
    case _ => false
  }

  /**
   * An upper-bound-minded estimate of an optimized plan's output bytes. Spark's own estimate without
   * table statistics makes every join the product of its sides, which would refuse every join; here
   * a join on equal keys is estimated as its two sides together (a key join's rows are at most its
   * larger side's, each as wide as both), a semi or anti join as its left side, and only a join
   * without equal keys as the product. Leaves, limits and grouping-free aggregates keep Spark's
   * estimate; grouping sets multiply their input; every other operator outputs at most its inputs.
   */
  def estimatedBytes(plan: LogicalPlan): BigInt = plan match {
    case _: LeafNode => plan.stats.sizeInBytes
    case j: Join =>
      val (left, right) = (estimatedBytes(j.left), estimatedBytes(j.right))
      j.joinType match {
        case LeftSemi | LeftAnti | ExistenceJoin(_) => left
        case _ if ExtractEquiJoinKeys.unapply(j).isDefined => left + right
        case _ => left * right
      }
    case a: Aggregate if a.groupingExpressions.isEmpty => a.stats.sizeInBytes
    case _: GlobalLimit | _: LocalLimit => plan.stats.sizeInBytes.min(plan.children.map(estimatedBytes).sum)
    case e: Expand => estimatedBytes(e.child) * e.projections.size
    case other => other.children.map(estimatedBytes).sum
  }
}
