package io.memphis.cache

import io.memphis.conf.{MemphisConf, Suspension}
import io.memphis.lineage.KeyContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}

/** The context a session's lineage keys are made in: its confs, its Hadoop conf, the user's caches. */
object SessionKeyContext {
  /** What lineage keys depend on besides the plan, from the session's confs. */
  def apply(session: SparkSession): KeyContext = {
    val conf = SparkShimImpl.sqlConf(session)
    new KeyContext(() => SparkShimImpl.newHadoopConf(session), conf.caseSensitiveAnalysis,
      s"parallelism=${session.sparkContext.defaultParallelism},maxPartitionBytes=${conf.filesMaxPartitionBytes}," +
        s"openCost=${conf.filesOpenCostInBytes},minPartitions=${conf.filesMinPartitionNum}",
      MemphisConf.LineageMaxListedFiles.get(conf), userCaches(session))
  }

  /**
   * The plan of the user's cached relation Spark substitutes for a plan (memphis's own relations,
   * named `memphis …`, and its marks left out), when Spark holds one a user made. Looked up with
   * memphis's rules off: Spark normalizes the plan it is handed, which would run them.
   */
  private def userCaches(session: SparkSession): Option[LogicalPlan => Option[LogicalPlan]] =
    if (!SparkRuntime.holdsCachedOtherThan(session, CachedRelation.NamePrefix)) None
    else Some(plan => Suspension.suspended(SparkShimImpl.lookupCachedData(session, plan))
      .filterNot(_.cachedRepresentation.cacheBuilder.tableName.exists(_.startsWith(CachedRelation.NamePrefix)))
      .map(cached => RetainShuffle.strip(OwnerMark.strip(cached.plan))))
}
