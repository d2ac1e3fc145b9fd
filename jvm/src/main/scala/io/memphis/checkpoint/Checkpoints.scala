package io.memphis.checkpoint

import java.util.IdentityHashMap

import scala.collection.mutable

import io.memphis.cache.Store
import io.memphis.conf.{CacheStats, ConnectSessions, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.LineageKey
import org.apache.spark.SparkContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.{Command, LogicalPlan}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{CheckpointRelations, SparkShimImpl}

/**
 * One cut: the checkpoint standing for the subplan of `key` (registered as `id`: the key's hash, and
 * the user whose query made it unless entries are shared across users), the folder it is written to (reliable
 * checkpoints only), and the checkpoints it was built on: emptied once those are released, so that
 * nothing memphis holds keeps their RDDs reachable (Spark, and [[CheckpointFiles]], free what is not).
 */
final class Checkpoint(val id: String, val key: LineageKey, val relation: LogicalPlan, val rdd: RDD[_], var builtOn: Seq[Checkpoint],
    val number: Long, val folder: Option[String])

/**
 * The registry of loop-carried subplans memphis cut, one per [[LineageCache]] (per SparkContext).
 *
 * A query deeper than `checkpoint.minHeight` leaves the keys of its deep subplans (deeper than the
 * threshold) in `seen`. A later deep query that holds one of them below its root (the template
 * grew around an earlier result) gets it replaced by a local checkpoint, built after the
 * checkpoints already registered inside it were substituted, so its own lineage is short. A
 * subplan whose key is registered is replaced by its checkpoint directly. With
 * `spark.memphis.checkpoint.dir` set the checkpoint is reliable, written there (see [[CheckpointFiles]]).
 *
 * Release: once a checkpoint is materialized (its RDD's lineage is cut), the checkpoints it was
 * built on are superseded and forgotten, so memphis holds at most the last two or three
 * iterations' results. It does not unpersist or delete them: a DataFrame planned against one (an old
 * iteration's, run again by the user) still reads it, and a checkpoint cannot be recomputed.
 * Spark's ContextCleaner removes its blocks once no plan references its RDD any more, as for a
 * user's own `localCheckpoint()`; until then Spark's storage limits (memory, then disk) bound them.
 * A reliable checkpoint's folder is deleted at the same moment by [[CheckpointFiles]].
 *
 * Speculation (`spark.memphis.loop.speculative`): a query that reads or cuts a checkpoint and holds,
 * above it, a loop step applied to it that the checkpointed subplan itself repeats below (the same
 * canonical forms and child positions: the next iteration's result, see [[Checkpoints.nextStep]])
 * checkpoints that subplan at its first occurrence, filled by this query's job, instead of
 * computing it here and again inside the next query's cut. Only subplans with a lineage key
 * (deterministic, every source fingerprinted), and not when the loop's previous result takes more
 * than the storage budget (the last iteration's speculative checkpoint is read by no one).
 */
final class Checkpoints(sparkContext: SparkContext, stats: CacheStats, scoped: (String, String) => String,
    storageBudgetBytes: SQLConf => Long) extends Store[Checkpoint] {
  // Invariant: `registry` (id -> its checkpoint) and `seen` (ids) change only under this object's lock.
  private val registry = mutable.LinkedHashMap.empty[String, Checkpoint]
  private val seen = mutable.LinkedHashSet.empty[String]
  private var made = 0L
  private val files = new CheckpointFiles(sparkContext, stats)

  /**
   * The plan to run for `plan`: itself when shallow or when nothing in it is loop-carried. `keys`
   * (its subplans' keys) are asked for only when it is deep.
   */
  def cut(session: SparkSession, plan: LogicalPlan, keys: => Seq[(LogicalPlan, LineageKey.Result)]): LogicalPlan = {
    files.deleteUnreachable()
    val query = new QueryCut(session, plan, () => keys)
    if (query.shallow(plan)) plan
    else {
      query.keyed()
      synchronized {
        releaseSuperseded()
        query.run()
      }
    }
  }

  /**
   * One deep query's cut: only the topmost loop-carried subplan is checkpointed; below it,
   * registered checkpoints are substituted. Its methods run under the registry's lock.
   */
  private final class QueryCut(session: SparkSession, plan: LogicalPlan, keysOf: () => Seq[(LogicalPlan, LineageKey.Result)]) {
    private val conf = SparkShimImpl.sqlConf(session)
    private val minHeight = MemphisConf.CheckpointMinHeight.get(conf)
    private val speculate = MemphisConf.LoopSpeculative.get(conf)
    private val user = ConnectSessions.userOfQuery(session)
    private val heights = new IdentityHashMap[LogicalPlan, Integer]()
    private lazy val keys = {
      val found = new IdentityHashMap[LogicalPlan, LineageKey.Result]()
      keysOf().foreach { case (p, r) => found.put(p, r) }
      found
    }
    /** The checkpoints read or made below the subplan being rewritten: what a new one is built on. */
    private val used = mutable.ArrayBuffer.empty[Checkpoint]
    /** Subplans to checkpoint at their first occurrence: one loop step above the checkpoint they map to. */
    private val ahead = new IdentityHashMap[LogicalPlan, Checkpoint]()

    def shallow(p: LogicalPlan): Boolean = height(p) <= minHeight || p.isInstanceOf[Command]

    /** Keys every subplan: called before the registry's lock is taken (fingerprints list files). */
    def keyed(): Unit = keys.size()

    def run(): LogicalPlan = {
      val result = rewrite(plan, isRoot = true, mayCut = true, Nil)
      // Remember this query's deep subplans: the next iteration's plan holds them.
      keys.forEach { (p, r) =>
        r.foreach(k => if (height(p) > minHeight) {
          seen.remove(id(k))
          seen += id(k)
        })
      }
      while (seen.size > Checkpoints.MaxSeen) seen.remove(seen.head)
      result
    }

    private def height(p: LogicalPlan): Int = {
      val known = heights.get(p)
      if (known != null) known
      else {
        val h = p.children.map(height).foldLeft(0)(math.max) + 1
        heights.put(p, h)
        h
      }
    }

    private def id(k: LineageKey): String = scoped(k.hash, user)

    private def keyOf(p: LogicalPlan): Option[LineageKey] = Option(keys.get(p)).flatMap(_.toOption)

    private def rewrite(p: LogicalPlan, isRoot: Boolean, mayCut: Boolean, above: List[LogicalPlan]): LogicalPlan =
      if (shallow(p)) p
      else keyOf(p) match {
        case Some(k) if registry.get(id(k)).exists(_.key.sameLineage(k)) =>
          val c = registry(id(k))
          used += c
          if (mayCut) expect(c, above)
          CheckpointRelations.rebind(c.relation, p.output)
        case Some(k) if mayCut && !isRoot && seen.contains(id(k)) && !registry.contains(id(k)) =>
          val (inner, builtOn) = below(p, mayCut = false, above)
          val c = make(p, inner, k, builtOn, "held by an earlier query")
          expect(c, above)
          CheckpointRelations.rebind(c.relation, p.output)
        case key =>
          val before = used.size
          val inner = p.mapChildren(rewrite(_, isRoot = false, mayCut, p :: above))
          (key, Option(ahead.get(p))) match {
            case (Some(k), Some(last)) => speculated(p, inner, k, last, taken(before))
            case _ => inner
          }
      }

    /** `p`'s children rewritten, and the checkpoints they read or made (taken from `used`). */
    private def below(p: LogicalPlan, mayCut: Boolean, above: List[LogicalPlan]): (LogicalPlan, Seq[Checkpoint]) = {
      val before = used.size
      val inner = p.mapChildren(rewrite(_, isRoot = false, mayCut, p :: above))
      (inner, taken(before))
    }

    private def taken(before: Int): Seq[Checkpoint] = {
      val builtOn = used.drop(before).toSeq
      used.remove(before, used.size - before)
      builtOn
    }

    /** The next iteration's result, checkpointed at its first occurrence (see the class comment). */
    private def speculated(p: LogicalPlan, inner: LogicalPlan, k: LineageKey, last: Checkpoint,
        builtOn: Seq[Checkpoint]): LogicalPlan = {
      val why = s"speculative: the loop step of checkpoint #${last.number} applied once more (the next " +
        "iteration's result), checkpointed at its first occurrence so that this query's job computes it once"
      stats.record(Counter.PersistedSpeculatively, s"${k.hash}: $why")
      CheckpointRelations.rebind(make(p, inner, k, builtOn, why).relation, p.output)
    }

    private def make(p: LogicalPlan, inner: LogicalPlan, k: LineageKey, builtOn: Seq[Checkpoint], why: String): Checkpoint = {
      made += 1
      val folder = Option(MemphisConf.CheckpointDir.get(conf)).filter(_.nonEmpty).map(files.folder(_, made))
      val (relation, rdd) = folder.fold(CheckpointRelations.localCheckpoint(session, inner))(
        CheckpointRelations.reliableCheckpoint(session, inner, _))
      val c = new Checkpoint(id(k), k, relation, rdd, builtOn.distinct, made, folder)
      registry(c.id) = c
      used += c
      stats.record(Counter.Checkpointed, s"checkpoint #$made of ${k.hash} " +
        s"(${folder.fold("local")(f => s"reliable, in $f")}; height ${height(p)} > $minHeight, $why; " +
        s"built on ${c.builtOn.map(_.number).mkString("[", ",", "]")})")
      c
    }

    /** The nearest subplan above `c` that is the loop step `c` repeats, applied once more, is next. */
    private def expect(c: Checkpoint, above: List[LogicalPlan]): Unit = if (speculate) {
      above.find(a => keyOf(a).exists(Checkpoints.nextStep(_, c.key))).filterNot(ahead.containsKey).foreach { next =>
        val bytes = CheckpointRelations.storedBytes(c.rdd)
        val budget = storageBudgetBytes(conf)
        if (bytes <= budget) ahead.put(next, c)
        else CacheStats.log.debug(s"memphis: no speculative checkpoint over #${c.number}: the loop's " +
          s"previous result takes $bytes bytes, more than the storage budget of $budget")
      }
    }
  }

  /** Forgets the checkpoints under a materialized one: no plan memphis makes reads them again. */
  private def releaseSuperseded(): Unit = {
    val materialized = registry.values.filter(c => CheckpointRelations.isCheckpointed(c.rdd)).toSeq
    val superseded = materialized.flatMap(_.builtOn).filter(c => registry.get(c.id).exists(_ eq c)).distinct
    superseded.foreach(c => release(c, Counter.CheckpointsReleased, s"superseded: a checkpoint built on it is materialized"))
    materialized.foreach(_.builtOn = Nil)
  }

  /** Forgets `c`; its blocks and files go when no plan references its RDD (see the class comment). */
  def release(c: Checkpoint, counter: Counter.Value, why: String): Unit = synchronized {
    registry.remove(c.id)
    c.folder.foreach(files.deleteWhenUnreachable(c.rdd, _))
    stats.record(counter, s"released checkpoint #${c.number} of ${c.key.hash}: $why")
  }

  /** Lets go of every checkpoint and forgets what was seen (`memphis.clear`, or memphis turned off). */
  def releaseAll(why: String): Unit = synchronized {
    registry.values.toSeq.foreach(release(_, Counter.CheckpointsReleased, why))
    seen.clear()
  }

  /** Lets go of `user`'s checkpoints (their last Spark Connect session closed). */
  def releaseOf(user: String, why: String): Unit = synchronized {
    registry.values.filter(c => c.id == scoped(c.key.hash, user)).toSeq.foreach(release(_, Counter.CheckpointsReleased, why))
  }

  /** How many checkpoints are held now. */
  def held: Int = synchronized(registry.size)

  /** Bytes the held local checkpoints take in Spark storage. */
  def storageBytes: Long = synchronized(registry.values.filter(_.folder.isEmpty).toSeq).map(c => CheckpointRelations.storedBytes(c.rdd)).sum

  /** Bytes the held reliable checkpoints take in their folders on the local filesystem. */
  def localFileBytes: Long = synchronized(registry.values.flatMap(_.folder).toSeq).map(files.localBytes).sum
}

object Checkpoints {
  /** How many deep subplan keys are remembered; a loop needs only the last iteration's. */
  val MaxSeen = 4096

  /**
   * Whether `next` is a loop step applied to `carried` that `carried` itself repeats: the canonical
   * forms and child positions on the path from `next` down to `carried` are met again, in order,
   * going down from `carried`. `next` is then the same template one iteration further.
   */
  def nextStep(next: LineageKey, carried: LineageKey): Boolean =
    next.local == carried.local && pathTo(next, carried).exists { step =>
      step.nonEmpty && step.foldLeft(Option(carried)) { case (k, (local, i)) =>
        k.filter(k => k.local == local && i < k.children.size).map(_.children(i))
      }.isDefined
    }

  /** The canonical form and child position of each node on the path from `key` down to `target`. */
  private def pathTo(key: LineageKey, target: LineageKey): Option[Seq[(String, Int)]] =
    if (key.hash == target.hash) Some(Nil)
    else key.children.iterator.zipWithIndex.filter(_._1.height >= target.height)
      .flatMap { case (c, i) => pathTo(c, target).map((key.local, i) +: _) }.take(1).toList.headOption
}
