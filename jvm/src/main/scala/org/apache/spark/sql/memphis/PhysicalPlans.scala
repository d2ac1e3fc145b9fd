package org.apache.spark.sql.memphis

import java.util.concurrent.atomic.AtomicInteger

import org.apache.spark.{MapOutputTrackerMaster, SparkEnv}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.QueryPlanningTracker
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.{ColumnarToRowTransition, InputAdapter, RowToColumnarTransition, SparkPlan,
  WholeStageCodegenExec}
import org.apache.spark.sql.execution.adaptive.{AdaptiveSparkPlanExec, BroadcastQueryStageExec, QueryStageExec,
  ShuffleQueryStageExec}
import org.apache.spark.sql.execution.exchange.{BroadcastExchangeExec, Exchange, ReusedExchangeExec, ShuffleExchangeExec,
  ShuffleExchangeLike}
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd

/**
 * memphis's reading of Spark's physical plans: the shuffles and broadcasts a query builds, whether
 * they are built, what they cost and hold, the nodes that read a retained one in place of a new
 * one, and what a finished SQL execution ran. The same on every Spark line; what differs goes
 * through [[SparkShimImpl]].
 */
object PhysicalPlans {
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
      case s: ShuffleQueryStageExec => SparkShimImpl.stageSucceeded(s)
      case _ => true
    }
    stageOk && (SparkEnv.get.mapOutputTracker match {
      case master: MapOutputTrackerMaster =>
        SparkShimImpl.shuffleId(shuffleOf(retained)).exists(id => master.findMissingPartitions(id).exists(_.isEmpty))
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

  /** The session whose SQL execution ended, when the event carries its query. */
  def sessionOf(end: SparkListenerSQLExecutionEnd): Option[SparkSession] = Option(end.qe).map(_.sparkSession)

  /**
   * The broadcasts a finished SQL execution built, with its subqueries and adaptive stages: the
   * exchanges (under adaptive execution, their query stages) whose relation was built successfully.
   * None when the execution failed or Spark kept no record of its plan.
   */
  def builtBroadcasts(end: SparkListenerSQLExecutionEnd): Seq[SparkPlan] =
    Option(end.qe).filter(_ => end.executionFailure.isEmpty).toSeq.flatMap(qe => broadcastsBuiltIn(qe.executedPlan))

  /**
   * The broadcasts built in `plan`, its subqueries and adaptive stages included, each once (not the
   * stages that reuse one): the exchanges (under adaptive execution, their query stages).
   */
  def broadcastsBuiltIn(plan: SparkPlan): Seq[SparkPlan] = {
    def walk(p: SparkPlan): Seq[SparkPlan] = (p match {
      case a: AdaptiveSparkPlanExec => walk(a.executedPlan)
      case s: BroadcastQueryStageExec if s.plan.isInstanceOf[BroadcastExchangeExec] =>
        Seq(s).filter(broadcastBuilt) ++ walk(s.broadcast.child)
      case s: QueryStageExec => walk(s.plan)
      case e: BroadcastExchangeExec => Seq(e).filter(broadcastBuilt) ++ walk(e.child)
      case _: ReusedExchangeExec => Nil
      case other => other.children.flatMap(walk)
    }) ++ p.subqueries.flatMap(walk)
    walk(plan)
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
      case s: BroadcastQueryStageExec => SparkShimImpl.stageSucceeded(s)
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
   * The normalized plan of the query a finished SQL execution ran, when Spark kept its query
   * execution and optimized it (which read the normalized plan): never planned here, on a listener's thread.
   */
  def normalizedPlan(end: SparkListenerSQLExecutionEnd): Option[LogicalPlan] =
    Option(end.qe).filter(_.tracker.phases.contains(QueryPlanningTracker.OPTIMIZATION)).map(_.normalized)

  /** Whether a SQL execution failed. */
  def executionFailed(end: SparkListenerSQLExecutionEnd): Boolean = end.executionFailure.isDefined
}
