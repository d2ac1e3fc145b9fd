package org.apache.spark.sql.memphis

import java.util.concurrent.atomic.AtomicInteger

import org.apache.spark.{MapOutputTrackerMaster, SPARK_VERSION, SparkContext, SparkEnv}
import io.memphis.MemphisConf
import io.memphis.lineage.KeyContext
import org.apache.spark.sql.{Dataset, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import scala.reflect.ClassTag

import org.apache.spark.rdd.{CheckpointRDD, RDD, RDDCheckpointData, ReliableCheckpointRDD}
import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.execution.{CacheManager, ColumnarToRowTransition, DoNotCleanup, InputAdapter, LogicalRDD,
  QueryExecution, RowToColumnarTransition, SparkPlan, WholeStageCodegenExec}
import org.apache.spark.sql.execution.adaptive.{AdaptiveSparkPlanExec, BroadcastQueryStageExec, QueryStageExec,
  ShuffleQueryStageExec}
import org.apache.spark.sql.execution.exchange.{BroadcastExchangeExec, Exchange, ReusedExchangeExec, ShuffleExchangeExec,
  ShuffleExchangeLike}
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd
import org.apache.spark.sql.internal.SQLConf

/**
 * Everything memphis needs from Spark internals that change between minor versions, for Spark 4.2.
 * It sits in Spark's package because some of it is `private[spark]`. A build for another Spark
 * version swaps this folder (`jvm/src/main/spark-<version>`), nothing else.
 */
object SparkShim {
  /** The Spark minor version this folder is written against. */
  val SupportedSparkMinor = "4.2"

  /** Why the running Spark cannot host this build, if it cannot. */
  def unsupportedSparkReason(version: String = SPARK_VERSION): Option[String] =
    if (version == SupportedSparkMinor || version.startsWith(SupportedSparkMinor + ".")) None
    else Some(s"memphis is built for Spark $SupportedSparkMinor.x but this is Spark $version; " +
      s"use Spark $SupportedSparkMinor (pyspark==$SupportedSparkMinor.0) or a memphis build for Spark $version")

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

  /**
   * The user a query runs as, by Spark's own rule (what `current_user()` returns): the user the
   * Thrift server set for this statement's thread, else `SPARK_USER`, else the Hadoop
   * `UserGroupInformation` current user (a `doAs` changes it).
   */
  def currentUser: String = org.apache.spark.sql.catalyst.CurrentUserContext.getCurrentUser

  /** Host and port of the driver's block manager, to tell driver storage from executors'. */
  def driverBlockManagerHostPort: Option[(String, Int)] =
    Option(SparkEnv.get).map(env => (env.blockManager.blockManagerId.host,
      env.blockManager.blockManagerId.port))

  /** Spark's local directories on this machine (shuffle files, spilled blocks). */
  def localDirs: Seq[java.io.File] =
    Option(SparkEnv.get).toSeq.flatMap(_.blockManager.diskBlockManager.localDirs.toSeq.map(_.getParentFile)).distinct

  /** The session's own SQLConf (the API-level SparkSession does not expose it in Spark 4). */
  def sqlConf(session: SparkSession): SQLConf =
    session.asInstanceOf[org.apache.spark.sql.classic.SparkSession].sessionState.conf

  /** A new session over the same SparkContext and shared state, with a copy of `session`'s state. */
  def cloneSession(session: SparkSession): SparkSession = classic(session).cloneSession()

  /**
   * What Spark's CacheManager turns off in the session a plan is cached with when the cached plan
   * may change its output partitioning (it clones the session unless these are already off).
   */
  val CachedPlanConfsOff: Seq[String] = Seq(SQLConf.AUTO_BUCKETED_SCAN_ENABLED.key)

  /** Lets adaptive execution change a cached plan's partitioning (coalesce its partitions). */
  val CachedPlanPartitioningConf: String = SQLConf.CAN_CHANGE_CACHED_PLAN_OUTPUT_PARTITIONING.key

  /** The analyzed plan of a DataFrame (the classic Dataset in Spark 4). */
  def analyzedPlan(df: Dataset[_]): LogicalPlan =
    df.asInstanceOf[org.apache.spark.sql.classic.Dataset[_]].queryExecution.analyzed

  /** What lineage keys depend on besides the plan, from the session's confs. */
  def keyContext(session: SparkSession): KeyContext = {
    val conf = sqlConf(session)
    val state = session.asInstanceOf[org.apache.spark.sql.classic.SparkSession].sessionState
    new KeyContext(() => state.newHadoopConf(), conf.caseSensitiveAnalysis,
      s"parallelism=${session.sparkContext.defaultParallelism},maxPartitionBytes=${conf.filesMaxPartitionBytes}," +
        s"openCost=${conf.filesOpenCostInBytes},minPartitions=${conf.filesMinPartitionNum}",
      MemphisConf.LineageMaxListedFiles.get(conf))
  }

  /** `plan` (analyzed) as the session's optimizer plans it on its own. */
  def optimize(session: SparkSession, plan: LogicalPlan): LogicalPlan =
    classic(session).sessionState.optimizer.execute(plan)

  def classic(session: SparkSession): org.apache.spark.sql.classic.SparkSession =
    session.asInstanceOf[org.apache.spark.sql.classic.SparkSession]

  def cacheManager(session: SparkSession): CacheManager = classic(session).sharedState.cacheManager

  /**
   * The name of the cached relation Spark would substitute for `plan` (None: nothing cached; Some(None):
   * cached without a name). Its RDD is not touched: building it would run an adaptive plan's stages.
   */
  def cachedRelationName(session: SparkSession, plan: LogicalPlan): Option[Option[String]] =
    cacheManager(session).lookupCachedData(classic(session), plan).map(_.cachedRepresentation.cacheBuilder.tableName)

  /** The table name and partition count of a cached relation's RDD. */
  def persistedRdd(sc: SparkContext, rddId: Int): Option[(String, Int)] =
    sc.getPersistentRDDs.get(rddId).flatMap(rdd => cachedTableName(rdd.name).map(_ -> rdd.getNumPartitions))

  /** The table name in a cached relation's RDD name ("In-memory table <name>"), if it is one. */
  def cachedTableName(rddName: String): Option[String] =
    Option(rddName).filter(_.startsWith(CachedRddPrefix)).map(_.stripPrefix(CachedRddPrefix))

  private val CachedRddPrefix = "In-memory table "

  def localRelation(output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    LocalRelation(output, rows)

  /**
   * `plan` as a lazily materialized local checkpoint (what `Dataset.localCheckpoint(eager = false)`
   * builds): a `LogicalRDD` over an RDD marked for local checkpointing, and that RDD. Nothing runs
   * for the last stage until a job reads the RDD; under adaptive execution the stages below it run now.
   */
  def localCheckpoint(session: SparkSession, plan: LogicalPlan): (LogicalPlan, RDD[_]) = {
    val relation = checkpointRelation(session, plan)
    (relation, relation.rdd)
  }

  /**
   * `plan` as a lazily materialized reliable checkpoint written to the folder `dir`: built like
   * [[localCheckpoint]] (its blocks are kept while the job that fills it runs, so writing the files
   * reads them instead of computing the plan again), then, once that job has filled it, written to
   * `dir` and read from there; its blocks are dropped. Unlike `Dataset.checkpoint`, the folder is
   * memphis's own, not `SparkContext.checkpointDir`, which belongs to the user.
   */
  def reliableCheckpoint(session: SparkSession, plan: LogicalPlan, dir: String): (LogicalPlan, RDD[_]) = {
    val relation = checkpointRelation(session, plan)
    relation.rdd.checkpointData = Some(new FolderCheckpointData(relation.rdd, dir))
    (relation, relation.rdd)
  }

  private def checkpointRelation(session: SparkSession, plan: LogicalPlan): LogicalRDD =
    org.apache.spark.sql.classic.Dataset.ofRows(classic(session), plan).localCheckpoint(eager = false)
      .logicalPlan match {
      case r: LogicalRDD => r
      case other => throw new IllegalStateException(s"localCheckpoint made ${other.nodeName}, not a LogicalRDD")
    }

  /** Writes an RDD to `dir` after the first job that computes it (Spark calls `doCheckpoint` then). */
  private final class FolderCheckpointData[T: ClassTag](@transient private val rdd: RDD[T], dir: String)
      extends RDDCheckpointData[T](rdd) {
    override protected def doCheckpoint(): CheckpointRDD[T] = {
      val written = ReliableCheckpointRDD.writeRDDToCheckpointDirectory(rdd, dir)
      rdd.unpersist(blocking = false)
      written
    }
  }

  /**
   * A fresh instance of a checkpoint's relation whose output carries the expression ids of `output`
   * (the subplan it stands for), so that the operators above it stay resolved.
   */
  def rebind(relation: LogicalPlan, output: Seq[Attribute]): LogicalPlan = {
    val fresh = relation match {
      case r: LogicalRDD => r.newInstance()
      case other => other
    }
    Project(output.zip(fresh.output).map { case (want, have) =>
      Alias(have, want.name)(exprId = want.exprId, qualifier = want.qualifier)
    }, fresh)
  }

  /** Bytes (memory + disk) of the blocks Spark stores for `rdd` now. */
  def storedBytes(rdd: RDD[_]): Long =
    rdd.sparkContext.getRDDStorageInfo(_.id == rdd.id).map(i => i.memSize + i.diskSize).sum

  /** Whether a local checkpoint's RDD has been materialized (its lineage is cut now). */
  def isCheckpointed(rdd: RDD[_]): Boolean = rdd.isCheckpointed

  /**
   * The shuffles `plan` reads first: the exchanges (under adaptive execution, their query stages)
   * reached from its root without crossing another exchange or stage.
   */
  def shuffleFrontier(plan: SparkPlan): Seq[SparkPlan] = plan match {
    case s: ShuffleQueryStageExec => Seq(s)
    case e: ShuffleExchangeLike => Seq(e)
    case _: QueryStageExec | _: Exchange | _: AdaptiveSparkPlanExec => Nil
    case p => p.children.flatMap(shuffleFrontier)
  }

  private def shuffleOf(retained: SparkPlan): ShuffleExchangeLike = retained match {
    case s: ShuffleQueryStageExec => s.shuffle
    case e: ShuffleExchangeLike => e
  }

  /**
   * An exchange's plan (shuffle or broadcast) in the form two plans of the same exchange share:
   * canonical, and without the code-generation wrappers and columnar transitions that only an
   * executed plan has (a query stage keeps the form it had before them).
   */
  def exchangeIdentity(exchange: SparkPlan): SparkPlan = exchange match {
    case s: QueryStageExec => s.canonicalized
    case e => withoutExecutionWrappers(e).canonicalized
  }

  private def withoutExecutionWrappers(plan: SparkPlan): SparkPlan = plan.transformUp {
    case w: WholeStageCodegenExec => w.child
    case i: InputAdapter => i.child
    case c: ColumnarToRowTransition => c.child
    case r: RowToColumnarTransition => r.child
  }

  /** Whether every map output of a retained shuffle (from [[shuffleFrontier]]) is registered now. */
  def shuffleWritten(retained: SparkPlan): Boolean = {
    val stageOk = retained match {
      case s: ShuffleQueryStageExec => s.isMaterialized && !s.hasFailed
      case _ => true
    }
    stageOk && (SparkEnv.get.mapOutputTracker match {
      case master: MapOutputTrackerMaster => master.findMissingPartitions(shuffleOf(retained).shuffleId).exists(_.isEmpty)
      case _ => false
    })
  }

  /**
   * What reads the retained shuffle in place of `exchange` (canonically equal to it): under adaptive
   * execution a query stage (materialized when the retained one was), else a reused exchange.
   */
  def reuseShuffle(retained: SparkPlan, exchange: SparkPlan, asQueryStage: Boolean): SparkPlan = retained match {
    case s: ShuffleQueryStageExec if asQueryStage => s.newReuseInstance(reusedStageIds.incrementAndGet(), exchange.output)
    case _ if asQueryStage =>
      ShuffleQueryStageExec(reusedStageIds.incrementAndGet(), ReusedExchangeExec(exchange.output, shuffleOf(retained)),
        retained.canonicalized)
    case _ => ReusedExchangeExec(exchange.output, shuffleOf(retained))
  }

  // Ids of reused stages: apart from the ids adaptive execution numbers from 0 within a query.
  private val reusedStageIds = new AtomicInteger(1 << 30)

  /**
   * The broadcast exchanges `plan` is about to build, in its subqueries too (those a dynamic
   * partition pruning filter reads among them); not those inside query stages or nested adaptive
   * plans, which their own planning sees.
   */
  def broadcastsToBuild(plan: SparkPlan): Seq[SparkPlan] = {
    def walk(p: SparkPlan): Seq[SparkPlan] = (p match {
      case e: BroadcastExchangeExec => Seq(e)
      case _: QueryStageExec | _: AdaptiveSparkPlanExec | _: ReusedExchangeExec => Nil
      case other => other.children.flatMap(walk)
    }) ++ p.subqueries.flatMap(walk)
    walk(plan)
  }

  /**
   * The logical plan a broadcast exchange's build side computes: the logical link of its topmost
   * linked operator, provided that every leaf below it was planned from a node of that logical plan
   * (so that the logical plan's sources are all the sources the broadcast reads).
   */
  def broadcastBuildSide(exchange: SparkPlan): Option[LogicalPlan] = exchange match {
    case e: BroadcastExchangeExec =>
      val child = withoutExecutionWrappers(e.child)
      child.logicalLink.filter(logical => child.collectLeaves().forall(_.logicalLink.exists(l => logical.exists(_ eq l))))
    case _ => None
  }

  /**
   * The broadcasts a finished SQL execution built, with its subqueries and adaptive stages: the
   * exchanges (under adaptive execution, their query stages) whose relation was built successfully.
   * None when the execution failed or Spark kept no record of its plan.
   */
  def builtBroadcasts(end: SparkListenerSQLExecutionEnd): Seq[SparkPlan] = {
    def walk(p: SparkPlan): Seq[SparkPlan] = (p match {
      case a: AdaptiveSparkPlanExec => walk(a.executedPlan)
      case s: BroadcastQueryStageExec if s.plan.isInstanceOf[BroadcastExchangeExec] =>
        Seq(s).filter(broadcastBuilt) ++ walk(s.broadcast.child)
      case s: QueryStageExec => walk(s.plan)
      case e: BroadcastExchangeExec => Seq(e).filter(broadcastBuilt) ++ walk(e.child)
      case _: ReusedExchangeExec => Nil
      case other => other.children.flatMap(walk)
    }) ++ p.subqueries.flatMap(walk)
    Option(end.qe).filter(_ => end.executionFailure.isEmpty).toSeq.flatMap(qe => walk(qe.executedPlan))
  }

  /** The exchange node of a broadcast (from [[broadcastsToBuild]] or [[builtBroadcasts]]), where tags live. */
  def broadcastExchange(broadcast: SparkPlan): BroadcastExchangeExec = broadcast match {
    case s: BroadcastQueryStageExec => s.broadcast.asInstanceOf[BroadcastExchangeExec]
    case e: BroadcastExchangeExec => e
  }

  /**
   * Whether a broadcast's relation is built and usable: its future completed successfully (reading
   * the promise, never the relation future itself, which would start building an unbuilt one).
   */
  def broadcastBuilt(retained: SparkPlan): Boolean = {
    val stageOk = retained match {
      case s: BroadcastQueryStageExec => s.isMaterialized && !s.hasFailed
      case _ => true
    }
    stageOk && broadcastExchange(retained).completionFuture.value.exists(_.isSuccess)
  }

  /** The built relation's size (the exchange's "data size" metric). */
  def broadcastBytes(retained: SparkPlan): Long = broadcastExchange(retained).runtimeStatistics.sizeInBytes.toLong

  /** What building the broadcast cost, in ms: collecting, building and broadcasting its relation. */
  def broadcastCostMs(retained: SparkPlan): Long = {
    val metrics = broadcastExchange(retained).metrics
    Seq("collectTime", "buildTime", "broadcastTime").flatMap(metrics.get).map(_.value).sum
  }

  /**
   * Bytes a retained shuffle (from [[shuffleFrontier]]) wrote to local disk, as its map outputs
   * report; 0 while some are missing (a lost executor), when Spark reads them as none.
   */
  def shuffleBytes(retained: SparkPlan): Long = SparkEnv.get.mapOutputTracker match {
    case master: MapOutputTrackerMaster if shuffleWritten(retained) => shuffleOf(retained) match {
      case e: ShuffleExchangeExec => scala.util.Try(master.getStatistics(e.shuffleDependency).bytesByPartitionId.sum).getOrElse(0L)
      case _ => 0L
    }
    case _ => 0L
  }

  /** Whether a SQL execution failed. */
  def executionFailed(end: SparkListenerSQLExecutionEnd): Boolean = end.executionFailure.isDefined

  /**
   * Lets go of a retained broadcast without destroying it: its executors' copies are removed now
   * (they are fetched from the driver again if read); the driver's copy goes when Spark's
   * ContextCleaner finds no plan referencing it, as for any query's broadcast.
   */
  def releaseBroadcast(retained: SparkPlan): Unit =
    broadcastExchange(retained).completionFuture.value.flatMap(_.toOption).foreach(_.unpersist(false))

  /**
   * What reads the retained broadcast in place of `exchange` (equal to it by [[exchangeIdentity]]):
   * under adaptive execution a materialized query stage, which only a retained stage can give;
   * otherwise a reused exchange.
   */
  def reuseBroadcast(retained: SparkPlan, exchange: SparkPlan, asQueryStage: Boolean): Option[SparkPlan] =
    retained match {
      case s: BroadcastQueryStageExec if asQueryStage => Some(s.newReuseInstance(reusedStageIds.incrementAndGet(), exchange.output))
      case _ if asQueryStage => None
      case _ => Some(ReusedExchangeExec(exchange.output, broadcastExchange(retained)))
    }

  /**
   * Waits (at most `timeoutMs`) until Spark's listeners have seen every event posted so far: a
   * query's end reaches listeners asynchronously, and the next query may be planned before.
   */
  def awaitListeners(sc: SparkContext, timeoutMs: Long): Unit =
    try sc.listenerBus.waitUntilEmpty(timeoutMs) catch { case _: java.util.concurrent.TimeoutException => }

  /** Whether Spark's own exchange reuse is on (`spark.sql.exchange.reuse`): memphis's follows it. */
  def exchangeReuseEnabled(conf: SQLConf): Boolean = conf.exchangeReuseEnabled

  /** Whether Spark keeps a query's shuffle files after it ends (it does unless told to clean up). */
  def shuffleFilesKept(conf: SQLConf): Boolean =
    QueryExecution.determineShuffleCleanupMode(conf) == DoNotCleanup &&
      !conf.getConfString("spark.sql.connect.shuffleDependency.fileCleanup.enabled", "false").toBoolean
}
