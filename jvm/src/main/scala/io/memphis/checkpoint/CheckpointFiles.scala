package io.memphis.checkpoint

import java.lang.ref.{Reference, ReferenceQueue, WeakReference}
import java.util.UUID

import scala.collection.mutable
import scala.util.control.NonFatal

import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
import org.apache.spark.SparkContext
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.rdd.RDD
import org.apache.spark.scheduler.{SparkListener, SparkListenerApplicationEnd}

/**
 * The folders of memphis's reliable checkpoints (`spark.memphis.checkpoint.dir`), one per checkpoint
 * under `<dir>/memphis-<application id>/`.
 *
 * A released checkpoint's folder is deleted once its RDD is unreachable, not at once: a DataFrame
 * planned against it (an old iteration's, run again by the user) still reads its files, and they are
 * its only data. Reachability is Spark's ContextCleaner's test (a weak reference, polled here on each
 * deep query); Spark's own cleaner cannot do it, as it only knows `SparkContext.checkpointDir`. When
 * the application ends nothing can read them, and the application's folders go with it.
 */
final class CheckpointFiles(sparkContext: SparkContext, stats: CacheStats) {
  // Invariant: `pending` (weak reference to a released checkpoint's RDD -> its folder) and `roots`
  // change only under this object's lock.
  private val unreachable = new ReferenceQueue[RDD[_]]
  private val pending = mutable.Map.empty[Reference[_ <: RDD[_]], String]
  private val roots = mutable.LinkedHashSet.empty[String]

  /** Bytes of the files in `folder` when it is on the local filesystem (else 0: not this machine's disk). */
  def localBytes(folder: String): Long = try {
    val path = new Path(folder)
    val fs = path.getFileSystem(sparkContext.hadoopConfiguration)
    if (fs.getScheme == "file" && fs.exists(path)) fs.getContentSummary(path).getLength else 0L
  } catch {
    case NonFatal(_) => 0L
  }

  /** A new folder for checkpoint number `n` under `dir`, for this application. */
  def folder(dir: String, n: Long): String = synchronized {
    val root = new Path(dir, s"memphis-${sparkContext.applicationId}").toString
    if (roots.isEmpty) sparkContext.addSparkListener(new SparkListener {
      override def onApplicationEnd(end: SparkListenerApplicationEnd): Unit = deleteRoots()
    })
    roots += root
    new Path(root, s"checkpoint-$n").toString
  }

  /** Deletes `folder` once `rdd` (the released checkpoint written there) is unreachable. */
  def deleteWhenUnreachable(rdd: RDD[_], folder: String): Unit = synchronized {
    pending(new WeakReference[RDD[_]](rdd, unreachable)) = folder
  }

  /** Deletes the folders of released checkpoints that no plan can read any more. */
  def deleteUnreachable(): Unit = {
    val ready = synchronized(Iterator.continually(unreachable.poll()).takeWhile(_ != null).flatMap(pending.remove).toSeq)
    ready.foreach(f => delete(f, "its checkpoint was released and no plan reads it"))
  }

  private def deleteRoots(): Unit = {
    val all = synchronized {
      pending.clear()
      roots.toSeq
    }
    all.foreach(r => delete(r, "the application ended"))
  }

  private def delete(folder: String, why: String): Unit =
    try {
      val path = new Path(folder)
      if (path.getFileSystem(sparkContext.hadoopConfiguration).delete(path, true)) {
        stats.record(Counter.CheckpointFilesDeleted, s"deleted checkpoint files $folder: $why")
      } else CacheStats.log.debug(s"memphis: no checkpoint files at $folder to delete ($why)")
    } catch {
      case NonFatal(e) => CacheStats.log.warn(s"memphis: could not delete checkpoint files $folder ($why): $e")
    }
}

object CheckpointFiles {
  /** Why memphis cannot write checkpoints under `dir`, if it cannot: it makes the folder and a probe file in it. */
  def unusable(dir: String, hadoop: Configuration): Option[String] =
    try {
      val root = new Path(dir)
      val fs = root.getFileSystem(hadoop)
      if (!fs.mkdirs(root) || !fs.getFileStatus(root).isDirectory) Some("it is not a directory that can be made")
      else {
        val probe = new Path(root, s".memphis-probe-${UUID.randomUUID()}")
        fs.create(probe, false).close()
        fs.delete(probe, false)
        None
      }
    } catch {
      case NonFatal(e) => Some(s"it cannot be made or written (${e.getClass.getSimpleName}: ${e.getMessage})")
    }
}
