package io.memphis.lineage

import java.nio.file.Files
import java.util.concurrent.atomic.AtomicInteger

import io.memphis.cache.SessionKeyContext
import io.memphis.conf.MemphisConf
import io.memphis.conf.CacheStats.Counter
import io.memphis.facade.LineageCache
import org.apache.commons.io.FileUtils
import org.apache.spark.SPARK_VERSION
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.{DataFrame, Dataset, SparkSession}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.memphis.{CacheTestShim, SparkRuntime, SparkShimImpl}
import org.scalatest.{BeforeAndAfterAll, Outcome}
import org.scalatest.funsuite.AnyFunSuite

/** Delta sources: keys follow the table version; a time-travel read stays pinned, and so does its entry. */
class DeltaKeySuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = SparkSession.builder().master("local[2]").appName("delta-keys")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "4")
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension,io.memphis.MemphisSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .getOrCreate()
  private lazy val dir = Files.createTempDirectory("memphis-delta")
  private lazy val path = dir.resolve("table").toString

  // No delta-spark release is built for Spark 4.3 yet (delta-spark_4.3_2.13 is not published): the 4.3
  // build puts 4.2's Delta on the test class path only so that it resolves (pom.xml).
  private val deltaRelease = !SPARK_VERSION.startsWith("4.3.")

  override def withFixture(test: NoArgTest): Outcome = {
    assume(deltaRelease, s"no delta-spark release is built for Spark $SPARK_VERSION yet")
    super.withFixture(test)
  }

  override def afterAll(): Unit = if (deltaRelease) spark.stop()

  private def key(df: Dataset[_]): LineageKey =
    LineageKey.of(SparkShimImpl.analyzedPlan(df), SessionKeyContext(spark))
      .fold(reason => fail(s"no key: $reason"), identity)

  private def latest: DataFrame = latest(path)
  private def latest(at: String): DataFrame = spark.read.format("delta").load(at)
  private def pinned(version: Long): DataFrame = pinned(path, version)
  private def pinned(at: String, version: Long): DataFrame = spark.read.format("delta").option("versionAsOf", version).load(at)

  test("an append by another session changes the key of a latest read, not of a pinned one") {
    spark.range(100).write.format("delta").save(path)
    val before = key(latest.where("id > 10"))
    val v0 = key(pinned(0).where("id > 10"))
    assert(before.hash != v0.hash, "a pinned read is an entry of its own, even at the latest version")
    assert(before.allSources.head.describe.contains("version 0"))
    assert(v0.allSources.head.identity.exists(_.endsWith("@v0")) &&
      v0.allSources.head.identity != before.allSources.head.identity, "a pinned read is checked as its version only")

    spark.newSession().range(100, 150).write.format("delta").mode("append").save(path)
    assert(!before.sourcesUnchanged, "the latest read's source changed")
    assert(key(pinned(0).where("id > 10")).sourcesUnchanged)
    val after = key(latest.where("id > 10"))
    assert(after.hash != before.hash)
    assert(key(pinned(0).where("id > 10")).hash == v0.hash, "a pinned read keeps its key")
    assert(key(pinned(1).where("id > 10")).allSources.head.describe.contains("version 1, pinned"))
    assert(latest.count() == 150 && pinned(0).count() == 100)
  }

  test("a pinned read whose files a VACUUM deleted has no key, and its held entry goes: it fails as in plain Spark") {
    val at = dir.resolve("vacuumed").toString
    spark.conf.set(MemphisConf.CollectedMaxBytes.key, "0") // the Spark tier's entry, not kept rows
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    // VACUUM lists the table in as many tasks as this says (10,000 by default): most of the suite's time.
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
    try {
      spark.range(100).write.format("delta").save(at)
      spark.range(7).write.format("delta").mode("overwrite").save(at) // version 1 replaces version 0's file
      val stats = LineageCache.forContext(spark.sparkContext).stats
      def perBucket(version: Long): Seq[Long] =
        pinned(at, version).groupBy((col("id") % 3).as("b")).count().collect().map(_.getLong(1)).toSeq.sorted
      val hits = stats.get(Counter.Hits)
      val answers = (1 to 3).map(_ => perBucket(0))
      assert(answers.distinct == Seq(Seq(33L, 33L, 34L)) && stats.get(Counter.Hits) == hits + 1,
        s"persisted at its 2nd occurrence, served at its 3rd (counters: ${stats.snapshot.filter(_._2 > 0)})")
      val letGo = stats.get(Counter.Invalidated) + stats.get(Counter.Evicted)

      spark.sql(s"VACUUM delta.`$at` RETAIN 0 HOURS")
      // A Delta release that re-caches the plans over the table's path at a VACUUM tells memphis on the
      // listener bus that its relation was replaced (evicted); one that does not leaves the entry to be
      // invalidated at the next read. Either way it goes once; the bus is drained so that the count is
      // not a race between the bus and this thread.
      SparkRuntime.awaitListeners(spark.sparkContext, 30000)
      val reason = LineageKey.of(SparkShimImpl.analyzedPlan(pinned(at, 0)), SessionKeyContext(spark)).left.toOption
      assert(reason.exists(_.contains("is gone")), s"no key after the VACUUM: $reason")
      assert(key(pinned(at, 1)).allSources.head.describe.contains("version 1, pinned"), "version 1's file is kept")
      intercept[Exception](perBucket(0))
      assert(stats.get(Counter.Invalidated) + stats.get(Counter.Evicted) == letGo + 1, "the entry of version 0 is let go")
      spark.conf.set("spark.memphis.enabled", "false")
      try intercept[Exception](perBucket(0)) finally spark.conf.set("spark.memphis.enabled", "true")
    } finally {
      spark.conf.unset(MemphisConf.CollectedMaxBytes.key)
      spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
      spark.conf.unset("spark.sql.sources.parallelPartitionDiscovery.parallelism")
    }
  }

  test("a pinned version's files come from Delta once: its next keys run no Spark job; a table made anew is read anew") {
    val at = dir.resolve("pinned-files").toString
    spark.range(50).write.format("delta").save(at)
    spark.range(50, 60).write.format("delta").mode("append").save(at)
    val jobs = new AtomicInteger
    val counting = new SparkListener {
      override def onJobStart(start: SparkListenerJobStart): Unit = jobs.incrementAndGet()
    }
    def jobsOf(f: => Any): Int = {
      SparkRuntime.awaitListeners(spark.sparkContext, 30000)
      val before = jobs.get
      f
      SparkRuntime.awaitListeners(spark.sparkContext, 30000)
      jobs.get - before
    }
    spark.sparkContext.addSparkListener(counting)
    try {
      val first = jobsOf(key(pinned(at, 0)))
      assert(first > 0, "Delta lists a version's files in a Spark job")
      val again = (1 to 3).map(_ => jobsOf(key(pinned(at, 0).where("id > 3"))))
      assert(again == Seq(0, 0, 0), s"jobs of the next keys of version 0: $again")
      // Another table at the same folder: its version 0 has other files, all present, and a key.
      FileUtils.deleteDirectory(new java.io.File(at))
      spark.range(5).write.format("delta").save(at)
      assert(jobsOf(key(pinned(at, 0))) > 0, "a new table's version 0 is listed again")
      assert(pinned(at, 0).count() == 5)
    } finally spark.sparkContext.removeSparkListener(counting)
  }

  test("an overwrite changes the key") {
    val before = key(latest)
    spark.range(7).write.format("delta").mode("overwrite").save(path)
    assert(key(latest).hash != before.hash)
  }

  test("pinned and latest reads alternating keep both entries; an append invalidates the latest one's only") {
    val at = dir.resolve("alternating").toString
    // The Spark tier's entries: with collected results kept, the repeats would read the first collect's rows.
    spark.conf.set(MemphisConf.CollectedMaxBytes.key, "0")
    spark.range(100).write.format("delta").save(at)
    spark.range(100, 130).write.format("delta").mode("append").save(at)
    val cache = LineageCache.forContext(spark.sparkContext)
    // From no history: whether the earlier tests' persists were read decides whether this one's are made
    // at their second occurrence (ReusePolicy), and those outcomes settle with the listener bus's timing.
    cache.clearFor(spark)
    val stats = cache.stats
    def perBucket(df: DataFrame): Seq[(Long, Long)] =
      df.groupBy((col("id") % 3).as("b")).count().collect().map(r => r.getLong(0) -> r.getLong(1)).toSeq.sorted
    // Answer and hits of one query.
    def run(df: => DataFrame): (Seq[(Long, Long)], Long) = {
      val before = stats.get(Counter.Hits)
      (perBucket(df), stats.get(Counter.Hits) - before)
    }
    val rounds = (1 to 3).map(_ => (run(latest(at)), run(pinned(at, 0))))
    assert(rounds.map { case ((_, l), (_, p)) => (l, p) } == Seq((0, 0), (0, 0), (1, 1)),
      s"each is persisted at its 2nd occurrence and served at its 3rd (counters: ${stats.snapshot.filter(_._2 > 0)})")
    assert(rounds.map(_._1._1).distinct.size == 1 && rounds.map(_._2._1).distinct.size == 1)
    val letGo = stats.get(Counter.Invalidated) + stats.get(Counter.Evicted)
    val sparkHolds = CacheTestShim.cachedPlans(spark).size

    spark.newSession().range(130, 160).write.format("delta").mode("append").save(at)
    // Where Spark replaced a relation, memphis hears of it from the listener bus, after the write.
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    val (latestAfter, latestHits) = run(latest(at))
    val (pinnedAfter, pinnedHits) = run(pinned(at, 0))
    // Delta 4 leaves the cached plans alone at a commit, and memphis invalidates the latest read's
    // entry at its next read; Delta 3 (Spark 3.5) re-caches every plan over the table at the commit,
    // so memphis sees its relation replaced (evicted) and lets go of Spark's re-cached copy.
    assert(latestHits == 0 && stats.get(Counter.Invalidated) + stats.get(Counter.Evicted) == letGo + 1,
      "the latest read recomputes")
    assert(CacheTestShim.cachedPlans(spark).size == sparkHolds - 1, "Spark holds no relation memphis let go")
    // Seen once on the 4.1 line in CI, not since: say which of memphis's timing-driven releases (the
    // slower-query guard, the heap's pressure valve) let the pinned entry go, if one did.
    assert(pinnedHits == 1, s"the pinned read is still served (refused as slower: ${stats.get(Counter.RefusedSlower)}, " +
      s"released under heap pressure: ${stats.get(Counter.PressureReleases)})")
    assert(latestAfter.map(_._2).sum == 160 && pinnedAfter.map(_._2).sum == 100)

    spark.conf.set("spark.memphis.enabled", "false")
    try {
      assert(latestAfter == perBucket(latest(at)))
      assert(pinnedAfter == perBucket(pinned(at, 0)) && pinnedAfter == rounds.head._2._1)
    } finally {
      spark.conf.set("spark.memphis.enabled", "true")
      spark.conf.unset(MemphisConf.CollectedMaxBytes.key)
    }
  }
}
