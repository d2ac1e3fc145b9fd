package io.memphis

import scala.collection.mutable

import io.memphis.CacheStats.Counter
import io.memphis.lineage.{LineageKey, SourceFingerprint}
import io.memphis.reuse.{Admission, CacheEntry, EntryState, EvictionPolicy, OwnerMark, RecentRecurrence, RetainShuffle,
  ReuseRule, ShuffleReuseRule, StorageListener}
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.PythonUDF
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{PhysicalPlans, SparkRuntime, SparkShimImpl}
import org.apache.spark.storage.StorageLevel
import org.slf4j.LoggerFactory

/**
 * The driver's lineage cache of Spark subplans. One per SparkContext, shared by its sessions, as
 * Spark's own CacheManager is, which stores the data: memphis decides what to persist and when to
 * let go; Spark's CacheManager holds the cached relations and substitutes them into queries.
 */
final class LineageCache private (val sparkContext: SparkContext) {
  import LineageCache.{log, Observed}

  val stats = new CacheStats

  /**
   * Whether an entry serves the queries of every user, or only those of the user whose query
   * produced it (each user then has entries of their own, so that no one reads through the cache
   * a source they could not read). A static conf: fixed for the context's life.
   */
  val shareAcrossUsers: Boolean = MemphisConf.ShareAcrossUsers.parse(
    sparkContext.getConf.get(MemphisConf.ShareAcrossUsers.key, MemphisConf.ShareAcrossUsers.default)).contains(true)

  /** The name of `user`'s entry (or checkpoint, or broadcast) of key `hash`: per user unless shared. */
  def scoped(hash: String, user: String): String = if (shareAcrossUsers) hash else s"$hash $user"

  // Invariant: `entries` (by entry id: key hash, and user unless shared) and `byRdd` (cached RDD
  // id -> entry) change only under this object's lock, together with the entries' own fields; an
  // entry is in `byRdd` only while it holds a cached relation (to-persist or materialized) whose RDD
  // Spark has built.
  private val entries = mutable.LinkedHashMap.empty[String, CacheEntry]
  private val byRdd = mutable.Map.empty[Int, CacheEntry]
  /** Seen entries that keep their first occurrence's shuffles, oldest first (bounded by a conf). */
  private val retaining = mutable.LinkedHashSet.empty[CacheEntry]
  /**
   * The plans of entries whose RDD was unpersisted outside memphis, newest last. Spark may hold a new
   * relation for such a plan: its CacheManager re-caches the plans over a path a writer refreshes
   * (Delta 3 on Spark 3.5 does at each commit), and memphis, which no longer tracks it, uncaches it
   * at a later query (not while Spark re-caches: the relation returns only at the end). Changes only
   * under this object's lock.
   */
  private val replacedOutside = mutable.LinkedHashSet.empty[LogicalPlan]
  /**
   * Aggregates first met inside a query (not as its root), newest last, at most
   * [[LineageCache.RecentAggregates]]: when at least half of them recurred, the session is looking at
   * shared aggregates from several sides, and the next such one is persisted at its first occurrence
   * (`reuse.persistAhead`) rather than at its second, which would finish it from a kept shuffle.
   */
  private val recentAggregates = new RecentRecurrence[CacheEntry](LineageCache.RecentAggregates, _.occurrences > 1)
  /**
   * SQL executions memphis planned and that have not ended: the query (consumer), when it was
   * planned, and the entries it reads or fills ([[executionEnded]] judges them on its duration).
   */
  private val running = mutable.LinkedHashMap.empty[Long, (String, Long, Set[CacheEntry])]
  /** Per query (consumer): how long it took, latest, when memphis served and persisted nothing for it. */
  private val plainMs = mutable.LinkedHashMap.empty[String, Long]
  /** How many times memphis persisted anything: numbers cached relations' names. */
  private var persists = 0L
  /** The session of the latest decision: its confs (budget, policy) and CacheManager serve evictions. */
  private var session: Option[SparkSession] = None

  /** The session subplans are cached with (see [[io.memphis.reuse.CachingSession]]). */
  private val caching = new io.memphis.reuse.CachingSession

  /** Loop-carried subplans cut by local checkpoints (see [[io.memphis.checkpoint.CheckpointRule]]). */
  val checkpoints = new io.memphis.checkpoint.Checkpoints(this)

  /** Broadcasts of joins that later queries read instead of building them again. */
  val broadcasts = new io.memphis.reuse.BroadcastRegistry(this)

  /** The driver heap's pressure valve ([[relievePressure]]). */
  private val pressure = new HeapPressure(MemphisConf.DriverPressureThreshold.parse(sparkContext.getConf.get(
    MemphisConf.DriverPressureThreshold.key, MemphisConf.DriverPressureThreshold.default)).getOrElse(0.8))

  sparkContext.addSparkListener(new StorageListener(this))

  /** Where memphis holds data, what it holds there and what it may hold: one account per place. */
  def budgets(conf: SQLConf): MemoryAccounts = new MemoryAccounts(this, conf)

  /** Bytes memphis holds in cached relations now: derived from the entries, so it cannot drift. */
  def heldBytes: Long = synchronized(entries.values.filter(e => EntryState.Holding.contains(e.state)).map(_.sizeBytes).sum)

  /**
   * Bytes of memphis's own structures on the driver heap: its entries and their keys, approximately.
   * Kept as a running sum, read without the lock: the broadcast rule reads it while Spark plans a
   * cached relation under that relation's own lock, which an uncache under this lock also takes.
   */
  def structureBytes: Long = structures.get

  private val structures = new java.util.concurrent.atomic.AtomicLong

  private def structureBytes(e: CacheEntry): Long = LineageCache.EntryBytes + 2L * e.key.canonicalChars

  /** Bytes the first occurrences' kept shuffles take on local disk. */
  def retainedShuffleBytes: Long = synchronized(retaining.toSeq).flatMap(_.firstShuffles).map(PhysicalPlans.shuffleBytes).sum

  /** What `memphis_stats()` shows: the counters, then, per place, what is held and the budget. */
  def statsRows(conf: SQLConf): Seq[(String, Long)] = {
    val account = budgets(conf)
    stats.snapshot ++ Seq("bytes_held" -> heldBytes, "bytes_held_join_broadcasts" -> broadcasts.heldBytes) ++
      account.rows ++ Seq("driver_heap_used_bytes" -> HeapPressure.usedBytes, "driver_heap_max_bytes" -> HeapPressure.maxBytes)
  }

  /**
   * Looks at one query's analyzed plan: drops entries whose sources changed, then for each
   * candidate subplan (outermost first) counts an occurrence, persists it on its k-th, or counts a
   * hit when it is held. Subplans under a served one are not computed, so not counted; those under
   * a just-persisted one are (they fill it). Returns the first occurrences whose shuffle is to be
   * kept (see [[io.memphis.reuse.RetainShuffle]]) and, unless entries are shared across users, the
   * subplans served or persisted for this query's user ([[io.memphis.reuse.OwnerMark]]): by
   * identity, each with the node to put over it.
   */
  def consider(session: SparkSession,
      plan: LogicalPlan): java.util.IdentityHashMap[LogicalPlan, LogicalPlan => LogicalPlan] = {
    val marks = new java.util.IdentityHashMap[LogicalPlan, LogicalPlan => LogicalPlan]
    // This runs for every query: one with nothing to persist and nothing held to check costs no keys.
    relievePressure()
    val holding = synchronized(entries.values.exists(e => EntryState.Holding.contains(e.state)))
    if (!holding && !plan.exists(LineageCache.isCandidate(_, plan))) return marks
    val planned = System.currentTimeMillis()
    val results = LineageKey.ofSubplans(plan, MemphisConf.keyContext(session))
    synchronized {
      this.session = Some(session)
      uncacheReplaced(session)
      dropStale(session, plan, results)
    }
    val minOccurrences = MemphisConf.MinOccurrences.get(SQLConf.get)
    val retainShuffles = minOccurrences > 1 && MemphisConf.RetainedShuffles.get(SQLConf.get) > 0 &&
      SparkShimImpl.shuffleFilesKept(SQLConf.get)
    val persistAhead = minOccurrences > 1 && MemphisConf.PersistAhead.get(SQLConf.get)
    // The query that consumes each subplan: its own key, or its plan's shape when it has none.
    val consumer = results.collectFirst { case (p, Right(k)) if p eq plan => k.hash }
      .getOrElse(plan.semanticHash().toHexString)
    val user = SparkShimImpl.currentUser
    val served = mutable.Set.empty[LogicalPlan]
    // The subplans this query reads from memphis's storage, served or persisted (by identity).
    val owned = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap[LogicalPlan, java.lang.Boolean])
    val due = mutable.ArrayBuffer.empty[(LogicalPlan, CacheEntry)]
    val used = mutable.Set.empty[CacheEntry]  // entries this query reads or fills
    // Built only when a first-occurrence aggregate asks (not on every query).
    lazy val keyOf = {
      val keys = new java.util.IdentityHashMap[LogicalPlan, LineageKey]
      results.foreach { case (p, Right(k)) => keys.put(p, k); case _ => }
      keys
    }
    // Whether memphis holds a result inside `subplan` for `user` (a shared aggregate, a loop's last
    // result): one-off questions about a held result are many, and caching each of them ahead
    // would nest cached relations, whose plans grow with every level (a loop's, exponentially).
    def overHeld(subplan: LogicalPlan, user: String): Boolean = subplan.children.exists(_.exists(p =>
      Option(keyOf.get(p)).flatMap(k => entries.get(scoped(k.hash, user))).exists(e => EntryState.Holding.contains(e.state))))
    val ahead = mutable.Map.empty[CacheEntry, String]  // due at their first occurrence: why
    // The query's answer up to its presentation (order, limit, columns): not persisted ahead, since
    // an answer is rarely asked for again as it is.
    lazy val answer = {
      val chain = mutable.ArrayBuffer(plan)
      while (LineageCache.presents(chain.last)) chain += chain.last.children.head
      chain
    }
    results.foreach { case (subplan, result) =>
      if (LineageCache.isCandidate(subplan, plan) && !served.exists(_.exists(_ eq subplan))) {
        result match {
          case Left(reason) => decide(Counter.Refused, s"no reuse of ${subplan.nodeName}: $reason")
          case Right(key) => synchronized {
            observe(session, subplan, key, user, minOccurrences, consumer) match {
              case Observed.Served(e) =>
                served += subplan
                owned.add(subplan)
                used += e
              case Observed.Due(e) => due += subplan -> e
              case Observed.First(e) if LineageCache.keepsShuffle(subplan) =>
                (if (persistAhead && !answer.exists(_ eq subplan) && !overHeld(subplan, user)) aheadReason(e) else None) match {
                  case Some(why) =>
                    ahead(e) = why
                    due += subplan -> e
                  case None if retainShuffles => marks.put(subplan, RetainShuffle(scoped(key.hash, user), _))
                  case None =>
                }
              case _ =>
            }
          }
        }
      }
    }
    // A due subplan inside another one is persisted only when it recurred more often than that one
    // (it is shared beyond it): otherwise the outer one serves every query that needs it. Refused
    // ones ([[Admission]]) are out before: they serve no one.
    val admitted = due.filter { case (subplan, e) => admits(session, subplan, e) }
    val chosen = admitted.foldLeft(List.empty[(LogicalPlan, CacheEntry)]) { case (picked, (subplan, e)) =>
      val outer = picked.filter(_._1.exists(_ eq subplan)).map(_._2.occurrences)
      if (outer.forall(e.occurrences > _)) (subplan, e) :: picked else picked
    }
    // Innermost first (`chosen` is reversed): an outer subplan's cached plan then reads the inner
    // one's cached relation, so the job that fills the outer one fills both.
    synchronized(chosen.foreach { case (subplan, e) =>
      // A concurrent query may have persisted it since it was found due.
      if (!EntryState.Holding.contains(e.state)) {
        persist(session, e, subplan, ahead.getOrElse(e, s"occurrence ${e.occurrences}: persisted") +
          ", filled by the job that needs it", owned)
        if (ahead.contains(e) && EntryState.Holding.contains(e.state)) stats.add(Counter.PersistedAhead)
      }
      if (EntryState.Holding.contains(e.state)) {
        owned.add(subplan)
        used += e
      }
    })
    currentExecution.foreach(executionPlanned(_, consumer, planned, used.toSet))
    if (!shareAcrossUsers) owned.forEach(p => marks.put(p, OwnerMark(user, _)))
    marks
  }

  /**
   * Whether `e`'s due subplan may be persisted: not when [[Admission]] refuses it (decided once per
   * entry, outside the lock: it runs the optimizer) or when it was refused since (too large once
   * stored, or it made a query slower). A refusal is counted each time and shown as the entry's reason.
   */
  private def admits(session: SparkSession, subplan: LogicalPlan, e: CacheEntry): Boolean = {
    if (synchronized(e.refusal.isEmpty && e.estimatedBytes.isEmpty)) {
      val verdict = Admission.verdict(session, subplan, budgets(SparkShimImpl.sqlConf(session)).storageShare)
      synchronized(verdict.fold(r => e.refusal = Some(r), bytes => e.estimatedBytes = Some(bytes)))
    }
    synchronized(e.refusal).forall { case (counter, why) =>
      synchronized(e.reason = why)
      decide(counter, s"no reuse of ${e.key.hash}: $why")
      false
    }
  }

  /** Bytes of Spark storage memphis may fill (see [[MemoryAccounts]]). */
  def storageBudgetBytes(conf: SQLConf): Long = budgets(conf).storageBudget

  /** SQL execution `id` runs query `consumer`, planned at `since`, reading or filling `used`. */
  private[memphis] def executionPlanned(id: Long, consumer: String, since: Long, used: Set[CacheEntry]): Unit = synchronized {
    val (_, first, before) = running.getOrElse(id, (consumer, since, Set.empty[CacheEntry]))
    running(id) = (consumer, first, before ++ used)
    while (running.size > LineageCache.MaxRunning) running.remove(running.head._1)
  }

  /**
   * A SQL execution memphis planned ended: when it neither read nor filled an entry its duration is
   * the query's plain time; when it did and took longer than the plain time by more than
   * [[LineageCache.SlowerBound]], its entries made it slower (reading a cached relation costs more
   * than the plan it stands for, or filling it more than the query): they are let go and refused.
   */
  def executionEnded(id: Long, endMs: Long, failed: Boolean): Unit = synchronized {
    running.remove(id).filter(_ => !failed).foreach { case (consumer, since, used) =>
      val took = endMs - since
      if (used.isEmpty) {
        plainMs.remove(consumer)
        plainMs(consumer) = took
        while (plainMs.size > LineageCache.MaxRemembered) plainMs.remove(plainMs.head._1)
      } else plainMs.get(consumer).foreach { plain =>
        val (factor, slackMs) = LineageCache.SlowerBound
        if (took > plain * factor + slackMs) used.filter(_.refusal.isEmpty).foreach { e =>
          val why = s"not persisted again: query $consumer took $took ms with it, $plain ms without"
          e.refusal = Some(Counter.RefusedSlower -> why)
          if (EntryState.Holding.contains(e.state)) session.foreach(release(_, e, EntryState.Evicted, Counter.RefusedSlower, why))
          else decide(Counter.RefusedSlower, s"${e.key.hash}: $why")
        }
      }
    }
  }

  /**
   * When the driver heap stays above its threshold after a collection ([[HeapPressure]]): lets go of
   * what memphis holds on the driver heap, lowest value per byte first: the first, then the next
   * while what is let go stays within half of what was held:
   * join broadcasts and, in local mode, where executors' storage is the driver heap, idle
   * materialized entries. Spark would otherwise run out of memory with them referenced.
   */
  def relievePressure(): Unit = if (pressure.crossed()) synchronized {
    val state = pressure.describe
    val policy = session.map(s => MemphisConf.EvictionPolicyName.get(SparkShimImpl.sqlConf(s))).getOrElse("costnsize")
    val held = broadcasts.retained.map(r => (EvictionPolicy.valuePerByte(r.costMs, r.uses, r.bytes), r.bytes,
      () => broadcasts.release(r, Counter.PressureReleases, s"heap pressure ($state)"))) ++
      (if (!sparkContext.isLocal) Nil else entries.values.filter(e => e.state == EntryState.Materialized && e.readers.isEmpty)
        .toSeq.flatMap(e => session.map(s => (EvictionPolicy.score(policy, e), e.sizeBytes,
          () => release(s, e, EntryState.Evicted, Counter.PressureReleases, s"heap pressure ($state)")))))
    val total = held.map(_._2).sum
    var freed = 0L
    held.sortBy(_._1).iterator.takeWhile { case (_, bytes, _) => freed == 0 || 2 * (freed + bytes) <= total }
      .foreach { case (_, bytes, let) =>
        let()
        freed += bytes
      }
    if (held.isEmpty) log.debug(s"memphis: heap pressure ($state), nothing of memphis's held on the driver")
  }

  /**
   * `subplan` as memphis caches it and looks it up for `user`: under the user's mark unless entries
   * are shared, with the subplans in `inner` (held for the same user) marked too, so that Spark
   * substitutes their cached relations into it and its job reads them.
   */
  private def ownedPlan(subplan: LogicalPlan, user: String, inner: java.util.Set[LogicalPlan]): LogicalPlan = {
    def mark(p: LogicalPlan): LogicalPlan = {
      val marked = p.mapChildren(mark)
      if (inner.contains(p)) OwnerMark(user, marked) else marked
    }
    if (shareAcrossUsers) subplan else OwnerMark(user, subplan.mapChildren(mark))
  }

  /**
   * Persists the candidate subplan of `plan` whose key hash is `hash` now, before its first
   * occurrence: the caller knows it is shared (several actions submitted together read it), so
   * waiting for a second occurrence would compute it twice, concurrently. Spark fills it lazily in
   * the first job that needs it. Says whether memphis holds it now.
   */
  def persistAhead(session: SparkSession, plan: LogicalPlan, hash: String, reason: String): Boolean = {
    val found = LineageKey.ofSubplans(plan, MemphisConf.keyContext(session)).collectFirst {
      case (subplan, Right(key)) if key.hash == hash && LineageCache.isCandidate(subplan, plan) => (subplan, key)
    }
    val user = SparkShimImpl.currentUser
    found.exists { case (subplan, key) => synchronized {
      this.session = Some(session)
      val entry = entries.get(scoped(hash, user)) match {
        case Some(e) => Some(e).filter(_.key.sameLineage(key))
        case None => Some(remember(key, user, System.currentTimeMillis()))
      }
      entry.filter(e => EntryState.Holding.contains(e.state) || admits(session, subplan, e)).exists { e =>
        if (!EntryState.Holding.contains(e.state)) persist(session, e, subplan, reason, java.util.Collections.emptySet())
        EntryState.Holding.contains(e.state)
      }
    }}
  }

  /**
   * The candidate subplans of `plan` with a key, root first: (key, the keys of the candidate
   * subplans that contain it). What is worth sharing between queries submitted together.
   */
  def candidateKeys(session: SparkSession, plan: LogicalPlan): Seq[(LineageKey, Seq[String])] = {
    val found = LineageKey.ofSubplans(plan, MemphisConf.keyContext(session)).collect {
      case (subplan, Right(key)) if LineageCache.isCandidate(subplan, plan) => key
    }
    val hashes = mutable.Set.empty[String]
    val keyed = found.filter(k => hashes.add(k.hash))
    keyed.map(k => k -> keyed.filter(o => (o ne k) && LineageCache.contains(o, k.hash)).map(_.hash))
  }

  /** Counts an occurrence of the subplan, and says whether this query reads it from storage or should persist it. */
  private def observe(session: SparkSession, subplan: LogicalPlan, key: LineageKey, user: String, minOccurrences: Int,
      consumer: String): Observed = {
    val now = System.currentTimeMillis()
    val id = scoped(key.hash, user)
    if (!shareAcrossUsers && entries.valuesIterator.exists(o =>
        o.key.hash == key.hash && o.owner != user && EntryState.Holding.contains(o.state))) {
      decide(Counter.RefusedOtherUser, s"not serving ${key.hash} to $user: another user's entry; computed on its own")
    }
    val known = entries.get(id).filter(_.key.sameLineage(key))
    known.foreach(_.addConsumer(consumer))
    known match {
      case None if entries.contains(id) =>
        decide(Counter.Refused, s"no reuse of ${subplan.nodeName}: its key hash ${key.hash} collides with another plan's")
        Observed.Counted
      case None =>
        val e = remember(key, user, now)
        e.addConsumer(consumer)
        decide(Counter.Misses, s"seen ${key.hash}: first occurrence")
        if (minOccurrences <= 1) Observed.Due(e) else Observed.First(e)
      case Some(e) if EntryState.Holding.contains(e.state) &&
          SparkRuntime.cachedRelationName(session, ownedPlan(subplan, user, java.util.Collections.emptySet())).contains(e.relationName) =>
        e.occurrences += 1
        e.hits += 1
        e.lastAccess = now
        stats.add(Counter.ComputeSavedMs, e.costMs)
        currentExecution.foreach(e.readers += _)
        decide(Counter.Hits, s"reuse ${key.hash} (${e.state}, hit ${e.hits})")
        Observed.Served(e)
      case Some(e) =>
        e.occurrences += 1
        e.lastAccess = now
        if (e.state == EntryState.Evicted) e.misses += 1
        decide(Counter.Misses, s"miss ${key.hash} (${e.state}, occurrence ${e.occurrences})")
        // An evicted entry already proved its reuse: it is persisted again when it returns (unless
        // it was refused since: [[admits]] says so).
        val wanted = e.state == EntryState.Evicted || e.occurrences >= minOccurrences
        if (wanted) Observed.Due(e) else Observed.Counted
    }
  }

  /**
   * Records `e`, an aggregate first met inside a query, among the recent ones; says why it is to be
   * persisted ahead when at least half of those before it (and at least one) recurred.
   */
  private def aheadReason(e: CacheEntry): Option[String] =
    recentAggregates.firstMet(e, "aggregates first met inside a query").map(why => s"occurrence 1: persisted ahead, $why")

  /**
   * A new seen entry for `key`. The entries that only remember (seen, evicted, invalid) are kept to
   * a bounded number, oldest out.
   */
  private def remember(key: LineageKey, user: String, now: Long): CacheEntry = {
    val e = new CacheEntry(scoped(key.hash, user), key, user, now)
    entries(e.id) = e
    structures.addAndGet(structureBytes(e))
    val remembered = entries.values.filterNot(e => EntryState.Holding.contains(e.state))
    if (remembered.size > LineageCache.MaxRemembered) {
      val oldest = remembered.minBy(_.lastAccess)
      dropShuffles(oldest)
      entries.remove(oldest.id)
      structures.addAndGet(-structureBytes(oldest))
    }
    e
  }

  /**
   * The shuffles the first occurrence of the seen entry `id` wrote ([[io.memphis.reuse.RetainShuffleExec]]):
   * kept for its second occurrence, for at most `spark.memphis.reuse.retainedShuffles` entries,
   * oldest let go first (Spark then cleans their files as it would have).
   */
  def retainShuffles(id: String, shuffles: Seq[SparkPlan]): Unit = synchronized {
    // A plan run again (a DataFrame collected twice) offers the same shuffles again: nothing new.
    val fresh = (e: CacheEntry) => e.firstShuffles.length != shuffles.length || e.firstShuffles.zip(shuffles).exists(p => p._1 ne p._2)
    entries.get(id).filter(e => e.state == EntryState.Seen && shuffles.nonEmpty && fresh(e)).foreach { e =>
      dropShuffles(e)
      e.firstShuffles = shuffles
      retaining += e
      val bound = MemphisConf.RetainedShuffles.get(SQLConf.get)
      while (retaining.size > bound) dropShuffles(retaining.head)
      decide(Counter.ShufflesRetained, s"retain ${shuffles.size} shuffle(s) of the first occurrence of ${e.key.hash}")
      // Bytes on local disk are known once the shuffles are written: the older ones already are.
      def overDisk = { val disk = budgets(SQLConf.get); disk.localDiskHeld > disk.localDiskBudget }
      while (retaining.size > 1 && overDisk) dropShuffles(retaining.head)
    }
  }

  private def dropShuffles(e: CacheEntry): Unit = {
    e.firstShuffles = Nil
    retaining -= e
  }

  /**
   * Registers the subplan with Spark's CacheManager, which substitutes it into this query and fills
   * it in the job that needs it. Its RDD appears only then; [[blockUpdated]] adopts it by name.
   * `inner`: subplans inside it held for the same user ([[ownedPlan]]).
   */
  private def persist(session: SparkSession, e: CacheEntry, subplan: LogicalPlan, reason: String,
      inner: java.util.Set[LogicalPlan]): Unit = {
    val toCache = ownedPlan(subplan, e.owner, inner)
    if (Seq(subplan, toCache).distinct.exists(SparkRuntime.cachedRelationName(session, _).isDefined)) {
      e.reason = "already cached outside memphis"
    } else {
      persists += 1
      e.relationName = Some(s"memphis ${e.key.hash} #$persists")
      val reused = (n: Int) => decide(Counter.ShufflesReused, s"persist ${e.key.hash} from $n shuffle(s) of its first occurrence")
      try ReuseRule.suspended(ShuffleReuseRule.offering(e.firstShuffles, reused)(
        SparkShimImpl.cacheQuery(caching.of(session), toCache, e.relationName, StorageLevel.MEMORY_AND_DISK)))
      finally dropShuffles(e)
      e.plan = Some(toCache)
      e.persistedAt = System.currentTimeMillis()
      currentExecution.foreach(e.readers += _)
      e.state = EntryState.ToPersist
      e.stored.clear()
      e.storedOn.clear()
      e.reason = reason
      decide(Counter.Persisted, s"persist ${e.key.hash} (${e.reason})")
    }
  }

  /**
   * Entries over a source this query reads whose fingerprint is not what it was: Spark's
   * CacheManager matches plans, not file contents, so it would serve them stale. A source the
   * query reads but could not fingerprint now counts as changed.
   */
  private def dropStale(session: SparkSession, plan: LogicalPlan, results: Seq[(LogicalPlan, LineageKey.Result)]): Unit = {
    val held = entries.values.filter(e => EntryState.Holding.contains(e.state)).toSeq
    if (held.nonEmpty) {
      val present = plan.collectLeaves().flatMap(SourceFingerprint.identityOf).toSet
      val fresh = results.collect { case (_, Right(k)) => k.sources }.flatten
        .flatMap(s => s.identity.map(_ -> s.digest)).toMap
      held.foreach { e =>
        val changed = e.key.allSources.exists { s =>
          s.identity.exists(id => present.contains(id) && !fresh.get(id).contains(s.digest))
        }
        if (changed) invalidate(session, e, "a source changed")
      }
    }
  }

  /** Lets go of the relations Spark re-cached for entries unpersisted outside memphis ([[replacedOutside]]). */
  private def uncacheReplaced(session: SparkSession): Unit = if (replacedOutside.nonEmpty) {
    if (SparkShimImpl.cacheManager(session).isEmpty) replacedOutside.clear()
    replacedOutside.filter(SparkShimImpl.lookupCachedData(session, _).isDefined).toSeq.foreach { p =>
      ReuseRule.suspended(SparkShimImpl.uncacheQuery(session, p))
      log.debug("memphis: uncached a relation Spark re-cached for a plan memphis let go")
      replacedOutside -= p
    }
  }

  /** Unpersists `e` and every held entry built on it. */
  private def invalidate(session: SparkSession, e: CacheEntry, why: String): Unit = {
    val dependents = entries.values.filter(d => (d ne e) && EntryState.Holding.contains(d.state) &&
      d.key.children.exists(LineageCache.contains(_, e.key.hash))).toSeq
    release(session, e, EntryState.Invalid, Counter.Invalidated, why)
    dependents.foreach(d => release(session, d, EntryState.Invalid, Counter.Invalidated, s"built on ${e.key.hash}: $why"))
  }

  private def release(session: SparkSession, e: CacheEntry, state: EntryState.Value, counter: Counter.Value,
      why: String): Unit = {
    if (EntryState.Holding.contains(e.state)) {
      e.plan.foreach(p => ReuseRule.suspended(
        SparkShimImpl.uncacheQuery(session, p)))
    }
    forget(e)
    e.state = state
    e.occurrences = 0
    e.reason = why
    decide(counter, s"${state} ${e.key.hash}: $why")
  }

  private def forget(e: CacheEntry): Unit = {
    dropShuffles(e)
    e.rddId.foreach(byRdd.remove)
    e.rddId = None
    e.relationName = None
    e.plan = None
    e.stored.clear()
    e.storedOn.clear()
  }

  /** Lets go of everything memphis holds (`memphis.clear`, or memphis turned off). */
  def releaseAll(session: SparkSession, why: String): Unit = synchronized {
    checkpoints.releaseAll(why)
    broadcasts.releaseAll(why)
    entries.values.filter(e => EntryState.Holding.contains(e.state)).toSeq
      .foreach(release(session, _, EntryState.Evicted, Counter.Evicted, why))
  }

  /** Forgets every entry too, after releasing what they hold. */
  def clear(session: SparkSession): Unit = synchronized {
    releaseAll(session, "cleared")
    entries.values.foreach(dropShuffles)
    entries.clear()
    structures.set(0)
    recentAggregates.clear()
    running.clear()
    plainMs.clear()
    caching.clear()
  }

  def blockUpdated(rddId: Int, partition: Int, isStored: Boolean, bytes: Long, executor: String): Unit = synchronized {
    byRdd.get(rddId).orElse(adopt(rddId)).foreach { e =>
      // A partition is stored while some executor stores it (a recomputed one may sit on two).
      val on = e.storedOn.getOrElse(partition, Set.empty[String])
      if (isStored) {
        e.stored(partition) = bytes
        e.storedOn(partition) = on + executor
      } else if ((on - executor).isEmpty) {
        e.stored.remove(partition)
        e.storedOn.remove(partition)
      } else e.storedOn(partition) = on - executor
      if (e.state == EntryState.ToPersist && e.stored.size == e.partitions) {
        e.state = EntryState.Materialized
        e.costMs = System.currentTimeMillis() - e.persistedAt
        e.reason = s"all ${e.partitions} partitions stored; computed in ${e.costMs} ms"
        decide(Counter.Materialized, s"materialized ${e.key.hash}: ${e.reason}")
        session.foreach(enforceBudget)
      } else if (e.state == EntryState.Materialized && !e.stored.contains(partition)) {
        partitionsLost(e, s"partition $partition lost")
      }
    }
  }

  /**
   * An executor (its block manager) is gone, and with it the partitions only it stored: Spark
   * recomputes them through lineage when read, and stores them again, which materializes the
   * entry again.
   */
  def executorRemoved(executor: String): Unit = synchronized {
    byRdd.values.foreach { e =>
      val lost = e.storedOn.collect { case (p, on) if on.contains(executor) => p -> (on - executor) }
      lost.foreach { case (p, rest) =>
        if (rest.isEmpty) {
          e.stored.remove(p)
          e.storedOn.remove(p)
        } else e.storedOn(p) = rest
      }
      val gone = lost.count(_._2.isEmpty)
      if (gone > 0 && e.state == EntryState.Materialized) partitionsLost(e, s"$gone partition(s) lost with executor $executor")
    }
  }

  private def partitionsLost(e: CacheEntry, what: String): Unit = {
    e.state = EntryState.ToPersist
    e.reason = s"$what; Spark recomputes them when read"
    log.debug(s"memphis: ${e.key.hash}: ${e.reason}")
  }

  /**
   * Evicts materialized entries, in the policy's order, until memphis holds no more than its
   * budget; one larger than the whole budget is let go and never persisted again. Entries still
   * being filled (to-persist) or read by a running SQL execution are not touched: when the next
   * to go is read, eviction waits, and runs again when an entry materializes or an execution ends.
   */
  private def enforceBudget(session: SparkSession): Unit = {
    val conf = SparkShimImpl.sqlConf(session)
    val budget = storageBudgetBytes(conf)
    val policy = MemphisConf.EvictionPolicyName.get(conf)
    val idle = (e: CacheEntry) => e.state == EntryState.Materialized && e.readers.isEmpty
    entries.values.filter(e => idle(e) && e.sizeBytes > budget).toSeq.foreach { e =>
      val why = s"${e.sizeBytes} bytes exceed the whole budget of $budget"
      release(session, e, EntryState.Evicted, Counter.Evicted, why)
      e.refusal = Some(Counter.Refused -> s"not persisted again: $why")
    }
    // Local checkpoints share the place: what they take is not there for cached relations.
    val checkpointed = checkpoints.storageBytes
    // In the policy's order; when the next to go is still read, wait for its execution to end.
    val order = EvictionPolicy.evictionOrder(policy, entries.values.filter(_.state == EntryState.Materialized).toSeq)
    order.iterator.takeWhile(e => heldBytes + checkpointed > budget && idle(e)).foreach { e =>
      release(session, e, EntryState.Evicted, Counter.Evicted,
        f"over the budget of $budget bytes ($policy score ${EvictionPolicy.score(policy, e)}%.3g)")
    }
  }

  /** The to-persist entry whose cached relation's RDD this is, now that Spark has built it. */
  private def adopt(rddId: Int): Option[CacheEntry] =
    SparkRuntime.persistedRdd(sparkContext, rddId).flatMap { case (name, partitions) =>
      entries.values.find(e => e.state == EntryState.ToPersist && e.rddId.isEmpty && e.relationName.contains(name))
        .map { e =>
          e.rddId = Some(rddId)
          e.partitions = partitions
          byRdd(rddId) = e
          e
        }
    }

  /** The SQL execution this thread plans for, if any (Spark sets it before planning an action). */
  private def currentExecution: Option[Long] =
    Option(sparkContext.getLocalProperty("spark.sql.execution.id")).map(_.toLong)

  /**
   * A job reads the cached RDDs among `rdds` (id, name): their entries are protected until its SQL
   * execution ends (or the job, outside SQL). This covers plans made before their action ran (e.g.
   * an explained or re-collected DataFrame), which planning could not tie to an execution.
   */
  def jobStarted(jobId: Int, executionId: Option[Long], rdds: Seq[(Int, String)]): Unit = synchronized {
    val reader = executionId.getOrElse(LineageCache.jobReader(jobId))
    rdds.foreach { case (id, name) =>
      val table = SparkRuntime.cachedTableName(name)
      byRdd.get(id).orElse(entries.values.find(e => table.isDefined && e.relationName == table))
        .filter(e => EntryState.Holding.contains(e.state))
        .foreach(_.readers += reader)
    }
  }

  /** A SQL execution (or a job, see [[jobStarted]]) ended: what only it read may be evicted now. */
  def readerEnded(reader: Long): Unit = synchronized {
    val read = entries.values.count(_.readers.remove(reader))
    if (read > 0) session.foreach(enforceBudget)
  }

  def rddUnpersisted(rddId: Int): Unit = synchronized {
    byRdd.get(rddId).foreach { e =>
      e.plan.foreach { p =>
        replacedOutside += p
        if (replacedOutside.size > LineageCache.MaxReplaced) replacedOutside -= replacedOutside.head
      }
      forget(e)
      e.state = EntryState.Evicted
      e.reason = "unpersisted outside memphis"
      decide(Counter.Evicted, s"evicted ${e.key.hash}: ${e.reason}")
    }
  }

  /** One row per entry, for `memphis_cache()`, read under the lock. */
  def entryRows[T](row: CacheEntry => T): Seq[T] = synchronized(entries.values.map(row).toList)

  /** The one path for every decision: count it and log it at debug level with its reason. */
  private[memphis] def decide(counter: Counter.Value, message: => String): Unit = {
    stats.add(counter)
    if (log.isDebugEnabled) log.debug(s"memphis: $message")
  }
}

object LineageCache {
  private[memphis] val log = LoggerFactory.getLogger(classOf[LineageCache])

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

  /** What one occurrence of a subplan comes to in its query. */
  private sealed trait Observed
  private object Observed {
    final case class Served(entry: CacheEntry) extends Observed
    final case class Due(entry: CacheEntry) extends Observed
    /** A first occurrence that is not persisted yet. */
    final case class First(entry: CacheEntry) extends Observed
    case object Counted extends Observed
  }

  /** The reader id of a job outside any SQL execution: negative, so it never equals an execution id. */
  def jobReader(jobId: Int): Long = -1L - jobId

  /** How many entries that hold nothing are remembered; each keeps only its key. */
  val MaxRemembered = 10000

  /** How many plans unpersisted outside memphis are looked for among Spark's cached relations. */
  val MaxReplaced = 16

  /** How many running SQL executions are followed for [[LineageCache.executionEnded]] (more are not judged). */
  val MaxRunning = 1000

  /**
   * A query memphis read or filled an entry for is slower than without when it takes more than
   * this factor of its plain time plus this many ms: the slack covers a shared machine's noise.
   */
  val SlowerBound: (Double, Long) = (1.5, 1000L)

  /** Bytes of an entry's own fields on the driver heap, besides its key's text (measured order of magnitude). */
  val EntryBytes = 1024L

  /** How many recent aggregates first met inside a query decide whether the next is persisted ahead. */
  val RecentAggregates = 16

  // Python operators by name: their classes moved between Spark versions.
  private val PythonOperators = Set("MapInPandas", "MapInArrow", "FlatMapGroupsInPandas", "FlatMapGroupsInArrow",
    "FlatMapCoGroupsInPandas", "FlatMapCoGroupsInArrow", "ArrowEvalPython", "BatchEvalPython")

  /**
   * Subplans worth keeping: rooted at an expensive operator, or a query's root over one. Scans of
   * columnar files and cheap row operators are not: re-reading them costs about what the cache would.
   */
  def isCandidate(subplan: LogicalPlan, root: LogicalPlan): Boolean = subplan match {
    case _: Command => false
    case _: Aggregate | _: Join | _: Window | _: Sort | _: Distinct | _: Deduplicate | _: Generate => true
    case l: LogicalRelation => l.relation match {
      case fs: HadoopFsRelation => Set("CSVFileFormat", "JsonFileFormat").contains(fs.fileFormat.getClass.getSimpleName)
      case _ => false
    }
    case p if PythonOperators.contains(p.nodeName) => true
    case p if p.expressions.exists(_.exists(_.isInstanceOf[PythonUDF])) => true
    case p => (p eq root) && !p.isInstanceOf[LeafNode] && p.exists(c => (c ne p) && isCandidate(c, root))
  }

  /**
   * Candidates whose first occurrence keeps its shuffle: aggregates, whose shuffle holds their
   * partial results (small, and all the second occurrence must still combine). Joins are left to
   * plain planning: filters pushed through them matter more than what a shuffle would save.
   */
  def keepsShuffle(subplan: LogicalPlan): Boolean = subplan match {
    case _: Aggregate | _: Distinct => true
    case _ => false
  }

  /** Operators that only present their child's rows: order, limit, columns, a name. */
  def presents(plan: LogicalPlan): Boolean = plan match {
    case _: Sort | _: GlobalLimit | _: LocalLimit | _: Offset | _: Project | _: SubqueryAlias => true
    case _ => false
  }

  private def contains(key: LineageKey, hash: String): Boolean =
    key.hash == hash || key.children.exists(contains(_, hash))
}
