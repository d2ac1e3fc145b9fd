package org.apache.spark.sql.memphis

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.{DataFrame, Dataset, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.execution.{CacheManager, CachedData}
import org.apache.spark.sql.execution.adaptive.QueryStageExec
import org.apache.spark.sql.execution.exchange.ShuffleExchangeLike
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.storage.StorageLevel

/**
 * What memphis needs from Spark that differs between Spark lines, as the one interface common code
 * calls. Each line's source folder (`jvm/src/main/spark-<line>`, chosen by the Maven profile of the
 * line) holds `object SparkShimImpl extends SparkShims`, so a jar carries exactly one. It only adapts
 * Spark: it imports nothing of memphis, and memphis's own use of Spark's plans lives in common code
 * ([[PhysicalPlans]], [[CheckpointRelations]], [[SparkRuntime]]). It sits in Spark's package because
 * some of what it reaches is `private[spark]`.
 */
trait SparkShims {
  /** The session's own SQLConf (from 4.0 the API-level SparkSession does not expose it). */
  def sqlConf(session: SparkSession): SQLConf

  /** A Hadoop configuration with the session's settings, as Spark's file sources build it. */
  def newHadoopConf(session: SparkSession): Configuration

  /** A new session over the same SparkContext and shared state, with a copy of `session`'s state. */
  def cloneSession(session: SparkSession): SparkSession

  /** The analyzed plan of a DataFrame. */
  def analyzedPlan(df: Dataset[_]): LogicalPlan

  /** A DataFrame of `plan` (analyzed) in `session`. */
  def dataFrame(session: SparkSession, plan: LogicalPlan): DataFrame

  /** `plan` (analyzed) as the session's optimizer plans it on its own. */
  def optimize(session: SparkSession, plan: LogicalPlan): LogicalPlan

  def cacheManager(session: SparkSession): CacheManager

  /** The cached relation Spark would substitute for `plan` (analyzed), as Spark's CacheManager matches it. */
  def lookupCachedData(session: SparkSession, plan: LogicalPlan): Option[CachedData]

  /**
   * What Spark's CacheManager turns off in the session a plan is cached with when the cached plan
   * may change its output partitioning (it clones the session unless these are already off).
   */
  def cachedPlanConfsOff: Seq[String]

  /** Caches `plan` (analyzed) planned with `session`, as `Dataset.persist` would. */
  def cacheQuery(session: SparkSession, plan: LogicalPlan, name: Option[String], level: StorageLevel): Unit

  /** Drops the cached relation of `plan`, not the ones that read it, without waiting for its blocks. */
  def uncacheQuery(session: SparkSession, plan: LogicalPlan): Unit

  /** `plan` as `Dataset.localCheckpoint(eager = false)` builds it: the logical plan over its RDD. */
  def lazyLocalCheckpoint(session: SparkSession, plan: LogicalPlan): LogicalPlan

  /** The user a query runs as, by Spark's own rule (what `current_user()` returns). */
  def currentUser: String

  /** The session's unique id (Spark Connect's server-side session id of a Connect session). */
  def sessionId(session: SparkSession): String

  /** The shuffle an exchange writes (its id in the MapOutputTracker), where the line can tell. */
  def shuffleId(exchange: ShuffleExchangeLike): Option[Int]

  /** Whether an adaptive query stage has its result, without having failed. */
  def stageSucceeded(stage: QueryStageExec): Boolean

  /** Whether Spark keeps a query's shuffle files after it ends (it does unless told to clean up). */
  def shuffleFilesKept(conf: SQLConf): Boolean

  /** A DSv2 table's identity and version (`Table.id()`/`version()`), on lines that have them. */
  def tableIdAndVersion(table: Table): Option[(String, String)]
}
