package io.memphis.reuse

import scala.util.control.NonFatal

import io.memphis.collected.KeepRequest
import io.memphis.conf.CacheStats
import io.memphis.facade.LineageCache
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, ReturnAnswer, UnaryNode}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkRuntime

/**
 * Marks the root of a query whose collected rows stand for one of its subplans (put there by
 * [[KeepResultRule]]): when the query's rows come back to the driver, they are offered to the
 * lineage cache's kept results. Invisible to plan comparison (its child's canonical form); shows in
 * `explain()` as `KeepResult memphis <key>`.
 */
final case class KeepResult(request: KeepRequest, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def doCanonicalize(): LogicalPlan = child.canonicalized
  override protected def withNewChildInternal(newChild: LogicalPlan): KeepResult = copy(child = newChild)
  override protected def stringArgs: Iterator[Any] = Iterator(request.describe)
}

/**
 * Passes its child's rows through; its `executeCollect` (what `collect()`, `count()` and PySpark's
 * `collect()` call on a query's root, under adaptive execution from the result stage) hands the rows
 * to [[CollectedResults.offer]] before returning them, and a result kept is offered to the durable
 * tier (written on its own thread). Other ways of reading the rows (an iterator,
 * `take`, Arrow batches) keep nothing. Its SQL metrics (the SQL tab) say what it kept.
 */
final case class KeepResultExec(request: KeepRequest, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override protected def doCanonicalize(): SparkPlan = child.canonicalized
  override protected def stringArgs: Iterator[Any] = Iterator(request.describe)

  override lazy val metrics: Map[String, SQLMetric] = Map(
    "keptRows" -> SQLMetrics.createMetric(sparkContext, "rows kept by memphis"),
    "keptBytes" -> SQLMetrics.createSizeMetric(sparkContext, "bytes kept by memphis"))

  override protected def doExecute(): RDD[InternalRow] = child.execute()

  override def executeCollect(): Array[InternalRow] = {
    val rows = child.executeCollect()
    try {
      val cache = LineageCache.forContext(sparkContext)
      cache.keepCollected(request, rows, SQLConf.get).foreach { r =>
        metrics("keptRows").set(r.rows.size.toLong)
        metrics("keptBytes").set(r.bytes)
        SparkRuntime.postDriverMetrics(sparkContext, metrics.values.toSeq)
        cache.durable.collected(r.key, request.owner, r.types, r.rows, r.costMs, r.bytes)
      }
    } catch {
      case NonFatal(e) => CacheStats.log.warn(s"memphis: did not keep a collected result after an internal error: $e", e)
    }
    rows
  }

  override def executeTake(n: Int): Array[InternalRow] = child.executeTake(n)

  override def executeTail(n: Int): Array[InternalRow] = child.executeTail(n)

  override def executeToIterator(): Iterator[InternalRow] = child.executeToIterator()

  override protected def withNewChildInternal(newChild: SparkPlan): KeepResultExec = copy(child = newChild)
}

/**
 * Plans the mark (adaptive re-planning included). The mark sits at the query's root, where Spark plans
 * a limit (with its ordering) to take rows without a global sort or shuffle (its `SpecialLimits`): its
 * child is planned as that root, so that the mark changes no plan.
 */
object KeepResultStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case ReturnAnswer(KeepResult(request, child)) => KeepResultExec(request, planLater(ReturnAnswer(child))) :: Nil
    case KeepResult(request, child) => KeepResultExec(request, planLater(child)) :: Nil
    case _ => Nil
  }
}
