package io.memphis.conf

import java.util.Locale

import scala.util.Try

import org.apache.spark.SparkConf
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkRuntime

/**
 * Every `spark.memphis.*` key: its default, what values are allowed, what it means. Values are
 * validated twice, by the same rules: the SparkConf when a session starts (unknown keys too), and
 * each `spark.conf.set` at run time (through SQLConf registration).
 */
object MemphisConf {
  val Prefix = "spark.memphis."

  /** A static entry is fixed for the SparkContext's life: `spark.conf.set` refuses to change it. */
  final case class Entry[T](key: String, default: String, allowed: String, doc: String, static: Boolean = false)(
      val parse: String => Option[T]) {
    /** The value in this session's conf; a value that slipped past validation counts as the default. */
    def get(conf: SQLConf): T = parse(conf.getConfString(key, default)).getOrElse(parse(default).get)

    /** The value a SparkContext started with (for static keys), the default when unset or invalid. */
    def get(conf: SparkConf): T = parse(conf.get(key, default)).getOrElse(parse(default).get)
  }

  val Enabled: Entry[Boolean] = Entry(
    Prefix + "enabled", "true", "a boolean (true or false)",
    "Turns every memphis rule on or off for the session; false is the plain-Spark baseline and releases " +
      "what memphis holds. Can change at run time.")(parseBoolean)

  // Static: a user's session must not be able to switch it on to read another user's entries.
  val ShareAcrossUsers: Entry[Boolean] = Entry(
    Prefix + "shareAcrossUsers", "false", "a boolean (true or false)",
    "Whether an entry (cached subplan, kept shuffle, join broadcast, loop checkpoint) that one user's " +
      "query produced may serve another user's queries. false: each user gets entries of their own, so " +
      "no one reads through the cache a source they could not read. true: one entry per subplan for " +
      "everyone (less storage when users share data and rights). The user is Spark's, as current_user() " +
      "returns it; over Spark Connect, the user id the client sent (not authenticated by Spark), and a session " +
      "that sent none is a scope of its own, with nothing in the durable tier. Fixed when the SparkContext " +
      "starts: set it before, spark.conf.set refuses it.", static = true)(parseBoolean)

  val StorageFraction: Entry[Double] = Entry(
    Prefix + "storage.fraction", "0.7", "a number greater than 0 and at most 1",
    "Share of the executors' storage memory that memphis may fill with cached subplans (MEMPHIS uses " +
      "0.7). In local mode the driver is the executor.")(parseFraction)

  val StorageMaxBytes: Entry[Long] = Entry(
    Prefix + "storage.maxBytes", "0", "a byte size such as 0, 512m or 4g (0 means no cap)",
    "Upper bound on the bytes memphis keeps in Spark storage, on top of storage.fraction; 0 means no cap.")(
    parseBytes)

  val LineageMaxListedFiles: Entry[Int] = Entry(
    Prefix + "lineage.maxListedFiles", "100000", "a whole number from 1 to 100000000",
    "Most files memphis lists to fingerprint one file source; a larger source gets no lineage key " +
      "(it is not reused), so that a key never costs more than a bounded listing.")(
    wholeNumber(1, 100000000))

  val MinOccurrences: Entry[Int] = Entry(
    Prefix + "reuse.minOccurrences", "2", "a whole number from 1 to 1000",
    "On which occurrence of a subplan memphis persists it (delayed caching): 2 persists what recurs, " +
      "1 everything it sees.")(
    wholeNumber(1, 1000))

  val RetainedShuffles: Entry[Int] = Entry(
    Prefix + "reuse.retainedShuffles", "16", "a whole number from 0 to 10000",
    "How many first occurrences of aggregates keep their shuffle output, so that the second occurrence, " +
      "which memphis persists, only combines it instead of computing the aggregate's input again; 0 keeps " +
      "none (the first occurrence then plans exactly as plain Spark). Kept shuffles stay on the executors' " +
      "local disks until let go, and keep the join broadcasts their map side read on the driver: they are kept " +
      "only while those fit in what the driver heap's budget (driver.heapFraction) leaves.")(
    wholeNumber(0, 10000))

  val PersistAhead: Entry[Boolean] = Entry(
    Prefix + "reuse.persistAhead", "true", "a boolean (true or false)",
    "Persist an aggregate inside a query at its first occurrence when at least half of the session's " +
      "last 16 such aggregates recurred (at least one), instead of at its second occurrence; false always " +
      "waits for reuse.minOccurrences.")(parseBoolean)

  /** The eviction policies `evictionPolicy` names ([[io.memphis.cache.EvictionPolicy]] scores them). */
  val EvictionPolicies: Seq[String] = Seq("costnsize", "lru", "dagheight")

  val EvictionPolicyName: Entry[String] = Entry(
    Prefix + "evictionPolicy", "costnsize", s"one of ${EvictionPolicies.mkString(", ")}",
    "Which cached subplan goes first when memphis holds more than its budget: costnsize the lowest " +
      "measured cost x (1 + hits + misses) / size, lru the least recently used, dagheight the deepest subplan.")(
    v => Some(v.trim.toLowerCase(Locale.ROOT)).filter(EvictionPolicies.contains))

  val CheckpointMinHeight: Entry[Int] = Entry(
    Prefix + "checkpoint.minHeight", "40", "a whole number from 2 to 100000",
    "Height of an analyzed plan past which memphis cuts a loop-carried subplan (one an earlier query " +
      "also held this deep) by a lazy local checkpoint.")(
    wholeNumber(2, 100000))

  val CheckpointDir: Entry[String] = Entry(
    Prefix + "checkpoint.dir", "", "a directory path or Hadoop URI that memphis can create and write " +
      "(empty means local checkpoints)",
    "Where memphis writes reliable checkpoints of loop-carried subplans, one folder per checkpoint under " +
      "memphis-<application id>/; a released checkpoint's folder is deleted once no plan reads it, the " +
      "application's folder when it ends. Checked at session start (the folder is made and a probe file " +
      "written); empty keeps lazy local checkpoints in Spark storage.")(
    v => Some(v.trim).filter(d => d.isEmpty || Try(new org.apache.hadoop.fs.Path(d)).isSuccess))

  val LoopSpeculative: Entry[Boolean] = Entry(
    Prefix + "loop.speculative", "true", "a boolean (true or false)",
    "In a loop whose results memphis checkpoints, checkpoint each iteration's result at its first " +
      "occurrence (a subplan that is the loop step of a checkpoint applied once more, with a lineage key) " +
      "in the query that computes it, so that it is computed once even when two jobs of the iteration, or " +
      "the next iteration, read it; false waits until the next query reads it (computed twice). Skipped " +
      "when the loop's previous result takes more than the storage budget.")(parseBoolean)

  val CollectedMaxBytes: Entry[Long] = Entry(
    Prefix + "collected.maxBytes", "4m", "a byte size such as 0, 1m or 16m (0 turns keeping collected results off)",
    "Largest collected result memphis keeps on the driver heap: the rows a collect() or count() " +
      "returned, standing for the subplan below the query's ordering and choice of columns (deterministic, " +
      "every source fingerprinted). Later queries that hold that subplan read the rows as a local relation " +
      "instead of computing it (a loop that collects its state reads the previous iteration's rows; a " +
      "repeated collect runs no job). Counted with its key's canonical forms and 56 bytes a row; all kept " +
      "results together stay within the driver heap's budget (driver.heapFraction), least value per byte " +
      "let go first.")(parseBytes)

  // Static: one folder for the context's life, so that its writes and reads agree; a session must not
  // be able to point memphis at a folder of another user's entries.
  val DurableDir: Entry[String] = Entry(
    Prefix + "durable.dir", "auto",
    "auto, none (or empty: off), or a directory path or Hadoop URI that memphis can create and write",
    "Where the durable tier keeps results beyond the application, one subfolder per user, so that a " +
      "restarted notebook, the next spark-submit run or another process of the same user reads them instead " +
      "of computing them. auto: $XDG_CACHE_HOME/memphis/durable (else ~/.cache/memphis/durable) when the " +
      "master is local (local, local[N]), off for any other master (on a cluster, name a folder executors " +
      "can write); none or empty turns it off. A value set explicitly is checked at session start (the " +
      "folder is made and a probe file written; a failure stops the session with key, value and reason); " +
      "when the auto folder cannot be used the tier is off with a warning. The driver (Python) reads the " +
      "same key for traced results and @memphis.reuse calls, in <dir>/<user>/driver (0700; " +
      "<dir>/shared/driver with shareAcrossUsers): there auto is the local folder for any master, a file: " +
      "URI is its path, another filesystem's URI (s3a://, hdfs://) keeps Spark results only, and " +
      "MEMPHIS_DURABLE=off in the environment turns the driver's tier off. Fixed when the SparkContext starts.", static = true)(
    v => Some(v.trim).filter(d => d.isEmpty || Seq("auto", "none").contains(d.toLowerCase(Locale.ROOT)) ||
      Try(new org.apache.hadoop.fs.Path(d)).isSuccess))

  val DurableMaxBytes: Entry[Long] = Entry(
    Prefix + "durable.maxBytes", "10g", "a byte size such as 0, 512m or 10g (0: nothing more is written)",
    "Bytes of Spark results the durable tier keeps for one user (the sum of their manifests' data " +
      "bytes); after each write, beyond it the entries of least compute time per byte are removed, oldest " +
      "first. Removed entries' files are deleted 30 minutes later (a query may still read them), so the " +
      "folder may exceed the budget by what was removed in the last 30 minutes. The driver's durable folder " +
      "has the same budget: before each write, files of lowest compute time per byte leave, only for a " +
      "value worth more; 0 turns the driver's tier off. Fixed when the SparkContext starts.", static = true)(parseBytes)

  // The driver-side tiers (Python) read the keys below; they are declared here so that the session
  // validates them with the rest.
  val HostMaxBytes: Entry[Long] = Entry(
    Prefix + "host.maxBytes", "0", "a byte size such as 0, 512m or 4g (0 means a quarter of the driver's RAM)",
    "Bytes of driver memory the host tier may hold: traced arrays, @memphis.reuse results, " +
      "memphis.collect results.")(
    parseBytes)

  val BroadcastMaxBytes: Entry[Long] = Entry(
    Prefix + "broadcast.maxBytes", "1g", "a byte size such as 256m or 1g",
    "Bytes of driver values that memphis.broadcast keeps broadcast for reuse; the least recently used " +
      "is unpersisted beyond it.")(
    parseBytes)

  val BroadcastJoinMaxBytes: Entry[Option[Long]] = Entry(
    Prefix + "broadcast.joinMaxBytes", "auto",
    "auto, or a byte size such as 0, 64m or 512m (0 turns cross-query broadcast reuse off)",
    "Bytes of join broadcasts memphis keeps after the query that built them, for later queries with the " +
      "same build side (same plan, same source fingerprints) to read instead of building them again. auto: " +
      "the driver heap's budget (driver.heapFraction) less memphis's own entries; a size caps that further. " +
      "A broadcast is kept at its second build (or its first, when at least half of the session's last 16 " +
      "first builds were built again), only when it takes at most half of this budget; beyond it the one " +
      "of least value per byte (build time x (1 + reads) / bytes) is unpersisted. Separate from " +
      "broadcast.maxBytes: the two registries live in different processes' views (JVM and Python).")(
    v => if (v.trim.equalsIgnoreCase("auto")) Some(None) else parseBytes(v).map(Some(_)))

  val DriverHeapFraction: Entry[Double] = Entry(
    Prefix + "driver.heapFraction", "0.1", "a number greater than 0 and at most 1",
    "Share of the driver's maximum heap (Runtime.maxMemory, what spark.driver.memory gives) that memphis " +
      "may fill with what it keeps referenced there: join broadcasts, kept collected results and its own " +
      "entries. Spark's storage memory is a separate account (storage.fraction). A broadcast hash relation " +
      "on a long key takes about 32 MiB whatever its rows, so with the default a 640 MiB driver keeps none " +
      "(57 MiB budget, 28 MiB per broadcast), a 1 GiB driver up to three, a 4 GiB driver a dozen.")(parseFraction)

  // Static: the threshold is set on the JVM's heap pool, which the whole driver shares.
  val DriverPressureThreshold: Entry[Double] = Entry(
    Prefix + "driver.pressureThreshold", "0.8", "a number greater than 0 and at most 1",
    "Share of the driver heap's old generation that, still in use after a garbage collection (the JVM's " +
      "collection usage threshold), makes memphis let go of what it holds on the driver heap, lowest value " +
      "per byte first: the first holding, then the next while what is let go stays within half of what was " +
      "held; nothing while all of it is under 1% of the heap. Join broadcasts, kept results, and in local mode " +
      "(where executor storage is the driver heap) idle cached relations. Counted as pressure_releases. While the " +
      "heap stays above it, no join broadcast is kept and, in local mode, nothing is persisted (counted as refused). " +
      "Fixed when the SparkContext starts.",
    static = true)(parseFraction)

  val LocalDiskFraction: Entry[Double] = Entry(
    Prefix + "localDisk.fraction", "0.1", "a number greater than 0 and at most 1",
    "Share of the free space of Spark's local directory (with what memphis holds there counted as free) " +
      "that memphis may fill with the first occurrences' kept shuffles and reliable checkpoint files on " +
      "this machine; beyond it the oldest kept shuffles are let go (Spark then cleans their files).")(parseFraction)

  val DiskDir: Entry[String] = Entry(
    Prefix + "disk.dir", "", "a directory path (empty means memphis-<user> under the system temp directory)",
    "Where the disk tier makes its private (0700) spill directory for the host tier's entries.")(
    v => Some(v.trim))

  val DiskMaxBytes: Entry[Long] = Entry(
    Prefix + "disk.maxBytes", "10g", "a byte size such as 0, 512m or 10g (0 turns spilling off)",
    "Bytes the disk tier may hold; the lowest-score files leave first.")(
    parseBytes)

  val GpuMemoryFraction: Entry[Double] = Entry(
    Prefix + "gpu.memoryFraction", "0.9", "a number greater than 0 and at most 1",
    "Share of the GPU's free memory, measured when the driver's GPU tier is made, that memphis manages: " +
      "the bytes the GPU tier's memory pool holds (cached values, live arrays and free blocks); MEMPHIS " +
      "uses 0.9.")(parseFraction)

  // Static: the events are posted, and the tab's memory bounded, for the SparkContext's life.
  val UiRetained: Entry[Int] = Entry(
    Prefix + "ui.retained", "1000", "a whole number from 0 to 100000",
    "How many of memphis's newest decisions (persisted, served, refused, evicted, invalidated, each with " +
      "its reason), and of its most recently used entries, the memphis tab of the Spark UI and the History " +
      "Server keep. memphis posts its decisions and, after each SQL execution, its counters and entries as " +
      "Spark listener events (so they reach the event log) while the UI or the event log is on; 0 posts none " +
      "and shows no tab. Fixed when the SparkContext starts.", static = true)(wholeNumber(0, 100000))

  val All: Seq[Entry[_]] = Seq(Enabled, ShareAcrossUsers, StorageFraction, StorageMaxBytes, MinOccurrences,
    RetainedShuffles, PersistAhead, EvictionPolicyName, LineageMaxListedFiles, CheckpointMinHeight, CheckpointDir,
    LoopSpeculative, CollectedMaxBytes, DurableDir, DurableMaxBytes, HostMaxBytes, BroadcastMaxBytes, BroadcastJoinMaxBytes, DriverHeapFraction, DriverPressureThreshold,
    LocalDiskFraction, DiskDir, DiskMaxBytes, GpuMemoryFraction, UiRetained)
  private val byKey: Map[String, Entry[_]] = All.map(e => e.key -> e).toMap[String, Entry[_]]

  All.foreach(e => SparkRuntime.registerSqlConf(e.key, e.default, e.doc, e.parse(_).isDefined, e.allowed, e.static))

  /** Forces the SQLConf registration above; call before a session reads or sets memphis keys. */
  def register(): Unit = ()

  /** The problem with one `spark.memphis.*` setting, if any. */
  def problem(key: String, value: String): Option[String] = byKey.get(key) match {
    case Some(e) if e.parse(value).isEmpty => Some(s"$key=$value is not allowed: expected ${e.allowed}")
    case Some(_) => None
    case None => Some(s"$key=$value: unknown memphis key; known keys: ${All.map(_.key).mkString(", ")}")
  }

  /**
   * Fails with every problem in `settings` (other keys are ignored), naming key, value and what is
   * allowed, and with the `more` problems found otherwise (see [[io.memphis.MemphisSparkSessionExtension.directoryProblems]]).
   */
  def validate(settings: Iterable[(String, String)], more: Seq[String] = Nil): Unit = {
    val problems = settings.toSeq.sortBy(_._1).collect {
      case (k, v) if k.startsWith(Prefix) => problem(k, v)
    }.flatten ++ more
    if (problems.nonEmpty) {
      throw new MemphisConfigException(s"Invalid memphis configuration: ${problems.mkString("; ")}. " +
        "A SparkContext keeps the conf it started with: stop it before retrying with other values.")
    }
  }

  private def parseBoolean(v: String): Option[Boolean] = v.trim.toLowerCase(Locale.ROOT) match {
    case "true" => Some(true)
    case "false" => Some(false)
    case _ => None
  }

  private def parseFraction(v: String): Option[Double] = Try(v.trim.toDouble).toOption.filter(f => f > 0 && f <= 1)

  /** A parser of whole numbers from `min` to `max`. */
  private def wholeNumber(min: Int, max: Int)(v: String): Option[Int] =
    Try(v.trim.toInt).toOption.filter(n => n >= min && n <= max)

  private val ByteSize = """(?i)\s*(\d+)\s*([kmgtp]?)b?\s*""".r

  def parseBytes(v: String): Option[Long] = v match {
    case ByteSize(n, unit) =>
      val shift = if (unit.isEmpty) 0 else "kmgtp".indexOf(unit.toLowerCase(Locale.ROOT)) + 1
      Try(n.toLong).toOption.filter(x => shift == 0 || x <= (Long.MaxValue >> (10 * shift))).map(_ << (10 * shift))
    case _ => None
  }
}
