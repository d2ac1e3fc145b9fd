package org.apache.spark.sql.memphis

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.{DataFrame, Dataset, SparkSession}
import org.apache.spark.sql.catalyst.CurrentUserContext
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.{CacheManager, CachedData, LogicalRDD}
import org.apache.spark.sql.execution.adaptive.QueryStageExec
import org.apache.spark.sql.execution.exchange.ShuffleExchangeLike
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.storage.StorageLevel

/**
 * What every Spark 4 line shares: the API-level SparkSession and Dataset are interfaces, and the
 * classic (JVM) implementations carry the session state and the query execution.
 */
trait Spark4Shims extends SparkShims {
  private def classicSession(session: SparkSession): classic.SparkSession = session.asInstanceOf[classic.SparkSession]

  def sqlConf(session: SparkSession): SQLConf = classicSession(session).sessionState.conf

  def newHadoopConf(session: SparkSession): Configuration = classicSession(session).sessionState.newHadoopConf()

  def cloneSession(session: SparkSession): SparkSession = classicSession(session).cloneSession()

  def analyzedPlan(df: Dataset[_]): LogicalPlan = df.asInstanceOf[classic.Dataset[_]].queryExecution.analyzed

  def dataFrame(session: SparkSession, plan: LogicalPlan): DataFrame = classic.Dataset.ofRows(classicSession(session), plan)

  def optimize(session: SparkSession, plan: LogicalPlan): LogicalPlan =
    classicSession(session).sessionState.optimizer.execute(plan)

  def cacheManager(session: SparkSession): CacheManager = classicSession(session).sharedState.cacheManager

  def lookupCachedData(session: SparkSession, plan: LogicalPlan): Option[CachedData] =
    cacheManager(session).lookupCachedData(classicSession(session), plan)

  def cachedPlanConfsOff: Seq[String] = Seq(SQLConf.AUTO_BUCKETED_SCAN_ENABLED.key)

  def cacheQuery(session: SparkSession, plan: LogicalPlan, name: Option[String], level: StorageLevel): Unit =
    cacheManager(session).cacheQuery(classicSession(session), plan, name, level)

  def uncacheQuery(session: SparkSession, plan: LogicalPlan): Unit =
    cacheManager(session).uncacheQuery(classicSession(session), plan, cascade = false, blocking = false)

  def lazyLocalCheckpoint(session: SparkSession, plan: LogicalPlan): LogicalPlan =
    classic.Dataset.ofRows(classicSession(session), plan).localCheckpoint(eager = false).logicalPlan

  def currentUser: String = CurrentUserContext.getCurrentUser

  def sessionId(session: SparkSession): String = classicSession(session).sessionUUID

  def shuffleId(exchange: ShuffleExchangeLike): Option[Int] = Some(exchange.shuffleId)

  def stageSucceeded(stage: QueryStageExec): Boolean = stage.isMaterialized && !stage.hasFailed
}
