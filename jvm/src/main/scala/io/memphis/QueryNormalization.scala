package io.memphis

import scala.util.control.NonFatal

import io.memphis.cache.{OwnerMark, ShuffleOffer}
import io.memphis.conf.{CacheStats, MemphisConf, Suspension}
import io.memphis.lineage.InlineCtes
import io.memphis.reuse.{CheckpointRule, CollectedResultRule, DurableReadRule, KeepResultRule, QueryContext, ReuseRule}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.{Command, LogicalPlan}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.internal.SQLConf

/**
 * memphis's one plan-normalization rule: it runs on each query's analyzed plan right before Spark's
 * CacheManager substitutes cached relations and the optimizer sees it, and runs memphis's phases
 * there, in this order, each on the plan the one before left:
 *
 *  1. [[InlineCtes]]: WITH clauses inlined as the optimizer will, so that every subplan is a
 *     computation of its own (in memphis's own calls too: Spark stores and matches their plans as
 *     it does the user's);
 *  1. [[CollectedResultRule]]: subplans read from rows earlier queries collected, and whether this
 *     query's rows are to be kept;
 *  1. [[DurableReadRule]]: subplans read from the durable tier;
 *  1. [[CheckpointRule]]: loop-carried lineage cut;
 *  1. [[ReuseRule]]: what memphis persists or serves, decided on the plan the phases above left;
 *  1. [[KeepResultRule]]: the mark that keeps this query's collected rows, last, so that no phase
 *     above has it to see through.
 *
 * A [[QueryContext]] made here carries what the phases share (keys, user, conf, whether the query
 * runs); what Spark's later phases need rides on the plan (marks). The phases are off while memphis
 * runs its own Spark calls ([[Suspension.suspended]]). Spark may normalize one query more than once
 * (each time afresh, with a new context). No phase raises into the user's query ([[guarded]]).
 */
final class QueryNormalization(session: SparkSession) extends Rule[LogicalPlan] {
  import QueryNormalization.guarded

  override def apply(plan: LogicalPlan): LogicalPlan = {
    val enabled = MemphisConf.Enabled.get(SQLConf.get)
    if (Suspension.isSuspended) { if (enabled) InlineCtes.inlined(plan) else plan }
    else {
      // Outside memphis's own calls, an offer at the root is Spark's CacheManager caching memphis's
      // plan again (after a write to a source): the offer was taken when memphis cached it.
      val query = ShuffleOffer.strip(plan)
      if (enabled) phases(new QueryContext(session), InlineCtes.inlined(query))
      else {
        if (!query.isInstanceOf[OwnerMark])
          guarded((), "skipped reuse")(ReuseRule.release(session, "spark.memphis.enabled is false"))
        query
      }
    }
  }

  private def phases(query: QueryContext, plan: LogicalPlan): LogicalPlan = {
    val unserved: (LogicalPlan, Option[KeepResultRule.Asked]) = (plan, None)
    val (served, keep) =
      if (plan.isInstanceOf[Command]) unserved
      else guarded(unserved, "no collected results")(CollectedResultRule(query, plan))
    val durable = guarded(served, "no durable reads")(DurableReadRule(query, served))
    val cut = guarded(durable, "no checkpoint")(CheckpointRule(query, durable))
    // A plan under a mark at its root is one memphis cached, planned again by Spark's CacheManager
    // (a re-cache after a write to its source): not a query to decide on.
    val reused = if (cut.isInstanceOf[OwnerMark]) cut else guarded(cut, "skipped reuse")(ReuseRule(query, cut))
    KeepResultRule(reused, keep)
  }
}

object QueryNormalization {
  /**
   * `phase` run with memphis's phases off on this thread (it calls Spark, which may normalize
   * plans), or, on an internal failure, `unchanged`, with why logged: memphis never fails a query.
   */
  private def guarded[T](unchanged: T, skipped: String)(phase: => T): T =
    Suspension.suspended {
      try phase
      catch {
        case NonFatal(e) =>
          CacheStats.log.warn(s"memphis: $skipped for this query after an internal error: $e", e)
          unchanged
      }
    }
}
