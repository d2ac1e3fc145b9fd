package io.memphis.cache

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}

/**
 * The session memphis hands Spark's CacheManager to cache a subplan with: one clone of the user's
 * session, kept, whose SQL conf follows the user's at every persist, with what Spark's CacheManager
 * turns off for a cached plan already off, and adaptive execution allowed to coalesce the cached
 * plan's partitions (Spark keeps them fixed for its own cache: a cached aggregate of 200
 * near-empty partitions costs more than it saves).
 *
 * Why a kept clone: given a session with those settings on, CacheManager clones it on every
 * `cacheQuery`. memphis persists far more often than a user calls `cache()`, and each clone (its
 * own catalog and function registry, about 1 MiB) stays reachable from the pool threads its
 * planning started, which Spark keeps with the session they inherited for 60 s after their last
 * task. It also leaves the user's session untouched: other threads read its conf meanwhile.
 *
 * Guarded by the lineage cache's one lock, its entry table's (one persist at a time).
 */
final class CachingSession {
  private var user: Option[SparkSession] = None
  private var cloned: Option[SparkSession] = None
  private var synced: Option[Map[String, String]] = None

  /** The session to cache `session`'s subplans with. */
  def of(session: SparkSession): SparkSession = {
    if (!user.exists(_ eq session)) {
      cloned = Some(SparkShimImpl.cloneSession(session))
      user = Some(session)
      synced = None
    }
    val settings = SparkShimImpl.sqlConf(session).getAllConfs
    if (!synced.contains(settings)) {
      val conf = SparkShimImpl.sqlConf(cloned.get)
      conf.clear()
      settings.foreach { case (k, v) => conf.setConfString(k, v) }
      SparkShimImpl.cachedPlanConfsOff.foreach(conf.setConfString(_, "false"))
      conf.setConfString(SparkRuntime.CachedPlanPartitioningConf, "true")
      synced = Some(settings)
    }
    cloned.get
  }

  /** Lets go of the clone (memphis cleared or turned off). */
  def clear(): Unit = {
    user = None
    cloned = None
    synced = None
  }
}
