package io.memphis.reuse

import scala.util.control.NonFatal

import io.memphis.cache.{OwnerMark, PendingObservation}
import io.memphis.conf.{CacheStats, MemphisConf}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.internal.SQLConf

/**
 * Decides, for each query, which of its subplans memphis persists or serves; registered as a
 * plan-normalization rule.
 *
 * Why there: normalization runs on the analyzed plan right before Spark's CacheManager substitutes
 * cached relations (`QueryExecution.withCachedData`), so a subplan persisted here is served to this
 * very query, and Spark fills it lazily inside the job that needs it (no extra job). Matching the
 * analyzed plan, before the optimizer pushes filters down, lets different filters on top of one
 * aggregate share it.
 *
 * The only changes it makes to a plan are marks: the first occurrences of aggregates whose shuffle
 * is kept ([[RetainShuffle]]), and the subplans memphis serves to this user ([[OwnerMark]]). A
 * query only planned (an explain) is marked too, but counts and persists nothing: what it would
 * count travels on the returned plan, counted if that plan runs ([[PendingObservation]]). A plan the
 * user caches that memphis holds is the user's from then on ([[LineageCache.yieldToUser]]). It never
 * raises into the user's query: on an internal failure it logs why and leaves the query to plain Spark.
 */
final class ReuseRule(session: SparkSession) extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    // A plan under a mark at its root is one memphis cached, planned again by Spark's CacheManager
    // (a re-cache after a write to its source): not a query.
    if (ReuseRule.suspendedHere.get() || plan.isInstanceOf[OwnerMark]) plan
    else ReuseRule.suspended {
      try {
        val cache = LineageCache.forContext(session.sparkContext)
        if (MemphisConf.Enabled.get(SQLConf.get)) {
          cache.yieldToUser(session, plan)
          val (marks, pending) = cache.consider(session, plan)
          val marked = ReuseRule.mark(plan, marks)
          pending.foreach(PendingObservation.attach(marked, _))
          marked
        } else {
          cache.releaseFor(session, "spark.memphis.enabled is false")
          plan
        }
      } catch {
        case NonFatal(e) =>
          CacheStats.log.warn(s"memphis: skipped reuse for this query after an internal error: $e", e)
          plan
      }
    }
  }
}

object ReuseRule {
  /** `plan` with each subplan in `marks` (by identity), its subqueries' included, under the node its mark makes. */
  private def mark(plan: LogicalPlan, marks: LineageCache.Marks): LogicalPlan =
    if (marks.isEmpty) plan
    else {
      val children = plan.mapChildren(mark(_, marks))
      val marked =
        if (!children.expressions.exists(_.exists(_.isInstanceOf[SubqueryExpression]))) children
        else children.transformExpressions { case s: SubqueryExpression => s.withNewPlan(mark(s.plan, marks)) }
      Option(marks.get(plan)).fold(marked)(_(marked))
    }

  private val suspendedHere: ThreadLocal[Boolean] = ThreadLocal.withInitial(() => false)

  /** Whether memphis's own Spark calls run on this thread (the rules then leave plans alone). */
  def isSuspended: Boolean = suspendedHere.get()

  /**
   * Runs `f` with the rule off on this thread. Spark's CacheManager normalizes every plan it is
   * asked to cache or uncache, which runs this rule again: memphis's own calls must not count as
   * queries (an uncache would persist the subplans of what it lets go).
   */
  def suspended[T](f: => T): T = {
    val before = suspendedHere.get()
    suspendedHere.set(true)
    try f finally suspendedHere.set(before)
  }
}
