package io.memphis.cache

import io.memphis.conf.Suspension
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}
import org.apache.spark.storage.StorageLevel

/**
 * The one place memphis talks to Spark's CacheManager, which stores the data and substitutes cached
 * relations into queries. A cache or uncache runs with memphis's rules off on its thread
 * ([[Suspension.suspended]]): the CacheManager normalizes the plans it is handed, which would run
 * them again. Called under the lineage cache's lock (the CacheManager's own lock comes second).
 */
final class SparkCache {
  /** The session subplans are cached with (see [[CachingSession]]). */
  private val caching = new CachingSession

  /**
   * Registers `plan` as the cached relation `name`, filled in the job that needs it; `shuffles`
   * (kept by its first occurrence) are on offer to its planning, and `reused` is told how many it read.
   */
  def cache(session: SparkSession, plan: LogicalPlan, name: String, shuffles: Seq[SparkPlan], reused: Int => Unit): Unit =
    Suspension.suspended(
      SparkShimImpl.cacheQuery(caching.of(session), ShuffleOffer(shuffles, reused, plan), Some(name), StorageLevel.MEMORY_AND_DISK))

  def uncache(session: SparkSession, plan: LogicalPlan): Unit = Suspension.suspended(SparkShimImpl.uncacheQuery(session, plan))

  /** Whether every partition of the relation Spark holds for `plan` is stored (what its CacheManager checks before a re-cache). */
  def loaded(session: SparkSession, plan: LogicalPlan): Boolean =
    SparkShimImpl.lookupCachedData(session, plan).exists(_.cachedRepresentation.cacheBuilder.isCachedColumnBuffersLoaded)

  /** The name of the cached relation Spark would substitute for `plan`, when it holds one (its name may be none). */
  def relationName(session: SparkSession, plan: LogicalPlan): Option[Option[String]] =
    SparkRuntime.cachedRelationName(session, plan)

  def holds(session: SparkSession, plan: LogicalPlan): Boolean = SparkShimImpl.lookupCachedData(session, plan).isDefined

  /** Whether Spark holds no cached relation at all. */
  def isEmpty(session: SparkSession): Boolean = SparkShimImpl.cacheManager(session).isEmpty

  /** Lets go of the caching session (memphis cleared or turned off). */
  def clear(): Unit = caching.clear()
}
