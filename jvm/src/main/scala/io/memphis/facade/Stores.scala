package io.memphis.facade

import io.memphis.broadcasts.JoinBroadcasts
import io.memphis.checkpoint.Checkpoints
import io.memphis.collected.CollectedResults
import io.memphis.conf.CacheStats
import io.memphis.durable.DurableTier
import io.memphis.lineage.HeldKeys
import org.apache.spark.SparkContext
import org.apache.spark.sql.internal.SQLConf

/**
 * What memphis keeps besides its entries in Spark storage, one of each per lineage cache: built
 * here so that the facade only names them. `scoped` names a user's item of a key (see [[LineageCache.scoped]]);
 * `keys` holds the kept results' keys with the entries'.
 */
final class Stores(sparkContext: SparkContext, stats: CacheStats, shareAcrossUsers: Boolean,
    scoped: (String, String) => String, storageBudgetBytes: SQLConf => Long, keys: HeldKeys) {
  /** Loop-carried subplans cut by local checkpoints (see [[CheckpointRule]]). */
  val checkpoints = new Checkpoints(sparkContext, stats, scoped, storageBudgetBytes)

  /** Broadcasts of joins that later queries read instead of building them again. */
  val broadcasts = new JoinBroadcasts(sparkContext, stats, shareAcrossUsers)

  /** Rows queries collected to the driver that later queries read instead of computing their subplan again. */
  val collected = new CollectedResults(stats, scoped, keys)

  /** Results of subplans kept beyond the application, under `spark.memphis.durable.dir`. */
  val durable = new DurableTier(sparkContext, stats, shareAcrossUsers)

  private val holding = Seq(checkpoints, broadcasts, collected)

  /** Lets go of what only `user` could use in each store. */
  def releaseOf(user: String, why: String): Unit = holding.foreach(_.releaseOf(user, why))

  /** Lets go of everything each store holds. */
  def releaseAll(why: String): Unit = holding.foreach(_.releaseAll(why))
}
