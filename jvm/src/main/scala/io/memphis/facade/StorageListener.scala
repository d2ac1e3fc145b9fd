package io.memphis.facade

import io.memphis.cache.StorageTracking
import io.memphis.conf.ConnectSessions
import org.apache.spark.scheduler.{SparkListener, SparkListenerBlockManagerRemoved, SparkListenerBlockUpdated,
  SparkListenerEvent, SparkListenerExecutorRemoved, SparkListenerJobEnd, SparkListenerJobStart, SparkListenerUnpersistRDD}
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkShimImpl}
import org.apache.spark.storage.RDDBlockId

/**
 * Tells the lineage cache what Spark's block managers actually store, so that "materialized" is
 * confirmed, not assumed, and partitions lost to Spark's own LRU or a lost executor are noticed;
 * which jobs read cached data, and when they (or their SQL executions) end, so that what a running
 * query reads is not evicted under it; which broadcasts a query built, for later queries to read;
 * which plans, planned before their action, ran (their occurrences are counted then). After each SQL
 * execution it posts memphis's state for the memphis tab.
 */
final class StorageListener(cache: LineageCache) extends SparkListener {
  override def onBlockUpdated(event: SparkListenerBlockUpdated): Unit = {
    val info = event.blockUpdatedInfo
    info.blockId match {
      case RDDBlockId(rddId, split) =>
        cache.events.blockUpdated(rddId, split, info.storageLevel.isValid, info.memSize + info.diskSize,
          info.blockManagerId.executorId)
      case _ =>
    }
  }

  override def onJobStart(event: SparkListenerJobStart): Unit = {
    val execution = Option(event.properties).flatMap(p => Option(p.getProperty("spark.sql.execution.id"))).map(_.toLong)
    val rdds = event.stageInfos.flatMap(_.rddInfos).filter(_.storageLevel.isValid).map(r => r.id -> r.name)
    if (rdds.nonEmpty) cache.events.jobStarted(event.jobId, execution, rdds)
  }

  override def onJobEnd(event: SparkListenerJobEnd): Unit = cache.events.readerEnded(StorageTracking.jobReader(event.jobId))

  // A lost executor's blocks go without block updates. Its block manager's removal and its own
  // both say so (either may come alone); the second finds nothing left to drop.
  override def onExecutorRemoved(event: SparkListenerExecutorRemoved): Unit = cache.events.executorRemoved(event.executorId)

  override def onBlockManagerRemoved(event: SparkListenerBlockManagerRemoved): Unit =
    cache.events.executorRemoved(event.blockManagerId.executorId)

  override def onUnpersistRDD(event: SparkListenerUnpersistRDD): Unit = cache.events.rddUnpersisted(event.rddId)

  override def onOtherEvent(event: SparkListenerEvent): Unit = event match {
    case end: SparkListenerSQLExecutionEnd =>
      cache.events.readerEnded(end.executionId)
      cache.events.executionEnded(end.executionId, end.time, PhysicalPlans.executionFailed(end))
      // Broadcasts register within the driver heap's budget now (results kept since the query was
      // planned count too), the query's pending observation is counted, and then kept results and
      // broadcasts fit the budget together.
      val conf = PhysicalPlans.sessionOf(end).map(SparkShimImpl.sqlConf)
      val normalized = PhysicalPlans.normalizedPlan(end)
      cache.growingDriverHeap(conf) {
        cache.broadcasts.executionEnded(end, conf.map(cache.budgets(_).joinBroadcastBudget), cache.pressure.heapCrowded)
        normalized.foreach(cache.executed)
      }
      // The memphis tab's counters and entries as they are after this execution (see MemphisEvents).
      StatsRows.postState(cache, conf.getOrElse(SQLConf.get), end.executionId)
    case other => ConnectSessions.closedSession(other).foreach { case (user, session) => cache.releases.connectSessionClosed(user, session) }
  }
}
