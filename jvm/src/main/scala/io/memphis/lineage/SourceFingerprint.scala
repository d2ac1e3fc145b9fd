package io.memphis.lineage

import java.security.MessageDigest

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * What a source held when a key was computed. `recheck()` looks again (a fresh listing, not
 * Spark's cached one), so a key can be checked before it serves a hit: equal fingerprints mean the
 * source is unchanged; anything else means recompute.
 */
sealed trait SourceFingerprint {
  /**
   * Which source this is (its paths or table id), without its state, for the staleness check; None
   * for data that cannot change (local rows, a time-travel read's pinned version).
   */
  def identity: Option[String]
  /** Stable text folded into the key: identity and state, no object addresses. */
  def digest: String
  def describe: String
  def recheck(): SourceFingerprint
}

object SourceFingerprint {
  def pathsIdentity(rootPaths: Seq[String]): String = "paths:" + rootPaths.sorted.mkString(",")
  def tableIdentity(id: String): String = "table:" + id

  /**
   * Whether a fingerprint taken earlier is stale for a query: its source is one that `plan` reads
   * and this query's keys (`results`, taken afresh) hold it in another state.
   */
  def staleIn(plan: org.apache.spark.sql.catalyst.plans.logical.LogicalPlan,
      results: Seq[(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan, LineageKey.Result)]): SourceFingerprint => Boolean = {
    val present = plan.collectLeaves().flatMap(identityOf).toSet
    val fresh = results.collect { case (_, Right(k)) => k.sources }.flatten.flatMap(s => s.identity.map(_ -> s.digest)).toMap
    s => s.identity.exists(id => present.contains(id) && !fresh.get(id).contains(s.digest))
  }

  /** The identity of the source a plan leaf reads, without looking at its state. */
  def identityOf(leaf: org.apache.spark.sql.catalyst.plans.logical.LogicalPlan): Option[String] = leaf match {
    case l: org.apache.spark.sql.execution.datasources.LogicalRelation => l.relation match {
      case fs: org.apache.spark.sql.execution.datasources.HadoopFsRelation =>
        if (DeltaVersion.isPinned(fs.location)) None else Some(pathsIdentity(fs.location.rootPaths.map(_.toString)))
      case _ => None
    }
    case r: org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation =>
      SparkShimImpl.tableIdAndVersion(r.table).map { case (id, _) => tableIdentity(id) }
    case _ => None
  }
}

/**
 * Files under Spark's root paths: sorted (path, size, modification time) of a fresh recursive
 * listing. Spark's own listing is not reused: it is cached when the DataFrame is made and cannot
 * see writers outside Spark, which is what this check is for. Hidden files (`.` or `_` prefix) are
 * skipped, as Spark skips them. Delta tables get [[DeltaVersion]] instead.
 */
final case class FileListing(rootPaths: Seq[String], files: Int, listingHash: String)(
    hadoopConf: Configuration, maxFiles: Int) extends SourceFingerprint {
  def identity: Option[String] = Some(SourceFingerprint.pathsIdentity(rootPaths))
  def digest: String = s"files(${rootPaths.map(Canonical.quote).mkString(",")};n=$files;$listingHash)"
  def describe: String = s"${rootPaths.mkString(", ")}: $files files, listing $listingHash"
  def recheck(): SourceFingerprint = Unavailable.unless(FileListing.of(rootPaths, hadoopConf, maxFiles))
}

object FileListing {
  /** Lists afresh; more than `maxFiles` files means no key (a listing must stay cheap). */
  def of(rootPaths: Seq[String], hadoopConf: Configuration, maxFiles: Int): FileListing = {
    val entries = ArrayBuffer.empty[String]
    def collect(fs: FileSystem, status: FileStatus): Unit = {
      if (status.isDirectory) {
        fs.listStatus(status.getPath).foreach { child =>
          val name = child.getPath.getName
          if (!(name.startsWith(".") || name.startsWith("_"))) collect(fs, child)
        }
      } else {
        entries += s"${Canonical.quote(status.getPath.toUri.getPath)} ${status.getLen} ${status.getModificationTime}"
        if (entries.size > maxFiles) {
          throw new NoKey(s"more than $maxFiles files under ${rootPaths.mkString(", ")} (spark.memphis.lineage.maxListedFiles)")
        }
      }
    }
    rootPaths.sorted.foreach { root =>
      val path = new Path(root)
      val fs = path.getFileSystem(hadoopConf)
      try collect(fs, fs.getFileStatus(path))
      catch { case _: java.io.FileNotFoundException => entries += s"missing ${Canonical.quote(root)}" }
    }
    val sorted = entries.sorted
    FileListing(rootPaths.sorted, sorted.size, Canonical.sha(sorted.mkString("\n")))(hadoopConf, maxFiles)
  }
}

/** A source that can no longer be fingerprinted: never equal to what it was. */
final case class Unavailable(reason: String) extends SourceFingerprint {
  def identity: Option[String] = None
  def digest: String = s"unavailable(${Canonical.quote(reason)})"
  def describe: String = s"unavailable: $reason"
  def recheck(): SourceFingerprint = this
}

object Unavailable {
  def unless(fingerprint: => SourceFingerprint): SourceFingerprint =
    try fingerprint catch { case e: NoKey => Unavailable(e.reason) }
}

/** Rows of a local relation, by content. */
final case class LocalContent(rows: Int, contentHash: String) extends SourceFingerprint {
  def identity: Option[String] = None
  def digest: String = s"local(n=$rows;$contentHash)"
  def describe: String = s"local relation: $rows rows, content $contentHash"
  def recheck(): SourceFingerprint = this // immutable: the rows live in the plan
}

/** A DSv2 table that names its identity and version (`Table.id()` / `Table.version()`). */
final case class TableVersion(tableClass: String, id: String, version: String)(reload: () => Option[String])
    extends SourceFingerprint {
  def identity: Option[String] = Some(SourceFingerprint.tableIdentity(id))
  def digest: String = s"table(${Canonical.quote(tableClass)};${Canonical.quote(id)};${Canonical.quote(version)})"
  def describe: String = s"table $id ($tableClass) at version $version"
  def recheck(): SourceFingerprint =
    reload().map(v => TableVersion(tableClass, id, v)(reload)).getOrElse(Unavailable(s"table $id could not be reloaded"))
}

private[lineage] object Canonical {
  /** A string in double quotes with `\` and `"` escaped: unambiguous inside canonical forms. */
  def quote(s: String): String = "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""

  def sha(text: String): String = sha(text.getBytes("UTF-8"))

  /** 128 bits of SHA-256, as hex. */
  def sha(bytes: Array[Byte]): String =
    MessageDigest.getInstance("SHA-256").digest(bytes).take(16).map(b => f"${b & 0xff}%02x").mkString
}

/**
 * A Delta table: its id and the version a read resolves to. A time-travel read is pinned to its
 * version; a latest read resolves to the newest commit in `_delta_log`, listed directly (not
 * through Delta's cached snapshot), so writers in other processes are seen.
 *
 * A pinned read's data cannot change, so it has no identity: a commit never invalidates its entries,
 * and a query that reads it does not look like a change to a latest read's entries. Its digest
 * says "pinned", so a pinned and a latest read of the same version are two entries: the next commit
 * invalidates the latest one's only.
 */
final case class DeltaVersion(path: String, tableId: String, version: Long, pinned: Boolean)(
    hadoopConf: Configuration) extends SourceFingerprint {
  def identity: Option[String] = if (pinned) None else Some(SourceFingerprint.pathsIdentity(Seq(path)))
  def digest: String =
    s"delta(${Canonical.quote(path)};${Canonical.quote(tableId)};v=$version${if (pinned) ";pinned" else ""})"
  def describe: String = s"Delta table $path (id $tableId) at version $version" + (if (pinned) ", pinned" else "")
  def recheck(): SourceFingerprint =
    if (pinned) this else copy(version = DeltaVersion.latestVersion(path, hadoopConf))(hadoopConf)
}

object DeltaVersion {
  private val Commit = """(\d{20})\.json""".r

  /**
   * The version of a Delta file index (found by reflection, so the jar needs no Delta at compile
   * time), or None when `location` is not Delta's. A Delta index whose version cannot be read has
   * no fingerprint: treating it as plain files could confuse a pinned read with a latest one.
   */
  def of(location: AnyRef, rootPaths: Seq[String], hadoopConf: Configuration): Option[DeltaVersion] = {
    if (!isDelta(location)) return None
    val snapshot = call(location, "snapshotAtAnalysis")
    val pinned = isPinned(location)
    val path = rootPaths match {
      case Seq(only) => only
      case other => throw new NoKey(s"a Delta index over ${other.size} root paths")
    }
    val tableId = snapshot.flatMap(call(_, "metadata")).flatMap(call(_, "id")).map(_.toString).getOrElse(path)
    val version =
      if (pinned) snapshot.flatMap(call(_, "version")).map(_.asInstanceOf[java.lang.Long].longValue)
        .getOrElse(throw new NoKey(s"the pinned version of Delta table $path could not be read"))
      else latestVersion(path, hadoopConf)
    Some(DeltaVersion(path, tableId, version, pinned)(hadoopConf))
  }

  private def isDelta(location: AnyRef): Boolean = location.getClass.getName.startsWith("org.apache.spark.sql.delta.")

  /** Whether `location` is the Delta index of a time-travel read. */
  def isPinned(location: AnyRef): Boolean =
    isDelta(location) && call(location, "isTimeTravelQuery").contains(java.lang.Boolean.TRUE)

  private def call(target: AnyRef, method: String): Option[AnyRef] =
    scala.util.Try(target.getClass.getMethod(method).invoke(target)).toOption.flatMap(Option(_))

  /** The newest commit in `_delta_log`; -1 when there is none (not a Delta table yet). */
  def latestVersion(path: String, hadoopConf: Configuration): Long = {
    val log = new Path(path, "_delta_log")
    val fs = log.getFileSystem(hadoopConf)
    val names = try fs.listStatus(log).map(_.getPath.getName) catch { case _: java.io.FileNotFoundException => Array.empty[String] }
    names.collect { case Commit(n) => n.toLong }.foldLeft(-1L)(math.max)
  }
}
