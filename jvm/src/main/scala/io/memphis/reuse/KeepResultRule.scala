package io.memphis.reuse

import io.memphis.collected.KeepRequest
import org.apache.spark.sql.catalyst.expressions.ExprId
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * Puts the [[KeepResult]] mark at the root of a query whose rows [[CollectedResultRule]] asked to
 * keep: the last phase of memphis's plan normalization ([[io.memphis.QueryNormalization]]).
 *
 * Why last, and apart from the phase that decides: the checkpoint and reuse phases key and match the
 * plan between the two, and a mark at its root would be one more node for them to see through (the
 * reuse phase's marks go over the subplans it serves, the root included).
 */
object KeepResultRule {
  /** The collected phase's ask: keep for `request` the rows of the query, whose output is `output`. */
  final case class Asked(output: Seq[ExprId], request: KeepRequest)

  /** `plan` under the mark `asked` for, when it has the output the ask was made for. */
  def apply(plan: LogicalPlan, asked: Option[Asked]): LogicalPlan =
    asked.filter(_.output == plan.output.map(_.exprId)).fold(plan)(a => KeepResult(a.request, plan))
}
