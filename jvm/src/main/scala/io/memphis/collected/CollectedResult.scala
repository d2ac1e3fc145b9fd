package io.memphis.collected

import io.memphis.lineage.{LineageKey, ServedSubplan}
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan}

/**
 * A subplan served from the rows an earlier query collected ([[CollectedResults]]): a local relation
 * of those rows (`child`), with the subplan's output, under this node, which says what it stands
 * for ([[ServedSubplan]]). It shows in the optimized plan (`explain(true)`) as `CollectedResult memphis <key>`,
 * followed by the order of its rows (`orderedBy`, text) when a sort above it was done on the driver
 * ([[SortCollectedRows]]).
 */
final case class CollectedResult(hash: String, rowCount: Int, child: LogicalPlan, orderedBy: String = "")(
    val standsForKey: LineageKey, val replaced: LogicalPlan, val savedMs: Long) extends ServedSubplan {
  override protected def otherCopyArgs: Seq[AnyRef] = Seq(standsForKey, replaced, Long.box(savedMs))
  override protected def withNewChildInternal(newChild: LogicalPlan): CollectedResult =
    copy(child = newChild)(standsForKey, replaced, savedMs)
  def servedFrom: String = "rows kept on the driver"
  override protected def stringArgs: Iterator[Any] =
    Iterator(s"memphis $hash", s"$rowCount rows") ++ Some(orderedBy).filter(_.nonEmpty).map("ordered by " + _)
}

object CollectedResult {
  /** `subplan` (of key `key`, computed in `costMs`) served by `rows`, the subplan's output carried by a local relation. */
  def apply(key: LineageKey, subplan: LogicalPlan, rows: IndexedSeq[org.apache.spark.sql.catalyst.InternalRow],
      costMs: Long): CollectedResult =
    CollectedResult(key.hash, rows.size, LocalRelation(subplan.output, rows))(key, subplan, costMs)
}
