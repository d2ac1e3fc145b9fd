package org.apache.spark.sql.memphis

import java.util.Properties

import scala.util.Try

import org.apache.spark.{SPARK_VERSION, SparkContext, SparkEnv}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan}
import org.apache.spark.sql.execution.{CacheManager, CachedData}
import org.apache.spark.sql.internal.SQLConf

/**
 * The running Spark as memphis reads it: its line, context, confs, storage and listeners. The same
 * on every Spark line; what differs goes through [[SparkShimImpl]].
 */
object SparkRuntime {
  private val built: Properties = {
    val properties = new Properties()
    val in = getClass.getResourceAsStream("/io/memphis/build.properties")
    try properties.load(in) finally in.close()
    properties
  }

  /** The Spark line (major.minor) this jar was built for, which the build writes into the jar. */
  val BuiltForLine: String = built.getProperty("spark.line")

  /** The Scala version (major.minor) this jar was built for. */
  val BuiltForScala: String = built.getProperty("scala.binary.version")

  /** Why the running Spark (its version, and the Scala version it runs) cannot host this build, if it cannot. */
  def unsupportedSparkReason(version: String = SPARK_VERSION,
      scalaVersion: String = scala.util.Properties.versionNumberString): Option[String] =
    if (version != BuiltForLine && !version.startsWith(BuiltForLine + "."))
      Some(s"this memphis jar is built for Spark $BuiltForLine.x but this is Spark $version; " +
        s"use the memphis jar built for Spark ${version.split('.').take(2).mkString(".")} (memphis.jar_path() picks it)")
    else if (!scalaVersion.startsWith(BuiltForScala + "."))
      Some(s"this memphis jar is built for Scala $BuiltForScala but this Spark runs Scala $scalaVersion; " +
        s"use memphis-spark-${BuiltForLine}_${scalaVersion.split('.').take(2).mkString(".")} (memphis.jar_path() picks it)")
    else None

  /** The running SparkContext; extensions are applied after it starts. */
  def activeSparkContext: Option[SparkContext] = SparkContext.getActive

  /**
   * Registers a string-valued SQL conf, so that `spark.conf.set` rejects a bad value on the spot
   * and `SET -v` lists the key with its doc.
   */
  def registerSqlConf(key: String, default: String, doc: String, isValid: String => Boolean,
      allowed: String, static: Boolean): Unit =
    (if (static) SQLConf.buildStaticConf(key) else SQLConf.buildConf(key)).doc(doc).version("memphis 0.1.0").stringConf
      .checkValue(isValid, s"Allowed: $allowed.").createWithDefault(default)

  /** Host and port of the driver's block manager, to tell driver storage from executors'. */
  def driverBlockManagerHostPort: Option[(String, Int)] =
    Option(SparkEnv.get).map(env => (env.blockManager.blockManagerId.host,
      env.blockManager.blockManagerId.port))

  /** Spark's local directories on this machine (shuffle files, spilled blocks). */
  def localDirs: Seq[java.io.File] =
    Option(SparkEnv.get).toSeq.flatMap(_.blockManager.diskBlockManager.localDirs.toSeq.map(_.getParentFile)).distinct

  /** Lets adaptive execution change a cached plan's partitioning (coalesce its partitions). */
  val CachedPlanPartitioningConf: String = SQLConf.CAN_CHANGE_CACHED_PLAN_OUTPUT_PARTITIONING.key

  /**
   * The name of the cached relation Spark would substitute for `plan` (None: nothing cached; Some(None):
   * cached without a name). Its RDD is not touched: building it would run an adaptive plan's stages.
   */
  def cachedRelationName(session: SparkSession, plan: LogicalPlan): Option[Option[String]] =
    SparkShimImpl.lookupCachedData(session, plan).map(_.cachedRepresentation.cacheBuilder.tableName)

  /**
   * Whether Spark's CacheManager holds a cached relation whose name does not start with `prefix` (one
   * a user made); true when its list cannot be read, so that a caller looks rather than assumes none.
   */
  def holdsCachedOtherThan(session: SparkSession, prefix: String): Boolean =
    !SparkShimImpl.cacheManager(session).isEmpty &&
      cachedData(session).forall(_.exists(!_.cachedRepresentation.cacheBuilder.tableName.exists(_.startsWith(prefix))))

  /** What Spark's CacheManager holds: a private field, read by reflection (None where it cannot be). */
  def cachedData(session: SparkSession): Option[Seq[CachedData]] =
    cachedDataField.flatMap(f => Try(f.get(SparkShimImpl.cacheManager(session))
      .asInstanceOf[scala.collection.Seq[CachedData]].toSeq).toOption)

  private lazy val cachedDataField: Option[java.lang.reflect.Field] =
    Try { val f = classOf[CacheManager].getDeclaredField("cachedData"); f.setAccessible(true); f }.toOption

  /** The table name and partition count of a cached relation's RDD. */
  def persistedRdd(sc: SparkContext, rddId: Int): Option[(String, Int)] =
    sc.getPersistentRDDs.get(rddId).flatMap((rdd: RDD[_]) => cachedTableName(rdd.name).map(_ -> rdd.getNumPartitions))

  /** The table name in a cached relation's RDD name ("In-memory table <name>"), if it is one. */
  def cachedTableName(rddName: String): Option[String] =
    Option(rddName).filter(_.startsWith(CachedRddPrefix)).map(_.stripPrefix(CachedRddPrefix))

  private val CachedRddPrefix = "In-memory table "

  def localRelation(output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    LocalRelation(output, rows)

  /** Posts `event` on the SparkContext's listener bus (its listeners and its event log see it). */
  def post(sc: SparkContext, event: org.apache.spark.scheduler.SparkListenerEvent): Unit = sc.listenerBus.post(event)

  /** Sends metrics set on the driver to the SQL execution this thread runs (the SQL tab shows them). */
  def postDriverMetrics(sc: SparkContext, metrics: Seq[org.apache.spark.sql.execution.metric.SQLMetric]): Unit =
    org.apache.spark.sql.execution.metric.SQLMetrics.postDriverMetricUpdates(sc,
      sc.getLocalProperty(org.apache.spark.sql.execution.SQLExecution.EXECUTION_ID_KEY), metrics)

  /** Whether this thread is running a listener of Spark's listener bus now. */
  def onListenerThread: Boolean = org.apache.spark.scheduler.LiveListenerBus.withinListenerThread.value

  /**
   * Waits (at most `timeoutMs`) until Spark's listeners have seen every event posted so far: a
   * query's end reaches listeners asynchronously, and the next query may be planned before.
   */
  def awaitListeners(sc: SparkContext, timeoutMs: Long): Unit =
    try sc.listenerBus.waitUntilEmpty(timeoutMs) catch { case _: java.util.concurrent.TimeoutException => }

  /**
   * Runs `f` on this thread as a job of memphis's own in `session`'s context: in job group `group`
   * (Spark's UI shows `description`), with none of the local properties this thread inherited from
   * the thread that started it (a user's job group, a SQL execution id), and `session` active.
   */
  def inBackgroundJob[T](session: SparkSession, group: String, description: String)(f: => T): T = {
    val sc = session.sparkContext
    sc.localProperties.set(new Properties)
    sc.setJobGroup(group, description, interruptOnCancel = false)
    SparkSession.setActiveSession(session)
    try f finally {
      sc.localProperties.remove()
      SparkSession.clearActiveSession()
    }
  }

  /** Whether Spark's own exchange reuse is on (`spark.sql.exchange.reuse`): memphis's follows it. */
  def exchangeReuseEnabled(conf: SQLConf): Boolean = conf.exchangeReuseEnabled
}
