package io.memphis.reuse

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.memphis.PhysicalPlans
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * Marks the first occurrence of a keyed aggregate (inserted by [[ReuseRule]]): the shuffle below it
 * is kept, so that its second occurrence, which memphis persists, reads that shuffle instead of
 * computing the aggregate's input again (see [[ShuffleReuseRule]]). Delayed caching then costs one
 * computation of a shared aggregate, as hand-placed `cache()` does, instead of two.
 *
 * The marker keeps the optimizer from pruning the aggregate's columns or pushing filters into it
 * from above (its `keep` lists, so references, all of its child's output), so that the first occurrence
 * shuffles what the persisted subplan will need: the price is that of the cached relation in later
 * occurrences, paid one occurrence earlier. It is invisible to plan comparison (canonical form of
 * its child), so Spark's CacheManager matches the marked subplan as if it were not there.
 */
final case class RetainShuffle(entryId: String, keep: Seq[Attribute], child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def doCanonicalize(): LogicalPlan = child.canonicalized
  override protected def withNewChildInternal(newChild: LogicalPlan): RetainShuffle = copy(child = newChild)
}

object RetainShuffle {
  /** `plan` without the marks of first occurrences (a user's cached plan, normalized with them). */
  def strip(plan: LogicalPlan): LogicalPlan = plan.transformUp { case r: RetainShuffle => r.child }

  def apply(entryId: String, child: LogicalPlan): RetainShuffle = RetainShuffle(entryId, child.output, child)
}

/**
 * Passes its child's rows through; when its job is set up it hands the shuffles just below it (the
 * frontier: those reached without crossing another exchange) to the lineage cache's entry.
 */
final case class RetainShuffleExec(entryId: String, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def supportsColumnar: Boolean = child.supportsColumnar
  override protected def doCanonicalize(): SparkPlan = child.canonicalized

  override protected def doExecute(): RDD[InternalRow] = {
    retain()
    child.execute()
  }

  override protected def doExecuteColumnar(): RDD[ColumnarBatch] = {
    retain()
    child.executeColumnar()
  }

  // Under adaptive execution the frontier stages have run by now; otherwise they run in this job.
  private def retain(): Unit =
    LineageCache.forContext(sparkContext).retainShuffles(entryId, PhysicalPlans.shuffleFrontier(child))

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
