package io.memphis.conf

import java.util.concurrent.atomic.AtomicLong

import org.slf4j.{Logger, LoggerFactory}

/**
 * The decisions of a [[io.memphis.facade.LineageCache]], as named counters safe to bump from any
 * thread; each decision is posted as a [[MemphisDecisionEvent]] too (see [[MemphisEvents]]).
 */
final class CacheStats(val events: MemphisEvents = new MemphisEvents(None)) {
  import CacheStats.Counter

  private val values: Map[Counter.Value, AtomicLong] = Counter.values.toSeq.map(_ -> new AtomicLong).toMap

  def add(counter: Counter.Value, delta: Long = 1L): Unit = values(counter).addAndGet(delta)

  /**
   * The one path for every decision (persist, reuse, evict, refuse, invalidate): counts it, logs it
   * at debug level with its reason and posts it (the message is made only when one of them needs it).
   */
  def record(counter: Counter.Value, message: => String): Unit = {
    add(counter)
    val debug = CacheStats.log.isDebugEnabled
    if (debug || events.enabled) {
      val text = message
      if (debug) CacheStats.log.debug(s"memphis: $text")
      events.post(MemphisDecisionEvent(System.currentTimeMillis(), counter.toString, text, events.executionId))
    }
  }

  def get(counter: Counter.Value): Long = values(counter).get

  /** Every counter by name, in declaration order. */
  def snapshot: Seq[(String, Long)] = Counter.values.toSeq.map(c => c.toString -> values(c).get)
}

object CacheStats {
  /** memphis's logger (named after the lineage cache, as users configure it). */
  val log: Logger = LoggerFactory.getLogger("io.memphis.LineageCache") // the name its log lines have always had

  /** Names are the public ones: SQL `memphis_stats()` rows and `memphis.stats()` keys. */
  object Counter extends Enumeration {
    val Hits = Value("hits")
    val Misses = Value("misses")
    val Persisted = Value("persisted")
    val Materialized = Value("materialized")
    val Evicted = Value("evicted")
    val Invalidated = Value("invalidated")
    val Refused = Value("refused")
    val RefusedOtherUser = Value("refused_other_user")
    val RefusedUnknownUser = Value("refused_unknown_user")
    val RefusedCrossJoin = Value("refused_cross_join")
    val RefusedEstimatedSize = Value("refused_estimated_size")
    val RefusedBroadcastJoin = Value("refused_broadcast_join")
    val RefusedSlower = Value("refused_slower")
    val RefusedNotRecurring = Value("refused_not_recurring")
    val PressureReleases = Value("pressure_releases")
    val ComputeSavedMs = Value("compute_saved_ms")
    val ShufflesRetained = Value("shuffles_retained")
    val ShufflesReused = Value("shuffles_reused")
    val Checkpointed = Value("checkpointed")
    val CheckpointsReleased = Value("checkpoints_released")
    val CheckpointFilesDeleted = Value("checkpoint_files_deleted")
    val PersistedSpeculatively = Value("persisted_speculatively")
    val PersistedAhead = Value("persisted_ahead")
    val BroadcastsSeen = Value("broadcasts_seen")
    val BroadcastsRegistered = Value("broadcasts_registered")
    val BroadcastsReused = Value("broadcasts_reused")
    val BroadcastsReleased = Value("broadcasts_released")
    val ResultsKept = Value("results_kept")
    val ResultsReused = Value("results_reused")
    val ResultsReleased = Value("results_released")
    val ResultsRefused = Value("results_refused")
    val DurableHits = Value("durable_hits")
    val DurableWrites = Value("durable_writes")
    val DurableBytesWritten = Value("durable_bytes_written")
    val DurableNotAdmitted = Value("durable_not_admitted")
    val DurableWriteFailures = Value("durable_write_failures")
    val DurableRefused = Value("durable_refused")
    val DurableInvalidated = Value("durable_invalidated")
    val DurableEvicted = Value("durable_evicted")
    val DurableCleaned = Value("durable_cleaned")
  }
}
