package io.memphis.reuse

import java.util.IdentityHashMap

import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.memphis.PhysicalPlans

/**
 * Lets the second occurrence of an aggregate read the shuffle its first occurrence left behind
 * ([[RetainShuffle]]): while memphis persists a subplan, each exchange on the frontier of its
 * cached plan that is canonically equal to a retained, completely written shuffle is replaced by a
 * reuse of that shuffle, and Spark skips the stages that wrote it.
 *
 * Why two hooks: under adaptive execution it runs as a query-stage preparation rule, before stages
 * are created, so that the reused shuffle counts as a materialized stage (whose partitions adaptive
 * execution may still coalesce); without adaptive execution, as a columnar pre-transition rule, the
 * last physical rule that sees the exchanges. Both run while Spark's CacheManager plans the cached
 * plan, on the thread that made the offer; everywhere else the rule does nothing.
 *
 * Equal canonical forms are Spark's own test for reusing an exchange; the persisted subplan's
 * lineage key (same sources, same fingerprints as at the first occurrence) is what makes the earlier
 * output still current.
 */
final class ShuffleReuseRule(asQueryStage: Boolean) extends Rule[SparkPlan] {
  override def apply(plan: SparkPlan): SparkPlan = ShuffleReuseRule.offer.get() match {
    case Some(offer) if offer.shuffles.nonEmpty => substitute(plan, offer)
    case _ => plan
  }

  private def substitute(plan: SparkPlan, offer: ShuffleReuseRule.Offer): SparkPlan = {
    val reuses = new IdentityHashMap[SparkPlan, SparkPlan]
    PhysicalPlans.shuffleFrontier(plan).foreach { exchange =>
      val identity = PhysicalPlans.exchangeIdentity(exchange)
      offer.shuffles.find(r => PhysicalPlans.exchangeIdentity(r) == identity && PhysicalPlans.shuffleWritten(r))
        .foreach(r => reuses.put(exchange, PhysicalPlans.reuseShuffle(r, exchange, asQueryStage)))
    }
    if (reuses.isEmpty) plan
    else {
      offer.reused(reuses.size)
      plan.transformDown { case p if reuses.containsKey(p) => reuses.get(p) }
    }
  }
}

object ShuffleReuseRule {
  /** Retained shuffles, and what to call with how many of them the cached plan reads. */
  final case class Offer(shuffles: Seq[SparkPlan], reused: Int => Unit)

  private val offer: ThreadLocal[Option[Offer]] = ThreadLocal.withInitial(() => None)

  /** Runs `f` (the planning of a cached plan) with `shuffles` on offer on this thread. */
  def offering[T](shuffles: Seq[SparkPlan], reused: Int => Unit)(f: => T): T = {
    offer.set(Some(Offer(shuffles, reused)))
    try f finally offer.set(None)
  }
}
