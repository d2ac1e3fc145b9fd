package io.memphis.durable

import java.util.concurrent.{LinkedBlockingQueue, ThreadFactory, ThreadPoolExecutor, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.mutable
import scala.util.control.NonFatal

import io.memphis.{CacheStats, MemphisConf}
import io.memphis.CacheStats.Counter
import io.memphis.checkpoint.CheckpointFiles
import io.memphis.durable.Manifest.{Refused, Serve, Stale}
import io.memphis.lineage.LineageKey
import io.memphis.reuse.CacheEntry
import org.apache.hadoop.fs.Path
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Attribute

/**
 * The durable tier of Spark subplan results: results that outlive the application, kept under
 * `spark.memphis.durable.dir` ([[DurableLayout]]) on any Hadoop filesystem; one per lineage cache.
 *
 * Written: when an entry becomes materialized in Spark's cache and [[DurableAdmission]] admits it,
 * by [[DurableWriter]] on this tier's one background thread, from the cached relation; the
 * manifest is committed last. Read: at planning, by [[DurableReadRule]] through [[lookup]], which
 * trusts an entry only when its manifest matches the subplan's key, canonical forms, fresh source
 * fingerprints and output, and its files are there as written. Bounded: [[DurableEviction]] after
 * each write. Never raises into a query: a failure is counted, logged, and the query computes.
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

  /** Writes queued or running: a level `memphis_stats()` shows, so that a caller can wait for them. */
  private val pending = new AtomicInteger

  def pendingWrites: Int = pending.get

  /** The session memphis last planned a query of (writes run in it); set by the read rule. */
  @volatile var session: Option[SparkSession] = None

  def enabled: Boolean = root.isDefined

  /** The folder of `user`'s Spark entries. */
  def folderOf(user: String): Option[Path] = root.map(r => DurableLayout.sparkFolder(r.toString, user, shared))

  /**
   * Entry `e` became materialized (called under the lineage cache's lock): when admitted, its
   * write is queued; nothing waits for it.
   */
  def materialized(e: CacheEntry): Unit = for {
    folder <- folderOf(e.owner)
    relation <- e.relation
    s <- session
    if maxBytes > 0 && synchronized(offered.add(s"$folder/${e.key.hash}"))
  } admission.verdict(e.costMs, e.sizeBytes) match {
    case Left(why) => stats.record(Counter.DurableNotAdmitted, s"${e.key.hash} not written to the durable tier: $why")
    case Right(why) =>
      val job = WriteJob(e.key, e.owner, relation.plan, e.costMs)
      pending.incrementAndGet()
      worker.execute(new Runnable {
        override def run(): Unit = try {
          writer.write(s, folder, job, why)
          eviction.pass(folder, maxBytes, System.currentTimeMillis())
        } catch {
          case NonFatal(t) =>
            CacheStats.log.warn(s"memphis: durable write of ${job.key.hash} failed: $t")
            stats.record(Counter.DurableWriteFailures, s"durable write of ${job.key.hash} failed: $t")
        } finally pending.decrementAndGet()
      })
  }

  /** The shapes of `user`'s entries: one listing, which a query makes once. */
  def shapes(user: String): Set[String] = folderOf(user).fold(Set.empty[String]) { folder =>
    try files.list(folder).filter(_.isDirectory).map(_.getPath.getName).toSet
    catch {
      case NonFatal(e) =>
        CacheStats.log.debug(s"memphis: could not list the durable tier's $folder: $e")
        Set.empty
    }
  }

  /**
   * The entry of `user` that serves the subplan of `key` and `output` (its folder and manifest), if
   * one does. One of the same shape that does not is counted and logged: invalidated and removed
   * when its sources changed, refused otherwise (removed when it is this user's and broken).
   */
  def lookup(user: String, key: LineageKey, output: Seq[Attribute]): Option[(Path, Manifest)] = folderOf(user).flatMap { folder =>
    val entry = new Path(folder, key.shapeHash)
    val manifestPath = new Path(entry, DurableLayout.ManifestName)
    def remove(): Boolean = {
      val removed = files.removeEntry(entry, System.currentTimeMillis())
      if (removed) synchronized(offered -= s"$folder/${key.hash}") // written again when materialized again
      removed
    }
    try files.manifest(manifestPath).flatMap { manifest =>
      val verdict = manifest match {
        case Left(why) => Refused(why, remove = shared || files.ownedByThisUser(manifestPath))
        case Right(m) =>
          val seen = for {
            d <- m.dataFolders.toSeq if d.startsWith(DurableLayout.DataPrefix) && !d.contains("..")
            s <- files.list(new Path(entry, d)) if DurableTier.isDataFile(s.getPath.getName)
          } yield s"$d/${s.getPath.getName}" -> FileSeen(s.getLen, s.getModificationTime, files.ownedByThisUser(s.getPath))
          Manifest.verdict(m, key, output, user, shared, files.ownedByThisUser(manifestPath), seen.toMap)
      }
      verdict match {
        case Serve(m) => Some(entry -> m)
        case Stale(why) =>
          if (remove()) stats.record(Counter.DurableInvalidated, s"durable entry of ${key.hash}'s plan removed: $why")
          None
        case Refused(why, removing) =>
          val removed = removing && remove() // not inside the message: it is built only when logged
          stats.record(Counter.DurableRefused, s"durable entry in $entry not read: $why${if (removed) "; removed" else ""}")
          None
      }
    } catch {
      case NonFatal(e) =>
        stats.record(Counter.DurableRefused, s"durable entry in $entry not read: $e")
        None
    }
  }

  /** `user`'s entries as their manifests say (those readable), with their folders: for `memphis_cache()`. */
  def entries(user: String): Seq[(Path, Manifest)] = folderOf(user).toSeq.flatMap { folder =>
    shapes(user).toSeq.sorted.flatMap { shape =>
      val entry = new Path(folder, shape)
      files.manifest(new Path(entry, DurableLayout.ManifestName)).flatMap(_.toOption)
        .filter(m => shared || m.owner == user).map(entry -> _)
    }
  }

  /** Deletes `user`'s Spark entries (`memphis.clear(spark, durable=True)`): they are asked for writing again. */
  def clear(user: String): Unit = folderOf(user).foreach { folder =>
    files.delete(folder)
    synchronized(offered.clear())
    CacheStats.log.debug(s"memphis: deleted the durable tier's $folder")
  }
}

object DurableTier {
  /** Larger files in a manifest's place are not read (a manifest of a deep plan takes tens of kilobytes). */
  val MaxManifestBytes: Long = 64L << 20

  /** A data file as Spark writes it, not its checksum, marker or a hidden file. */
  def isDataFile(name: String): Boolean = !name.startsWith(".") && !name.startsWith("_")
}
