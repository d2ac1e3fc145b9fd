package io.memphis.durable

import java.io.FileNotFoundException
import java.nio.ByteBuffer
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths, StandardOpenOption}
import java.nio.file.attribute.{PosixFilePermission, PosixFilePermissions}
import java.util.UUID

import scala.util.control.NonFatal

import io.memphis.conf.CacheStats
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}
import org.apache.hadoop.fs.permission.FsPermission

/**
 * The durable tier's file operations on any Hadoop filesystem. Unless entries are shared across
 * users, folders are made owner-only (0700) and files owner-only (0600), and on the local
 * filesystem a file is trusted only when this process's user owns it (another user could have planted it).
 *
 * On the local filesystem, folders, files and permissions are made through java.nio: without
 * Hadoop's native library (pyspark ships none) its local filesystem starts a `chmod` process for every
 * permission it sets, about 5 ms each, a dozen per entry written.
 */
final class DurableFiles(hadoopConf: Configuration, shared: Boolean) {
  private def fs(p: Path): FileSystem = p.getFileSystem(hadoopConf)

  /** The local file of `p`, when its filesystem is the local one (its paths are qualified: the tier's root is). */
  private def local(p: Path): Option[java.nio.file.Path] =
    if (fs(p).getScheme == "file") Some(Paths.get(p.toUri.getPath)) else None

  /** Makes `folder` and its parents up to `below` (exclusive), owner-only unless shared. */
  def makeFolder(folder: Path, below: Path): Unit = {
    local(folder) match {
      case Some(f) => Files.createDirectories(f)
      case None => fs(folder).mkdirs(folder)
    }
    var p = folder
    while (p != null && p != below) {
      makePrivate(p, DurableFiles.FolderMode)
      p = p.getParent
    }
  }

  /** The statuses in `folder`; none when it does not exist. */
  def list(folder: Path): Seq[FileStatus] =
    try fs(folder).listStatus(folder).toSeq catch { case _: FileNotFoundException => Nil }

  /** Makes the files in `folder` (and it) owner-only, unless shared. */
  def makeFilesPrivate(folder: Path): Unit = {
    makePrivate(folder, DurableFiles.FolderMode)
    list(folder).filter(_.isFile).foreach(s => makePrivate(s.getPath, DurableFiles.FileMode))
  }

  private def makePrivate(p: Path, mode: Short): Unit = if (!shared) {
    try local(p).fold(fs(p).setPermission(p, new FsPermission(mode)))(f => Files.setPosixFilePermissions(f, DurableFiles.posix(mode)))
    catch { case NonFatal(e) => CacheStats.log.debug(s"memphis: could not make $p owner-only: $e") }
  }

  /** Writes `text` to a new file `p` (failing if it exists), owner-only unless shared. */
  def writeNew(p: Path, text: String): Unit = writeNew(p, text.getBytes(StandardCharsets.UTF_8))

  /** Writes `bytes` to a new file `p` (failing if it exists), owner-only unless shared. */
  def writeNew(p: Path, bytes: Array[Byte]): Unit = local(p) match {
    case Some(f) => // created owner-only, never readable by others for a moment
      val options = java.util.EnumSet.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
      val out = if (shared) Files.newByteChannel(f, options)
        else Files.newByteChannel(f, options, PosixFilePermissions.asFileAttribute(DurableFiles.posix(DurableFiles.FileMode)))
      try out.write(ByteBuffer.wrap(bytes)) finally out.close()
    case None =>
      val out = fs(p).create(p, false)
      try out.write(bytes) finally out.close()
      makePrivate(p, DurableFiles.FileMode)
  }

  /** The text of `p`, if it is at most `maxBytes` long; None when it does not exist. */
  def read(p: Path, maxBytes: Long): Option[String] = readBytes(p, maxBytes).map(new String(_, StandardCharsets.UTF_8))

  /** The bytes of `p`, if it is at most `maxBytes` long; None when it does not exist. */
  def readBytes(p: Path, maxBytes: Long): Option[Array[Byte]] = try {
    val length = fs(p).getFileStatus(p).getLen
    if (length > maxBytes) throw new java.io.IOException(s"$p has $length bytes, more than this file may ($maxBytes)")
    val bytes = new Array[Byte](length.toInt)
    val in = fs(p).open(p)
    try org.apache.hadoop.io.IOUtils.readFully(in, bytes, 0, bytes.length) finally in.close()
    Some(bytes)
  } catch { case _: FileNotFoundException => None }

  /** The manifest at `p`: None when there is none, Left(why) when it cannot be read (a checksum error too) or parsed. */
  def manifest(p: Path): Option[Either[String, Manifest]] =
    try read(p, DurableTier.MaxManifestBytes).map(Manifest.parse)
    catch { case NonFatal(e) => Some(Left(s"its manifest cannot be read ($e)")) }

  /**
   * Whether this process's user owns `p`, where the filesystem says who owns a file reliably and
   * cheaply: the local one. Elsewhere (HDFS, object stores) the filesystem's own permissions and the
   * manifest's owner field decide.
   */
  def ownedByThisUser(p: Path): Boolean =
    fs(p).getScheme != "file" || {
      // Paths are qualified (the tier's root is): a local one's URI path is the file's.
      java.nio.file.Files.getOwner(java.nio.file.Paths.get(p.toUri.getPath)).getName == System.getProperty("user.name")
    }

  /** Renames `from` to `to`; false when it cannot (`from` gone: another process moved it first). */
  def rename(from: Path, to: Path): Boolean =
    try fs(from).rename(from, to) catch { case _: FileNotFoundException => false }

  /**
   * Removes the entry in `folder`: its manifest renamed away (one process wins when several remove it),
   * its data left for the grace period of [[DurableEviction]]. False when there was none to remove.
   */
  def removeEntry(folder: Path, now: Long): Boolean =
    rename(new Path(folder, DurableLayout.ManifestName),
      new Path(folder, s"${DurableLayout.RemovedPrefix}$now-${UUID.randomUUID()}.json"))

  def delete(p: Path): Boolean = try fs(p).delete(p, true) catch { case _: FileNotFoundException => false }
}

object DurableFiles {
  val FolderMode: Short = Integer.parseInt("700", 8).toShort
  val FileMode: Short = Integer.parseInt("600", 8).toShort

  private def posix(mode: Short): java.util.Set[PosixFilePermission] =
    PosixFilePermissions.fromString(new FsPermission(mode).toString)
}
