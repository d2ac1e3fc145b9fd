package io.memphis

import scala.util.control.NonFatal

import io.memphis.cache.SessionKeyContext
import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.facade.{LineageCache, StatsRows}
import io.memphis.lineage.{InlineCtes, LineageKey}
import org.apache.spark.sql.{Dataset, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}

/**
 * Coarse entry points for the Python package over py4j: one round trip per call. A Spark Connect
 * client reaches the same through SQL ([[MemphisTableFunctions]]); both call what is here.
 */
object PythonFacade {
  /** How long `statsJson` waits at most for Spark's listeners. */
  private val StatsListenerWaitMs = 10000L

  /**
   * The `memphis_stats()` rows, once Spark's listeners have seen the queries that finished (a
   * query's end, and what memphis records then, such as the broadcasts it built, reaches them
   * asynchronously): counters read right after an action include it.
   */
  def statsRows(session: SparkSession): Seq[(String, Long)] = {
    SparkRuntime.awaitListeners(session.sparkContext, StatsListenerWaitMs)
    StatsRows.of(LineageCache.forContext(session.sparkContext), SparkShimImpl.sqlConf(session))
  }

  /** [[statsRows]] as a flat JSON object of numbers. */
  def statsJson(session: SparkSession): String =
    statsRows(session).map { case (name, value) => s""""$name": $value""" }.mkString("{", ", ", "}")

  /** Unpersists everything memphis holds and forgets its entries. */
  def clear(session: SparkSession): Unit = LineageCache.forContext(session.sparkContext).clearFor(session)

  /** [[clear]], then deletes the user's Spark entries of the durable tier. */
  def clearDurable(session: SparkSession): Unit = LineageCache.forContext(session.sparkContext).clearDurableFor(session)

  /** The lineage key of a DataFrame's result as hex, or null when it has none. */
  def lineageKey(df: Dataset[_]): String = keyOf(df.sparkSession, SparkShimImpl.analyzedPlan(df)).toOption.map(_.hash).orNull

  /** The key with its canonical form and sources, or why there is none. */
  def explainKey(df: Dataset[_]): String = explanation(keyOf(df.sparkSession, SparkShimImpl.analyzedPlan(df)))

  /**
   * The candidate subplans of a DataFrame's plan as a JSON list of {"key", "height", "within"}
   * (within: the keys of the candidate subplans that contain it), for `memphis.run_all`.
   */
  def subplanKeys(df: Dataset[_]): String = {
    val keys = LineageCache.forContext(df.sparkSession.sparkContext)
      .candidateKeys(df.sparkSession, SparkShimImpl.analyzedPlan(df))
    keys.map { case (key, within) =>
      s"""{"key": "${key.hash}", "height": ${key.height}, "within": [${within.map(h => s""""$h"""").mkString(", ")}]}"""
    }.mkString("[", ", ", "]")
  }

  def persistShared(df: Dataset[_], hash: String, reason: String): Boolean =
    persistShared(df.sparkSession, SparkShimImpl.analyzedPlan(df), hash, reason)

  /**
   * Persists the subplan of `plan` with key `hash` now (see [[LineageCache.persistShared]]); whether
   * memphis holds it. An internal failure is logged and persists nothing: `run_all`'s actions then
   * run as plain Spark would.
   */
  def persistShared(session: SparkSession, plan: LogicalPlan, hash: String, reason: String): Boolean =
    try {
      MemphisConf.Enabled.get(SparkShimImpl.sqlConf(session)) &&
        LineageCache.forContext(session.sparkContext).persistShared(session, plan, hash, reason)
    } catch {
      case NonFatal(e) =>
        CacheStats.log.warn(s"memphis: did not persist a shared subplan after an internal error: $e", e)
        false
    }

  /** The key of `plan` (analyzed) as memphis's rules key it when it runs, its WITH clauses inlined. */
  def keyOf(session: SparkSession, plan: LogicalPlan): LineageKey.Result =
    LineageKey.of(InlineCtes.inlined(plan), SessionKeyContext(session))

  def explanation(key: LineageKey.Result): String = key match {
    case Right(k) => s"lineage key ${k.hash} (height ${k.height})\n${k.explain}"
    case Left(reason) => s"no lineage key: $reason"
  }
}
