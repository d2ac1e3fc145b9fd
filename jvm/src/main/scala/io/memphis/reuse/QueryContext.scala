package io.memphis.reuse

import io.memphis.cache.{Executions, SessionKeyContext}
import io.memphis.conf.ConnectSessions
import io.memphis.facade.LineageCache
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * One query as memphis's normalization phases see it ([[io.memphis.QueryNormalization]]): made once
 * each time Spark normalizes the query's plan, and handed to every phase in turn, so that what one
 * phase learned (the keys of the plan) serves the next without state kept on the thread.
 */
final class QueryContext(val session: SparkSession) {
  lazy val cache: LineageCache = LineageCache.forContext(session.sparkContext)

  /** The session's conf, where the phases read `spark.memphis.*`. */
  lazy val conf: SQLConf = SparkShimImpl.sqlConf(session)

  /** Whose query it is (each user has entries of their own unless shared). */
  lazy val user: String = ConnectSessions.userOfQuery(session)

  /** Whether the query runs, or is only planned ([[Executions]]): only a run counts and persists. */
  lazy val executing: Boolean = Executions.executing(session.sparkContext)

  private var keyed: Option[(LogicalPlan, Seq[(LogicalPlan, LineageKey.Result)])] = None

  /**
   * [[LineageKey.ofSubplans]] of `plan`, computed once: a later phase handed the very same plan (a
   * phase that changes nothing hands on its input) reuses them, so that a query's sources are
   * listed once. A plan a phase changed is keyed afresh.
   */
  def keys(plan: LogicalPlan): Seq[(LogicalPlan, LineageKey.Result)] = keyed match {
    case Some((p, keys)) if p eq plan => keys
    case _ =>
      val keys = LineageKey.ofSubplans(plan, SessionKeyContext(session))
      keyed = Some(plan -> keys)
      keys
  }
}
