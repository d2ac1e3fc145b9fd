package io.memphis.collected

import io.memphis.lineage.{LineageKey, StandsFor}
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}

/**
 * A subplan served from the rows an earlier query collected ([[CollectedResults]]): a local relation
 * of those rows (`child`), with the subplan's output, under this node, which says what it stands
 * for. It shows in the optimized plan (`explain(true)`) as `CollectedResult memphis <key>`.
 *
 * It is what it replaced for everything that compares plans: its lineage key is the subplan's
 * ([[StandsFor]]), so the keys of the plans around it are unchanged, and its canonical form is the
 * subplan's, so Spark's CacheManager matches a plan that holds it with one that holds the subplan
 * (a relation cached over either serves both). The planner plans its local relation
 * ([[CollectedResultStrategy]]).
 */
final case class CollectedResult(hash: String, rowCount: Int, child: LogicalPlan)(val standsForKey: LineageKey,
    val replaced: LogicalPlan) extends UnaryNode with StandsFor {
  override def output: Seq[Attribute] = child.output
  override protected def otherCopyArgs: Seq[AnyRef] = Seq(standsForKey, replaced)
  override protected def doCanonicalize(): LogicalPlan = replaced.canonicalized
  override protected def withNewChildInternal(newChild: LogicalPlan): CollectedResult =
    copy(child = newChild)(standsForKey, replaced)
  override protected def stringArgs: Iterator[Any] = Iterator(s"memphis $hash", s"$rowCount rows")
}

object CollectedResult {
  /** `subplan` (of key `key`) served by `rows`, the subplan's output carried by a local relation. */
  def apply(key: LineageKey, subplan: LogicalPlan, rows: IndexedSeq[org.apache.spark.sql.catalyst.InternalRow]): CollectedResult =
    CollectedResult(key.hash, rows.size, LocalRelation(subplan.output, rows))(key, subplan)
}

/** Plans a served result as its local relation. */
object CollectedResultStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case c: CollectedResult => planLater(c.child) :: Nil
    case _ => Nil
  }
}
