package io.memphis.durable

import java.io.{ByteArrayOutputStream, FileNotFoundException, IOException}
import java.nio.ByteBuffer
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths, StandardOpenOption}
import java.nio.file.attribute.{PosixFilePermission, PosixFilePermissions}
import java.util.UUID

import scala.collection.concurrent.TrieMap
import scala.util.control.NonFatal

import io.memphis.conf.CacheStats
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{CommonPathCapabilities, FSDataInputStream, FileStatus, FileSystem, Path}
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.hadoop.security.UserGroupInformation

/**
 * The durable tier's file operations on any Hadoop filesystem, by the kind of store:
 *
 *  - a filesystem with owners and permissions (the local one, HDFS): unless entries are shared across
 *    users, folders are made owner-only (0700) and files owner-only (0600), and a file is trusted only
 *    when this process's user owns it (another user could have planted it). A manifest is committed by
 *    a rename, atomic there.
 *  - an object store (S3A, GCS): no owners, no permissions (the store's access control decides who
 *    reads a bucket), no atomic rename (a rename is a copy, then a delete), but an object appears whole
 *    when its writer closes it. A manifest is committed by writing it in place, one request, last; no
 *    folder is made (a folder is a prefix there) and nothing is chmod-ed.
 *
 * On the local filesystem, folders, files and permissions are made through java.nio: without
 * Hadoop's native library (pyspark ships none) its local filesystem starts a `chmod` process for every
 * permission it sets, about 5 ms each, a dozen per entry written.
 */
final class DurableFiles(hadoopConf: Configuration, shared: Boolean) {
  private def fs(p: Path): FileSystem = p.getFileSystem(hadoopConf)

  // Per filesystem (scheme and authority): whether it keeps owners and permissions. Asked once.
  private val permissionsOf = TrieMap.empty[(String, String), Boolean]

  /** Whether the filesystem of `p` (qualified) keeps owners and permissions that memphis sets and checks. */
  def hasPermissions(p: Path): Boolean = permissionsOf.getOrElseUpdate((p.toUri.getScheme, p.toUri.getAuthority), {
    val f = fs(p)
    !DurableFiles.objectStore(f.getScheme) &&
      (try f.hasPathCapability(p, CommonPathCapabilities.FS_PERMISSIONS) catch { case NonFatal(_) => false })
  })

  /** Whether the filesystem of `p` is an object store: a manifest is committed there by writing it in place, not by a rename. */
  def objectStore(p: Path): Boolean = DurableFiles.objectStore(fs(p).getScheme)

  /** The user this process acts as on a Hadoop filesystem (the owner of what it creates there). */
  private lazy val hadoopUser: String =
    try UserGroupInformation.getCurrentUser.getShortUserName catch { case NonFatal(_) => System.getProperty("user.name") }

  /** The local file of `p`, when its filesystem is the local one (its paths are qualified: the tier's root is). */
  private def local(p: Path): Option[java.nio.file.Path] =
    if (fs(p).getScheme == "file") Some(Paths.get(p.toUri.getPath)) else None

  /** Makes `folder` and its parents up to `below` (exclusive), owner-only unless shared. */
  def makeFolder(folder: Path, below: Path): Unit = if (!objectStore(folder)) {
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
  def makeFilesPrivate(folder: Path): Unit = if (!shared && hasPermissions(folder)) {
    makePrivate(folder, DurableFiles.FolderMode)
    list(folder).filter(_.isFile).foreach(s => makePrivate(s.getPath, DurableFiles.FileMode))
  }

  private def makePrivate(p: Path, mode: Short): Unit = if (!shared && hasPermissions(p)) {
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
    case None if objectStore(p) => put(p, bytes)
    case None =>
      val out = fs(p).create(p, false)
      try out.write(bytes) finally out.close()
      makePrivate(p, DurableFiles.FileMode)
  }

  /**
   * Writes `text` to the object `p` of an object store in one request, replacing any object there: it
   * appears whole when written, or not at all. No check that it exists, no parent folder made (S3A's
   * create performance mode): the caller names a fresh object, or a manifest whose writers all write valid ones.
   */
  def put(p: Path, text: String): Unit = put(p, text.getBytes(StandardCharsets.UTF_8))

  private def put(p: Path, bytes: Array[Byte]): Unit = {
    val out = fs(p).createFile(p).overwrite(true).opt(DurableFiles.S3aCreatePerformance, "true").build()
    try out.write(bytes) finally out.close()
  }

  /** The text of `p`, if it is at most `maxBytes` long; None when it does not exist. */
  def read(p: Path, maxBytes: Long): Option[String] = readBytes(p, maxBytes).map(new String(_, StandardCharsets.UTF_8))

  /** The bytes of `p`, if it is at most `maxBytes` long; None when it does not exist. */
  def readBytes(p: Path, maxBytes: Long): Option[Array[Byte]] = try {
    if (local(p).isDefined) {
      val length = fs(p).getFileStatus(p).getLen
      if (length > maxBytes) throw new IOException(s"$p has $length bytes, more than this file may ($maxBytes)")
      val bytes = new Array[Byte](length.toInt)
      val in = fs(p).open(p)
      try org.apache.hadoop.io.IOUtils.readFully(in, bytes, 0, bytes.length) finally in.close()
      Some(bytes)
    } else {
      // Elsewhere opened and read to its end, with no status asked first: on S3A one HEAD and one GET.
      val in = openWhole(p)
      try {
        val out = new ByteArrayOutputStream
        val buffer = new Array[Byte](64 * 1024)
        var n = in.read(buffer)
        while (n >= 0) {
          if (out.size + n > maxBytes) throw new IOException(s"$p has more bytes than this file may ($maxBytes)")
          out.write(buffer, 0, n)
          n = in.read(buffer)
        }
        Some(out.toByteArray)
      } finally in.close()
    }
  } catch { case _: FileNotFoundException => None }

  private def openWhole(p: Path): FSDataInputStream =
    try fs(p).openFile(p).opt(DurableFiles.ReadPolicy, "whole-file").build().get()
    catch { case e: java.util.concurrent.ExecutionException if e.getCause != null => throw e.getCause }

  /** The manifest at `p`: None when there is none, Left(why) when it cannot be read (a checksum error too) or parsed. */
  def manifest(p: Path): Option[Either[String, Manifest]] =
    try read(p, DurableTier.MaxManifestBytes).map(Manifest.parse)
    catch { case NonFatal(e) => Some(Left(s"its manifest cannot be read ($e)")) }

  /**
   * Whether this process's user owns `p`, where the filesystem keeps owners: the local one (asked
   * through java.nio), HDFS (its status). On an object store, which keeps none, true: the store's access
   * control and the manifest's owner field decide.
   */
  def ownedByThisUser(p: Path): Boolean = local(p) match {
    // Paths are qualified (the tier's root is): a local one's URI path is the file's.
    case Some(f) => Files.getOwner(f).getName == System.getProperty("user.name")
    case None => !hasPermissions(p) || fs(p).getFileStatus(p).getOwner == hadoopUser
  }

  /** Whether this process's user owns the file of status `s` (from a listing: on HDFS no further request). */
  def ownedByThisUser(s: FileStatus): Boolean = local(s.getPath) match {
    case Some(_) => ownedByThisUser(s.getPath)
    case None => !hasPermissions(s.getPath) || s.getOwner == hadoopUser
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
  /** Object stores by scheme: an object appears whole when written; a rename is a copy and a delete. */
  private val ObjectStores = Set("s3a", "s3", "s3n", "gs")

  def objectStore(scheme: String): Boolean = ObjectStores.contains(scheme)

  /** S3A's createFile option that skips its checks of the path and its parents (other stores ignore it). */
  private val S3aCreatePerformance = "fs.s3a.create.performance"

  /** The standard openFile option of how a file will be read. */
  private val ReadPolicy = "fs.option.openfile.read.policy"

  val FolderMode: Short = Integer.parseInt("700", 8).toShort
  val FileMode: Short = Integer.parseInt("600", 8).toShort

  private def posix(mode: Short): java.util.Set[PosixFilePermission] =
    PosixFilePermissions.fromString(new FsPermission(mode).toString)
}
