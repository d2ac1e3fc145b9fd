package io.memphis.cache

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.rules.Rule

/**
 * Ties a subplan memphis persists to the user whose query produced it, unless
 * `spark.memphis.shareAcrossUsers` is true. Spark's CacheManager, one per application, substitutes
 * a cached relation into any plan that matches it, whoever runs it; memphis caches
 * `OwnerMark(user, subplan)` and wraps, in that user's queries only, the subplans it serves them, so
 * another user's plan never matches and computes on its own.
 *
 * Its canonical form keeps the user and drops the marks below it: an entry persisted with the
 * entries inside it marked (so that its job reads theirs) still matches the same subplan after
 * those were let go. The optimizer removes the marks that remain ([[RemoveOwnerMarks]]): at the
 * root of a cached plan while Spark plans it, or over a subplan whose relation was let go meanwhile.
 */
final case class OwnerMark(user: String, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def doCanonicalize(): LogicalPlan = OwnerMark(user, OwnerMark.strip(child).canonicalized)
  override protected def withNewChildInternal(newChild: LogicalPlan): OwnerMark = copy(child = newChild)
}

object OwnerMark {
  def strip(plan: LogicalPlan): LogicalPlan = plan.transformUp { case OwnerMark(_, child) => child }
}

/** An optimizer rule: a mark matters only to Spark's CacheManager, which has looked by then. */
object RemoveOwnerMarks extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = OwnerMark.strip(plan)
}
