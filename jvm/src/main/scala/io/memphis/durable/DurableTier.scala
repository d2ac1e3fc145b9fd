package io.memphis.durable

import java.util.concurrent.{LinkedBlockingQueue, ThreadFactory, ThreadPoolExecutor, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.mutable
import scala.util.control.NonFatal

import io.memphis.cache.CacheEntry
import io.memphis.checkpoint.CheckpointFiles
import io.memphis.conf.{CacheStats, ConnectSessions, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.durable.Manifest.{Refused, Serve, Stale}
import io.memphis.lineage.LineageKey
import org.apache.hadoop.fs.Path
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.types.DataType

/**
 * The durable tier of Spark subplan results: results that outlive the application, kept under
 * `spark.memphis.durable.dir` ([[DurableLayout]]) on any Hadoop filesystem; one per lineage cache.
 *
 * Written: when an entry becomes materialized in Spark's cache and [[DurableAdmission]] admits it,
 * by [[DurableWriter]] on this tier's one background thread, from the cached relation; the
 * manifest is committed last. Read: at planning, by [[DurableReadRule]] through [[lookup]], which
 * trusts an entry only when its manifest matches the subplan's key, canonical forms, fresh source
 * fingerprints and output, and its files are there as written. Bounded: [[DurableEviction]] when
 * the write queue empties, or every [[DurableTier.WritesPerPass]] writes. Never raises into a query: a failure is counted, logged, and the query computes.
 */
final class DurableTier(sc: SparkContext, stats: CacheStats, shared: Boolean) {
  /** The qualified root, or None when the tier is off (the default folder unusable counts as off, with a warning). */
  val root: Option[Path] = {
    val value = sc.getConf.get(MemphisConf.DurableDir.key, MemphisConf.DurableDir.default)
    DurableLayout.root(value, sc.isLocal).flatMap { dir =>
      CheckpointFiles.unusable(dir, sc.hadoopConfiguration) match {
        case Some(why) =>
          CacheStats.log.warn(s"memphis: the durable tier is off: $dir cannot be used ($why)")
          None
        case None =>
          val path = new Path(dir)
          Some(path.getFileSystem(sc.hadoopConfiguration).makeQualified(path))
      }
    }
  }

  val maxBytes: Long = MemphisConf.DurableMaxBytes.parse(
    sc.getConf.get(MemphisConf.DurableMaxBytes.key, MemphisConf.DurableMaxBytes.default)).getOrElse(0L)

  private val files = new DurableFiles(sc.hadoopConfiguration, shared)
  private val admission = new DurableAdmission
  private val eviction = new DurableEviction(files, stats)
  private val writer = new DurableWriter(files, admission, stats)

  // Invariant: `offered` (owner folder / key hash of each entry already offered for writing, so that
  // each is asked once, until a lookup removes its entry) changes only under this object's lock. Writes and eviction passes run on
  // `worker`, one at a time: this process never runs two at once. Other processes may: see
  // [[DurableEviction]] and [[DurableWriter]] for why that is safe.
  private val offered = mutable.Set.empty[String]
  // `listed` (folder -> when it was listed, the shapes in it) changes only under this object's lock too.
  private val listed = mutable.Map.empty[Path, (Long, Set[String])]
  // One thread, gone after a minute idle: a context stopped and another started leaves no thread behind.
  private lazy val worker: ThreadPoolExecutor = {
    val pool = new ThreadPoolExecutor(1, 1, 60, TimeUnit.SECONDS, new LinkedBlockingQueue[Runnable], new ThreadFactory {
      override def newThread(r: Runnable): Thread = {
        val t = new Thread(r, "memphis-durable-writer")
        t.setDaemon(true)
        t
      }
    })
    pool.allowCoreThreadTimeOut(true)
    pool
  }

  /** Writes since the last eviction pass: read and written on `worker` only. */
  private var writesSincePass = 0

  /** Writes queued or running: a level `memphis_stats()` shows, so that a caller can wait for them. */
  private val pending = new AtomicInteger

  def pendingWrites: Int = pending.get

  /** The session memphis last planned a query of (writes run in it); set by the read rule. */
  @volatile var session: Option[SparkSession] = None

  def enabled: Boolean = root.isDefined

  /**
   * Whether the tier is on but keeps nothing of `user`'s, neither read nor written: a Spark Connect
   * session of no known user ([[ConnectSessions.unknown]]), whose folder would be shared by every
   * such client. Shared entries are everyone's, so with `shareAcrossUsers` this user's are kept too.
   */
  def refuses(user: String): Boolean = enabled && !shared && ConnectSessions.unknown(user)

  /** The root `user`'s folders are under; none when the tier is off or [[refuses]] the user. */
  private def rootFor(user: String): Option[String] = root.filter(_ => !refuses(user)).map(_.toString)

  /** The folder of `user`'s Spark entries. */
  def folderOf(user: String): Option[Path] = rootFor(user).map(DurableLayout.sparkFolder(_, user, shared))

  /** The folder of `user`'s collected rows. */
  def collectedFolderOf(user: String): Option[Path] = rootFor(user).map(DurableLayout.collectedFolder(_, user, shared))

  /** Whether `owner`'s result `what` is not written because the tier [[refuses]] them; counted and logged then. */
  private def refusedWrite(owner: String, what: String): Boolean = refuses(owner) && {
    stats.record(Counter.RefusedUnknownUser, s"$what not written to the durable tier: ${DurableTier.unknownUser(owner)}")
    true
  }

  /**
   * Entry `e` became materialized (called under the lineage cache's lock): when admitted, its
   * write is queued; nothing waits for it. An unknown user's is not, as its reason says (`memphis_cache()`).
   */
  def materialized(e: CacheEntry): Unit = if (refusedWrite(e.owner, e.key.hash)) {
    e.reason = s"${e.reason}; not written to the durable tier: no known user"
  } else for {
    folder <- folderOf(e.owner)
    relation <- e.relation
    s <- session
  } offer(folder, e.key, e.owner, e.costMs, e.sizeBytes, Right(s -> WriteJob(e.key, e.owner, relation.plan, e.costMs)))

  /**
   * `rows` (UnsafeRows of `types`), collected by a query that took `costMs`, were kept for the
   * subplan of `key` on `owner`'s behalf, taking `bytes`: when admitted, and when their columns are
   * flat ([[CollectedRowsFile.unstorable]]), their write is queued; nothing waits for it.
   */
  def collected(key: LineageKey, owner: String, types: Seq[DataType], rows: Seq[InternalRow], costMs: Long,
      bytes: Long): Unit = if (!refusedWrite(owner, s"the collected rows of ${key.hash}")) collectedFolderOf(owner).foreach { folder =>
    CollectedRowsFile.unstorable(types) match {
      case Some(why) => stats.record(Counter.DurableNotAdmitted, s"rows of ${key.hash} not written to the durable tier: $why")
      case None => offer(folder, key, owner, costMs, bytes, Left(RowsJob(key, owner, types, rows, costMs)))
    }
  }

  /** Queues the write of `job` (rows or a Spark result) of `key` under `folder`, once per key until it is removed, when admitted. */
  private def offer(folder: Path, key: LineageKey, owner: String, costMs: Long, bytes: Long,
      job: Either[RowsJob, (SparkSession, WriteJob)]): Unit =
    if (maxBytes > 0 && synchronized(offered.add(s"$folder/${key.hash}"))) admission.verdict(costMs, bytes) match {
      case Left(why) => stats.record(Counter.DurableNotAdmitted, s"${key.hash} not written to the durable tier: $why")
      case Right(why) =>
        pending.incrementAndGet()
        worker.execute(new QueuedWrite(job.isRight, s"$folder/${key.hash}") {
          override def run(): Unit = try {
            job match {
              case Left(rows) => writer.writeRows(folder, rows, why)
              case Right((s, result)) => writer.write(s, folder, result, why)
            }
            synchronized(listed.clear())
            writesSincePass += 1
            // A pass reads every manifest of the user: one after a burst of writes, not one per write.
            if (pending.get == 1 || writesSincePass >= DurableTier.WritesPerPass) {
              writesSincePass = 0
              // On an object store a folder the user's does not hold is not listed (three requests there).
              val folders = Seq(folderOf(owner), collectedFolderOf(owner)).flatten
                .filter(f => !files.objectStore(f) || namesIn(f.getParent).contains(f.getName))
              eviction.pass(folders, maxBytes, System.currentTimeMillis())
            }
          } catch {
            case NonFatal(t) =>
              CacheStats.log.warn(s"memphis: durable write of ${key.hash} failed: $t")
              stats.record(Counter.DurableWriteFailures, s"durable write of ${key.hash} failed: $t")
          } finally pending.decrementAndGet()
        })
    }

  /** A write on `worker`'s queue: whether it reads a cached relation (a Spark job), and what it was offered as. */
  private abstract class QueuedWrite(val readsRelation: Boolean, val offeredAs: String) extends Runnable

  /**
   * Before memphis lets go of its cached relations (`memphis.clear`): the queued writes that would read
   * one are dropped (the relation gone, they would compute their whole plan again, and run a job
   * after the clear), and the write running now is waited for, at most `timeoutMs`. A dropped entry
   * is offered again when it is materialized again.
   */
  def settle(timeoutMs: Long): Unit = if (pending.get > 0) {
    worker.getQueue.toArray.foreach {
      case w: QueuedWrite if w.readsRelation && worker.remove(w) =>
        pending.decrementAndGet()
        synchronized(offered.remove(w.offeredAs))
        CacheStats.log.debug(s"memphis: the durable write of ${w.offeredAs} dropped: memphis is cleared")
      case _ =>
    }
    val deadline = System.currentTimeMillis() + timeoutMs
    while (pending.get > 0 && System.currentTimeMillis() < deadline) Thread.sleep(10)
  }

  /** The shapes of `user`'s Spark entries: one listing, which a query makes once. */
  def shapes(user: String): Set[String] = shapesIn(folderOf(user))

  /** The shapes of `user`'s collected rows: one listing, which a query makes once. */
  def collectedShapes(user: String): Set[String] = shapesIn(collectedFolderOf(user))

  /**
   * The shapes in `folder`, listed at most once per [[DurableTier.ListingMs]] (queries plan one after
   * another; an entry another process commits is seen that much later, a removed one is a miss at
   * lookup); listed afresh after this process writes, removes or clears. On an object store, where
   * listing a folder that is not there takes three requests (the listing, then S3A's probes of the path),
   * the user's folder is listed first (once for both of its folders): a folder it does not hold is not listed.
   */
  private def shapesIn(folder: Option[Path]): Set[String] = folder.fold(Set.empty[String]) { folder =>
    if (files.objectStore(folder) && !namesIn(folder.getParent).contains(folder.getName)) Set.empty[String]
    else namesIn(folder)
  }

  /** The folders in `folder`, listed at most once per [[DurableTier.ListingMs]]. */
  private def namesIn(folder: Path): Set[String] = {
    val now = System.currentTimeMillis()
    synchronized(listed.get(folder)).filter(l => now - l._1 < DurableTier.ListingMs).map(_._2).getOrElse {
      val shapes = try files.list(folder).filter(_.isDirectory).map(_.getPath.getName).toSet
      catch {
        case NonFatal(e) =>
          CacheStats.log.debug(s"memphis: could not list the durable tier's $folder: $e")
          Set.empty[String]
      }
      synchronized(listed(folder) = now -> shapes)
      shapes
    }
  }

  /**
   * The entry of `user` that serves the subplan of `key` and `output` (its folder and manifest), if
   * one does. One of the same shape that does not is counted and logged: invalidated and removed
   * when its sources changed, refused otherwise (removed when it is this user's and broken).
   */
  def lookup(user: String, key: LineageKey, output: Seq[Attribute]): Option[(Path, Manifest)] =
    folderOf(user).flatMap(find(_, user, key, Manifest.Format, Manifest.schemaOf(output).json)((_, _) => Right(())))
      .map { case (entry, m, _) => entry -> m }

  /**
   * The rows `user`'s collected entry of `key` holds for columns of `types`, and its manifest, if
   * one serves: checked as [[lookup]] checks, then its file's checksum and every row's bounds
   * ([[CollectedRowsFile.decode]]); a file that fails is refused and removed.
   */
  def lookupRows(user: String, key: LineageKey, types: Seq[DataType]): Option[(IndexedSeq[InternalRow], Manifest)] =
    collectedFolderOf(user).flatMap(find(_, user, key, CollectedRowsFile.format, Manifest.schemaOfTypes(types).json) {
      (entry, m) =>
        val file = m.files.head
        files.readBytes(new Path(entry, file.path), m.bytes) match {
          case None => Left(s"file ${file.path} is missing")
          case Some(bytes) if DurableWriter.sha256(bytes) != file.sha256 => Left(s"file ${file.path} does not match its checksum")
          case Some(bytes) => CollectedRowsFile.decode(bytes, types)
        }
    }).map { case (_, m, rows) => rows -> m }

  /**
   * The entry in `folder` of `user` whose manifest (of `format`, for a result of `schema`) serves
   * the subplan of `key`, and what `check` reads of its data (Left(why) when the data is wrong).
   */
  private def find[A](folder: Path, user: String, key: LineageKey, format: String, schema: String)(
      check: (Path, Manifest) => Either[String, A]): Option[(Path, Manifest, A)] = {
    val entry = new Path(folder, key.shapeHash)
    val manifestPath = new Path(entry, DurableLayout.ManifestName)
    def remove(): Boolean = {
      val removed = files.removeEntry(entry, System.currentTimeMillis())
      if (removed) synchronized { // written again when materialized again
        offered -= s"$folder/${key.hash}"
        listed.clear()
      }
      removed
    }
    try files.manifest(manifestPath).flatMap { manifest =>
      val verdict = manifest match {
        case Left(why) => Refused(why, remove = shared || files.ownedByThisUser(manifestPath))
        case Right(m) =>
          val seen = for {
            d <- m.dataFolders.toSeq if d.startsWith(DurableLayout.DataPrefix) && !d.contains("..")
            s <- files.list(new Path(entry, d)) if DurableTier.isDataFile(s.getPath.getName)
          } yield s"$d/${s.getPath.getName}" -> FileSeen(s.getLen, s.getModificationTime, files.ownedByThisUser(s))
          Manifest.verdict(m, key, format, schema, user, shared, files.ownedByThisUser(manifestPath), seen.toMap)
      }
      def refuse(why: String, removing: Boolean): Option[(Path, Manifest, A)] = {
        val removed = removing && remove() // not inside the message: it is built only when logged
        stats.record(Counter.DurableRefused, s"durable entry in $entry not read: $why${if (removed) "; removed" else ""}")
        None
      }
      verdict match {
        case Serve(m) => check(entry, m).fold(refuse(_, removing = true), data => Some((entry, m, data)))
        case Stale(why) =>
          if (remove()) stats.record(Counter.DurableInvalidated, s"durable entry of ${key.hash}'s plan removed: $why")
          None
        case Refused(why, removing) => refuse(why, removing)
      }
    } catch {
      case NonFatal(e) =>
        stats.record(Counter.DurableRefused, s"durable entry in $entry not read: $e")
        None
    }
  }

  /** `user`'s entries, Spark results then collected rows, as their manifests say (those readable), with their folders: for `memphis_cache()`. */
  def entries(user: String): Seq[(Path, Manifest)] =
    Seq(folderOf(user) -> shapes(user), collectedFolderOf(user) -> collectedShapes(user)).flatMap {
      case (folder, shapes) => folder.toSeq.flatMap { folder =>
        shapes.toSeq.sorted.flatMap { shape =>
          val entry = new Path(folder, shape)
          files.manifest(new Path(entry, DurableLayout.ManifestName)).flatMap(_.toOption)
            .filter(m => shared || m.owner == user).map(entry -> _)
        }
      }
    }

  /** Deletes `user`'s entries (`memphis.clear(spark, durable=True)`): they are asked for writing again. */
  def clear(user: String): Unit = Seq(folderOf(user), collectedFolderOf(user)).flatten.foreach { folder =>
    files.delete(folder)
    synchronized {
      offered.clear()
      listed.clear()
    }
    CacheStats.log.debug(s"memphis: deleted the durable tier's $folder")
  }
}

object DurableTier {
  /** Why the tier keeps nothing of `user`'s, a user it refuses: for the counter's log line. */
  def unknownUser(user: String): String = s"no known user ($user: a Spark Connect session that sent no user id)"

  /** How long a listing of a user's folder serves the queries planned after it. */
  val ListingMs = 1000L

  /** The most writes between two eviction passes, when writes keep coming. */
  val WritesPerPass = 16

  /** Larger files in a manifest's place are not read (a manifest of a deep plan takes tens of kilobytes). */
  val MaxManifestBytes: Long = 64L << 20

  /** A data file as Spark writes it, not its checksum, marker or a hidden file. */
  def isDataFile(name: String): Boolean = !name.startsWith(".") && !name.startsWith("_")
}
