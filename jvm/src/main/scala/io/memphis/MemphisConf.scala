package io.memphis

import java.util.Locale

import scala.util.Try

import io.memphis.lineage.KeyContext
import io.memphis.reuse.{CachedRelation, OwnerMark, QueryContext, RetainShuffle}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}

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
  }

  val Enabled: Entry[Boolean] = Entry(
    Prefix + "enabled", "true", "a boolean (true or false)",
    "Turns every memphis rule on or off for the session; false is the plain-Spark baseline.")(parseBoolean)

  // Static: a user's session must not be able to switch it on to read another user's entries.
  val ShareAcrossUsers: Entry[Boolean] = Entry(
    Prefix + "shareAcrossUsers", "false", "a boolean (true or false)",
    "Whether an entry one user's query produced (cached subplan, kept shuffle, broadcast, checkpoint) " +
      "may serve another user's query; false keeps each user's entries to that user's queries. " +
      "Fixed when the SparkContext starts.", static = true)(parseBoolean)

  val StorageFraction: Entry[Double] = Entry(
    Prefix + "storage.fraction", "0.7", "a number greater than 0 and at most 1",
    "Share of the executors' storage memory that memphis may fill with cached subplans.")(parseFraction)

  val StorageMaxBytes: Entry[Long] = Entry(
    Prefix + "storage.maxBytes", "0", "a byte size such as 0, 512m or 4g (0 means no cap)",
    "Upper bound on the bytes memphis keeps in Spark storage, on top of storage.fraction.")(
    parseBytes)

  val LineageMaxListedFiles: Entry[Int] = Entry(
    Prefix + "lineage.maxListedFiles", "100000", "a whole number from 1 to 100000000",
    "Most files memphis lists to fingerprint one file source; a larger source gets no lineage key " +
      "(it is not reused), so that a key never costs more than a bounded listing.")(
    wholeNumber(1, 100000000))

  val MinOccurrences: Entry[Int] = Entry(
    Prefix + "reuse.minOccurrences", "2", "a whole number from 1 to 1000",
    "On which occurrence of a subplan memphis persists it (delayed caching): 2 persists what recurs, 1 everything.")(
    wholeNumber(1, 1000))

  val RetainedShuffles: Entry[Int] = Entry(
    Prefix + "reuse.retainedShuffles", "16", "a whole number from 0 to 10000",
    "How many first occurrences of aggregates keep their shuffle output for the second occurrence to " +
      "persist from (0: none; the first occurrence then plans as plain Spark would).")(
    wholeNumber(0, 10000))

  val PersistAhead: Entry[Boolean] = Entry(
    Prefix + "reuse.persistAhead", "true", "a boolean (true or false)",
    "Persist an aggregate inside a query at its first occurrence when at least half of the session's " +
      "recent such aggregates recurred (see LineageCache.RecentAggregates), instead of at its second; " +
      "false always waits for minOccurrences.")(parseBoolean)

  val EvictionPolicyName: Entry[String] = Entry(
    Prefix + "evictionPolicy", "costnsize", s"one of ${reuse.EvictionPolicy.Names.mkString(", ")}",
    "Which cached subplan goes first when memphis holds more than its budget (see docs/architecture.md).")(
    v => Some(v.trim.toLowerCase(Locale.ROOT)).filter(reuse.EvictionPolicy.Names.contains))

  val CheckpointMinHeight: Entry[Int] = Entry(
    Prefix + "checkpoint.minHeight", "40", "a whole number from 2 to 100000",
    "Height of an analyzed plan past which memphis cuts a loop-carried subplan (one an earlier query " +
      "also held this deep) by a lazy local checkpoint.")(
    wholeNumber(2, 100000))

  val CheckpointDir: Entry[String] = Entry(
    Prefix + "checkpoint.dir", "", "a directory path or Hadoop URI that memphis can create and write " +
      "(empty means local checkpoints)",
    "Where memphis writes reliable checkpoints of loop-carried subplans (one folder per application); " +
      "empty keeps lazy local checkpoints in Spark storage.")(
    v => Some(v.trim).filter(d => d.isEmpty || Try(new org.apache.hadoop.fs.Path(d)).isSuccess))

  val LoopSpeculative: Entry[Boolean] = Entry(
    Prefix + "loop.speculative", "true", "a boolean (true or false)",
    "In a loop whose results memphis checkpoints, checkpoint each iteration's result at its first " +
      "occurrence (the same loop step over the previous result) instead of when the next query reads it, " +
      "so that it is computed once; false waits for the next query.")(parseBoolean)

  val CollectedMaxBytes: Entry[Long] = Entry(
    Prefix + "collected.maxBytes", "4m", "a byte size such as 0, 1m or 16m (0 turns keeping collected results off)",
    "Largest result of a collect (the rows of a deterministic subplan, below the query's ordering or " +
      "choice of columns) that memphis keeps on the driver heap, so that later queries holding that " +
      "subplan read the rows instead of computing it again; within the driver heap's budget.")(parseBytes)

  // Static: one folder for the context's life, so that its writes and reads agree; a session must not
  // be able to point memphis at a folder of another user's entries.
  val DurableDir: Entry[String] = Entry(
    Prefix + "durable.dir", "auto",
    "auto, none (or empty: off), or a directory path or Hadoop URI that memphis can create and write",
    "Where memphis keeps results that outlive the application (the durable tier), one subfolder per user: " +
      "auto is $XDG_CACHE_HOME/memphis/durable (else ~/.cache/memphis/durable) for a local master and off " +
      "for any other; none or empty turns it off. Fixed when the SparkContext starts.", static = true)(
    v => Some(v.trim).filter(d => d.isEmpty || Seq("auto", "none").contains(d.toLowerCase(Locale.ROOT)) ||
      Try(new org.apache.hadoop.fs.Path(d)).isSuccess))

  val DurableMaxBytes: Entry[Long] = Entry(
    Prefix + "durable.maxBytes", "10g", "a byte size such as 0, 512m or 10g (0: nothing more is written)",
    "Bytes of Spark results the durable tier may keep for this user; beyond it the entries of least " +
      "compute time per byte are removed. Fixed when the SparkContext starts.", static = true)(parseBytes)

  // The driver-side tiers (Python) read the keys below; they are declared here so that the session
  // validates them with the rest.
  val HostMaxBytes: Entry[Long] = Entry(
    Prefix + "host.maxBytes", "0", "a byte size such as 0, 512m or 4g (0 means a quarter of the driver's RAM)",
    "Bytes of driver memory the host tier may hold for traced arrays, reused functions and collected DataFrames.")(
    parseBytes)

  val BroadcastMaxBytes: Entry[Long] = Entry(
    Prefix + "broadcast.maxBytes", "1g", "a byte size such as 256m or 1g",
    "Bytes of driver values memphis.broadcast keeps broadcast for reuse; the least recently used is let go beyond it.")(
    parseBytes)

  val BroadcastJoinMaxBytes: Entry[Option[Long]] = Entry(
    Prefix + "broadcast.joinMaxBytes", "auto",
    "auto, or a byte size such as 0, 64m or 512m (0 turns cross-query broadcast reuse off)",
    "Bytes of join broadcasts memphis keeps for later queries to read instead of building them again; " +
      "auto: the driver-heap budget (driver.heapFraction); a size caps it further.")(
    v => if (v.trim.equalsIgnoreCase("auto")) Some(None) else parseBytes(v).map(Some(_)))

  val DriverHeapFraction: Entry[Double] = Entry(
    Prefix + "driver.heapFraction", "0.1", "a number greater than 0 and at most 1",
    "Share of the driver's maximum heap memphis may fill with what it keeps referenced there (join " +
      "broadcasts and its own entries); Spark's storage memory is accounted apart (storage.fraction).")(parseFraction)

  // Static: the threshold is set on the JVM's heap pool, which the whole driver shares.
  val DriverPressureThreshold: Entry[Double] = Entry(
    Prefix + "driver.pressureThreshold", "0.8", "a number greater than 0 and at most 1",
    "Share of the driver's old-generation heap that, still in use after a garbage collection, makes " +
      "memphis let go of what it holds on the driver, lowest score first. Fixed when the SparkContext starts.",
    static = true)(parseFraction)

  val LocalDiskFraction: Entry[Double] = Entry(
    Prefix + "localDisk.fraction", "0.1", "a number greater than 0 and at most 1",
    "Share of the free space of Spark's local directory that memphis may fill with kept shuffles and " +
      "checkpoint files; the oldest kept shuffles go first beyond it.")(parseFraction)

  val DiskDir: Entry[String] = Entry(
    Prefix + "disk.dir", "", "a directory path (empty means memphis-<user> under the system temp directory)",
    "Where the disk tier spills host entries; created private to the user (mode 0700).")(
    v => Some(v.trim))

  val DiskMaxBytes: Entry[Long] = Entry(
    Prefix + "disk.maxBytes", "10g", "a byte size such as 0, 512m or 10g (0 turns spilling off)",
    "Bytes the disk tier may hold; the entries of least value go first.")(
    parseBytes)

  val GpuMemoryFraction: Entry[Double] = Entry(
    Prefix + "gpu.memoryFraction", "0.9", "a number greater than 0 and at most 1",
    "Share of the GPU's free memory, measured when the driver's GPU tier is made, that memphis manages " +
      "(cached values, recycled buffers, live arrays); MEMPHIS uses 0.9.")(parseFraction)

  val All: Seq[Entry[_]] = Seq(Enabled, ShareAcrossUsers, StorageFraction, StorageMaxBytes, MinOccurrences,
    RetainedShuffles, PersistAhead, EvictionPolicyName, LineageMaxListedFiles, CheckpointMinHeight, CheckpointDir,
    LoopSpeculative, CollectedMaxBytes, DurableDir, DurableMaxBytes, HostMaxBytes, BroadcastMaxBytes, BroadcastJoinMaxBytes, DriverHeapFraction, DriverPressureThreshold,
    LocalDiskFraction, DiskDir, DiskMaxBytes, GpuMemoryFraction)
  private val byKey: Map[String, Entry[_]] = All.map(e => e.key -> e).toMap[String, Entry[_]]

  All.foreach(e => SparkRuntime.registerSqlConf(e.key, e.default, e.doc, e.parse(_).isDefined, e.allowed, e.static))

  /** What lineage keys depend on besides the plan, from the session's confs. */
  def keyContext(session: SparkSession): KeyContext = {
    val conf = SparkShimImpl.sqlConf(session)
    new KeyContext(() => SparkShimImpl.newHadoopConf(session), conf.caseSensitiveAnalysis,
      s"parallelism=${session.sparkContext.defaultParallelism},maxPartitionBytes=${conf.filesMaxPartitionBytes}," +
        s"openCost=${conf.filesOpenCostInBytes},minPartitions=${conf.filesMinPartitionNum}",
      LineageMaxListedFiles.get(conf), userCaches(session))
  }

  /**
   * The plan of the user's cached relation Spark substitutes for a plan (memphis's own relations,
   * named `memphis …`, and its marks left out), when Spark holds one a user made. Looked up with
   * memphis's rules off: Spark normalizes the plan it is handed, which would run them.
   */
  private def userCaches(session: SparkSession): Option[LogicalPlan => Option[LogicalPlan]] =
    if (!SparkRuntime.holdsCachedOtherThan(session, CachedRelation.NamePrefix)) None
    else Some(plan => QueryContext.suspended(SparkShimImpl.lookupCachedData(session, plan))
      .filterNot(_.cachedRepresentation.cacheBuilder.tableName.exists(_.startsWith(CachedRelation.NamePrefix)))
      .map(cached => RetainShuffle.strip(OwnerMark.strip(cached.plan))))

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
   * allowed, and with the `more` problems found otherwise (see [[directoryProblems]]).
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

  /**
   * The problems with `checkpoint.dir` and `durable.dir` in the SparkConf, if any: a directory memphis
   * cannot make or write. (The durable tier's default folder is not checked here: when it cannot be
   * used, the tier is off, with a warning.)
   */
  def directoryProblems(sc: org.apache.spark.SparkContext): Seq[String] = {
    val checkpoints = sc.getConf.getOption(CheckpointDir.key).flatMap(CheckpointDir.parse).filter(_.nonEmpty)
    val durableRoot = sc.getConf.getOption(DurableDir.key).flatMap(io.memphis.durable.DurableLayout.explicitRoot)
    Seq(CheckpointDir -> checkpoints, DurableDir -> durableRoot).flatMap { case (entry, dir) =>
      dir.toSeq.flatMap(d => checkpoint.CheckpointFiles.unusable(d, sc.hadoopConfiguration)
        .map(why => s"${entry.key}=$d is not allowed: $why; expected ${entry.allowed}"))
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
