package io.memphis.lineage

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}

/**
 * A subplan served from data memphis holds elsewhere (rows kept on the driver, files of the durable
 * tier): `child` reads that data with the subplan's output, and this node says what it stands for.
 *
 * It is what it replaced for everything that compares plans: its lineage key is the subplan's
 * ([[StandsFor]]), so the keys of the plans around it are unchanged, and its canonical form is the
 * subplan's, so Spark's CacheManager matches a plan that holds it with one that holds the subplan
 * (a relation cached over either serves both). The planner plans its child ([[ServedSubplanStrategy]]).
 */
abstract class ServedSubplan extends UnaryNode with StandsFor {
  /** The subplan it stands for. */
  def replaced: LogicalPlan
  override def output: Seq[Attribute] = child.output
  override protected def doCanonicalize(): LogicalPlan = replaced.canonicalized
}

/** Plans a served subplan as what reads its data. */
object ServedSubplanStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case s: ServedSubplan => planLater(s.child) :: Nil
    case _ => Nil
  }
}
