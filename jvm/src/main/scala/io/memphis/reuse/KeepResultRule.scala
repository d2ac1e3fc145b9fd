package io.memphis.reuse

import io.memphis.collected.KeepRequest
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.catalyst.expressions.ExprId
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule

/**
 * Puts the [[KeepResult]] mark at the root of a query whose rows [[CollectedResultRule]] asked to
 * keep; registered as the last plan-normalization rule.
 *
 * Why last, and apart from the rule that decides: the checkpoint and reuse rules key and match the
 * plan between the two, and a mark at its root would be one more node for them to see through
 * (the reuse rule's marks go over the subplans it serves, the root included). The request passes
 * on the normalizing thread (Spark runs the rules one after the other on it); it is taken only by
 * a plan with the output it was made for, and any request left over is dropped when the next query's
 * normalization starts. Being last, it also drops the query's keys that the rules before it shared
 * ([[io.memphis.lineage.LineageKey.ofQuery]]).
 */
final class KeepResultRule extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan =
    if (ReuseRule.isSuspended) plan
    else {
      LineageKey.forgetQuery() // the query's normalization ends here
      KeepResultRule.take(plan.output.map(_.exprId)).fold(plan)(KeepResult(_, plan))
    }
}

object KeepResultRule {
  private val pending = new ThreadLocal[(Seq[ExprId], KeepRequest)]

  /** The rows of the query being normalized on this thread, whose output is `output`, are to be kept for `request`. */
  private[reuse] def expect(output: Seq[ExprId], request: KeepRequest): Unit = pending.set(output -> request)

  /** Drops a request left on this thread. */
  private[reuse] def forget(): Unit = pending.remove()

  private def take(output: Seq[ExprId]): Option[KeepRequest] = {
    val request = Option(pending.get())
    pending.remove()
    request.collect { case (expected, r) if expected == output => r }
  }
}
