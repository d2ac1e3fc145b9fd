package io.memphis.reuse

import java.util.IdentityHashMap

import io.memphis.cache.ShuffleOffer
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{SparkPlan, UnaryExecNode}
import org.apache.spark.sql.memphis.PhysicalPlans
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * Lets the second occurrence of an aggregate read the shuffle its first occurrence left behind
 * ([[RetainShuffle]]): a subplan memphis persists is handed to Spark's CacheManager under a
 * [[ShuffleOffer]] at its root, and when the CacheManager plans it, each exchange on the frontier of
 * the cached plan that is canonically equal to an offered, completely written shuffle is replaced
 * by a reuse of that shuffle, and Spark skips the stages that wrote it.
 *
 * Why two hooks: under adaptive execution it runs as a query-stage preparation rule, before stages
 * are created, so that the reused shuffle counts as a materialized stage (whose partitions adaptive
 * execution may still coalesce); without adaptive execution, as a columnar pre-transition rule, the
 * last physical rule that sees the exchanges. Whichever sees the offer's node first takes the offer
 * (once) and removes the node; everywhere else the rule does nothing.
 *
 * Equal canonical forms are Spark's own test for reusing an exchange; the persisted subplan's
 * lineage key (same sources, same fingerprints as at the first occurrence) is what makes the earlier
 * output still current.
 */
final class ShuffleReuseRule(asQueryStage: Boolean) extends Rule[SparkPlan] {
  // The offer's node is the root: nothing is planned above the root of a plan being cached.
  override def apply(plan: SparkPlan): SparkPlan = plan match {
    case ShuffleOfferExec(offer, child) => offer.take().fold(child)(substitute(child, _, offer.reused))
    case _ => plan
  }

  private def substitute(plan: SparkPlan, shuffles: Seq[SparkPlan], reused: Int => Unit): SparkPlan = {
    val reuses = new IdentityHashMap[SparkPlan, SparkPlan]
    PhysicalPlans.shuffleFrontier(plan).foreach { exchange =>
      val identity = PhysicalPlans.exchangeIdentity(exchange)
      shuffles.find(r => PhysicalPlans.exchangeIdentity(r) == identity && PhysicalPlans.shuffleWritten(r))
        .foreach(r => reuses.put(exchange, PhysicalPlans.reuseShuffle(r, exchange, asQueryStage)))
    }
    if (reuses.isEmpty) plan
    else {
      reused(reuses.size)
      plan.transformDown { case p if reuses.containsKey(p) => reuses.get(p) }
    }
  }
}

/** The offer's node planned: removed by [[ShuffleReuseRule]] before anything runs; passes its child's rows through. */
final case class ShuffleOfferExec(offer: ShuffleOffer.Offer, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def supportsColumnar: Boolean = child.supportsColumnar
  override protected def doCanonicalize(): SparkPlan = child.canonicalized
  override protected def doExecute(): RDD[InternalRow] = child.execute()
  override protected def doExecuteColumnar(): RDD[ColumnarBatch] = child.executeColumnar()
  override protected def withNewChildInternal(newChild: SparkPlan): ShuffleOfferExec = copy(child = newChild)
}
