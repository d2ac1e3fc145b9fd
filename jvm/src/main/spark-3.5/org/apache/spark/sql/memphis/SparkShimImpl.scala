package org.apache.spark.sql.memphis

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.{DataFrame, Dataset, SparkSession}
import org.apache.spark.sql.catalyst.CurrentUserContext
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.execution.{CacheManager, CachedData}
import org.apache.spark.sql.execution.adaptive.QueryStageExec
import org.apache.spark.sql.execution.exchange.{ShuffleExchangeExec, ShuffleExchangeLike}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.storage.StorageLevel
import org.apache.spark.util.Utils

/**
 * Spark 3.5: one SparkSession and Dataset class that carry the session state and the query
 * execution; the CacheManager matches plans without a session; no per-query shuffle cleanup, no DSv2
 * table versions.
 */
object SparkShimImpl extends SparkShims {
  def sqlConf(session: SparkSession): SQLConf = session.sessionState.conf

  def newHadoopConf(session: SparkSession): Configuration = session.sessionState.newHadoopConf()

  def cloneSession(session: SparkSession): SparkSession = session.cloneSession()

  def analyzedPlan(df: Dataset[_]): LogicalPlan = df.queryExecution.analyzed

  def dataFrame(session: SparkSession, plan: LogicalPlan): DataFrame = Dataset.ofRows(session, plan)

  def optimize(session: SparkSession, plan: LogicalPlan): LogicalPlan = session.sessionState.optimizer.execute(plan)

  def cacheManager(session: SparkSession): CacheManager = session.sharedState.cacheManager

  def lookupCachedData(session: SparkSession, plan: LogicalPlan): Option[CachedData] =
    cacheManager(session).lookupCachedData(plan)

  // From a 3.5 patch release on, the CacheManager also turns off the final stage's shuffle
  // optimizations for a cached plan (named by its key: 3.5.0 has no such conf, and ignores it).
  def cachedPlanConfsOff: Seq[String] = Seq(SQLConf.AUTO_BUCKETED_SCAN_ENABLED.key,
    "spark.sql.adaptive.applyFinalStageShuffleOptimizations")

  def cacheQuery(session: SparkSession, plan: LogicalPlan, name: Option[String], level: StorageLevel): Unit =
    cacheManager(session).cacheQuery(session, plan, name, level)

  def uncacheQuery(session: SparkSession, plan: LogicalPlan): Unit =
    cacheManager(session).uncacheQuery(session, plan, cascade = false, blocking = false)

  def lazyLocalCheckpoint(session: SparkSession, plan: LogicalPlan): LogicalPlan =
    Dataset.ofRows(session, plan).localCheckpoint(eager = false).logicalPlan

  // What 4.0's CurrentUserContext.getCurrentUser does; 3.5 has the thread's user but not the rule.
  def currentUser: String = Option(CurrentUserContext.CURRENT_USER.get()).getOrElse(Utils.getCurrentUserName())

  def sessionId(session: SparkSession): String = session.sessionUUID

  // 3.5's exchanges do not expose their shuffle id; the built-in one has it on its dependency.
  def shuffleId(exchange: ShuffleExchangeLike): Option[Int] = exchange match {
    case e: ShuffleExchangeExec => Some(e.shuffleDependency.shuffleId)
    case _ => None
  }

  // QueryStageExec.hasFailed arrived in a 3.5 patch release; before it, a failed stage has no result.
  def stageSucceeded(stage: QueryStageExec): Boolean = stage.isMaterialized

  // 3.5 never removes a query's shuffle files before its context stops.
  def shuffleFilesKept(conf: SQLConf): Boolean = true

  def tableIdAndVersion(table: Table): Option[(String, String)] = None
}
