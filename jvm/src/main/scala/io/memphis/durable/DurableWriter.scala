package io.memphis.durable

import java.util.UUID

import io.memphis.conf.{CacheStats, Suspension}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.LineageKey
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}
import org.apache.spark.sql.types.DataType

/** A materialized entry to write: its key, owner, cached plan (as Spark's CacheManager holds it) and measured cost. */
final case class WriteJob(key: LineageKey, owner: String, plan: LogicalPlan, costMs: Long)

/** Collected rows to write: their subplan's key, owner, column types, rows (UnsafeRows) and the collecting query's time. */
final case class RowsJob(key: LineageKey, owner: String, types: Seq[DataType], rows: Seq[InternalRow], costMs: Long)

/** What the manifest says of an entry's data as written: its format, schema (JSON), rows and the files' checksums by name. */
private final case class DataWritten(format: String, schema: String, rows: Long, sha256ByName: Map[String, String] = Map.empty)

/**
 * Writes entries to the durable tier, on the tier's background thread. A materialized entry: its
 * cached plan, which Spark's CacheManager substitutes with the cached relation (the job reads the
 * stored blocks; nothing is computed again), is written as Parquet into a data folder of its own.
 * Collected rows: the rows on the driver, written by this thread as one file ([[CollectedRowsFile]]),
 * no job. Then the manifest is committed beside the data, last: on a filesystem (local, HDFS) written
 * under a temporary name and renamed into place; on an object store (S3A, GCS), where a rename is a copy
 * and a delete, written in place in one request (an object appears whole or not at all). Two processes
 * writing one key use two data folders; the commit decides (on object stores the later manifest replaces
 * the earlier; on HDFS and the local filesystem, whose Hadoop rename does not replace a file, the first
 * stays: either is valid), and the data no
 * manifest lists is deleted later ([[DurableEviction]]). Whatever fails, nothing is left that a
 * reader would trust: a reader trusts only a manifest whose listed files are all there, with their bytes
 * and modification times, and no other data file beside them.
 */
private[durable] final class DurableWriter(files: DurableFiles, admission: DurableAdmission, stats: CacheStats) {
  /** Writes `job` under `folder` (the owner's `spark` folder) in `session`; `why` it was admitted. */
  def write(session: SparkSession, folder: Path, job: WriteJob, why: String): Unit =
    commit(folder, job.key, job.owner, job.costMs, why) { data =>
      SparkRuntime.inBackgroundJob(session, "memphis-durable", s"memphis: durable write of ${job.key.hash}") {
        Suspension.suspended {
          val columns = job.plan.output.zipWithIndex.map { case (a, i) => Alias(a, s"c$i")() }
          SparkShimImpl.dataFrame(session, Project(columns, job.plan)).write.parquet(data.toString)
        }
      }
      val rows = SparkShimImpl.lookupCachedData(session, job.plan)
        .flatMap(_.cachedRepresentation.computeStats().rowCount).fold(-1L)(_.toLong)
      DataWritten(Manifest.Format, Manifest.schemaOf(job.plan.output).json, rows)
    }

  /** Writes `job` under `folder` (the owner's `collected` folder); `why` it was admitted. */
  def writeRows(folder: Path, job: RowsJob, why: String): Unit =
    commit(folder, job.key, job.owner, job.costMs, why) { data =>
      val bytes = CollectedRowsFile.encode(job.rows, job.types.size)
      files.makeFolder(data, data.getParent)
      files.writeNew(new Path(data, DurableLayout.RowsFileName), bytes)
      DataWritten(CollectedRowsFile.format, Manifest.schemaOfTypes(job.types).json, job.rows.size.toLong,
        Map(DurableLayout.RowsFileName -> DurableWriter.sha256(bytes)))
    }

  /**
   * Commits an entry of `key` (computed in `costMs`) under `folder` unless the owner's is there
   * already: `writeData` writes the data folder it is given and says what the manifest is to say of
   * it; the manifest is committed last.
   */
  private def commit(folder: Path, key: LineageKey, owner: String, costMs: Long, why: String)(
      writeData: Path => DataWritten): Unit = {
    val entry = new Path(folder, key.shapeHash)
    val manifestPath = new Path(entry, DurableLayout.ManifestName)
    val existing = files.manifest(manifestPath).flatMap(_.toOption)
    if (existing.exists(m => m.key == key.hash && m.owner == owner)) {
      CacheStats.log.debug(s"memphis: ${key.hash} is in the durable tier already (written by $owner at ${existing.get.writtenMs})")
    } else {
      files.makeFolder(entry, folder.getParent.getParent)
      val id = UUID.randomUUID().toString
      val data = new Path(entry, DurableLayout.DataPrefix + id)
      val temp = new Path(entry, s"${DurableLayout.TempPrefix}$id.tmp")
      var committed = false
      try {
        val started = System.nanoTime()
        val written = writeData(data)
        val ms = (System.nanoTime() - started) / 1000000
        files.makeFilesPrivate(data)
        val parts = files.list(data).filter(s => s.isFile && DurableTier.isDataFile(s.getPath.getName))
        val bytes = parts.map(_.getLen).sum
        admission.wrote(bytes, ms)
        val manifest = Manifest(written.format, key.hash, key.shapeHash, owner, Manifest.lineageOf(key), written.schema,
          written.rows, bytes, costMs, System.currentTimeMillis(), parts.map { s =>
            val name = s.getPath.getName
            DataFile(s"${data.getName}/$name", s.getLen, s.getModificationTime, written.sha256ByName.getOrElse(name, ""))
          })
        if (files.objectStore(manifestPath)) {
          DurableWriter.pauseBeforeCommit()
          files.put(manifestPath, manifest.toJson)
          committed = true
        } else {
          files.writeNew(temp, manifest.toJson)
          DurableWriter.pauseBeforeCommit()
          committed = files.rename(temp, manifestPath)
        }
        if (committed) {
          stats.add(Counter.DurableBytesWritten, bytes)
          stats.record(Counter.DurableWrites, s"wrote ${key.hash} to the durable tier ($why): $bytes bytes in " +
            s"${parts.size} file(s) in $ms ms, under $entry")
        } else CacheStats.log.debug(s"memphis: another process committed ${key.hash} to the durable tier first")
      } finally if (!committed) {
        if (!files.objectStore(temp)) files.delete(temp)
        files.delete(data)
      }
    }
  }
}

object DurableWriter {
  /**
   * For tests of writers and readers around a commit. The JVM system property
   * `memphis.durable.pauseBeforeCommitMs` holds every write that long between its data and its
   * manifest's commit; `memphis.durable.commitBarrier=<local folder>,<n>` holds it until `n` files are
   * in that folder (at most 5 minutes), after adding one of its own: writers that meet there commit
   * only once all have written their data, and a reader can let a writer go by adding a file.
   */
  private def pauseBeforeCommit(): Unit = {
    Option(System.getProperty("memphis.durable.pauseBeforeCommitMs")).foreach(ms => Thread.sleep(ms.toLong))
    Option(System.getProperty("memphis.durable.commitBarrier")).foreach { value =>
      val (folder, n) = (new java.io.File(value.split(",")(0)), value.split(",")(1).toInt)
      folder.mkdirs()
      new java.io.File(folder, s"writer-${UUID.randomUUID()}").createNewFile()
      val deadline = System.currentTimeMillis() + 5 * 60 * 1000
      while (Option(folder.list()).fold(0)(_.length) < n && System.currentTimeMillis() < deadline) Thread.sleep(50)
    }
  }

  /** The SHA-256 of `bytes` in hex: the checksum a reader of collected rows checks. */
  def sha256(bytes: Array[Byte]): String =
    java.security.MessageDigest.getInstance("SHA-256").digest(bytes).map(b => f"${b & 0xff}%02x").mkString
}
