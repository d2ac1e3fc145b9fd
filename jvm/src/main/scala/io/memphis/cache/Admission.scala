package io.memphis.cache

import scala.util.control.NonFatal

import io.memphis.conf.CacheStats.Counter
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Expression, IsNotNull, PredicateHelper, SubqueryExpression}
import org.apache.spark.sql.catalyst.optimizer.JoinSelectionHelper
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys
import org.apache.spark.sql.catalyst.plans.{Cross, ExistenceJoin, Inner, LeftAnti, LeftSemi}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.internal.SQLConf
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
 *
 * And one kind that costs more to keep than to compute again: a join that broadcasts a side (as the
 * subplan alone is planned). Computed again, it reads its inputs once and probes a hash table
 * (whose broadcast memphis itself keeps across queries, [[JoinBroadcasts]]), about what reading
 * its cache costs; kept, it stores its whole output, every column of both sides, where each
 * query reads a few. Any dear input of it (an aggregate, a shuffled join, a window) is a
 * candidate of its own, persisted when it recurs.
 */
object Admission extends JoinSelectionHelper with PredicateHelper {
  /** The most of the storage memory memphis may use that one entry may be expected to take. */
  val MaxShare = 0.5

  /**
   * How many times its files' bytes a scan of columnar files (Parquet, Delta's Parquet, ORC) takes in
   * a cached relation: Spark estimates a scan as its files' size, compressed and dictionary-encoded,
   * while a cached relation holds Spark's own column batches. TPC-DS at sf 1: a subplan of Q49
   * (sales left-joined with their returns), estimated at 116 MB, stored 418 MB (3.6×) and took 18 s
   * to fill, for a query plain Spark answers in 1.4 s.
   */
  val ColumnarFileExpansion = 4

  /** Either the refusal (its counter and why) or the estimated output in bytes. */
  def verdict(session: SparkSession, subplan: LogicalPlan, budgetBytes: Long,
      conf: SQLConf): Either[(Counter.Value, String), BigInt] =
    if (isConditionlessJoin(subplan)) {
      Left(Counter.RefusedCrossJoin -> ("not persisted: a join without a condition; the predicates above it move " +
        "into it when the query is optimized, so on its own it is a cross product"))
    } else {
      try {
        val optimized = SparkShimImpl.optimize(session, subplan)
        lazy val estimate = estimatedBytes(optimized)
        val share = BigInt((budgetBytes * MaxShare).toLong)
        if (broadcastsASide(optimized, conf)) {
          Left(Counter.RefusedBroadcastJoin -> ("not persisted: a join that broadcasts a side; computed again it " +
            "reads its inputs once and probes the broadcast, about what reading its cache costs, while its cache " +
            "would store every column of both sides"))
        } else if (estimate > share) {
          Left(Counter.RefusedEstimatedSize -> (s"not persisted: estimated output of $estimate bytes exceeds its share " +
            s"($share bytes, $MaxShare of the $budgetBytes bytes of storage memory memphis may use)"))
        } else Right(estimate)
      } catch {
        case NonFatal(e) => Left(Counter.RefusedEstimatedSize -> s"not persisted: its output could not be estimated ($e)")
      }
    }

  /**
   * For a subplan (a node of `query`): the filters of `query` that its optimizer moves down into it,
   * if any (the query is optimized once, when first asked): a filter on an input of the subplan
   * there that the subplan planned alone has not. The query then computes only part of the subplan
   * (an aggregate by year under a filter on the year), while persisting it computes the whole (every
   * year), so filling it costs its query more than its computation (TPC-DS' edited pass: Q11 and
   * Q64 2.3–2.5× plain Spark's time filling an aggregate on its second occurrence, never read
   * again). Null checks inferred from joins above and runtime filters (dynamic pruning, bloom
   * filters) do not count: they are not the query's own. An input the optimized query no longer
   * reads (a union branch its filter ruled out) counts.
   */
  def narrowingFilters(session: SparkSession, query: LogicalPlan): LogicalPlan => Seq[String] = {
    lazy val whole = filtersAtInputs(SparkShimImpl.optimize(session, query))
    subplan => filtersAtInputs(SparkShimImpl.optimize(session, subplan)).filter(_._1.nonEmpty).flatMap { case (input, own) =>
      val there = whole.filter(_._1.exists(input.contains))
      if (there.isEmpty) Seq(s"it reads no column of an input of ${input.size}")
      else there.flatMap(_._2.filterNot(c => own.exists(_.semanticEquals(c)))).map(_.sql)
    }.distinct
  }

  /** Each input (leaf) of an optimized plan, by its columns' ids, with the query's own filter conjuncts right above it. */
  private def filtersAtInputs(plan: LogicalPlan): Seq[(Set[Long], Seq[Expression])] = {
    def own(c: Expression) = !c.isInstanceOf[IsNotNull] && !SubqueryExpression.hasSubquery(c)
    def walk(p: LogicalPlan, above: Seq[Expression]): Seq[(Set[Long], Seq[Expression])] = p match {
      case leaf: LeafNode => Seq(leaf.output.map(_.exprId.id).toSet -> above)
      case f: Filter => walk(f.child, above ++ splitConjunctivePredicates(f.condition).filter(own))
      case pr: Project => walk(pr.child, above)
      case other => other.children.flatMap(walk(_, Nil))
    }
    walk(plan, Nil)
  }

  /**
   * A join (under the nodes that only pick rows or columns) that Spark plans as a broadcast join, as
   * its JoinSelection decides: a side it may build from is hinted to broadcast or, when no strategy
   * is hinted, small enough by its statistics.
   */
  def broadcastsASide(plan: LogicalPlan, conf: SQLConf): Boolean = plan match {
    case j: Join =>
      val bySize = !(j.hint.leftHint ++ j.hint.rightHint).exists(_.strategy.isDefined)
      def side(canBuild: Boolean, hinted: Boolean, child: LogicalPlan) = canBuild && (hinted || bySize && canBroadcastBySize(child, conf))
      side(canBuildBroadcastLeft(j.joinType), hintToBroadcastLeft(j.hint), j.left) ||
        side(canBuildBroadcastRight(j.joinType), hintToBroadcastRight(j.hint), j.right)
    case p @ (_: Project | _: Filter | _: SubqueryAlias) => broadcastsASide(p.children.head, conf)
    case _ => false
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
   * estimate (a scan of columnar files times [[ColumnarFileExpansion]]); grouping sets multiply their
   * input; every other operator outputs at most its inputs.
   */
  def estimatedBytes(plan: LogicalPlan): BigInt = plan match {
    case l: LogicalRelation if columnarFiles(l) => l.stats.sizeInBytes * ColumnarFileExpansion
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

  private def columnarFiles(scan: LogicalRelation): Boolean = scan.relation match {
    case fs: HadoopFsRelation => Seq("Parquet", "Orc").exists(fs.fileFormat.getClass.getSimpleName.contains)
    case _ => false
  }
}
