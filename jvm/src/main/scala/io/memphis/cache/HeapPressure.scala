package io.memphis.cache

import io.memphis.conf.CacheStats
import java.lang.management.{ManagementFactory, MemoryNotificationInfo, MemoryPoolMXBean, MemoryType}
import javax.management.{Notification, NotificationEmitter, NotificationListener}

import scala.util.control.NonFatal

/**
 * The driver heap's pressure valve: tells when the heap's old generation stays above
 * `driver.pressureThreshold` of its maximum after a garbage collection, as the JVM's memory pool
 * reports it (its collection usage threshold), so that memphis lets go of what it holds on the
 * driver before Spark runs out of memory. Each crossing is handled once: the JVM counts them.
 *
 * Why a collection threshold: the heap's usage between collections says nothing about what is
 * live; what survives a collection is what stays.
 */
final class HeapPressure(threshold: Double) {
  // Invariant: `handled` changes only under this object's lock.
  private var handled = 0L

  /** The pool that holds long-lived objects: the heap pool with both usage thresholds (G1's old generation). */
  private val pool: Option[MemoryPoolMXBean] = ManagementFactory.getMemoryPoolMXBeans.toArray(Array.empty[MemoryPoolMXBean])
    .find(p => p.getType == MemoryType.HEAP && p.isUsageThresholdSupported && p.isCollectionUsageThresholdSupported)

  pool.foreach { p =>
    val max = if (p.getUsage.getMax > 0) p.getUsage.getMax else Runtime.getRuntime.maxMemory
    p.setCollectionUsageThreshold((max * threshold).toLong)
    handled = p.getCollectionUsageThresholdCount
  }

  /** Whether the heap crossed the threshold after a collection since the last time this said so. */
  def crossed(): Boolean = synchronized {
    pool.exists { p =>
      val count = p.getCollectionUsageThresholdCount
      val fresh = count > handled && p.isCollectionUsageThresholdExceeded
      handled = count
      fresh
    }
  }

  /** Whether the old generation stayed above the threshold after the latest collection. */
  def above: Boolean = pool.exists(_.isCollectionUsageThresholdExceeded)

  /** The old generation's use after the latest collection, and its maximum (for the log). */
  def describe: String = pool.fold("no old-generation pool")(p =>
    s"${p.getName}: ${p.getCollectionUsage.getUsed} bytes in use after a collection, threshold ${p.getCollectionUsageThreshold}")
}

object HeapPressure {
  /** The driver's heap: in use now and its maximum, in bytes. */
  def usedBytes: Long = ManagementFactory.getMemoryMXBean.getHeapMemoryUsage.getUsed

  def maxBytes: Long = Runtime.getRuntime.maxMemory

  /**
   * Runs `onCrossing` when the JVM reports a crossing of a collection threshold, on its notification
   * thread; registered once per JVM (the caller forwards to the live cache).
   */
  def listen(onCrossing: () => Unit): Unit = ManagementFactory.getMemoryMXBean match {
    case emitter: NotificationEmitter =>
      emitter.addNotificationListener(new NotificationListener {
        override def handleNotification(n: Notification, handback: Any): Unit =
          if (n.getType == MemoryNotificationInfo.MEMORY_COLLECTION_THRESHOLD_EXCEEDED) {
            try onCrossing() catch {
              case NonFatal(e) => CacheStats.log.warn(s"memphis: the heap pressure valve failed: $e", e)
            }
          }
      }, null, null)
    case _ =>
  }
}
