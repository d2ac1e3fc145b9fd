package io.memphis.cache

import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.{LineageKey, SourceFingerprint}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * Letting go of cached relations: over the budget, under heap pressure, when a source changed, or
 * when memphis is cleared. Runs under the table's lock.
 *
 * @param budget the bytes of Spark storage memphis may fill under a conf
 * @param checkpointed the bytes local checkpoints take there (they share the place)
 */
final class Eviction(table: EntryTable, spark: SparkCache, stats: CacheStats, budget: SQLConf => Long,
    checkpointed: () => Long) {
  /** The session of the latest decision: its confs (budget, policy) and CacheManager serve evictions. Under the table's lock. */
  var session: Option[SparkSession] = None

  /**
   * Unpersists `e` and lets it go, counted under `counter`; nothing when it holds nothing (any more:
   * one in a list of entries to let go may have gone with another built on it, see [[uncache]]).
   */
  def release(session: SparkSession, e: CacheEntry, state: EntryState.Value, counter: Counter.Value, why: String): Unit =
    if (EntryState.Holding.contains(e.state)) {
      e.relation.foreach(r => uncache(session, r.plan, e.key.hash))
      table.forget(e)
      e.moveTo(state, why)
      e.occurrences = 0
      stats.record(counter, s"$state ${e.key.hash}: $why")
    }

  /**
   * Uncaches `plan` (of `what`), letting go first of the held entries built on it whose relation Spark
   * has begun but not finished storing. Spark's CacheManager would re-cache those with their stored
   * blocks cleared, and memphis would learn of it only from the listener, after a query might have been
   * served the new relation, which no entry tracks (found by CacheStatePropertySuite).
   */
  def uncache(session: SparkSession, plan: LogicalPlan, what: String): Unit = {
    val unfinished = table.holding.filter(d => d.relation.exists(r =>
      r.rddId.isDefined && (r.plan ne plan) && r.plan.exists(_.sameResult(plan)) && !spark.loaded(session, r.plan)))
    unfinished.foreach(release(session, _, EntryState.Evicted, Counter.Evicted, s"built on $what, let go before it was stored"))
    spark.uncache(session, plan)
  }

  /** Lets go of everything memphis holds in Spark storage. */
  def releaseAll(session: SparkSession, why: String): Unit =
    table.holding.foreach(release(session, _, EntryState.Evicted, Counter.Evicted, why))

  /** Lets go of what `user`'s entries hold (their last Spark Connect session closed). */
  def releaseOf(user: String, why: String): Unit = session.foreach { s =>
    table.holding.filter(_.owner == user).foreach(release(s, _, EntryState.Evicted, Counter.Evicted, why))
  }

  /**
   * Entries over a source this query reads whose fingerprint is not what it was: Spark's
   * CacheManager matches plans, not file contents, so it would serve them stale. A source the
   * query reads but could not fingerprint now counts as changed.
   */
  def dropStale(session: SparkSession, plan: LogicalPlan, results: Seq[(LogicalPlan, LineageKey.Result)]): Unit = {
    val held = table.holding
    if (held.nonEmpty) {
      val stale = SourceFingerprint.staleIn(plan, results)
      held.foreach { e =>
        val changed = e.key.allSources.exists(stale)
        // One built on an entry invalidated just before went with it.
        if (changed && EntryState.Holding.contains(e.state)) invalidate(session, e, "a source changed")
      }
    }
  }

  /** Unpersists `e` and every held entry built on it. */
  private def invalidate(session: SparkSession, e: CacheEntry, why: String): Unit = {
    val dependents = table.holding.filter(d => (d ne e) && d.key.children.exists(_.contains(e.key.hash)))
    dependents.foreach(d => release(session, d, EntryState.Invalid, Counter.Invalidated, s"built on ${e.key.hash}: $why"))
    release(session, e, EntryState.Invalid, Counter.Invalidated, why)
  }

  /**
   * Evicts materialized entries, in the policy's order, until memphis holds no more than its
   * budget; one larger than the whole budget is let go and never persisted again. Entries still
   * being filled (to-persist) or read by a running SQL execution are not touched: when the next
   * to go is read, eviction waits, and runs again when an entry materializes or an execution ends.
   */
  def enforceBudget(): Unit = session.foreach { session =>
    val conf = SparkShimImpl.sqlConf(session)
    val bytes = budget(conf)
    val policy = MemphisConf.EvictionPolicyName.get(conf)
    val idle = (e: CacheEntry) => e.state == EntryState.Materialized && e.readers.isEmpty
    table.all.filter(e => idle(e) && e.sizeBytes > bytes).toSeq.foreach { e =>
      val why = s"${e.sizeBytes} bytes exceed the whole budget of $bytes"
      release(session, e, EntryState.Evicted, Counter.Evicted, why)
      e.refusal = Some(Counter.Refused -> s"not persisted again: $why")
    }
    // Local checkpoints share the place: what they take is not there for cached relations.
    val others = checkpointed()
    // In the policy's order; when the next to go is still read, wait for its execution to end.
    val order = EvictionPolicy.evictionOrder(policy, table.all.filter(_.state == EntryState.Materialized).toSeq)
    order.iterator.takeWhile(e => table.heldBytes + others > bytes && idle(e)).foreach { e =>
      release(session, e, EntryState.Evicted, Counter.Evicted,
        f"over the budget of $bytes bytes ($policy score ${EvictionPolicy.score(policy, e)}%.3g)")
    }
  }

  /**
   * Under heap pressure (`why`): lets go of what memphis holds on the driver heap, lowest value
   * per byte first: the first, then the next while what is let go stays within half of what was
   * held. `others` (value per byte, bytes, let go) and, when `onDriverHeap` (local mode, where
   * executors' storage is the driver heap), idle materialized entries. Nothing goes while all of it
   * together is under [[Eviction.NegligibleHeapShare]] of the heap: letting go would not relieve
   * Spark, and would lose the reuse (a re-run's kept results, a few KiB each, standing for seconds).
   */
  def relieve(why: String, others: Seq[(Double, Long, () => Unit)], onDriverHeap: Boolean): Unit = {
    val policy = session.map(s => MemphisConf.EvictionPolicyName.get(SparkShimImpl.sqlConf(s))).getOrElse("costnsize")
    val held = others ++ (if (!onDriverHeap) Nil else table.all.filter(e => e.state == EntryState.Materialized && e.readers.isEmpty)
      .toSeq.flatMap(e => session.map(s => (EvictionPolicy.score(policy, e), e.sizeBytes,
        () => release(s, e, EntryState.Evicted, Counter.PressureReleases, why)))))
    val total = held.map(_._2).sum
    if (total < HeapPressure.maxBytes * Eviction.NegligibleHeapShare) {
      CacheStats.log.debug(s"memphis: $why; memphis holds $total bytes on the driver, too few to relieve it: kept")
    } else {
      var freed = 0L
      held.sortBy(_._1).iterator.takeWhile { case (_, bytes, _) => freed == 0 || 2 * (freed + bytes) <= total }
        .foreach { case (_, bytes, let) =>
          let()
          freed += bytes
        }
    }
  }
}

object Eviction {
  /** Below this share of the driver heap, what memphis holds there is kept under heap pressure. */
  val NegligibleHeapShare = 0.01
}
