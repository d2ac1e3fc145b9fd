package io.memphis.lineage

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.memphis.SparkRuntime
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * A subplan served from data memphis holds elsewhere (rows kept on the driver, files of the durable
 * tier): `child` reads that data with the subplan's output, and this node says what it stands for.
 *
 * It is what it replaced for everything that compares plans: its lineage key is the subplan's
 * ([[StandsFor]]), so the keys of the plans around it are unchanged, and its canonical form is the
 * subplan's, so Spark's CacheManager matches a plan that holds it with one that holds the subplan
 * (a relation cached over either serves both). The planner plans its child under a
 * [[ServedSubplanExec]] ([[ServedSubplanStrategy]]).
 */
abstract class ServedSubplan extends UnaryNode with StandsFor {
  /** The subplan it stands for. */
  def replaced: LogicalPlan
  /** Where its rows come from, in words (the SQL tab shows it). */
  def servedFrom: String
  /** What computing the subplan took when it was measured: the time each read of it saves. */
  def savedMs: Long
  override def output: Seq[Attribute] = child.output
  override protected def doCanonicalize(): LogicalPlan = replaced.canonicalized
}

/**
 * A served subplan's rows as they pass: they are its child's, unchanged (rows or columnar batches, a
 * collect on the driver staying on the driver); its SQL metrics, in the SQL tab's plan graph, count the
 * rows memphis served and the compute time that saved.
 */
final case class ServedSubplanExec(from: String, hash: String, savedMs: Long, child: SparkPlan) extends UnaryExecNode {
  override def nodeName: String = "ServedByMemphis"
  override protected def stringArgs: Iterator[Any] = Iterator(s"memphis $hash", from)
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def supportsColumnar: Boolean = child.supportsColumnar
  override protected def doCanonicalize(): SparkPlan = child.canonicalized

  override lazy val metrics: Map[String, SQLMetric] = Map(
    "servedRows" -> SQLMetrics.createMetric(sparkContext, "rows served by memphis"),
    "savedTime" -> SQLMetrics.createTimingMetric(sparkContext, "compute time saved"))

  /** The time saved, once per execution of this plan: set on the driver, sent with the SQL execution's metrics. */
  private def saved(alsoRows: Long = -1L): Unit = {
    metrics("savedTime").set(savedMs)
    if (alsoRows >= 0) metrics("servedRows").set(alsoRows)
    SparkRuntime.postDriverMetrics(sparkContext, if (alsoRows >= 0) metrics.values.toSeq else Seq(metrics("savedTime")))
  }

  override protected def doExecute(): RDD[InternalRow] = {
    saved()
    val rows = metrics("servedRows")
    child.execute().mapPartitions(_.map { row => rows += 1; row })
  }

  override protected def doExecuteColumnar(): RDD[ColumnarBatch] = {
    saved()
    val rows = metrics("servedRows")
    child.executeColumnar().mapPartitions(_.map { batch => rows += batch.numRows(); batch })
  }

  override def executeCollect(): Array[InternalRow] = {
    val all = child.executeCollect()
    saved(all.length)
    all
  }

  override def executeTake(n: Int): Array[InternalRow] = {
    val taken = child.executeTake(n)
    saved(taken.length)
    taken
  }

  override def executeTail(n: Int): Array[InternalRow] = {
    val taken = child.executeTail(n)
    saved(taken.length)
    taken
  }

  override def executeToIterator(): Iterator[InternalRow] = {
    saved()
    child.executeToIterator()
  }

  override protected def withNewChildInternal(newChild: SparkPlan): ServedSubplanExec = copy(child = newChild)
}

/** Plans a served subplan as what reads its data, under the node that counts what it served. */
object ServedSubplanStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case s: ServedSubplan => ServedSubplanExec(s.servedFrom, s.standsForKey.hash, s.savedMs, planLater(s.child)) :: Nil
    case _ => Nil
  }
}
