package io.memphis.broadcasts

import scala.collection.mutable
import scala.util.control.NonFatal

import io.memphis.cache.{Admission, EvictionPolicy, RecentRecurrence, Store}
import io.memphis.conf.{CacheStats, ConnectSessions}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.LineageKey
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.trees.TreeNodeTag
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkRuntime}

/**
 * A broadcast an earlier query built: what it is, what its sources held then, and its exchange or
 * stage; registered under `identity` and, unless entries are shared across users, the user whose
 * query built it (`scope`). `costMs`: what building it took; `uses`: how often it was read since.
 */
final class RetainedBroadcast(val identity: SparkPlan, val scope: String, val key: LineageKey, val plan: SparkPlan,
    val bytes: Long, val costMs: Long, var lastUse: Long) {
  var uses = 0L
}

/** The key of a broadcast exchange's build side, and in whose scope its query planned it. */
final case class PlannedBroadcast(key: LineageKey, scope: String)

/**
 * The broadcasts of joins that later queries may read instead of building them again; one per
 * [[LineageCache]] (per SparkContext).
 *
 * Planning ([[BroadcastReuseRule]]) gives each broadcast exchange whose build side has a lineage
 * key that key (a plan tag that its copies keep); when the query's SQL execution ends well, the
 * broadcasts it built and that carry a key are registered here by their identity (the exchange's
 * canonical form, [[PhysicalPlans.exchangeIdentity]]). A later exchange with the same identity and
 * the same lineage (same sources, same fingerprints, taken afresh while it is planned) reads the
 * registered broadcast. The identity alone is not enough: Spark's canonical forms compare file
 * sources by their paths, not by the files in them.
 *
 * Kept on its second build, or on its first when the session's recent broadcasts recurred
 * ([[RecentRecurrence]]): a broadcast is held on the driver heap, which is not the place for one-off
 * build sides. Either is kept only while keeping pays ([[RecentRecurrence.pays]] of the recent bets:
 * at least half of the broadcasts kept were read again, or of those held back were built again): in
 * a notebook whose queries changed (other years) a broadcast built a second time is often never read
 * a third (TPC-DS' edited pass at e35ed99: 158 kept, 7 reads), and it takes the heap's room for
 * nothing. Bounded by the driver heap's budget for join broadcasts ([[io.memphis.reuse.MemoryAccounts]],
 * capped by `spark.memphis.broadcast.joinMaxBytes`); one larger than half of it is not kept, and
 * beyond it the one of least value per byte (build time × (1 + reads) / bytes) goes first. Letting go
 * unpersists, never destroys: a DataFrame that planned the broadcast (the query that built it, run
 * again, or one planned from this registry) may read it at any time, and a destroyed broadcast
 * fails such a read, where an unpersisted one is fetched from the driver again. Spark's
 * ContextCleaner destroys it once no plan references it, as it does for any query's broadcast.
 */
final class JoinBroadcasts(sparkContext: SparkContext, stats: CacheStats, shareAcrossUsers: Boolean)
    extends Store[RetainedBroadcast] {
  // Invariant: `entries` ((identity, scope) -> entry, least recently used first), `expected`, `built`,
  // `reads`, `recent`, `bets`, `ended` and `budget` change only under this object's lock.
  private val entries = mutable.LinkedHashMap.empty[(SparkPlan, String), RetainedBroadcast]
  /** Key hashes of broadcasts planned and not registered yet (their query may have just ended). */
  private val expected = mutable.LinkedHashSet.empty[String]
  /** How often each broadcast (key hash, scope) was built, for the most recent [[JoinBroadcasts.MaxExpected]]. */
  private val built = mutable.LinkedHashMap.empty[(String, String), Int]
  /** How often each kept broadcast (key hash, scope) was read, for the most recent [[JoinBroadcasts.MaxExpected]]. */
  private val reads = mutable.LinkedHashMap.empty[(String, String), Int]
  private val recent = new RecentRecurrence[(String, String)](JoinBroadcasts.RecentBroadcasts, built.getOrElse(_, 0) > 1)
  /** SQL executions ended: a bet is judged once it paid or [[JoinBroadcasts.BetSettlesAfter]] of them ended since. */
  private var ended = 0L
  /**
   * The broadcasts kept, and those held back as keeping did not pay, newest last: whether they paid.
   * By their ids' counts, not the broadcasts: a bet must not keep a released broadcast's plan alive.
   */
  private val bets = new RecentRecurrence[JoinBroadcasts.Bet](JoinBroadcasts.RecentBroadcasts,
    b => (if (b.kept) reads else built).getOrElse(b.id, 0) > b.mark, b => ended - b.ended >= JoinBroadcasts.BetSettlesAfter)
  /** Bytes the registry may hold: from the latest session that planned a broadcast; none until one did. */
  private var budget = 0L

  def heldBytes: Long = synchronized(entries.values.map(_.bytes).sum)

  def held: Int = synchronized(entries.size)

  /** The broadcasts kept now. */
  def retained: Seq[RetainedBroadcast] = synchronized(entries.values.toList)

  /**
   * The registered broadcast `exchange` may read in `scope` (see [[scopeOf]]), if any, given its
   * build side's key now. A registered broadcast of the same identity whose lineage differs is
   * stale (a source changed): it is let go. When the same key was planned by a query whose end has
   * not reached the registry yet, waits for Spark's listeners once (outside the lock: the listener
   * needs it).
   */
  def lookup(identity: SparkPlan, scope: String, key: LineageKey, budgetBytes: Long): Option[RetainedBroadcast] = {
    def find(): Option[RetainedBroadcast] = synchronized {
      budget = budgetBytes
      entries.get(identity -> scope).flatMap { r =>
        if (!r.key.sameLineage(key)) {
          release(r, Counter.BroadcastsReleased, "invalidated: a source of its build side changed")
          None
        } else if (!PhysicalPlans.broadcastBuilt(r.plan)) {
          release(r, Counter.BroadcastsReleased, "its broadcast is no longer usable")
          None
        } else {
          // Least recently used first: a reused entry moves to the end.
          entries.remove(identity -> scope)
          entries(identity -> scope) = r
          r.lastUse = System.currentTimeMillis()
          r.uses += 1
          count(reads, key.hash -> scope)
          Some(r)
        }
      }
    }
    find().orElse {
      if (synchronized(expected.contains(key.hash))) {
        SparkRuntime.awaitListeners(sparkContext, JoinBroadcasts.ListenerWaitMs)
        find()
      } else None
    }.orElse {
      if (synchronized(entries.keys.exists { case (i, s) => i == identity && s != scope })) {
        stats.record(Counter.RefusedOtherUser, s"not reusing broadcast ${key.hash} for $scope: another user's")
      }
      None
    }
  }

  /** Whose broadcasts a query of `session` may read: its user's own, unless entries are shared. */
  def scopeOf(session: SparkSession): String = if (shareAcrossUsers) "" else ConnectSessions.userOfQuery(session)

  /** A broadcast with this key is planned: its query registers it when it ends. */
  def planned(key: LineageKey): Unit = synchronized {
    expected -= key.hash
    expected += key.hash
    while (expected.size > JoinBroadcasts.MaxExpected) expected.remove(expected.head)
  }

  /**
   * A SQL execution ended: registers the broadcasts it built whose build side had a key, within
   * `budgetNow` when known (what is kept on the driver heap changed since the query was planned),
   * unless the heap is `crowded` (why, if it is: kept now, a broadcast would take the room of the
   * next one Spark builds there).
   */
  def executionEnded(end: SparkListenerSQLExecutionEnd, budgetNow: Option[Long], crowded: Option[String]): Unit =
    try {
      synchronized {
        ended += 1
        budgetNow.foreach(budget = _)
      }
      PhysicalPlans.builtBroadcasts(end).foreach { built =>
        PhysicalPlans.broadcastExchange(built).getTagValue(JoinBroadcasts.KeyTag).foreach(register(built, _, crowded))
      }
    } catch {
      case NonFatal(e) => CacheStats.log.warn(s"memphis: did not register the broadcasts of a query: $e", e)
    }

  /**
   * The newest build of a broadcast is the one kept: a query builds a broadcast only when none it
   * could read was registered (it ended after the query was planned, or it is a plain exchange,
   * which cannot serve adaptive execution), so the newer one serves at least as many queries.
   */
  private def register(plan: SparkPlan, planned: PlannedBroadcast, crowded: Option[String]): Unit = synchronized {
    val key = planned.key
    expected -= key.hash
    val identity = PhysicalPlans.exchangeIdentity(plan)
    val bytes = PhysicalPlans.broadcastBytes(plan)
    val known = entries.get(identity -> planned.scope)
    if (!known.exists(_.plan eq plan)) { // the same plan run again registers nothing new
      known.foreach(release(_, Counter.BroadcastsReleased, "replaced by a newer build of the same broadcast"))
      val id = key.hash -> planned.scope
      val builds = count(built, id)
      val likely = if (builds > 1) Some(s"built $builds times") else recent.firstMet(id, "broadcasts built")
      if (likely.isEmpty) {
        stats.record(Counter.BroadcastsSeen, s"seen broadcast ${key.hash}: first build, kept if built again")
      } else if (crowded.isDefined) {
        stats.record(Counter.Refused, s"no reuse of broadcast ${key.hash}: ${crowded.get}")
      } else if (bytes > budget * Admission.MaxShare) {
        stats.record(Counter.Refused, s"no reuse of broadcast ${key.hash}: $bytes bytes exceed its share " +
          s"(${Admission.MaxShare} of the budget of $budget)")
      } else if (!RecentRecurrence.pays(bets.judged)) {
        bets.add(JoinBroadcasts.Bet(id, kept = false, builds, ended))
        stats.record(Counter.RefusedNotRecurring, s"not keeping broadcast ${key.hash} (${likely.get}): fewer than " +
          "half of the last broadcasts kept were read again, or of those held back built again")
      } else {
        entries(identity -> planned.scope) = new RetainedBroadcast(identity, planned.scope, key, plan, bytes,
          PhysicalPlans.broadcastCostMs(plan), System.currentTimeMillis())
        bets.add(JoinBroadcasts.Bet(id, kept = true, reads.getOrElse(id, 0), ended))
        stats.record(Counter.BroadcastsRegistered, s"registered broadcast ${key.hash} ($bytes bytes, ${likely.get})")
        val order = entries.values.toSeq.sortBy(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.lastUse))
        order.iterator.takeWhile(_ => entries.values.map(_.bytes).sum > budget).foreach { r =>
          release(r, Counter.BroadcastsReleased, s"over the budget of $budget bytes (least value per byte)")
        }
      }
    }
  }

  /** Counts one more of `id` in `counts` (the most recent [[JoinBroadcasts.MaxExpected]] kept); returns its count. */
  private def count(counts: mutable.LinkedHashMap[(String, String), Int], id: (String, String)): Int = {
    val n = counts.remove(id).getOrElse(0) + 1
    counts(id) = n
    while (counts.size > JoinBroadcasts.MaxExpected) counts.remove(counts.head._1)
    n
  }

  /** Lets go of `r` (see the class comment: unpersisted, not destroyed), counted under `counter`. */
  def release(r: RetainedBroadcast, counter: Counter.Value, why: String): Unit = synchronized {
    if (entries.get(r.identity -> r.scope).exists(_ eq r)) {
      entries.remove(r.identity -> r.scope)
      PhysicalPlans.releaseBroadcast(r.plan)
      stats.record(counter, s"released broadcast ${r.key.hash}: $why")
    }
  }

  /** Lets go of the broadcasts registered in `user`'s scope (their last Spark Connect session closed). */
  def releaseOf(user: String, why: String): Unit = synchronized {
    entries.values.filter(_.scope == user).toList.foreach(release(_, Counter.BroadcastsReleased, why))
  }

  /** Lets go of every registered broadcast (`memphis.clear`, or memphis turned off). */
  def releaseAll(why: String): Unit = synchronized {
    entries.values.toList.foreach(release(_, Counter.BroadcastsReleased, why))
    expected.clear()
    built.clear()
    reads.clear()
    recent.clear()
    bets.clear()
  }
}

object JoinBroadcasts {
  /**
   * The lineage key of a broadcast exchange's build side, set while it is planned, on the query's
   * thread: the listener that registers the broadcast runs on another, so the scope travels with it.
   */
  val KeyTag: TreeNodeTag[PlannedBroadcast] = TreeNodeTag[PlannedBroadcast]("memphis.broadcastKey")

  /** How many planned, unregistered broadcast keys are remembered (for [[JoinBroadcasts.lookup]]'s wait), and built ones counted. */
  val MaxExpected = 1024

  /** How many recent first builds decide whether the next is kept at once ([[RecentRecurrence]]). */
  val RecentBroadcasts = 16

  /**
   * A bet on broadcast `id` (key hash, scope), made when `ended` SQL executions had ended: `kept`
   * (paid once read more than `mark` times), or held back (paid once built more than `mark` times).
   */
  final case class Bet(id: (String, String), kept: Boolean, mark: Int, ended: Long)

  /** SQL executions after which a bet not paid yet counts as not paying. */
  val BetSettlesAfter = 8

  /** Longest wait for Spark's listeners before planning a broadcast without reuse. */
  val ListenerWaitMs = 2000L
}
