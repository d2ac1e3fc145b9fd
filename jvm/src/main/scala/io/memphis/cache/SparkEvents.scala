package io.memphis.cache

/**
 * What Spark's listener reports ([[io.memphis.facade.StorageListener]]) and the slower-query guard's
 * executions: the one way in for events from Spark's threads, each applied under the entry table's lock.
 */
final class SparkEvents(table: EntryTable, storage: StorageTracking, slower: SlowerQueries) {
  def blockUpdated(rddId: Int, partition: Int, isStored: Boolean, bytes: Long, executor: String): Unit =
    table.locked(storage.blockUpdated(rddId, partition, isStored, bytes, executor))
  def executorRemoved(executor: String): Unit = table.locked(storage.executorRemoved(executor))
  def jobStarted(jobId: Int, executionId: Option[Long], rdds: Seq[(Int, String)]): Unit =
    table.locked(storage.jobStarted(jobId, executionId, rdds))
  def readerEnded(reader: Long): Unit = table.locked(storage.readerEnded(reader))
  def rddUnpersisted(rddId: Int): Unit = table.locked(storage.rddUnpersisted(rddId))
  def executionPlanned(id: Long, consumer: String, since: Long, used: Set[CacheEntry]): Unit =
    table.locked(slower.executionPlanned(id, consumer, since, used))
  def executionEnded(id: Long, endMs: Long, failed: Boolean): Unit = table.locked(slower.executionEnded(id, endMs, failed))
}
