package io.memphis.durable

import java.security.MessageDigest
import java.util.Locale

import org.apache.hadoop.fs.Path

/**
 * Where the durable tier keeps what, under its root (`spark.memphis.durable.dir`). Other processes,
 * and memphis's driver-side tier (Python, under `<user>/driver/`), rely on it:
 * {{{
 *   <root>/<user>/spark/<shape>/manifest.json              the committed entry ([[Manifest]]), renamed into place last
 *   <root>/<user>/spark/<shape>/data-<uuid>/part-*.parquet  its data, written before the manifest
 *   <root>/<user>/spark/<shape>/.manifest-<uuid>.tmp       a manifest being committed
 *   <root>/<user>/spark/<shape>/removed-<ms>-<uuid>.json   a removed entry's manifest: its data stays for a grace period
 *   <root>/<user>/collected/<shape>/...                    rows queries collected, in the same scheme: data-<uuid>/rows.bin
 *   <root>/<user>/driver/...                               the driver-side tier's entries
 * }}}
 * `<user>` ([[userFolder]]) is the user's name when it is a plain name, else a hash of it, and
 * `shared` when entries are shared across users; `<shape>` is the lineage key's shape hash
 * ([[io.memphis.lineage.LineageKey.shapeHash]]): no user input, no path of a source, reaches a name.
 */
object DurableLayout {
  val SharedFolder = "shared"
  val SparkFolder = "spark"
  val CollectedFolder = "collected"
  val RowsFileName = "rows.bin"
  val ManifestName = "manifest.json"
  val DataPrefix = "data-"
  val RemovedPrefix = "removed-"
  val TempPrefix = ".manifest-"

  private val PlainName = "[A-Za-z0-9][A-Za-z0-9._-]{0,63}".r

  /** The root a `durable.dir` value names itself (not auto, none or empty), which the session start checks. */
  def explicitRoot(value: String): Option[String] =
    Some(value.trim).filter(v => v.nonEmpty && !Seq("auto", "none").contains(v.toLowerCase(Locale.ROOT)))

  /** The root a `durable.dir` value means: auto is [[defaultRoot]] for a local master, and off for any other. */
  def root(value: String, localMaster: Boolean): Option[String] = value.trim.toLowerCase(Locale.ROOT) match {
    case "auto" => if (localMaster) Some(defaultRoot) else None
    case _ => explicitRoot(value)
  }

  /** `$XDG_CACHE_HOME/memphis/durable`, else `~/.cache/memphis/durable`: the user's own, kept across reboots. */
  def defaultRoot: String = {
    val cache = Option(System.getenv("XDG_CACHE_HOME")).filter(_.nonEmpty)
      .getOrElse(new java.io.File(System.getProperty("user.home"), ".cache").getPath)
    new java.io.File(cache, "memphis/durable").getAbsolutePath
  }

  /**
   * The folder of `user`'s entries: `shared` when entries are shared across users; else the name
   * itself when it is plain (a letter or digit, then letters, digits, `.`, `_`, `-`; at most 64) and
   * not `shared`, otherwise `u-` and the first 16 hex digits of the SHA-256 of its UTF-8 bytes.
   */
  def userFolder(user: String, shared: Boolean): String =
    if (shared) SharedFolder
    else if (PlainName.pattern.matcher(user).matches() && user != SharedFolder) user
    else "u-" + MessageDigest.getInstance("SHA-256").digest(user.getBytes("UTF-8")).take(8).map(b => f"${b & 0xff}%02x").mkString

  /** The folder of `user`'s Spark entries under `root`. */
  def sparkFolder(root: String, user: String, shared: Boolean): Path =
    new Path(new Path(root, userFolder(user, shared)), SparkFolder)

  /** The folder of `user`'s collected rows under `root`. */
  def collectedFolder(root: String, user: String, shared: Boolean): Path =
    new Path(new Path(root, userFolder(user, shared)), CollectedFolder)
}
