package io.memphis.facade

import io.memphis.cache.{EntryTable, Eviction, SlowerQueries, SparkCache, StorageTracking}
import io.memphis.conf.ConnectSessions
import org.apache.spark.sql.SparkSession

/**
 * Letting go of what memphis holds, in every store at once: everything (`memphis.clear`, memphis
 * turned off), or one Spark Connect user's (their last session closed, or they cleared), apart from
 * the facade because it reaches every store and decides whose each thing is.
 */
final class Releases(table: EntryTable, spark: SparkCache, stores: Stores, eviction: Eviction, storage: StorageTracking,
    slower: SlowerQueries, shareAcrossUsers: Boolean) {
  /**
   * Lets go of everything memphis holds (`memphis.clear`, or memphis turned off), the relations Spark
   * re-cached for entries let go outside memphis included: a user's `unpersist()` of a plan that
   * memphis's entries are built on makes Spark's CacheManager rebuild theirs, untracked.
   */
  def releaseAll(session: SparkSession, why: String): Unit = table.locked {
    stores.releaseAll(why)
    eviction.releaseAll(session, why)
    storage.uncacheReplaced(session)
  }

  /**
   * A Spark Connect session closed: when it was its user's last, what only that user could use
   * (their entries, checkpoints and join broadcasts) is let go. Nothing when entries are shared.
   */
  def connectSessionClosed(user: String, sessionId: String): Unit =
    if (!shareAcrossUsers && !ConnectSessions.active.exists { case (u, s, _) => u == user && s != sessionId }) {
      releaseOf(user, s"the last Spark Connect session of $user closed")
    }

  /** Lets go of what only `user` could use: their entries', checkpoints', join broadcasts' and collected results' data. */
  private def releaseOf(user: String, why: String): Unit = table.locked {
    stores.releaseOf(user, why)
    eviction.releaseOf(user, why)
  }

  /**
   * `memphis.clear` from `session`: forgets every entry after releasing what they hold; on a Spark
   * Connect server, where users share this cache, lets go of what the calling user's hold.
   */
  def clearFor(session: SparkSession): Unit = {
    // Outside the lock: a write running now finishes its job, whose listener events need the lock.
    stores.durable.settle(LineageCache.SettleMs)
    connectUser(session).fold(clear(session))(u => releaseOf(u, s"cleared by $u"))
  }

  /** [[clearFor]], then deletes the durable tier's Spark entries of `session`'s user. */
  def clearDurableFor(session: SparkSession): Unit = {
    clearFor(session)
    stores.durable.clear(ConnectSessions.userOfQuery(session))
  }

  /** memphis turned off in `session`: lets go of what it holds (on a Connect server, what the session's user's hold). */
  def releaseFor(session: SparkSession, why: String): Unit = connectUser(session).fold(releaseAll(session, why))(releaseOf(_, why))

  /** The Spark Connect user of `session` whose entries are theirs alone (none when entries are shared). */
  def connectUser(session: SparkSession): Option[String] = ConnectSessions.userOf(session).filter(_ => !shareAcrossUsers)

  /** Forgets every entry too, after releasing what they hold. */
  def clear(session: SparkSession): Unit = table.locked {
    releaseAll(session, "cleared")
    table.clear()
    slower.clear()
    spark.clear()
  }
}
