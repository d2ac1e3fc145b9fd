package io.memphis

import io.memphis.conf.CacheStats
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{SparkSession, SparkSessionExtensions}
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{ExpressionInfo, Literal}
import org.apache.spark.sql.memphis.{CacheTestShim, SparkRuntime, SparkShimImpl}
import org.scalatest.funsuite.AnyFunSuite

/** Another extension, to check that memphis keeps what else `spark.sql.extensions` names. */
class OtherTestExtension extends (SparkSessionExtensions => Unit) {
  override def apply(e: SparkSessionExtensions): Unit =
    e.injectFunction((FunctionIdentifier("other_extension_fn"),
      new ExpressionInfo(classOf[OtherTestExtension].getName, "other_extension_fn"), _ => Literal(42)))
}

class MemphisExtensionSuite extends AnyFunSuite with LocalSessions {
  private def statsBySql(spark: SparkSession): Map[String, Long] =
    spark.sql("SELECT name, value FROM memphis_stats()").collect()
      .map(r => r.getString(0) -> r.getLong(1)).toMap

  /** The budget, once the block manager has reported its memory (shortly after the context starts). */
  private def awaitBudget(spark: SparkSession): Long = {
    val deadline = System.currentTimeMillis() + 30000
    while (statsBySql(spark)("storage_budget_bytes") == 0 && System.currentTimeMillis() < deadline) Thread.sleep(100)
    val budget = statsBySql(spark)("storage_budget_bytes")
    assert(budget > 0)
    budget
  }

  test("memphis_stats() answers from SQL and the Python facade alike") {
    val spark = newSession()
    awaitBudget(spark)
    val bySql = statsBySql(spark)
    val places = Set("bytes_held_storage", "storage_budget_bytes", "bytes_held_driver_heap", "driver_heap_budget_bytes",
      "join_broadcast_budget_bytes", "bytes_held_results", "bytes_held_local_disk", "local_disk_budget_bytes")
    assert(bySql.keySet == CacheStats.Counter.values.map(_.toString).toSet ++ places + "bytes_held" +
      "bytes_held_join_broadcasts" + "driver_heap_used_bytes" + "driver_heap_max_bytes" + "durable_writes_pending")
    assert(CacheStats.Counter.values.toSeq.forall(c => bySql(c.toString) == 0L))
    assert(Seq("storage_budget_bytes", "driver_heap_budget_bytes", "local_disk_budget_bytes").forall(bySql(_) > 0L))
    // Measured figures (heap in use, free disk) move between two calls; the counters do not.
    val json = PythonFacade.statsJson(spark)
    CacheStats.Counter.values.foreach(c => assert(json.contains(s""""$c": ${bySql(c.toString)}"""), json))
  }

  test("counters bumped on the JVM cache show in memphis_stats()") {
    val spark = newSession()
    val cache = LineageCache.forContext(spark.sparkContext)
    cache.stats.add(CacheStats.Counter.Hits, 3)
    assert(statsBySql(spark)("hits") == 3L)
    assert(LineageCache.forContext(spark.sparkContext) eq cache)
  }

  test("memphis_stats() rejects arguments") {
    val spark = newSession()
    val e = intercept[Exception](spark.sql("SELECT * FROM memphis_stats(1)").collect())
    assert(e.getMessage.contains("takes no arguments"))
  }

  test("the storage budget follows storage.fraction and storage.maxBytes") {
    val spark = newSession()
    spark.conf.set("spark.memphis.storage.fraction", "1")
    val full = awaitBudget(spark)
    spark.conf.set("spark.memphis.storage.fraction", "0.5")
    assert(statsBySql(spark)("storage_budget_bytes") == (full * 0.5).toLong)
    spark.conf.set("spark.memphis.storage.maxBytes", "1m")
    assert(statsBySql(spark)("storage_budget_bytes") == (1L << 20))
  }

  test("a bad spark.memphis value stops the session from starting") {
    val e = intercept[IllegalArgumentException](newSession("spark.memphis.storage.fraction" -> "1.5"))
    assert(e.getMessage.contains("spark.memphis.storage.fraction=1.5"))
    assert(e.getMessage.contains("greater than 0 and at most 1"))
  }

  test("an unknown spark.memphis key stops the session from starting") {
    val e = intercept[IllegalArgumentException](newSession("spark.memphis.enable" -> "false"))
    assert(e.getMessage.contains("unknown memphis key"))
  }

  test("spark.conf.set rejects a bad value at run time and keeps the old one") {
    val spark = newSession()
    val e = intercept[IllegalArgumentException](spark.conf.set("spark.memphis.enabled", "maybe"))
    assert(e.getMessage.contains("spark.memphis.enabled") && e.getMessage.contains("maybe"))
    assert(e.getMessage.contains("a boolean (true or false)"))
    assert(spark.conf.get("spark.memphis.enabled") == "true")
  }

  test("other extensions named in spark.sql.extensions keep working") {
    val spark = newSession("spark.sql.extensions" -> s"${classOf[OtherTestExtension].getName},$Extension")
    assert(spark.sql("SELECT other_extension_fn()").head().getInt(0) == 42)
    assert(statsBySql(spark).contains("hits"))
  }

  test("a broadcast join's broadcast is built once across queries, adaptive or not") {
    val spark = newSession()
    import org.apache.spark.sql.functions.{broadcast, col, sum}
    Seq("true", "false").foreach { adaptive =>
      spark.conf.set("spark.sql.adaptive.enabled", adaptive)
      PythonFacade.clear(spark)
      val before = statsBySql(spark)
      // Different fact filters (not on the join key, which the optimizer would copy to the build side):
      // only the dimension's broadcast recurs, no cached subplan serves a query.
      def query(i: Int) = spark.range(20000).where(col("id") % 7 =!= i).withColumn("k", col("id") % 500)
        .join(broadcast(spark.range(500).select(col("id").as("k"), (col("id") % 5).as("g"))), "k")
        .groupBy("g").agg(sum("id"))
      val answers = (0 until 4).map(i => query(i).collect().toSeq.sortBy(_.getLong(0)))
      val after = statsBySql(spark)
      // Seen at its first build, kept at its second, read by the other two.
      assert(after("broadcasts_seen") - before("broadcasts_seen") == 1, adaptive)
      assert(after("broadcasts_registered") - before("broadcasts_registered") == 1, adaptive)
      assert(after("broadcasts_reused") - before("broadcasts_reused") == 2, adaptive)
      assert(after("bytes_held_join_broadcasts") > 0)
      spark.conf.set("spark.memphis.enabled", "false")
      assert((0 until 4).map(i => query(i).collect().toSeq.sortBy(_.getLong(0))) == answers, adaptive)
      assert(statsBySql(spark)("bytes_held_join_broadcasts") == 0, "memphis off releases them")
      spark.conf.set("spark.memphis.enabled", "true")
    }
  }

  test("subplans are cached with one kept session that follows the user's conf, which memphis never changes") {
    val spark = newSession(NoKeptResults)
    val partitioning = SparkRuntime.CachedPlanPartitioningConf
    val userValue = spark.conf.getOption(partitioning) // its default differs between Spark lines
    def aggregate(m: Int) = spark.range(20000).selectExpr(s"id % $m AS g", "id AS v").groupBy("g").sum("v")
    def answers(ms: Seq[Int]) = ms.map(m => aggregate(m).collect().toSet)
    val plain = { spark.conf.set("spark.memphis.enabled", "false"); try answers(3 to 8) finally spark.conf.set("spark.memphis.enabled", "true") }
    val ms = 3 to 6
    assert(Seq.fill(3)(answers(ms)).forall(_ == plain.take(ms.size)))  // the second occurrence persists, the third reads
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    assert(Seq.fill(3)(answers(7 to 8)).forall(_ == plain.drop(ms.size)))
    val sessions = CacheTestShim.cachedPlanSessions(spark)
    assert(sessions.size == 6 && sessions.forall(_ eq sessions.head) && !(sessions.head eq spark), sessions)
    val cachingConf = SparkShimImpl.sqlConf(sessions.head)
    assert(cachingConf.numShufflePartitions == 3 && cachingConf.getConfString(partitioning) == "true")
    assert(SparkShimImpl.cachedPlanConfsOff.forall(cachingConf.getConfString(_) == "false"))
    assert(spark.conf.getOption(partitioning) == userValue, "the user's session keeps its own value")
  }

  test("a relation Spark re-caches when a write refreshes its path is let go; answers follow the files") {
    val spark = newSession(NoKeptResults)
    val dir = java.nio.file.Files.createTempDirectory("memphis-refresh").resolve("t").toString
    spark.range(100).write.parquet(dir)
    def total(): Long = spark.read.parquet(dir).selectExpr("id % 3 AS b").groupBy("b").count().collect().map(_.getLong(1)).sum
    val stats = LineageCache.forContext(spark.sparkContext).stats
    assert(Seq.fill(3)(total()) == Seq(100, 100, 100) && stats.get(CacheStats.Counter.Hits) == 1)
    assert(CacheTestShim.cachedPlans(spark).size == 1)
    // Spark's own append re-caches every cached plan over the path (CacheManager.recacheByPath): the
    // relation memphis persisted is replaced by one it does not know of.
    spark.range(100, 130).write.mode("append").parquet(dir)
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    val after = total()
    assert(CacheTestShim.cachedPlans(spark).isEmpty, "Spark holds no relation memphis let go")
    spark.conf.set("spark.memphis.enabled", "false")
    try assert(after == total() && after == 130) finally spark.conf.set("spark.memphis.enabled", "true")
  }

  test("a jar accepts its own Spark line only") {
    val line = SparkRuntime.BuiltForLine
    assert(org.apache.spark.SPARK_VERSION.startsWith(line + "."), "the build's line is the Spark it compiled against")
    assert(SparkRuntime.unsupportedSparkReason(s"$line.0").isEmpty)
    assert(SparkRuntime.unsupportedSparkReason(s"$line.9").isEmpty)
    assert(SparkRuntime.unsupportedSparkReason("3.4.0").exists(_.contains(s"built for Spark $line.x but this is Spark 3.4.0")))
    assert(SparkRuntime.unsupportedSparkReason(s"${line}0.0").nonEmpty)
    val builtScala = SparkRuntime.BuiltForScala
    assert(builtScala.nonEmpty && scala.util.Properties.versionNumberString.startsWith(builtScala + "."))
    val other = if (builtScala == "2.12") "2.13" else "2.12"
    assert(SparkRuntime.unsupportedSparkReason(s"$line.0", s"$other.18").exists(
      _.contains(s"built for Scala $builtScala but this Spark runs Scala $other.18; use memphis-spark-${line}_$other")))
  }
}
