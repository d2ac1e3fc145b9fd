package io.memphis.durable

import java.io.File
import java.security.MessageDigest
import java.util.Locale

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
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
 *
 * The names and rules are the jar's `io/memphis/durable-layout.json`, which the Python package reads
 * too (`memphis.tiers.durable`), so that both languages lay out one tree (tests/test_shared_facts.py).
 */
object DurableLayout {
  private val spec: JsonNode = {
    val in = getClass.getResourceAsStream("/io/memphis/durable-layout.json")
    try new ObjectMapper().readTree(in) finally in.close()
  }

  /** The text at `path` in the spec; a missing one is a broken jar, not an empty name. */
  private def fact(path: String*): String = {
    val node = path.foldLeft(spec)(_.path(_))
    require(node.isValueNode, s"durable-layout.json has no ${path.mkString(".")}")
    node.asText
  }

  val SharedFolder: String = fact("shared_folder")
  val SparkFolder: String = fact("tier_folders", "spark")
  val CollectedFolder: String = fact("tier_folders", "collected")
  val RowsFileName: String = fact("entry_files", "rows")
  val ManifestName: String = fact("entry_files", "manifest")
  val DataPrefix: String = fact("entry_files", "data_prefix")
  val RemovedPrefix: String = fact("entry_files", "removed_prefix")
  val TempPrefix: String = fact("entry_files", "temp_prefix")

  private val PlainName = fact("user_folder", "plain").r
  private val HashedPrefix = fact("user_folder", "hashed_prefix")
  private val HashedHexDigits = fact("user_folder", "hashed_hex_digits").toInt

  /** The root a `durable.dir` value names itself (not auto, none or empty), which the session start checks. */
  def explicitRoot(value: String): Option[String] =
    Some(value.trim).filter(v => v.nonEmpty && !Seq("auto", "none").contains(v.toLowerCase(Locale.ROOT)))

  /** The root a `durable.dir` value means: auto is [[defaultRoot]] for a local master, and off for any other. */
  def root(value: String, localMaster: Boolean): Option[String] = value.trim.toLowerCase(Locale.ROOT) match {
    case "auto" => if (localMaster) Some(defaultRoot) else None
    case _ => explicitRoot(value)
  }

  /** `$XDG_CACHE_HOME/memphis/durable`, else `~/.cache/memphis/durable`: the user's own, kept across reboots. */
  def defaultRoot: String =
    defaultRoot(System.getenv(fact("root_default", "cache_home_variable")), System.getProperty("user.home"))

  /**
   * The default root for this value of the cache home variable (null when unset) and home folder:
   * a relative value is ignored, as the XDG Base Directory spec says.
   */
  def defaultRoot(cacheHome: String, home: String): String = {
    val cache = Option(cacheHome).filter(new File(_).isAbsolute)
      .getOrElse(new File(home, fact("root_default", "cache_home_default")).getPath)
    new File(cache, fact("root_default", "path")).getAbsolutePath
  }

  /**
   * The folder of `user`'s entries: `shared` when entries are shared across users; else the name
   * itself when it is plain (a letter or digit, then letters, digits, `.`, `_`, `-`; at most 64) and
   * not `shared`, otherwise `u-` and the first 16 hex digits of the SHA-256 of its UTF-8 bytes.
   */
  def userFolder(user: String, shared: Boolean): String =
    if (shared) SharedFolder
    else if (PlainName.pattern.matcher(user).matches() && user != SharedFolder) user
    else HashedPrefix + MessageDigest.getInstance("SHA-256").digest(user.getBytes("UTF-8")).map(b => f"${b & 0xff}%02x").mkString
      .take(HashedHexDigits)

  /** The folder of `user`'s Spark entries under `root`. */
  def sparkFolder(root: String, user: String, shared: Boolean): Path =
    new Path(new Path(root, userFolder(user, shared)), SparkFolder)

  /** The folder of `user`'s collected rows under `root`. */
  def collectedFolder(root: String, user: String, shared: Boolean): Path =
    new Path(new Path(root, userFolder(user, shared)), CollectedFolder)
}
