package io.memphis.facade

import io.memphis.broadcasts.JoinBroadcasts
import io.memphis.cache.{CacheEntry, EntryState, EntryTable, Eviction, Executions, HeapPressure, OwnerMark, PendingObservation,
  QueryCandidates, QueryConf, RecentRecurrence, RetainShuffle, ReuseActions, ReusePolicy, SessionKeyContext, SlowerQueries, SparkCache, SparkEvents,
  StorageTracking}
import io.memphis.checkpoint.Checkpoints
import io.memphis.collected.{CollectedResults, KeepRequest, KeptResult}
import io.memphis.conf.{CacheStats, ConnectSessions, MemphisConf, MemphisEvents}
import io.memphis.conf.CacheStats.Counter
import io.memphis.durable.DurableTier
import io.memphis.facade.LineageCache.Marks
import io.memphis.lineage.{HeldKeys, InlineCtes, LineageKey}
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkShimImpl}
import org.apache.spark.sql.types.DataType

/**
 * The driver's lineage cache of Spark subplans. One per SparkContext, shared by its sessions, as
 * Spark's own CacheManager is, which stores the data: memphis decides what to persist and when to
 * let go; Spark's CacheManager holds the cached relations and substitutes them into queries.
 *
 * A facade over the pieces in [[io.memphis.cache]] and the [[Stores]]. Concurrency: one lock, the
 * entry table's ([[EntryTable.locked]]); every piece changes its state and the entries' only under
 * it, and calls Spark's CacheManager (whose own lock comes last) from under it; the stores' own
 * monitors come between them (the order is written at [[io.memphis.cache.Store]]).
 */
final class LineageCache private (val sparkContext: SparkContext) {
  val stats = new CacheStats(new MemphisEvents(Some(sparkContext)))

  /**
   * Whether an entry serves the queries of every user, or only those of the user whose query
   * produced it (each user then has entries of their own, so that no one reads through the cache
   * a source they could not read). A static conf: fixed for the context's life.
   */
  val shareAcrossUsers: Boolean = MemphisConf.ShareAcrossUsers.parse(
    sparkContext.getConf.get(MemphisConf.ShareAcrossUsers.key, MemphisConf.ShareAcrossUsers.default)).contains(true)

  /** The keys of the entries and of the kept results, each distinct node held once. */
  private val keys = new HeldKeys
  private val table = new EntryTable(shareAcrossUsers, LineageCache.RecentAggregates, keys)
  private val spark = new SparkCache

  private val stores = new Stores(sparkContext, stats, shareAcrossUsers, scoped, storageBudgetBytes, keys)
  val checkpoints: Checkpoints = stores.checkpoints
  val broadcasts: JoinBroadcasts = stores.broadcasts
  val collected: CollectedResults = stores.collected
  val durable: DurableTier = stores.durable

  private val eviction = new Eviction(table, spark, stats, storageBudgetBytes, () => checkpoints.storageBytes)
  private val storage = new StorageTracking(sparkContext, table, spark, eviction, stats, durable.materialized)
  private val slower = new SlowerQueries(eviction, stats)
  private[facade] val pressure = new PressureValve(sparkContext, table, eviction, stores)
  private val actions = new ReuseActions(table, spark, stats, budgets(_).storageShare, () => currentExecution,
    () => pressure.storageCrowdsHeap)

  /** What Spark's listener reports, and the slower-query guard's executions. */
  val events = new SparkEvents(table, storage, slower)

  /** Letting go of everything, or of one Spark Connect user's, in every store. */
  val releases = new Releases(table, spark, stores, eviction, storage, slower, shareAcrossUsers)

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

  /**
   * Keeps the rows a query collected for `request` within the driver heap's budget, which kept results
   * share with join broadcasts ([[PressureValve.fit]]): the result, when kept.
   */
  def keepCollected(request: KeepRequest, rows: Array[InternalRow], conf: SQLConf): Option[KeptResult] =
    growingDriverHeap(Some(conf))(collected.offer(request, rows, budgets(conf).collectedResultsBudget))

  /** Lets go of the join broadcasts and kept results of least value per byte until they fit the driver heap's budget. */
  def fitDriverHeap(conf: SQLConf): Unit = pressure.fit(budgets(conf).collectedResultsBudget)

  /**
   * Runs `grow`, which adds to what memphis holds on the driver heap (a kept result, join broadcasts,
   * remembered entries), then fits the heap's budget ([[fitDriverHeap]], with `conf`), both under the
   * cache's lock: [[driverHeapHeld]] is read under it too, so no reader sees the bytes between a growth
   * and its fit, over the budget (the TPC-DS corpus' sampler did once in 3,035 samples, by 197 KB).
   */
  def growingDriverHeap[T](conf: Option[SQLConf])(grow: => T): T = table.locked {
    val grown = grow
    conf.foreach(fitDriverHeap)
    grown
  }

  /** Bytes memphis holds on the driver heap: join broadcasts, kept results and its own structures. */
  def driverHeapHeld: Long = table.locked(broadcasts.heldBytes + collected.heldBytes + structureBytes)

  /** Keeps the rows of `key`'s subplan another process collected (read from the durable tier) as [[keepCollected]] does. */
  def adoptCollected(id: String, key: LineageKey, types: Seq[DataType], rows: IndexedSeq[InternalRow], costMs: Long,
      conf: SQLConf): KeptResult =
    growingDriverHeap(Some(conf))(collected.adopt(id, key, types, rows, costMs, budgets(conf).collectedResultsBudget))

  /** Bytes the first occurrences' kept shuffles take on local disk. */
  def retainedShuffleBytes: Long = table.retainedShuffleBytes

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
    pressure.relieve()
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
      val decisions = ReusePolicy.decide(candidates, past, recent, table.recentSize, conf,
        persistRecurring = RecentRecurrence.recurs(table.recentlyDue.judged),
        persistsRead = RecentRecurrence.pays(table.recentPersists.judged))
      // The entries remembered now take room on the driver heap too.
      val observed = if (executing) growingDriverHeap(Some(conf.sql))(actions.observe(query, decisions, planned))
        else Map.empty[Int, CacheEntry]
      (candidates, decisions, observed)
    }
    decisions.retain.foreach(i => marks.put(query.subplan(i), RetainShuffle(scoped(query.key(i).hash, query.user), _)))
    val owned =
      if (executing) carryOut(session, query, candidates, decisions, entries, conf, planned)
      else actions.served(query, decisions)
    actions.servedInSubqueries(session, query, executing).foreach(owned.add)
    if (!shareAcrossUsers) owned.forEach(p => marks.put(p, OwnerMark(query.user, _)))
    (marks, if (executing) None else Some(new PendingObservation(query, decisions)))
  }

  /** Carries out the decisions on an executed query: persists what is due; returns the subplans it reads from memphis. */
  private def carryOut(session: SparkSession, query: QueryCandidates, candidates: IndexedSeq[ReusePolicy.Candidate],
      decisions: ReusePolicy.Decisions, entries: Map[Int, CacheEntry], conf: QueryConf,
      planned: Long): java.util.Set[LogicalPlan] = {
    // Planned before as another query, which shares its plan (and its observation): counted here.
    PendingObservation.on(query.plan).foreach(_.take())
    val (owned, used) = actions.persistDue(session, query, candidates, decisions, entries, conf)
    currentExecution.foreach(events.executionPlanned(_, query.consumer, planned, used))
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
    LineageKey.ofSubplans(plan, SessionKeyContext(session)).collectFirst {
      case (subplan, Right(key)) if key.hash == hash && QueryCandidates.isCandidate(subplan, plan) => (subplan, key)
    }.exists { case (subplan, key) =>
      table.locked(eviction.session = Some(session))
      val conf = SparkShimImpl.sqlConf(session)
      growingDriverHeap(Some(conf))(actions.persistShared(session, ConnectSessions.userOfQuery(session), subplan, key, reason, conf))
    }
  }

  /** What is worth sharing between queries submitted together (see [[QueryCandidates.candidateKeys]]). */
  def candidateKeys(session: SparkSession, analyzed: LogicalPlan): Seq[(LineageKey, Seq[String])] =
    QueryCandidates.candidateKeys(session, analyzed)

  /**
   * The shuffles the first occurrence of the seen entry `id` wrote ([[io.memphis.reuse.RetainShuffleExec]]):
   * kept for its second occurrence, for at most `spark.memphis.reuse.retainedShuffles` entries,
   * oldest let go first (Spark then cleans their files as it would have), fewer when local disk is short.
   * Returns how many it kept (0: none).
   *
   * A kept shuffle keeps what its map side read alive, the join broadcasts built below it among them:
   * Spark frees a broadcast on the driver once no plan references it. So shuffles are kept only
   * while those broadcasts, with the other kept shuffles', fit in what the driver heap's budget
   * leaves (TPC-DS with a 640 MiB driver, docs/reliability.md: none of the shuffles kept was read
   * again, and the broadcasts they held made the edited pass 2.4× plain Spark's time, 1.2× without).
   */
  def retainShuffles(id: String, shuffles: Seq[SparkPlan]): Long = table.locked {
    def overDisk = { val disk = budgets(SQLConf.get); disk.localDiskHeld > disk.localDiskBudget }
    def broadcastBytes(plans: Seq[SparkPlan]) = plans.flatMap(PhysicalPlans.broadcastsBuiltIn).map(PhysicalPlans.broadcastBytes).sum
    val pinned = broadcastBytes(shuffles)
    // Summed only when a broadcast lies below (none without adaptive execution: it is built in this job).
    lazy val room = {
      val accounts = budgets(SQLConf.get)
      accounts.driverHeapBudget - accounts.driverHeapHeld - broadcastBytes(table.retainedShuffles)
    }
    val kept = if (pinned > 0 && pinned > room) {
      table.get(id).foreach(e => stats.record(Counter.Refused, s"not keeping the shuffles of the first occurrence of " +
        s"${e.key.hash}: they keep $pinned bytes of join broadcasts on the driver heap, where its budget leaves ${room max 0}"))
      None
    } else table.retainShuffles(id, shuffles, MemphisConf.RetainedShuffles.get(SQLConf.get), () => overDisk)
    kept.foreach(e => stats.record(Counter.ShufflesRetained, s"retain ${shuffles.size} shuffle(s) of the first occurrence of ${e.key.hash}"))
    kept.fold(0L)(_ => shuffles.size.toLong)
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

  // The ways of letting go that the rules and the table functions ask the facade for (see [[Releases]]).
  def releaseFor(session: SparkSession, why: String): Unit = releases.releaseFor(session, why)
  def clearFor(session: SparkSession): Unit = releases.clearFor(session)
  def clearDurableFor(session: SparkSession): Unit = releases.clearDurableFor(session)

  /** One row per entry, for `memphis_cache()`, read under the lock. */
  def entryRows[T](row: CacheEntry => T): Seq[T] = table.locked(table.all.map(row).toList)

  /** The rows of the entries `session` may see: on a Spark Connect server, its user's own (unless entries are shared). */
  def entryRowsFor[T](session: SparkSession, row: CacheEntry => T): Seq[T] = releases.connectUser(session) match {
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
  private lazy val pressureListened: Unit = HeapPressure.listen(() => synchronized(current).foreach(_.pressure.relieve()))

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
