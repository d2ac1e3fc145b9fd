package io.memphis.reuse

import io.memphis.cache.PendingObservation
import io.memphis.facade.LineageCache
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * Decides, for each query, which of its subplans memphis persists or serves: a phase of memphis's
 * plan normalization ([[io.memphis.QueryNormalization]]), after the phases that serve kept data
 * and cut lineage, so that it decides on the plan they left.
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
 * user caches that memphis holds is the user's from then on ([[LineageCache.yieldToUser]]).
 */
object ReuseRule {
  def apply(query: QueryContext, plan: LogicalPlan): LogicalPlan = {
    val cache = query.cache
    cache.yieldToUser(query.session, plan)
    val (marks, pending) = cache.consider(query.session, plan, query.keys(plan), query.executing)
    val marked = mark(plan, marks)
    pending.foreach(PendingObservation.attach(marked, _))
    marked
  }

  /** memphis is off for `session`'s queries: lets go of what it holds for them, `why`. */
  def release(session: SparkSession, why: String): Unit =
    LineageCache.forContext(session.sparkContext).releaseFor(session, why)

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
}
