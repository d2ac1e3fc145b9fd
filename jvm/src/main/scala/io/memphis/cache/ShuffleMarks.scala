package io.memphis.cache

import java.util.concurrent.atomic.AtomicReference

import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.SparkPlan

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
 * The root of a plan memphis hands Spark's CacheManager to persist, carrying the shuffles its first
 * occurrence kept to [[ShuffleReuseRule]], which reads the cached plan's physical form. The offer
 * rides on the plan because Spark plans it inside the CacheManager's call, where memphis cannot
 * pass anything else. Invisible to plan comparison (its child's canonical form), so the
 * CacheManager matches the cached plan as if it were not there.
 *
 * The CacheManager keeps the plan, node included, and plans it again on a re-cache (after a write to
 * a source): the offer is taken once, so that a re-cache computes afresh, as it must, and memphis's
 * normalization drops the node there ([[io.memphis.QueryNormalization]]).
 */
final case class ShuffleOffer(offer: ShuffleOffer.Offer, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  // The CacheManager's relation takes its ordering from the plan's root.
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def maxRows: Option[Long] = child.maxRows
  override protected def doCanonicalize(): LogicalPlan = child.canonicalized
  override protected def withNewChildInternal(newChild: LogicalPlan): ShuffleOffer = copy(child = newChild)
}

object ShuffleOffer {
  /** Retained shuffles, and what to call with how many of them the cached plan reads; taken once. */
  final class Offer(shuffles: Seq[SparkPlan], val reused: Int => Unit) {
    private val left = new AtomicReference[Seq[SparkPlan]](shuffles)

    /** The shuffles, the first time; after that None (and they are no longer held here). */
    def take(): Option[Seq[SparkPlan]] = Option(left.getAndSet(null))
  }

  /** `plan` without the offer at its root. */
  def strip(plan: LogicalPlan): LogicalPlan = plan match {
    case ShuffleOffer(_, child) => child
    case _ => plan
  }

  /** `plan` under the offer of `shuffles` (as it is when none are kept). */
  def apply(shuffles: Seq[SparkPlan], reused: Int => Unit, plan: LogicalPlan): LogicalPlan =
    if (shuffles.isEmpty) plan else ShuffleOffer(new Offer(shuffles, reused), plan)
}
