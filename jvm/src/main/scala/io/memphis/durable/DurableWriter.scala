package io.memphis.durable

import java.util.UUID

import io.memphis.CacheStats
import io.memphis.CacheStats.Counter
import io.memphis.lineage.LineageKey
import io.memphis.reuse.ReuseRule
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}

/** A materialized entry to write: its key, owner, cached plan (as Spark's CacheManager holds it) and measured cost. */
final case class WriteJob(key: LineageKey, owner: String, plan: LogicalPlan, costMs: Long)

/**
 * Writes a materialized entry to the durable tier, on the tier's background thread: its cached
 * plan, which Spark's CacheManager substitutes with the cached relation (the job reads the stored
 * blocks; nothing is computed again), is written as Parquet into a data folder of its own, then the
 * manifest is written beside it under a temporary name and renamed into place, last. Two processes
 * writing one key use two data folders; the rename that commits decides (on the local filesystem
 * the later one replaces the earlier, elsewhere the first stays), and the data no manifest lists is
 * deleted later ([[DurableEviction]]). Whatever fails, nothing is left that a reader would trust.
 */
private[durable] final class DurableWriter(files: DurableFiles, admission: DurableAdmission, stats: CacheStats) {
  /** Writes `job` under `folder` (the owner's `spark` folder) in `session`; `why` it was admitted. */
  def write(session: SparkSession, folder: Path, job: WriteJob, why: String): Unit = {
    val entry = new Path(folder, job.key.shapeHash)
    val manifestPath = new Path(entry, DurableLayout.ManifestName)
    val existing = files.manifest(manifestPath).flatMap(_.toOption)
    if (existing.exists(m => m.key == job.key.hash && m.owner == job.owner)) {
      CacheStats.log.debug(s"memphis: ${job.key.hash} is in the durable tier already (written by ${job.owner} at ${existing.get.writtenMs})")
    } else {
      files.makeFolder(entry, folder.getParent.getParent)
      val id = UUID.randomUUID().toString
      val data = new Path(entry, DurableLayout.DataPrefix + id)
      val temp = new Path(entry, s"${DurableLayout.TempPrefix}$id.tmp")
      var committed = false
      try {
        val started = System.nanoTime()
        SparkRuntime.inBackgroundJob(session, "memphis-durable", s"memphis: durable write of ${job.key.hash}") {
          ReuseRule.suspended {
            val columns = job.plan.output.zipWithIndex.map { case (a, i) => Alias(a, s"c$i")() }
            SparkShimImpl.dataFrame(session, Project(columns, job.plan)).write.parquet(data.toString)
          }
        }
        val ms = (System.nanoTime() - started) / 1000000
        files.makeFilesPrivate(data)
        val parts = files.list(data).filter(s => s.isFile && DurableTier.isDataFile(s.getPath.getName))
        val bytes = parts.map(_.getLen).sum
        admission.wrote(bytes, ms)
        val rows = SparkShimImpl.lookupCachedData(session, job.plan)
          .flatMap(_.cachedRepresentation.computeStats().rowCount).fold(-1L)(_.toLong)
        val manifest = Manifest(Manifest.Format, job.key.hash, job.key.shapeHash, job.owner, Manifest.lineageOf(job.key),
          Manifest.schemaOf(job.plan.output).json, rows, bytes, job.costMs, System.currentTimeMillis(),
          parts.map(s => DataFile(s"${data.getName}/${s.getPath.getName}", s.getLen, s.getModificationTime)))
        files.writeNew(temp, manifest.toJson)
        DurableWriter.pauseBeforeCommit()
        committed = files.rename(temp, manifestPath)
        if (committed) {
          stats.add(Counter.DurableBytesWritten, bytes)
          stats.record(Counter.DurableWrites, s"wrote ${job.key.hash} to the durable tier ($why): $bytes bytes in " +
            s"${parts.size} file(s) in $ms ms, under $entry")
        } else CacheStats.log.debug(s"memphis: another process committed ${job.key.hash} to the durable tier first")
      } finally if (!committed) {
        files.delete(temp)
        files.delete(data)
      }
    }
  }
}

object DurableWriter {
  /**
   * For tests of a writer killed before its commit: the JVM system property
   * `memphis.durable.pauseBeforeCommitMs` holds every write that long between its data and its manifest's commit.
   */
  private def pauseBeforeCommit(): Unit =
    Option(System.getProperty("memphis.durable.pauseBeforeCommitMs")).foreach(ms => Thread.sleep(ms.toLong))
}
