package io.memphis.reuse

import io.memphis.cache.{RetainShuffle, ShuffleOffer}
import io.memphis.facade.LineageCache
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkRuntime}
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * Passes its child's rows through; when its job is set up it hands the shuffles just below it (the
 * frontier: those reached without crossing another exchange) to the lineage cache's entry. Its SQL
 * metric (the SQL tab) counts the shuffles kept.
 */
final case class RetainShuffleExec(entryId: String, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def supportsColumnar: Boolean = child.supportsColumnar
  override protected def doCanonicalize(): SparkPlan = child.canonicalized

  override lazy val metrics: Map[String, SQLMetric] = Map(
    "keptShuffles" -> SQLMetrics.createMetric(sparkContext, "shuffles kept by memphis"))

  override protected def doExecute(): RDD[InternalRow] = {
    retain()
    child.execute()
  }

  override protected def doExecuteColumnar(): RDD[ColumnarBatch] = {
    retain()
    child.executeColumnar()
  }

  // Under adaptive execution the frontier stages have run by now; otherwise they run in this job.
  private def retain(): Unit = {
    metrics("keptShuffles").set(LineageCache.forContext(sparkContext).retainShuffles(entryId, PhysicalPlans.shuffleFrontier(child)))
    SparkRuntime.postDriverMetrics(sparkContext, metrics.values.toSeq)
  }

  override protected def withNewChildInternal(newChild: SparkPlan): RetainShuffleExec = copy(child = newChild)
}

/** Plans the marker, and the offer of the shuffles it kept ([[ShuffleOffer]]), adaptive re-planning included. */
object RetainShuffleStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case RetainShuffle(hash, _, child) => RetainShuffleExec(hash, planLater(child)) :: Nil
    case ShuffleOffer(offer, child) => ShuffleOfferExec(offer, planLater(child)) :: Nil
    case _ => Nil
  }
}
