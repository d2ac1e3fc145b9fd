package io.memphis.lineage

import java.security.MessageDigest

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

/**
 * What a source held when a key was computed. `recheck()` looks again (a fresh listing, not
 * Spark's cached one), so a key can be checked before it serves a hit: equal fingerprints mean the
 * source is unchanged; anything else means recompute.
 */
sealed trait SourceFingerprint {
  /** Stable text folded into the key: identity and state, no object addresses. */
  def digest: String
  def describe: String
  def recheck(): SourceFingerprint
}

/**
 * Files under Spark's root paths: sorted (path, size, modification time) of a recursive listing.
 * Hidden files (`.` or `_` prefix) are skipped as Spark skips them, except `_delta_log`, so that a
 * Delta commit changes the fingerprint even before Delta-specific keys exist.
 */
final case class FileListing(rootPaths: Seq[String], files: Int, listingHash: String)(
    hadoopConf: Configuration) extends SourceFingerprint {
  def digest: String = s"files(${rootPaths.map(Canonical.quote).mkString(",")};n=$files;$listingHash)"
  def describe: String = s"${rootPaths.mkString(", ")}: $files files, listing $listingHash"
  def recheck(): SourceFingerprint = FileListing.of(rootPaths, hadoopConf)
}

object FileListing {
  def of(rootPaths: Seq[String], hadoopConf: Configuration): FileListing = {
    val entries = ArrayBuffer.empty[String]
    rootPaths.sorted.foreach { root =>
      val path = new Path(root)
      val fs = path.getFileSystem(hadoopConf)
      val status = try Some(fs.getFileStatus(path)) catch { case _: java.io.FileNotFoundException => None }
      status match {
        case None => entries += s"missing ${Canonical.quote(root)}"
        case Some(s) => collect(fs, s, entries)
      }
    }
    val sorted = entries.sorted
    FileListing(rootPaths.sorted, sorted.size, Canonical.sha(sorted.mkString("\n")))(hadoopConf)
  }

  private def collect(fs: FileSystem, status: FileStatus, into: ArrayBuffer[String]): Unit = {
    if (status.isDirectory) {
      fs.listStatus(status.getPath).foreach { child =>
        val name = child.getPath.getName
        if (!(name.startsWith(".") || name.startsWith("_")) || name == "_delta_log") collect(fs, child, into)
      }
    } else {
      into += s"${Canonical.quote(status.getPath.toUri.getPath)} ${status.getLen} ${status.getModificationTime}"
    }
  }
}

/** Rows of a local relation, by content. */
final case class LocalContent(rows: Int, contentHash: String) extends SourceFingerprint {
  def digest: String = s"local(n=$rows;$contentHash)"
  def describe: String = s"local relation: $rows rows, content $contentHash"
  def recheck(): SourceFingerprint = this // immutable: the rows live in the plan
}

/** A DSv2 table that names its identity and version (`Table.id()` / `Table.version()`). */
final case class TableVersion(tableClass: String, id: String, version: String)(reload: () => Option[String])
    extends SourceFingerprint {
  def digest: String = s"table(${Canonical.quote(tableClass)};${Canonical.quote(id)};${Canonical.quote(version)})"
  def describe: String = s"table $id ($tableClass) at version $version"
  def recheck(): SourceFingerprint =
    TableVersion(tableClass, id, reload().getOrElse("unavailable"))(reload)
}

private[lineage] object Canonical {
  /** A string in double quotes with `\` and `"` escaped: unambiguous inside canonical forms. */
  def quote(s: String): String = "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""

  def sha(text: String): String = sha(text.getBytes("UTF-8"))

  /** 128 bits of SHA-256, as hex. */
  def sha(bytes: Array[Byte]): String =
    MessageDigest.getInstance("SHA-256").digest(bytes).take(16).map(b => f"${b & 0xff}%02x").mkString
}
