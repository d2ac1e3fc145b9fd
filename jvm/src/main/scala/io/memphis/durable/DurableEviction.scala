package io.memphis.durable

import io.memphis.cache.EvictionPolicy
import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
import org.apache.hadoop.fs.{FileStatus, Path}

/**
 * Keeps a user's durable folders within their byte budget and deletes what no reader can need;
 * runs on the tier's one thread after writes, so this process never runs two at once.
 *
 * Several processes may run it at once: an entry is removed by renaming its manifest away (one of
 * them wins), and data is deleted only when no manifest and no manifest removed within the grace
 * period ([[DurableEviction.GraceMs]]) lists it, and it is older than that: a reader that planned
 * with a manifest just removed still finds its files, and a write in progress (its data folder
 * young, its manifest not committed yet) is left alone. A killed writer's folder goes once it is old.
 */
private[durable] final class DurableEviction(files: DurableFiles, stats: CacheStats) {
  import DurableEviction.GraceMs

  /** One pass over `folders` (a user's `spark` and `collected` folders, one budget) at `now`, evicting beyond `maxBytes`. */
  def pass(folders: Seq[Path], maxBytes: Long, now: Long): Unit = {
    val live = folders.flatMap(files.list).filter(_.isDirectory).flatMap(tidy(_, now))
    var total = live.map(_._2.bytes).sum
    // Least compute time per byte first (the cost/size score of the Spark tier; reads in other processes are unknown), oldest first.
    val order = live.sortBy { case (_, m) => (EvictionPolicy.valuePerByte(m.costMs, 0L, m.bytes), m.writtenMs) }
    order.iterator.takeWhile(_ => total > maxBytes).foreach { case (entry, m) =>
      if (files.removeEntry(entry, now)) {
        total -= m.bytes
        stats.record(Counter.DurableEvicted, s"durable entry ${m.key} removed: over durable.maxBytes ($maxBytes bytes), " +
          s"${m.bytes} bytes computed in ${m.costMs} ms")
      }
    }
  }

  /** Deletes an entry folder's leftovers; returns its live manifest, if it has one. */
  private def tidy(folder: FileStatus, now: Long): Option[(Path, Manifest)] = {
    val entry = folder.getPath
    val inside = files.list(entry)
    def named(prefix: String) = inside.filter(_.getPath.getName.startsWith(prefix))
    def manifest(s: FileStatus) = files.manifest(s.getPath).flatMap(_.toOption)
    val live = inside.find(_.getPath.getName == DurableLayout.ManifestName).flatMap(manifest)
    val (recent, expired) = named(DurableLayout.RemovedPrefix).partition(s => now - DurableEviction.removedAt(s) < GraceMs)
    expired.foreach(s => files.delete(s.getPath))
    val listed = live.toSeq.flatMap(_.dataFolders) ++ recent.flatMap(manifest).flatMap(_.dataFolders)
    val old = (s: FileStatus) => now - s.getModificationTime >= GraceMs
    val leftovers = named(DurableLayout.DataPrefix).filter(s => !listed.contains(s.getPath.getName) && old(s)) ++
      named(DurableLayout.TempPrefix).filter(old)
    leftovers.foreach { s =>
      if (files.delete(s.getPath)) stats.record(Counter.DurableCleaned, s"deleted ${s.getPath}: no manifest lists it and " +
        s"it is older than ${GraceMs / 60000} minutes (a removed entry's data, or a write that did not finish)")
    }
    // Emptied and old: not a folder a writer just made for its data.
    if (live.isEmpty && old(folder) && inside.size == expired.size + leftovers.size) files.delete(entry)
    live.map(entry -> _)
  }
}

object DurableEviction {
  /** How long removed entries' data and unfinished writes are kept: longer than a query reads its files. */
  val GraceMs: Long = 30L * 60 * 1000

  /** When a removed manifest was removed: in its name (a rename keeps the file's modification time). */
  private def removedAt(s: FileStatus): Long =
    scala.util.Try(s.getPath.getName.stripPrefix(DurableLayout.RemovedPrefix).takeWhile(_ != '-').toLong)
      .getOrElse(s.getModificationTime)
}
