package org.apache.spark.sql.memphis

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/** Spark internals the tests reach for, in Spark's package as [[SparkShims]] is. */
object CacheTestShim {
  /**
   * Builds the RDD of the cached relation Spark holds for `plan` without running a job (adaptive
   * execution off), as the first job that reads it would: its (id, partitions).
   */
  def buildCachedRdd(session: SparkSession, plan: LogicalPlan): Option[(Int, Int)] =
    SparkShimImpl.lookupCachedData(session, plan).map { cached =>
      val rdd = cached.cachedRepresentation.cacheBuilder.cachedColumnBuffers
      rdd.id -> rdd.getNumPartitions
    }

  /** The analyzed plans Spark's CacheManager holds cached relations for. */
  def cachedPlans(session: SparkSession): Seq[LogicalPlan] = cachedData(session).map(_.plan)

  /** The sessions Spark's CacheManager planned each cached relation with. */
  def cachedPlanSessions(session: SparkSession): Seq[SparkSession] =
    cachedData(session).map(_.cachedRepresentation.cacheBuilder.cachedPlan.session)

  private def cachedData(session: SparkSession): Seq[org.apache.spark.sql.execution.CachedData] =
    SparkRuntime.cachedData(session).getOrElse(sys.error("the CacheManager's cached data could not be read"))
}
