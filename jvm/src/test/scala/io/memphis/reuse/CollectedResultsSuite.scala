package io.memphis.reuse

import java.nio.file.Files

import io.memphis.LocalSessions
import io.memphis.collected.{CollectedResult, CollectedResults, KeepRequest}
import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.{HeldKeys, LineageKey, LocalContent}
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan}
import org.apache.spark.sql.functions.{col, count, sum}
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}
import org.apache.spark.sql.types.{DataType, LongType}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Collected results: the rows a query returns to the driver stand for its subplan below the
 * presentation, and later queries that hold that subplan read them; answers as without memphis.
 */
class CollectedResultsSuite extends AnyFunSuite with LocalSessions {
  private def stats(spark: SparkSession): CacheStats = LineageCache.forContext(spark.sparkContext).stats

  private def counters(spark: SparkSession): Map[String, Long] = {
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    Seq(Counter.ResultsKept, Counter.ResultsReused, Counter.ResultsReleased, Counter.ResultsRefused)
      .map(c => c.toString -> stats(spark).get(c)).toMap
  }

  private def delta(before: Map[String, Long], after: Map[String, Long]): Map[String, Long] =
    after.map { case (k, v) => k -> (v - before(k)) }

  private def memphisOff[T](spark: SparkSession)(f: => T): T = {
    spark.conf.set(MemphisConf.Enabled.key, "false")
    try f finally spark.conf.set(MemphisConf.Enabled.key, "true")
  }

  private def height(plan: LogicalPlan): Int = 1 + plan.children.map(height).foldLeft(0)(math.max)

  /** A loop step: each point's nearest centre (of 3), then the centres as the means of their points. */
  private def step(points: DataFrame, centres: DataFrame): DataFrame = {
    val d = points.crossJoin(centres).withColumn("d", (col("x") - col("cx")) * (col("x") - col("cx")))
    val nearest = d.groupBy("pid", "x").agg(org.apache.spark.sql.functions.min(
      org.apache.spark.sql.functions.struct("d", "cid")).getField("cid").as("cid"))
    nearest.groupBy("cid").agg(org.apache.spark.sql.functions.avg("x").as("cx"))
  }

  /** Eight iterations, each collecting its centres in order: (the rows of each, the last query's optimized plan). */
  private def loop(spark: SparkSession): (Seq[Seq[Row]], LogicalPlan) = {
    // Points on a grid of 1/8: every mean is exact, in any order of summation.
    val points = spark.range(300).select(col("id").as("pid"), ((col("id") % 40) / 8.0).as("x"))
    var centres = spark.range(3).select(col("id").cast("int").as("cid"), (col("id") * 1.5).as("cx"))
    var last: DataFrame = null
    val rows = (1 to 8).map { _ =>
      centres = step(points, centres)
      last = centres.orderBy("cid")
      last.collect().toSeq
    }
    (rows, last.queryExecution.optimizedPlan)
  }

  for (adaptive <- Seq("true", "false")) {
    test(s"a loop that collects its state reads the previous iteration's rows; plans stay shallow (adaptive $adaptive)") {
      val spark = newSession("spark.sql.adaptive.enabled" -> adaptive)
      val (plain, plainPlan) = memphisOff(spark)(loop(spark))
      val before = counters(spark)
      val (on, onPlan) = loop(spark)
      assert(on == plain)
      assert(delta(before, counters(spark)) == Map("results_kept" -> 8, "results_reused" -> 7,
        "results_released" -> 0, "results_refused" -> 0))
      assert(height(plainPlan) > 30, "without memphis the plan grows by an iteration each time")
      assert(height(onPlan) < 12 && onPlan.exists(_.isInstanceOf[CollectedResult]), onPlan.treeString)
      assert(onPlan.treeString.contains("CollectedResult memphis"), "explain shows what the query reads")
    }
  }

  test("the rows under orderings, renames and projections that keep every column stand for the subplan; a filter's for the filter") {
    val spark = newSession()
    val agg = spark.range(100).groupBy((col("id") % 5).as("k")).agg(sum("id").as("s"), count("*").as("n"))
    def rowsOf(df: DataFrame) = CollectedResultRule.rowsOf(SparkShimImpl.analyzedPlan(df))
    val aggPlan = SparkShimImpl.analyzedPlan(agg)
    val (ordered, at) = rowsOf(agg.orderBy(col("s").desc)).get
    assert(ordered.sameResult(aggPlan) && at == Seq(0, 1, 2))
    val (widened, atWidened) = rowsOf(agg.select(col("n"), (col("s") * 2).as("twice"), col("k").as("key"), col("s"))).get
    assert(widened.sameResult(aggPlan) && atWidened == Seq(2, 3, 0))
    val (filtered, _) = rowsOf(agg.where(col("n") > 3)).get
    assert(filtered.isInstanceOf[Filter], "a filter drops rows: its own rows stand for it, not for the aggregate")
    assert(rowsOf(agg.select(col("k"))).exists(_._1.isInstanceOf[org.apache.spark.sql.catalyst.plans.logical.Project]))
    assert(rowsOf(spark.range(10).toDF()).isEmpty, "a leaf is not kept")

    // A kept result serves the aggregate inside a later query, its columns back in the aggregate's order.
    val expected = memphisOff(spark)(agg.where(col("s") > 900).collect().toSeq.sortBy(_.getLong(0)))
    agg.select(col("n"), (col("s") * 2).as("twice"), col("k").as("key"), col("s")).collect()
    val before = counters(spark)
    assert(agg.where(col("s") > 900).collect().toSeq.sortBy(_.getLong(0)) == expected)
    assert(delta(before, counters(spark))("results_reused") == 1)

    // A filter's rows are kept for the filter: they do not serve the aggregate under it.
    val other = spark.range(100).groupBy((col("id") % 6).as("k")).agg(sum("id").as("s"))
    other.where(col("s") > 800).collect()
    val reused = counters(spark)("results_reused")
    assert(other.groupBy().agg(sum("s")).collect().head.getLong(0) == 4950L)
    assert(counters(spark)("results_reused") == reused)
  }

  test("a subplan that observes metrics is run, not read from kept rows: its metrics are reported") {
    val spark = newSession()
    val observed = new java.util.concurrent.atomic.AtomicInteger
    spark.listenerManager.register(new org.apache.spark.sql.util.QueryExecutionListener {
      override def onSuccess(funcName: String, qe: org.apache.spark.sql.execution.QueryExecution, durationNs: Long): Unit =
        if (qe.observedMetrics.contains("rows")) observed.incrementAndGet()
      override def onFailure(funcName: String, qe: org.apache.spark.sql.execution.QueryExecution, e: Exception): Unit = ()
    })
    def df = spark.range(100).groupBy((col("id") % 3).as("k")).count().observe("rows", count("*").as("n"))
    val before = counters(spark)
    assert(df.collect().length == 3 && df.collect().length == 3)
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    assert(observed.get == 2 && delta(before, counters(spark))("results_reused") == 0)
  }

  test("a non-deterministic subplan's rows are not kept") {
    val spark = newSession()
    spark.range(1000).selectExpr("id % 10 AS k").createOrReplaceTempView("r")
    val before = counters(spark)
    for (_ <- 1 to 3) {
      spark.sql("SELECT k, count(*) AS c, max(x) * 0 AS m FROM (SELECT k, rand() AS x FROM r) GROUP BY k").collect()
    }
    val plan = spark.sql("SELECT sum(c) FROM (SELECT k, count(*) AS c, max(x) * 0 AS m FROM (SELECT k, rand() AS x FROM r) " +
      "GROUP BY k)")
    assert(plan.collect().head.getLong(0) == 1000)
    assert(!plan.queryExecution.optimizedPlan.exists(_.isInstanceOf[CollectedResult]))
    assert(delta(before, counters(spark)).values.forall(_ == 0))
  }

  test("a source file changed after the collect invalidates the kept rows: the next query computes") {
    val spark = newSession()
    val path = Files.createTempDirectory("memphis-collected").resolve("t").toString
    spark.range(1000).selectExpr("id % 7 AS k", "id AS v").write.parquet(path)
    def agg = spark.read.parquet(path).groupBy("k").agg(sum("v").as("s"))
    def total = agg.groupBy().agg(sum("s")).collect().head.getLong(0)
    agg.collect()
    val before = counters(spark)
    assert(total == 499500L)
    assert(delta(before, counters(spark))("results_reused") == 1)
    spark.range(1000, 1010).selectExpr("id % 7 AS k", "id AS v").write.mode("append").parquet(path)
    val changed = counters(spark)
    assert(total == 499500L + (1000L until 1010L).sum)
    val after = delta(changed, counters(spark))
    assert(after("results_reused") == 0 && after("results_released") == 2, s"the aggregate's rows and the total's: $after")
    assert(memphisOff(spark)(total) == 499500L + (1000L until 1010L).sum)
  }

  test("a result larger than collected.maxBytes is not kept; a conf of 0 keeps none; a bad value is refused") {
    val spark = newSession(MemphisConf.CollectedMaxBytes.key -> "4k")
    val big = spark.range(1000).groupBy(col("id").as("k")).count()
    val before = counters(spark)
    assert(big.collect().length == 1000)
    assert(delta(before, counters(spark)) == Map("results_kept" -> 0, "results_reused" -> 0, "results_released" -> 0,
      "results_refused" -> 1))
    assert(!big.groupBy().count().queryExecution.optimizedPlan.exists(_.isInstanceOf[CollectedResult]))
    val small = spark.range(1000).groupBy((col("id") % 3).as("k")).count()
    small.collect()
    assert(counters(spark)("results_kept") == before("results_kept") + 1)
    spark.conf.set(MemphisConf.CollectedMaxBytes.key, "0")
    spark.range(1000).groupBy((col("id") % 4).as("k")).count().collect()
    assert(counters(spark)("results_kept") == before("results_kept") + 1)
    val e = intercept[IllegalArgumentException](spark.conf.set(MemphisConf.CollectedMaxBytes.key, "lots"))
    assert(e.getMessage.contains(MemphisConf.CollectedMaxBytes.key) && e.getMessage.contains("lots") &&
      e.getMessage.contains(MemphisConf.CollectedMaxBytes.allowed))
  }

  test("a bad collected.maxBytes stops the session from starting, naming key, value and what is allowed") {
    val e = intercept[IllegalArgumentException](newSession(MemphisConf.CollectedMaxBytes.key -> "-1"))
    assert(e.getMessage.contains(s"${MemphisConf.CollectedMaxBytes.key}=-1 is not allowed") &&
      e.getMessage.contains(MemphisConf.CollectedMaxBytes.allowed))
  }

  private def key(name: String): LineageKey = LineageKey(name * 4, s"local($name)", Nil, Seq(LocalContent(1, name)), 1)

  private val Types: Seq[DataType] = Seq(LongType)

  private def rows(n: Int): Array[InternalRow] = Array.tabulate(n)(i => InternalRow(i.toLong))

  private def request(k: LineageKey, maxBytes: Long = 1L << 20, planned: Long = System.currentTimeMillis()) =
    KeepRequest(k.hash, k, "ada", Seq(0), Types, maxBytes, planned)

  test("kept results: same lineage and types only; bounded by their budget, least value per byte first") {
    val keys = new HeldKeys
    val results = new CollectedResults(new CacheStats, (hash, _) => hash, keys)
    val now = System.currentTimeMillis()
    results.offer(request(key("a"), planned = now - 5000), rows(10), budget = 1L << 20)
    results.offer(request(key("b"), planned = now - 10), rows(10), budget = 1L << 20)
    assert(results.held == 2 && results.heldBytes > 0 && keys.size == 2)
    val a = results.lookup(key("a").hash, key("a"), Types)
    assert(a.map(_.rows.size).contains(10))
    a.foreach(results.read)
    assert(results.lookup(key("a").hash, key("a"), Seq(org.apache.spark.sql.types.IntegerType)).isEmpty)
    val other = key("a").copy(sources = Seq(LocalContent(1, "changed")))
    assert(results.lookup(key("a").hash, other, Types).isEmpty, "another lineage under the same hash")
    // Room for two: the third goes in, and "b" (cheap, never read) goes out, not "a" (dear, read once).
    val budget = results.heldBytes + results.retained.head.bytes / 2
    results.offer(request(key("c")), rows(10), budget)
    assert(results.retained.map(_.key.hash).toSet == Set(key("a").hash, key("c").hash))
    results.offer(request(key("d")), rows(10), budget = 100)
    assert(!results.retained.exists(_.key.hash == key("d").hash), "larger than the whole budget: refused")
    assert(keys.size == 2, "the keys of the results let go, and of the one refused, are let go too")
    results.releaseAll("cleared")
    assert(results.held == 0 && results.heldBytes == 0 && keys.size == 0 && keys.bytes == 0)
  }
}
