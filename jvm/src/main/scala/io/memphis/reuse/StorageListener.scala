package io.memphis.reuse

import io.memphis.LineageCache
import org.apache.spark.scheduler.{SparkListener, SparkListenerBlockUpdated, SparkListenerEvent, SparkListenerUnpersistRDD}
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd
import org.apache.spark.storage.RDDBlockId

/**
 * Tells the lineage cache what Spark's block managers actually store, so that "materialized" is
 * confirmed, not assumed, and partitions lost to Spark's own LRU or a lost executor are noticed;
 * and when SQL executions end, so that what they read may be evicted again.
 */
final class StorageListener(cache: LineageCache) extends SparkListener {
  override def onBlockUpdated(event: SparkListenerBlockUpdated): Unit = {
    val info = event.blockUpdatedInfo
    info.blockId match {
      case RDDBlockId(rddId, split) =>
        cache.blockUpdated(rddId, split, info.storageLevel.isValid, info.memSize + info.diskSize)
      case _ =>
    }
  }

  override def onUnpersistRDD(event: SparkListenerUnpersistRDD): Unit = cache.rddUnpersisted(event.rddId)

  override def onOtherEvent(event: SparkListenerEvent): Unit = event match {
    case end: SparkListenerSQLExecutionEnd => cache.executionEnded(end.executionId)
    case _ =>
  }
}
