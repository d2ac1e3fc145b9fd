package io.memphis.lineage

import java.security.MessageDigest

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{EtagSource, FileStatus, FileSystem, GlobFilter, Path}
import org.apache.spark.sql.execution.datasources.{FileIndex, PartitioningAwareFileIndex}
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
  /** What a person calls the source: a folder's or table's name, without its state (the memphis tab's entries). */
  def named: String
  def recheck(): SourceFingerprint
}

object SourceFingerprint {
  /** A path's last segment (a table folder's name), trailing slashes ignored. */
  def lastSegment(path: String): String = path.stripSuffix("/").split('/').last

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
        val roots = fs.location.rootPaths.map(_.toString)
        if (DeltaVersion.isPinned(fs.location)) DeltaVersion.identityOfPinned(fs.location, roots) else Some(pathsIdentity(roots))
      case _ => None
    }
    case r: org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation =>
      SparkShimImpl.tableIdAndVersion(r.table).map { case (id, _) => tableIdentity(id) }
    case _ => None
  }
}

/**
 * Files under Spark's root paths: sorted (path, size, modification time, content digest) of a fresh
 * recursive listing, with the files Spark skips skipped (its hidden-name rule, empty files, the
 * read's `pathGlobFilter`). It is what a file source holds now; [[FileListing.read]] binds a plan's
 * key to it only when the plan reads exactly these files. The content digest ([[FileContent]]) sees
 * a file rewritten with its size and modification time kept. Delta tables get [[DeltaVersion]] instead.
 */
final case class FileListing(rootPaths: Seq[String], files: Int, listingHash: String)(
    hadoopConf: Configuration, maxFiles: Int, globFilter: Option[String]) extends SourceFingerprint {
  def identity: Option[String] = Some(SourceFingerprint.pathsIdentity(rootPaths))
  def digest: String = s"files(${rootPaths.map(Canonical.quote).mkString(",")};n=$files;$listingHash)"
  def describe: String = s"${rootPaths.mkString(", ")}: $files files, listing $listingHash"
  def named: String = rootPaths.map(SourceFingerprint.lastSegment).mkString(", ")
  def recheck(): SourceFingerprint = Unavailable.unless(FileListing.of(rootPaths, hadoopConf, maxFiles, globFilter))
}

object FileListing {
  /**
   * The fingerprint of the files a plan's `location` reads. An index that listed its files when it
   * was made (a DataFrame's `InMemoryFileIndex`, a table's cached relation) reads that list, however
   * old: when another writer has added, removed or rewritten a file since, the plan's rows are not
   * those of the files now, and a key from a fresh listing would file old rows under the fresh
   * query's key. Such a plan gets no key (it can neither serve nor be served). An index that lists
   * when it runs (a catalog table's `CatalogFileIndex`) reads the files now.
   */
  def read(location: FileIndex, rootPaths: Seq[String], hadoopConf: Configuration, maxFiles: Int,
      globFilter: Option[String]): FileListing = {
    val now = listing(rootPaths, hadoopConf, maxFiles, globFilter)
    location match {
      case listed: PartitioningAwareFileIndex =>
        val planned = listed.allFiles().filter(f => f.getLen > 0 && keeps(f.getPath.getName, globFilter)).map(entry)
        if (planned.sorted != now.map(_._1)) {
          throw new NoKey(s"the plan's list of the files under ${rootPaths.mkString(", ")} is older than the files " +
            s"(${planned.size} listed then, ${now.size} now): a new DataFrame or REFRESH TABLE reads them afresh")
        }
      case _ =>
    }
    fingerprint(rootPaths, now, hadoopConf, maxFiles, globFilter)
  }

  /** Lists afresh; more than `maxFiles` files means no key (a listing must stay cheap). */
  def of(rootPaths: Seq[String], hadoopConf: Configuration, maxFiles: Int, globFilter: Option[String]): FileListing =
    fingerprint(rootPaths, listing(rootPaths, hadoopConf, maxFiles, globFilter), hadoopConf, maxFiles, globFilter)

  private def fingerprint(rootPaths: Seq[String], files: Seq[(String, FileStatus)], hadoopConf: Configuration,
      maxFiles: Int, globFilter: Option[String]): FileListing = {
    val text = files.map { case (e, status) => s"$e ${FileContent.digest(status, hadoopConf)}" }.mkString("\n")
    FileListing(rootPaths.sorted, files.size, Canonical.sha(text))(hadoopConf, maxFiles, globFilter)
  }

  private def entry(status: FileStatus): String =
    s"${Canonical.quote(status.getPath.toUri.getPath)} ${status.getLen} ${status.getModificationTime}"

  /** Spark's rule for the names it skips (`HadoopFSUtils.shouldFilterOutPathName`), and the read's glob. */
  private def keeps(name: String, globFilter: Option[String]): Boolean = {
    val hidden = ((name.startsWith("_") && !name.contains("=")) || name.startsWith(".") || name.endsWith("._COPYING_")) &&
      !(name.startsWith("_common_metadata") || name.startsWith("_metadata"))
    !hidden && globFilter.forall(g => new GlobFilter(g).accept(new Path(name)))
  }

  /** The files under `rootPaths` now, sorted by their entry (path, size, modification time). */
  private def listing(rootPaths: Seq[String], hadoopConf: Configuration, maxFiles: Int,
      globFilter: Option[String]): Seq[(String, FileStatus)] = {
    val entries = ArrayBuffer.empty[(String, FileStatus)]
    def collect(fs: FileSystem, status: FileStatus): Unit = {
      if (status.isDirectory) {
        fs.listStatus(status.getPath).foreach { child =>
          if (keeps(child.getPath.getName, if (child.isDirectory) None else globFilter)) collect(fs, child)
        }
      } else if (status.getLen > 0) {
        entries += entry(status) -> status
        if (entries.size > maxFiles) {
          throw new NoKey(s"more than $maxFiles files under ${rootPaths.mkString(", ")} (spark.memphis.lineage.maxListedFiles)")
        }
      }
    }
    rootPaths.sorted.foreach { root =>
      val path = new Path(root)
      val fs = path.getFileSystem(hadoopConf)
      try collect(fs, fs.getFileStatus(path))
      catch { case _: java.io.FileNotFoundException => entries += s"missing ${Canonical.quote(root)}" -> null }
    }
    entries.sortBy(_._1).toSeq
  }
}

/**
 * A digest of a file's state that is cheap to take and sees a file rewritten with its size and
 * modification time kept (`cp -p`, `rsync -t`, `tar -x`):
 *  - its change stamp, which no writer can set back: an object store's ETag (S3A, ABFS: the listing
 *    carries it), a local file's inode change time and inode number (one `stat`);
 *  - its content's end: a Parquet file's footer (schema, row groups, each column chunk's offsets,
 *    sizes and statistics), the last 4 KiB of any other file (ORC keeps its footer there too). Read
 *    once per file state (path, size, modification time, change stamp) per process, so a file system
 *    with no change stamp (HDFS) shows a same-size, same-time rewrite to the next process (and so
 *    to the durable tier) if its footer differs, not to this one.
 */
private[lineage] object FileContent {
  private val TailBytes = 4096
  private val MaxFooterBytes = 16 << 20
  private val MaxRemembered = 200000
  // Footer digests by "path size mtime stamp"; cleared when full (each is then read once more).
  private val known = new java.util.concurrent.ConcurrentHashMap[String, String]()

  def digest(status: FileStatus, hadoopConf: Configuration): String =
    if (status == null) "none"
    else {
      val stamp = changeStamp(status)
      val id = s"${status.getPath} ${status.getLen} ${status.getModificationTime} $stamp"
      val footer = Option(known.get(id)).getOrElse {
        val taken = read(status, hadoopConf)
        if (known.size >= MaxRemembered) known.clear()
        known.put(id, taken)
        taken
      }
      s"$stamp $footer"
    }

  private def changeStamp(status: FileStatus): String = status match {
    case tagged: EtagSource if tagged.getEtag != null => s"etag:${tagged.getEtag}"
    case _ if status.getPath.toUri.getScheme == "file" =>
      try {
        val local = java.nio.file.Paths.get(status.getPath.toUri)
        s"ctime:${java.nio.file.Files.getAttribute(local, "unix:ctime")}," +
          s"ino:${java.nio.file.Files.getAttribute(local, "unix:ino")}"
      } catch { case _: UnsupportedOperationException | _: IllegalArgumentException | _: java.io.IOException => "" }
    case _ => ""
  }

  private def read(status: FileStatus, hadoopConf: Configuration): String = {
    val length = status.getLen
    val in = status.getPath.getFileSystem(hadoopConf).open(status.getPath)
    try {
      def tail(n: Long): Array[Byte] = {
        val bytes = new Array[Byte](n.toInt)
        in.readFully(length - n, bytes)
        bytes
      }
      val last = tail(math.min(length, 8L))
      val footer = if (length >= 12 && new String(last, last.length - 4, 4, "US-ASCII") == "PAR1") {
        java.nio.ByteBuffer.wrap(last, 0, 4).order(java.nio.ByteOrder.LITTLE_ENDIAN).getInt.toLong
      } else -1L
      val bytes = if (footer > 0 && footer <= math.min(length - 8, MaxFooterBytes)) tail(footer + 8) else tail(math.min(length, TailBytes))
      Canonical.sha(bytes)
    } catch {
      case e: java.io.IOException => throw new NoKey(s"${status.getPath} could not be read: $e")
    } finally in.close()
  }
}

/** A source that can no longer be fingerprinted: never equal to what it was. */
final case class Unavailable(reason: String) extends SourceFingerprint {
  def identity: Option[String] = None
  def digest: String = s"unavailable(${Canonical.quote(reason)})"
  def describe: String = s"unavailable: $reason"
  def named: String = "unavailable"
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
  def named: String = s"$rows local rows"
  def recheck(): SourceFingerprint = this // immutable: the rows live in the plan
}

/** A DSv2 table that names its identity and version (`Table.id()` / `Table.version()`). */
final case class TableVersion(tableClass: String, id: String, version: String)(reload: () => Option[String])
    extends SourceFingerprint {
  def identity: Option[String] = Some(SourceFingerprint.tableIdentity(id))
  def digest: String = s"table(${Canonical.quote(tableClass)};${Canonical.quote(id)};${Canonical.quote(version)})"
  def describe: String = s"table $id ($tableClass) at version $version"
  def named: String = id
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
 * A pinned read's data cannot change, but its files can go (VACUUM): it is keyed only while every
 * file of its version is still in the table's folder (else plain Spark fails to read it, and so must
 * memphis: a VACUUM is how users make old versions unreadable). Its identity is the version's, so a
 * commit never invalidates its entries, a query that reads it does not look like a change to a
 * latest read's entries, and one whose files went invalidates the entries of that version. Its digest
 * says "pinned", so a pinned and a latest read of the same version are two entries: the next commit
 * invalidates the latest one's only.
 */
final case class DeltaVersion(path: String, tableId: String, version: Long, pinned: Boolean)(
    hadoopConf: Configuration) extends SourceFingerprint {
  def identity: Option[String] =
    Some(if (pinned) DeltaVersion.pinnedIdentity(path, version) else SourceFingerprint.pathsIdentity(Seq(path)))
  def digest: String =
    s"delta(${Canonical.quote(path)};${Canonical.quote(tableId)};v=$version${if (pinned) ";pinned" else ""})"
  def describe: String = s"Delta table $path (id $tableId) at version $version" + (if (pinned) ", pinned" else "")
  def named: String = s"Delta ${SourceFingerprint.lastSegment(path)}"
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
      if (pinned) pinnedVersion(location).getOrElse(throw new NoKey(s"the pinned version of Delta table $path could not be read"))
      else latestVersion(path, hadoopConf)
    if (pinned) requireFiles(location, path, tableId, version, hadoopConf)
    Some(DeltaVersion(path, tableId, version, pinned)(hadoopConf))
  }

  def pinnedIdentity(path: String, version: Long): String = s"delta-pinned:$path@v$version"

  /** The identity of a time-travel read's version, without looking at its files. */
  def identityOfPinned(location: AnyRef, rootPaths: Seq[String]): Option[String] = rootPaths match {
    case Seq(path) => pinnedVersion(location).map(pinnedIdentity(path, _))
    case _ => None
  }

  private def pinnedVersion(location: AnyRef): Option[Long] =
    call(location, "snapshotAtAnalysis").flatMap(call(_, "version")).map(_.asInstanceOf[java.lang.Long].longValue)

  /**
   * Fails with [[NoKey]] unless every data file of a pinned read's version is in the table's folder
   * (one recursive listing; the version's file list is Delta's, from [[PinnedFiles]]).
   */
  private def requireFiles(location: AnyRef, path: String, tableId: String, version: Long,
      hadoopConf: Configuration): Unit = {
    val files = PinnedFiles.of(path, tableId, version, hadoopConf) {
      location match {
        case index: FileIndex => index.inputFiles.map(f => new Path(f).toUri.getPath).toSeq
        case _ => throw new NoKey(s"the files of Delta table $path at version $version could not be read")
      }
    }
    if (files.nonEmpty) {
      val root = new Path(path)
      val present = scala.collection.mutable.HashSet.empty[String]
      try {
        val listed = root.getFileSystem(hadoopConf).listFiles(root, true)
        while (listed.hasNext) present += listed.next().getPath.toUri.getPath
      } catch { case e: java.io.IOException => throw new NoKey(s"Delta table $path could not be listed: $e") }
      files.find(f => !present.contains(f)).foreach { gone =>
        throw new NoKey(s"a file of Delta table $path at version $version is gone (VACUUM?): $gone")
      }
    }
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

/**
 * The data files of the pinned Delta versions read in this JVM. Delta lists a version's files by
 * rebuilding its state in a Spark job (about a second even for a small table), and a time-travel read
 * builds a new snapshot at every ask, so each ask paid that job again for its key. A version's files
 * never change: its commit file is written once. They are kept by table folder, table id, version and
 * that commit file's length and modification time (a folder emptied and filled with another log does
 * not match), and only while that file exists. At most [[MaxPaths]] paths are held, the least recently
 * used version going first.
 */
private[lineage] object PinnedFiles {
  val MaxPaths = 100000

  // Guarded by `this`; in access order.
  private val kept = scala.collection.mutable.LinkedHashMap.empty[String, Seq[String]]
  private var paths = 0

  /** The files of `path`'s `version`: kept ones, else `list()`'s, then kept. */
  def of(path: String, tableId: String, version: Long, hadoopConf: Configuration)(list: => Seq[String]): Seq[String] = {
    val commit = new Path(new Path(path, "_delta_log"), f"$version%020d.json")
    val id = scala.util.Try(commit.getFileSystem(hadoopConf).getFileStatus(commit)).toOption
      .map(st => s"$path|$tableId|$version|${st.getLen}|${st.getModificationTime}")
    id.flatMap(get).getOrElse {
      val files = list
      id.foreach(put(_, files))
      files
    }
  }

  private def get(id: String): Option[Seq[String]] = synchronized {
    kept.remove(id).map { files => kept.put(id, files); files }
  }

  private def put(id: String, files: Seq[String]): Unit = synchronized {
    if (files.size <= MaxPaths && !kept.contains(id)) {
      kept.put(id, files)
      paths += files.size
      while (paths > MaxPaths) {
        val (oldest, gone) = kept.head
        kept.remove(oldest)
        paths -= gone.size
      }
    }
  }
}
