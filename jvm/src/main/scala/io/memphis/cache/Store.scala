package io.memphis.cache

import io.memphis.conf.CacheStats.Counter

/**
 * A store of what memphis holds for later queries besides the entries in Spark storage: checkpoints,
 * join broadcasts, collected results (each `H` it holds is let go on its own, by one user or all at once).
 * The entries in Spark storage ([[Eviction]]) are let go by the same names, in the same order, after
 * the session whose CacheManager uncaches them: `release(session, entry, state, counter, why)`,
 * `releaseOf(user, why)`, `releaseAll(session, why)`.
 *
 * Lock order: the entry table's lock ([[EntryTable.locked]]) first; under it, one store's own
 * monitor at a time (Checkpoints', with CheckpointFiles' inside it; JoinBroadcasts'; CollectedResults';
 * DurableTier's, then DurableAdmission's), never the table's from under a store's (a budget a store
 * measures itself reads the conf and Spark's executors, not the table); Spark's CacheManager's lock
 * last ([[SparkCache]]). Outside the table's lock, a store's monitor is taken alone (the listener, the rules).
 */
trait Store[H] {
  /** Lets go of `held`, counted under `counter`. */
  def release(held: H, counter: Counter.Value, why: String): Unit

  /** Lets go of what only `user` could use (their last Spark Connect session closed, or they cleared memphis). */
  def releaseOf(user: String, why: String): Unit

  /** Lets go of everything it holds (`memphis.clear`, or memphis turned off). */
  def releaseAll(why: String): Unit
}
