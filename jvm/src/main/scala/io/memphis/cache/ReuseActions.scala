package io.memphis.cache

import scala.collection.mutable
import scala.util.control.NonFatal

import io.memphis.cache.ReusePolicy.{Decisions, Observation}
import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf

/**
 * Carries out the reuse policy's decisions: counts each occurrence on its entry, asks
 * [[Admission]], and persists.
 *
 * @param storageShare the bytes of storage memory an admission measures estimates against, under a conf
 * @param currentExecution the SQL execution this thread plans for, if any
 * @param storageCrowdsHeap why persisting now would crowd out Spark's own work on the driver heap, if it would
 */
final class ReuseActions(table: EntryTable, spark: SparkCache, stats: CacheStats, storageShare: SQLConf => Long,
    currentExecution: () => Option[Long], storageCrowdsHeap: () => Option[String]) {
  /** How many times memphis persisted anything: numbers cached relations' names. Under the table's lock. */
  private var persists = 0L

  /**
   * Counts what `decisions` observed on the table, under its lock; returns the observed candidates'
   * entries. Also when the count was deferred to the run of a plan decided on earlier ([[PendingObservation]]).
   */
  def observe(query: QueryCandidates, decisions: Decisions, now: Long): Map[Int, CacheEntry] = {
    import Observation._
    val entries = mutable.Map.empty[Int, CacheEntry]
    def id(i: Int) = table.scoped(query.key(i).hash, query.user)
    def remember(i: Int) = table.remember(id(i), query.key(i), query.user, now)
    // Forgotten since the policy's input was read (a first occurrence pushed it out): remembered anew.
    def known(i: Int) = {
      val e = table.get(id(i)).getOrElse(remember(i))
      e.addConsumer(query.consumer)
      e.occurrences += 1
      e.lastAccess = now
      entries(i) = e
      e
    }
    def miss(i: Int) = {
      val e = known(i)
      if (e.state == EntryState.Evicted) e.misses += 1
      stats.record(Counter.Misses, s"miss ${e.key.hash} (${e.state}, occurrence ${e.occurrences})")
    }
    decisions.observed.foreach {
      case NoKey(i, reason) => stats.record(Counter.Refused, s"no reuse of ${query.subplan(i).nodeName}: $reason")
      case OtherUsers(i) => stats.record(Counter.RefusedOtherUser,
        s"not serving ${query.key(i).hash} to ${query.user}: another user's entry; computed on its own")
      case Collision(i) => stats.record(Counter.Refused,
        s"no reuse of ${query.subplan(i).nodeName}: its key hash ${query.key(i).hash} collides with another plan's")
      // Seen by another query since a deferred count's plan was decided on: this is a later occurrence.
      case FirstSeen(i) if table.contains(id(i)) => miss(i)
      case FirstSeen(i) =>
        val e = remember(i)
        e.addConsumer(query.consumer)
        entries(i) = e
        stats.record(Counter.Misses, s"seen ${e.key.hash}: first occurrence")
      case Hit(i) => hit(known(i))
      case Miss(i) => miss(i)
    }
    decisions.recentlyMet.foreach(i => table.recent.add(entries(i)))
    decisions.recentlyDue.foreach(i => table.due(entries(i)))
    decisions.heldBack.foreach(i => stats.record(Counter.RefusedNotRecurring, s"not persisting ${query.key(i).hash} on " +
      s"occurrence ${entries(i).occurrences}: " + (if (decisions.heldUnpaid.contains(i))
        "fewer than half of the last subplans persisted were read again" else "none of the last subplans found due came back")))
    decisions.heldUnpaid.foreach(i => table.heldBack(entries(i)))
    table.queryObserved()
    entries.toMap
  }

  /** Counts a read of `e`'s relation by the query planned on this thread (its occurrence is counted by the caller). */
  def hit(e: CacheEntry): Unit = {
    e.hits += 1
    stats.add(Counter.ComputeSavedMs, e.costMs)
    currentExecution().foreach(e.readers += _)
    stats.record(Counter.Hits, s"reuse ${e.key.hash} (${e.state}, hit ${e.hits})")
  }

  /**
   * Persists what the policy chose of the due candidates [[admits]] lets through, innermost first;
   * returns the subplans this query reads from memphis's storage (served or persisted, by identity)
   * and their entries.
   */
  def persistDue(session: SparkSession, query: QueryCandidates, candidates: IndexedSeq[ReusePolicy.Candidate],
      decisions: Decisions, entries: Map[Int, CacheEntry], conf: QueryConf): (java.util.Set[LogicalPlan], Set[CacheEntry]) = {
    val owned = served(query, decisions)
    val used = mutable.Set.empty[CacheEntry] ++= decisions.served.map(entries)
    val crowded = if (decisions.due.isEmpty) None else storageCrowdsHeap()
    crowded.foreach(why => decisions.due.foreach(i => stats.record(Counter.Refused, s"not persisting ${query.key(i).hash}: $why")))
    val narrowing = Admission.narrowingFilters(session, query.plan)
    val admitted = if (crowded.isDefined) Nil else decisions.due.filter(i =>
      admits(session, query.subplan(i), entries(i), conf.sql) && fillsWhatItNeeds(query.subplan(i), entries(i), narrowing, decisions, conf))
    val chosen = ReusePolicy.choose(candidates, admitted, i => table.locked(entries(i).occurrences))
    table.locked(chosen.foreach { i =>
      val e = entries(i)
      // A concurrent query may have persisted it since it was found due.
      if (!EntryState.Holding.contains(e.state)) {
        val ahead = decisions.ahead.get(e.id)
        persist(session, e, query.subplan(i), ahead.getOrElse(s"occurrence ${e.occurrences}: persisted") +
          ", filled by the job that needs it", owned)
        if (ahead.isDefined && EntryState.Holding.contains(e.state)) stats.add(Counter.PersistedAhead)
      }
      if (EntryState.Holding.contains(e.state)) {
        owned.add(query.subplan(i))
        used += e
      }
    })
    (owned, used.toSet)
  }

  /**
   * Whether filling `e` (due, of `subplan`) computes no more than its query needs of it, or is worth
   * it anyway. On its `minOccurrences`-th occurrence a subplan into which the query's filters reach
   * (`narrowing`, [[Admission.narrowingFilters]]) is held back while the recent bets say persisting
   * does not pay ([[RecentRecurrence.paysDearer]]): persisting it would compute what the filters
   * drop, a price for a next occurrence it has not yet shown (an edited notebook's query meets the
   * subplan a second time and often never a third). One that comes back is persisted then. The bet
   * not made counts among the recent persists' outcomes ([[RecentRecurrence.pays]]).
   */
  private def fillsWhatItNeeds(subplan: LogicalPlan, e: CacheEntry, narrowing: LogicalPlan => Seq[String],
      decisions: Decisions, conf: QueryConf): Boolean = {
    val (occurrence, dearerPays) = table.locked((e.occurrences, RecentRecurrence.paysDearer(table.recentPersists.judged)))
    val filters = if (conf.minOccurrences < 2 || occurrence != conf.minOccurrences || decisions.ahead.contains(e.id) ||
        dearerPays) Nil
      else try narrowing(subplan) catch {
        case NonFatal(err) =>
          CacheStats.log.debug(s"memphis: could not tell whether the filters of the query reach into ${e.key.hash}: $err")
          Nil
      }
    filters.isEmpty || {
      val why = s"not persisting ${e.key.hash} on occurrence $occurrence: filling it would compute rows the query does not " +
        s"need, as the query's filters reach into it: ${filters.take(3).mkString("; ")}, and none of the last subplans " +
        "persisted was read again; persisted if it comes back"
      table.locked {
        e.reason = why
        table.heldBack(e)
      }
      stats.record(Counter.RefusedNotRecurring, why)
      false
    }
  }

  /** The subplans Spark substitutes a held entry's relation for in this query (by identity). */
  def served(query: QueryCandidates, decisions: Decisions): java.util.Set[LogicalPlan] = {
    val subplans = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap[LogicalPlan, java.lang.Boolean])
    decisions.served.foreach(i => subplans.add(query.subplan(i)))
    subplans
  }

  /**
   * The outermost subplans of `query`'s subqueries (IN, EXISTS, scalar; not their correlated
   * parts) for which Spark holds one of the user's entries: served there too, as in the query's
   * own plan, and counted as hits when the query runs. Nothing in a subquery counts as a first
   * occurrence or is persisted: the policy decides on the query's own plan.
   */
  def servedInSubqueries(session: SparkSession, query: QueryCandidates, executing: Boolean): Seq[LogicalPlan] = {
    val subqueries = if (table.holdsAny) QueryCandidates.subqueryPlans(query.plan) else Nil
    if (subqueries.isEmpty) Nil
    else {
      val context = SessionKeyContext(session)
      subqueries.flatMap { sub =>
        val keys = new java.util.IdentityHashMap[LogicalPlan, LineageKey.Result]()
        LineageKey.ofSubplans(sub, context).foreach { case (p, r) => keys.put(p, r) }
        def held(p: LogicalPlan): Option[CacheEntry] = Option(keys.get(p)).flatMap(_.toOption)
          .filter(_ => QueryCandidates.isCandidate(p, sub) && !QueryCandidates.correlated(p))
          .flatMap(k => table.get(table.scoped(k.hash, query.user)).filter(_.key.sameLineage(k)))
          .filter(e => EntryState.Holding.contains(e.state) && spark.relationName(session,
            QueryCandidates.owned(p, query.user, java.util.Collections.emptySet(), table.shared))
            .contains(e.relation.map(_.name)))
        def walk(p: LogicalPlan): Seq[LogicalPlan] = held(p) match {
          case Some(e) =>
            if (executing) {
              e.addConsumer(query.consumer)
              e.occurrences += 1
              e.lastAccess = System.currentTimeMillis()
              hit(e)
            }
            Seq(p)
          case None => p.children.flatMap(walk)
        }
        table.locked(walk(sub))
      }
    }
  }

  /**
   * Persists `user`'s `subplan` (key `key`) now, before its first occurrence (see
   * [[io.memphis.reuse.LineageCache.persistShared]]); says whether memphis holds it now.
   */
  def persistShared(session: SparkSession, user: String, subplan: LogicalPlan, key: LineageKey,
      reason: String, conf: SQLConf): Boolean = table.locked {
    val id = table.scoped(key.hash, user)
    val entry = table.get(id) match {
      case Some(e) => Some(e).filter(_.key.sameLineage(key))
      case None => Some(table.remember(id, key, user, System.currentTimeMillis()))
    }
    entry.filter(e => EntryState.Holding.contains(e.state) || admits(session, subplan, e, conf)).exists { e =>
      if (!EntryState.Holding.contains(e.state)) persist(session, e, subplan, reason, java.util.Collections.emptySet())
      EntryState.Holding.contains(e.state)
    }
  }

  /**
   * Whether `e`'s due subplan may be persisted: not when [[Admission]] refuses it (decided once per
   * entry, outside the lock: it runs the optimizer) or when it was refused since (too large once
   * stored, or it made a query slower). A refusal is counted each time and shown as the entry's reason.
   */
  private def admits(session: SparkSession, subplan: LogicalPlan, e: CacheEntry, conf: SQLConf): Boolean = {
    if (table.locked(e.refusal.isEmpty && e.estimatedBytes.isEmpty)) {
      val verdict = Admission.verdict(session, subplan, storageShare(conf), conf)
      table.locked(verdict.fold(r => e.refusal = Some(r), bytes => e.estimatedBytes = Some(bytes)))
    }
    table.locked(e.refusal).forall { case (counter, why) =>
      table.locked(e.reason = why)
      stats.record(counter, s"no reuse of ${e.key.hash}: $why")
      false
    }
  }

  /**
   * Registers the subplan with Spark's CacheManager, which substitutes it into this query and fills
   * it in the job that needs it. Its RDD appears only then; storage tracking adopts it by name.
   * `inner`: subplans inside it held for the same user ([[QueryCandidates.owned]]).
   */
  private def persist(session: SparkSession, e: CacheEntry, subplan: LogicalPlan, reason: String,
      inner: java.util.Set[LogicalPlan]): Unit = {
    val toCache = QueryCandidates.owned(subplan, e.owner, inner, table.shared)
    if (Seq(subplan, toCache).distinct.exists(spark.relationName(session, _).isDefined)) {
      e.reason = "already cached outside memphis"
    } else {
      persists += 1
      val name = s"${CachedRelation.NamePrefix}${e.key.hash} #$persists"
      val reused = (n: Int) => stats.record(Counter.ShufflesReused, s"persist ${e.key.hash} from $n shuffle(s) of its first occurrence")
      try spark.cache(session, toCache, name, e.firstShuffles, reused)
      finally table.dropShuffles(e)
      e.relation = Some(new CachedRelation(name, toCache, System.currentTimeMillis()))
      currentExecution().foreach(e.readers += _)
      e.moveTo(EntryState.ToPersist, reason)
      table.persisted(e)
      stats.record(Counter.Persisted, s"persist ${e.key.hash} (${e.reason})")
    }
  }
}
