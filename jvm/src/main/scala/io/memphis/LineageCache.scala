package io.memphis

import scala.collection.mutable

import io.memphis.CacheStats.Counter
import io.memphis.LineageCache.Marks
import io.memphis.cache.{EntryTable, Eviction, Executions, PendingObservation, QueryCandidates, QueryConf, ReuseActions,
  ReusePolicy, SlowerQueries, SparkCache, StorageTracking}
import io.memphis.lineage.{InlineCtes, LineageKey}
import io.memphis.reuse.{CacheEntry, EntryState, EvictionPolicy, OwnerMark, RetainShuffle, StorageListener}
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * The driver's lineage cache of Spark subplans. One per SparkContext, shared by its sessions, as
 * Spark's own CacheManager is, which stores the data: memphis decides what to persist and when to
 * let go; Spark's CacheManager holds the cached relations and substitutes them into queries.
 *
 * A facade over the pieces in [[io.memphis.cache]]. Concurrency: one lock, the entry table's
 * ([[EntryTable.locked]]); every piece changes its state and the entries' only under it, and
 * calls Spark's CacheManager (whose own lock comes second) from under it.
 */
final class LineageCache private (val sparkContext: SparkContext) {
  val stats = new CacheStats

  /**
   * Whether an entry serves the queries of every user, or only those of the user whose query
   * produced it (each user then has entries of their own, so that no one reads through the cache
   * a source they could not read). A static conf: fixed for the context's life.
   */
  val shareAcrossUsers: Boolean = MemphisConf.ShareAcrossUsers.parse(
    sparkContext.getConf.get(MemphisConf.ShareAcrossUsers.key, MemphisConf.ShareAcrossUsers.default)).contains(true)

  private val table = new EntryTable(shareAcrossUsers, LineageCache.RecentAggregates)
  private val spark = new SparkCache

  /** Loop-carried subplans cut by local checkpoints (see [[io.memphis.checkpoint.CheckpointRule]]). */
  val checkpoints = new io.memphis.checkpoint.Checkpoints(sparkContext, stats, scoped, storageBudgetBytes)

  /** Broadcasts of joins that later queries read instead of building them again. */
  val broadcasts = new io.memphis.reuse.JoinBroadcasts(sparkContext, stats, shareAcrossUsers)

  /** Rows queries collected to the driver that later queries read instead of computing their subplan again. */
  val collected = new io.memphis.collected.CollectedResults(stats)

  /** Results of subplans kept beyond the application, under `spark.memphis.durable.dir`. */
  val durable = new io.memphis.durable.DurableTier(sparkContext, stats, shareAcrossUsers)

  private val eviction = new Eviction(table, spark, stats, storageBudgetBytes, () => checkpoints.storageBytes)
  private val storage = new StorageTracking(sparkContext, table, spark, eviction, stats, durable.materialized)
  private val slower = new SlowerQueries(eviction, stats)
  private val actions = new ReuseActions(table, spark, stats, budgets(_).storageShare, () => currentExecution)

  /** The driver heap's pressure valve ([[relievePressure]]). */
  private val pressure = new HeapPressure(MemphisConf.DriverPressureThreshold.parse(sparkContext.getConf.get(
    MemphisConf.DriverPressureThreshold.key, MemphisConf.DriverPressureThreshold.default)).getOrElse(0.8))

  sparkContext.addSparkListener(new StorageListener(this))

  /** The name of `user`'s entry (or checkpoint, or broadcast) of key `hash`: per user unless shared. */
  def scoped(hash: String, user: String): String = table.scoped(hash, user)

  /** Where memphis holds data, what it holds there and what it may hold: one account per place. */
  def budgets(conf: SQLConf): MemoryAccounts = new MemoryAccounts(this, conf)

  /** Whether memphis holds `user`'s entry of `key` in Spark storage (to-persist or materialized). */
  def holds(key: LineageKey, user: String): Boolean = table.locked(table.get(scoped(key.hash, user))
    .exists(e => EntryState.Holding.contains(e.state) && e.key.sameLineage(key)))

  /** Bytes of Spark storage memphis may fill (see [[MemoryAccounts]]). */
  def storageBudgetBytes(conf: SQLConf): Long = budgets(conf).storageBudget

  /** Bytes memphis holds in cached relations now: derived from the entries, so it cannot drift. */
  def heldBytes: Long = table.heldBytes

  /** Bytes of memphis's own structures on the driver heap (read without the lock: see [[EntryTable]]). */
  def structureBytes: Long = table.structureBytes

  /** Bytes the first occurrences' kept shuffles take on local disk. */
  def retainedShuffleBytes: Long = table.retainedShuffleBytes

  /** What `memphis_stats()` shows: the counters, then, per place, what is held and the budget. */
  def statsRows(conf: SQLConf): Seq[(String, Long)] = {
    val account = budgets(conf)
    stats.snapshot ++ Seq("bytes_held" -> heldBytes, "bytes_held_join_broadcasts" -> broadcasts.heldBytes,
      "durable_writes_pending" -> durable.pendingWrites.toLong) ++
      account.rows ++ Seq("driver_heap_used_bytes" -> HeapPressure.usedBytes, "driver_heap_max_bytes" -> HeapPressure.maxBytes)
  }

  /**
   * Looks at one query's analyzed plan: drops entries whose sources changed, then keys its
   * candidate subplans (`keys`, asked for only then), decides on them ([[ReusePolicy]]) and, when
   * the query is being executed (`runs`, see [[Executions]]), carries the decisions out. Returns
   * the first occurrences whose shuffle is to be kept ([[RetainShuffle]]) and, unless entries are shared across users, the subplans served or
   * persisted for this query's user ([[OwnerMark]]): by identity, each with the node to put over it.
   * When the query is only planned, nothing is counted or persisted: its observation is returned,
   * to be counted if that plan runs ([[PendingObservation]]).
   */
  def consider(session: SparkSession, plan: LogicalPlan, keys: => Seq[(LogicalPlan, LineageKey.Result)],
      runs: => Boolean): (Marks, Option[PendingObservation]) = {
    val marks = new Marks
    // This runs for every query: one with nothing to persist and nothing held to check costs no keys.
    relievePressure()
    if (!table.holdsAny && !plan.exists(QueryCandidates.isCandidate(_, plan))) return (marks, None)
    val executing = runs
    val planned = System.currentTimeMillis()
    val conf = QueryConf(SparkShimImpl.sqlConf(session))
    val query = new QueryCandidates(plan, keys, ConnectSessions.userOfQuery(session))
    val (candidates, decisions, entries) = table.locked {
      eviction.session = Some(session)
      storage.uncacheReplaced(session)
      eviction.dropStale(session, plan, query.results)
      val (candidates, past, recent) = query.policyInput(table, spark, session, conf.persistAhead)
      val decisions = ReusePolicy.decide(candidates, past, recent, table.recentSize, conf)
      (candidates, decisions, if (executing) actions.observe(query, decisions, planned) else Map.empty[Int, CacheEntry])
    }
    decisions.retain.foreach(i => marks.put(query.subplan(i), RetainShuffle(scoped(query.key(i).hash, query.user), _)))
    val owned =
      if (executing) carryOut(session, query, candidates, decisions, entries, conf, planned)
      else actions.served(query, decisions)
    servedInSubqueries(session, query, executing).foreach(owned.add)
    if (!shareAcrossUsers) owned.forEach(p => marks.put(p, OwnerMark(query.user, _)))
    (marks, if (executing) None else Some(new PendingObservation(query, decisions)))
  }

  /**
   * The outermost subplans of `query`'s subqueries (IN, EXISTS, scalar; not their correlated
   * parts) for which Spark holds one of the user's entries: served there too, as in the query's
   * own plan, and counted as hits when the query runs. Nothing in a subquery counts as a first
   * occurrence or is persisted: the policy decides on the query's own plan.
   */
  private def servedInSubqueries(session: SparkSession, query: QueryCandidates, executing: Boolean): Seq[LogicalPlan] = {
    val subqueries = if (table.holdsAny) QueryCandidates.subqueryPlans(query.plan) else Nil
    if (subqueries.isEmpty) Nil
    else {
      val context = MemphisConf.keyContext(session)
      subqueries.flatMap { sub =>
        val keys = new java.util.IdentityHashMap[LogicalPlan, LineageKey.Result]()
        LineageKey.ofSubplans(sub, context).foreach { case (p, r) => keys.put(p, r) }
        def held(p: LogicalPlan): Option[CacheEntry] = Option(keys.get(p)).flatMap(_.toOption)
          .filter(_ => QueryCandidates.isCandidate(p, sub) && !QueryCandidates.correlated(p))
          .flatMap(k => table.get(scoped(k.hash, query.user)).filter(_.key.sameLineage(k)))
          .filter(e => EntryState.Holding.contains(e.state) && spark.relationName(session,
            QueryCandidates.owned(p, query.user, java.util.Collections.emptySet(), table.shared))
            .contains(e.relation.map(_.name)))
        def walk(p: LogicalPlan): Seq[LogicalPlan] = held(p) match {
          case Some(e) =>
            if (executing) {
              e.addConsumer(query.consumer)
              e.occurrences += 1
              e.lastAccess = System.currentTimeMillis()
              actions.hit(e)
            }
            Seq(p)
          case None => p.children.flatMap(walk)
        }
        table.locked(walk(sub))
      }
    }
  }

  /** Carries out the decisions on an executed query: persists what is due; returns the subplans it reads from memphis. */
  private def carryOut(session: SparkSession, query: QueryCandidates, candidates: IndexedSeq[ReusePolicy.Candidate],
      decisions: ReusePolicy.Decisions, entries: Map[Int, CacheEntry], conf: QueryConf,
      planned: Long): java.util.Set[LogicalPlan] = {
    // Planned before as another query, which shares its plan (and its observation): counted here.
    PendingObservation.on(query.plan).foreach(_.take())
    val (owned, used) = actions.persistDue(session, query, candidates, decisions, entries, conf)
    currentExecution.foreach(executionPlanned(_, query.consumer, planned, used))
    owned
  }

  /**
   * A SQL execution ran `plan`, its query's normalized plan: counts what was observed when it was
   * normalized outside an execution ([[PendingObservation]]), once. Due entries are not persisted
   * then (the query has run): its next occurrence persists them.
   */
  def executed(plan: LogicalPlan): Unit = PendingObservation.on(plan).filter(_.take()).foreach(o =>
    table.locked(actions.observe(o.query, o.decisions, System.currentTimeMillis())))

  /**
   * Persists the candidate subplan of `analyzed` (its WITH clauses inlined, as the query runs) whose key hash is `hash` now, before its first
   * occurrence: the caller knows it is shared (several actions submitted together read it), so
   * waiting for a second occurrence would compute it twice, concurrently. Spark fills it lazily in
   * the first job that needs it. Says whether memphis holds it now.
   */
  def persistShared(session: SparkSession, analyzed: LogicalPlan, hash: String, reason: String): Boolean = {
    val plan = InlineCtes.inlined(analyzed)
    LineageKey.ofSubplans(plan, MemphisConf.keyContext(session)).collectFirst {
      case (subplan, Right(key)) if key.hash == hash && QueryCandidates.isCandidate(subplan, plan) => (subplan, key)
    }.exists { case (subplan, key) =>
      table.locked(eviction.session = Some(session))
      actions.persistShared(session, ConnectSessions.userOfQuery(session), subplan, key, reason, SparkShimImpl.sqlConf(session))
    }
  }

  /**
   * The candidate subplans of `analyzed` (its WITH clauses inlined) with a key, root first: (key, the keys of the candidate
   * subplans that contain it). What is worth sharing between queries submitted together.
   */
  def candidateKeys(session: SparkSession, analyzed: LogicalPlan): Seq[(LineageKey, Seq[String])] = {
    val plan = InlineCtes.inlined(analyzed)
    val found = LineageKey.ofSubplans(plan, MemphisConf.keyContext(session)).collect {
      case (subplan, Right(key)) if QueryCandidates.isCandidate(subplan, plan) => key
    }
    val hashes = mutable.Set.empty[String]
    val keyed = found.filter(k => hashes.add(k.hash))
    keyed.map(k => k -> keyed.filter(o => (o ne k) && o.contains(k.hash)).map(_.hash))
  }

  /**
   * The shuffles the first occurrence of the seen entry `id` wrote ([[io.memphis.reuse.RetainShuffleExec]]):
   * kept for its second occurrence, for at most `spark.memphis.reuse.retainedShuffles` entries,
   * oldest let go first (Spark then cleans their files as it would have), fewer when local disk is short.
   */
  def retainShuffles(id: String, shuffles: Seq[SparkPlan]): Unit = table.locked {
    def overDisk = { val disk = budgets(SQLConf.get); disk.localDiskHeld > disk.localDiskBudget }
    table.retainShuffles(id, shuffles, MemphisConf.RetainedShuffles.get(SQLConf.get), () => overDisk).foreach(e =>
      stats.record(Counter.ShufflesRetained, s"retain ${shuffles.size} shuffle(s) of the first occurrence of ${e.key.hash}"))
  }

  /**
   * When the driver heap stays above its threshold after a collection ([[HeapPressure]]): lets go of
   * join broadcasts, kept collected results and, in local mode, where executors' storage is the driver heap, idle
   * materialized entries, lowest value per byte first (see [[Eviction.relieve]]). Spark would
   * otherwise run out of memory with them referenced.
   */
  def relievePressure(): Unit = if (pressure.crossed()) table.locked {
    val why = s"heap pressure (${pressure.describe})"
    eviction.relieve(why, broadcasts.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
      () => broadcasts.release(r, Counter.PressureReleases, why))) ++
      collected.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
        () => collected.release(r, why, Counter.PressureReleases))), onDriverHeap = sparkContext.isLocal)
  }

  /**
   * Lets go of everything memphis holds (`memphis.clear`, or memphis turned off), the relations Spark
   * re-cached for entries let go outside memphis included: a user's `unpersist()` of a plan that
   * memphis's entries are built on makes Spark's CacheManager rebuild theirs, untracked.
   */
  def releaseAll(session: SparkSession, why: String): Unit = table.locked {
    checkpoints.releaseAll(why)
    broadcasts.releaseAll(why)
    collected.releaseAll(why)
    eviction.releaseAll(session, why)
    storage.uncacheReplaced(session)
  }

  /**
   * The user caches `plan` (`cache()`, `persist(level)`, `CACHE TABLE`) while memphis holds its result:
   * Spark's CacheManager would keep memphis's relation and ignore the user's storage level, and
   * `memphis.clear` would then drop what the user cached. memphis lets go of its entry first, so the
   * cache Spark makes next is the user's, at the user's level, and the user's to let go.
   */
  def yieldToUser(session: SparkSession, plan: LogicalPlan): Unit =
    // Every query passes here: the stack is looked at only while memphis holds something.
    if (table.holdsAny && Executions.cachingForUser) table.locked {
      // memphis caches a subplan under its user's mark (see QueryCandidates.owned), and marks it so in the user's plan.
      val owned = QueryCandidates.owned(plan, ConnectSessions.userOfQuery(session), java.util.Collections.emptySet(), shareAcrossUsers)
      spark.relationName(session, owned).flatten.foreach { name =>
        table.holding.filter(_.relation.exists(_.name == name)).foreach(e => eviction.release(session, e,
          EntryState.Evicted, Counter.Evicted, "the user caches the same plan, at a storage level of their own"))
      }
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
    checkpoints.releaseOf(user, why)
    broadcasts.releaseOf(user, why)
    collected.releaseOf(k => scoped(k.hash, user), why)
    eviction.releaseOf(user, why)
  }

  /**
   * `memphis.clear` from `session`: forgets every entry after releasing what they hold; on a Spark
   * Connect server, where users share this cache, lets go of what the calling user's hold.
   */
  def clearFor(session: SparkSession): Unit = {
    // Outside the lock: a write running now finishes its job, whose listener events need the lock.
    durable.settle(LineageCache.SettleMs)
    connectUser(session).fold(clear(session))(u => releaseOf(u, s"cleared by $u"))
  }

  /** [[clearFor]], then deletes the durable tier's Spark entries of `session`'s user. */
  def clearDurableFor(session: SparkSession): Unit = {
    clearFor(session)
    durable.clear(ConnectSessions.userOfQuery(session))
  }

  /** memphis turned off in `session`: lets go of what it holds (on a Connect server, what the session's user's hold). */
  def releaseFor(session: SparkSession, why: String): Unit = connectUser(session).fold(releaseAll(session, why))(releaseOf(_, why))

  /** The Spark Connect user of `session` whose entries are theirs alone (none when entries are shared). */
  private def connectUser(session: SparkSession): Option[String] = ConnectSessions.userOf(session).filter(_ => !shareAcrossUsers)

  /** Forgets every entry too, after releasing what they hold. */
  def clear(session: SparkSession): Unit = table.locked {
    releaseAll(session, "cleared")
    table.clear()
    slower.clear()
    spark.clear()
  }

  // What Spark's listener reports ([[StorageListener]]), and the slower-query guard's executions.
  def blockUpdated(rddId: Int, partition: Int, isStored: Boolean, bytes: Long, executor: String): Unit =
    table.locked(storage.blockUpdated(rddId, partition, isStored, bytes, executor))
  def executorRemoved(executor: String): Unit = table.locked(storage.executorRemoved(executor))
  def jobStarted(jobId: Int, executionId: Option[Long], rdds: Seq[(Int, String)]): Unit =
    table.locked(storage.jobStarted(jobId, executionId, rdds))
  def readerEnded(reader: Long): Unit = table.locked(storage.readerEnded(reader))
  def rddUnpersisted(rddId: Int): Unit = table.locked(storage.rddUnpersisted(rddId))
  private[memphis] def executionPlanned(id: Long, consumer: String, since: Long, used: Set[CacheEntry]): Unit =
    table.locked(slower.executionPlanned(id, consumer, since, used))
  def executionEnded(id: Long, endMs: Long, failed: Boolean): Unit = table.locked(slower.executionEnded(id, endMs, failed))

  /** One row per entry, for `memphis_cache()`, read under the lock. */
  def entryRows[T](row: CacheEntry => T): Seq[T] = table.locked(table.all.map(row).toList)

  /** The rows of the entries `session` may see: on a Spark Connect server, its user's own (unless entries are shared). */
  def entryRowsFor[T](session: SparkSession, row: CacheEntry => T): Seq[T] = connectUser(session) match {
    case Some(user) => table.locked(table.all.filter(_.owner == user).map(row).toList)
    case None => entryRows(row)
  }

  /** The SQL execution this thread plans for, if any (Spark sets it before planning an action). */
  private def currentExecution: Option[Long] = Executions.current(sparkContext)
}

object LineageCache {
  // Invariant: `current` belongs to the live SparkContext; a new context gets a new, empty cache.
  // Guarded by the object's lock.
  private var current: Option[LineageCache] = None

  // The JVM's heap notifications reach the live cache's valve; registered once per JVM.
  private lazy val pressureListened: Unit = HeapPressure.listen(() => synchronized(current).foreach(_.relievePressure()))

  def forContext(sc: SparkContext): LineageCache = synchronized {
    pressureListened
    current.filter(_.sparkContext eq sc).getOrElse {
      val cache = new LineageCache(sc)
      current = Some(cache)
      cache
    }
  }

  /** Subplans of a query (by identity), each with the node to put over it. */
  type Marks = java.util.IdentityHashMap[LogicalPlan, LogicalPlan => LogicalPlan]

  /** How long `memphis.clear` waits at most for the durable write running when it is called. */
  val SettleMs = 60000L

  /** How many recent aggregates first met inside a query decide whether the next is persisted ahead. */
  val RecentAggregates = 16
}
