package io.memphis

import io.memphis.cache.{Admission, CacheEntry, EntryState}
import io.memphis.conf.{CacheStats, MemphisConf}
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.catalyst.plans.{Inner, LeftSemi}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Join, LogicalPlan, Union}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.{CacheTestShim, SparkRuntime, SparkShimImpl}
import org.scalatest.funsuite.AnyFunSuite

/** What memphis refuses to persist, and the entries that made a query slower. */
class AdmissionSuite extends AnyFunSuite with LocalSessions {
  private def views(spark: SparkSession): Unit = {
    spark.range(0, 200000).selectExpr("id % 1000 AS k", "id AS v").createOrReplaceTempView("a")
    spark.range(0, 20000).selectExpr("id % 1000 AS k", "id % 10 AS x").createOrReplaceTempView("b")
    spark.range(0, 1000).selectExpr("id AS k", "id % 3 AS y").createOrReplaceTempView("c")
  }

  private def analyzed(spark: SparkSession, sql: String): LogicalPlan = spark.sql(sql).queryExecution.analyzed

  private def joins(plan: LogicalPlan): Seq[Join] = plan.collect { case j: Join => j }

  /** The joins without a condition that computing `plans` on their own runs (as the optimizer plans them). */
  private def conditionless(spark: SparkSession, plans: Seq[LogicalPlan]): Seq[LogicalPlan] =
    plans.flatMap(p => SparkShimImpl.optimize(spark, p).collect { case j: Join if j.condition.isEmpty => j })

  test("a comma join's analyzed join has no condition; the same join written with ON has one") {
    val spark = newSession()
    views(spark)
    val comma = joins(analyzed(spark, "SELECT sum(v) FROM a, b WHERE a.k = b.k"))
    assert(comma.size == 1 && Admission.isConditionlessJoin(comma.head))
    val on = joins(analyzed(spark, "SELECT sum(v) FROM a JOIN b ON a.k = b.k"))
    assert(on.size == 1 && !Admission.isConditionlessJoin(on.head))
  }

  test("the filters a query moves into its subplan: on a grouping column, through a join, a union branch ruled out") {
    val spark = newSession()
    views(spark)
    spark.sql("SELECT k, sum(v) AS total FROM a GROUP BY k").createOrReplaceTempView("per_k")
    spark.sql("SELECT 's' AS t, k, sum(v) AS s FROM a GROUP BY k UNION ALL SELECT 'w' AS t, k, sum(x) AS s FROM b GROUP BY k")
      .createOrReplaceTempView("both")
    def reaching(sql: String, subplan: LogicalPlan => LogicalPlan): Seq[String] = {
      val query = analyzed(spark, sql)
      Admission.narrowingFilters(spark, query)(subplan(query))
    }
    val perK = (q: LogicalPlan) => q.collectFirst { case agg: Aggregate => agg }.get
    assert(reaching("SELECT * FROM per_k WHERE k = 5", perK).exists(_.contains("= 5")))
    assert(reaching("SELECT * FROM per_k WHERE total > 100", perK).isEmpty, "a filter on what it computes stays above")
    spark.range(0, 3000).selectExpr("id % 1000 AS k", "id AS z").createOrReplaceTempView("e")
    assert(reaching("SELECT p.k, total, z FROM per_k p JOIN e ON p.k = e.k WHERE e.z < 500", perK).isEmpty,
      "another input's filter does not reach it")
    assert(reaching("SELECT p.k, total, y FROM per_k p JOIN c ON p.k = c.k WHERE c.k = 7", perK).exists(_.contains("= 7")),
      "the join carries the key's filter over")
    // c.y is c.k % 3: the optimizer infers (k % 3) = 1 for the aggregate's keys too.
    assert(reaching("SELECT p.k, total, y FROM per_k p JOIN c ON p.k = c.k WHERE c.y = 1", perK).exists(_.contains("% 3")))
    val union = (q: LogicalPlan) => q.collectFirst { case u: Union => u }.get
    assert(reaching("SELECT * FROM both WHERE t = 's'", union).exists(_.startsWith("it reads no column")))
    assert(reaching("SELECT * FROM both", union).isEmpty)
  }

  test("estimates: a key join is its two sides, a semi join its left, a condition-less join their product") {
    val spark = newSession()
    views(spark)
    def estimate(sql: String): BigInt = Admission.estimatedBytes(SparkShimImpl.optimize(spark, analyzed(spark, sql)))
    val a = estimate("SELECT k, v FROM a")
    val b = estimate("SELECT k, x FROM b")
    assert(a > 0 && b > 0)
    assert(estimate("SELECT a.k, v, x FROM a JOIN b ON a.k = b.k") == a + b)
    assert(estimate("SELECT a.k, v FROM a LEFT SEMI JOIN b ON a.k = b.k") == a)
    assert(estimate("SELECT a.k, v, x FROM a CROSS JOIN b") == a * b)
    // Spark's own estimate makes the key join a product too: the reason for memphis's own.
    assert(SparkShimImpl.optimize(spark, analyzed(spark, "SELECT a.k, v, x FROM a JOIN b ON a.k = b.k")).stats.sizeInBytes > (a + b) * 1000)
    // A scan of Parquet files: their bytes, as Spark estimates them, times what Spark's column batches take more.
    val dir = java.nio.file.Files.createTempDirectory("memphis-estimate").resolve("t").toString
    spark.range(0, 20000).selectExpr("id % 7 AS k", "id AS v").write.parquet(dir)
    val files = new java.io.File(dir).listFiles().filter(_.getName.endsWith(".parquet")).map(_.length).sum
    assert(estimate(s"SELECT k, v FROM parquet.`$dir`") == BigInt(files) * Admission.ColumnarFileExpansion)
  }

  test("comma joins repeated: answers as plain Spark's, no condition-less join cached, refusals counted") {
    val spark = newSession(NoKeptResults)
    views(spark)
    val queries = Seq(
      "SELECT count(*) FROM a, b WHERE a.k = b.k AND b.x < 5",
      "SELECT sum(v) FROM a, b WHERE a.k = b.k AND b.x > 7",
      "SELECT sum(v), count(*) FROM a, b, c WHERE a.k = b.k AND b.k = c.k AND c.y = 1",
      "SELECT max(v) FROM a, b, c WHERE a.k = b.k AND b.k = c.k AND c.y = 2",
      "SELECT sum(x) FROM a CROSS JOIN b WHERE a.k = b.k AND a.v < 1000",
      "SELECT sum(x) FROM a CROSS JOIN b WHERE a.k = b.k AND a.v < 2000",
      "WITH j AS (SELECT a.k, v, x FROM a, b WHERE a.k = b.k) SELECT (SELECT sum(v) FROM j WHERE x = 1), (SELECT sum(v) FROM j WHERE x = 2)")
    val on = queries.flatMap(q => Seq(spark.sql(q).collect().toSeq, spark.sql(q).collect().toSeq))
    val stats = LineageCache.forContext(spark.sparkContext).stats
    assert(stats.get(CacheStats.Counter.RefusedCrossJoin) > 0)
    val cached = CacheTestShim.cachedPlans(spark)
    assert(cached.nonEmpty && conditionless(spark, cached).isEmpty, cached)
    spark.conf.set(MemphisConf.Enabled.key, "false")
    val off = queries.flatMap(q => Seq(spark.sql(q).collect().toSeq, spark.sql(q).collect().toSeq))
    assert(on == off)
  }

  test("an entry whose output is estimated beyond its share of the storage memory is refused, with its reason") {
    val spark = newSession(MemphisConf.StorageFraction.key -> "0.0001", NoKeptResults)
    views(spark)
    val q = "SELECT k, count(*), sum(v) FROM a GROUP BY k"
    val on = Seq.fill(3)(spark.sql(q).collect().toSet)
    val cache = LineageCache.forContext(spark.sparkContext)
    assert(cache.stats.get(CacheStats.Counter.RefusedEstimatedSize) > 0)
    assert(cache.stats.get(CacheStats.Counter.Persisted) == 0)
    assert(cache.entryRows(_.reason).exists(_.contains("exceeds its share")), cache.entryRows(_.reason))
    spark.conf.set(MemphisConf.Enabled.key, "false")
    assert(on.forall(_ == spark.sql(q).collect().toSet))
  }

  test("an entry that made its query slower than without it is let go and refused from then on; a slow fill is not judged") {
    val spark = newSession(NoKeptResults)
    views(spark)
    val q = "SELECT k, count(*) AS n FROM a GROUP BY k"
    val cache = LineageCache.forContext(spark.sparkContext)
    Seq.fill(2)(spark.sql(q).collect())
    SparkRuntime.awaitListeners(spark.sparkContext, 30000) // the 2nd run filled the entry: stored now
    def held: Seq[CacheEntry] = cache.entryRows(identity).filter(e => EntryState.Holding.contains(e.state))
    assert(held.map(_.state) == Seq(EntryState.Materialized))
    val entry = held.head
    val consumer = entry.consumers.head
    // As the listener reports them: the query took 100 ms on its own, then 5 s filling an entry (one
    // persisted by it, not stored yet): the fill is paid once, so it is not judged.
    cache.events.executionPlanned(-10, consumer, 0, Set.empty)
    cache.events.executionEnded(-10, 100, failed = false)
    val filling = new CacheEntry("filling", entry.key, entry.owner, 0)
    filling.moveTo(EntryState.ToPersist, "persisted by the execution below")
    cache.events.executionPlanned(-12, consumer, 0, Set(entry, filling))
    cache.events.executionEnded(-12, 5000, failed = false)
    assert(cache.stats.get(CacheStats.Counter.RefusedSlower) == 0 && entry.refusal.isEmpty && filling.refusal.isEmpty)
    // Then 5 s reading the stored entry alone.
    cache.events.executionPlanned(-11, consumer, 0, Set(entry))
    cache.events.executionEnded(-11, 5000, failed = false)
    assert(cache.stats.get(CacheStats.Counter.RefusedSlower) == 1)
    assert(entry.state == EntryState.Evicted && entry.reason.contains("not persisted again"), entry.reason)
    val hits = cache.stats.get(CacheStats.Counter.Hits)
    val persisted = cache.stats.get(CacheStats.Counter.Persisted)
    val again = Seq.fill(2)(spark.sql(q).collect().toSet)
    assert(cache.stats.get(CacheStats.Counter.Hits) == hits && cache.stats.get(CacheStats.Counter.Persisted) == persisted)
    assert(cache.stats.get(CacheStats.Counter.RefusedSlower) >= 2)
    spark.conf.set(MemphisConf.Enabled.key, "false")
    assert(again.forall(_ == spark.sql(q).collect().toSet))
  }

  test("a join is a broadcast join when a side it may build from is small or hinted, and not hinted against") {
    val spark = newSession()
    views(spark)
    def broadcasts(sql: String): Boolean = Admission.broadcastsASide(SparkShimImpl.optimize(spark, analyzed(spark, sql)), SQLConf.get)
    assert(broadcasts("SELECT a.k, v, x FROM a JOIN b ON a.k = b.k"))
    assert(broadcasts("SELECT a.k, v, x FROM a LEFT JOIN b ON a.k = b.k"))
    assert(!broadcasts("SELECT a.k, v FROM a FULL OUTER JOIN b ON a.k = b.k")) // Spark broadcasts no side of a full join
    assert(!broadcasts("SELECT k, v FROM a"))
    assert(!broadcasts("SELECT /*+ SHUFFLE_HASH(a, b) */ a.k, v, x FROM a JOIN b ON a.k = b.k"))
    spark.conf.set(SQLConf.AUTO_BROADCASTJOIN_THRESHOLD.key, "-1")
    assert(!broadcasts("SELECT a.k, v, x FROM a JOIN b ON a.k = b.k"))
    assert(broadcasts("SELECT /*+ BROADCAST(b) */ a.k, v, x FROM a JOIN b ON a.k = b.k"))
  }

  test("a recurring join that broadcasts a side is not persisted (refused_broadcast_join); shuffled, it is") {
    val queries = Seq(
      "SELECT x, count(*) FROM a JOIN b ON a.k = b.k GROUP BY x",
      "SELECT x, sum(v) FROM a JOIN b ON a.k = b.k GROUP BY x",
      "SELECT max(v), min(x) FROM a JOIN b ON a.k = b.k")
    /** The answers, whether a cached plan holds a join, the broadcast joins refused and the entries' reasons. */
    def run(threshold: String): (Seq[Seq[Row]], Boolean, Long, Seq[String]) = {
      val spark = newSession(NoKeptResults, SQLConf.AUTO_BROADCASTJOIN_THRESHOLD.key -> threshold)
      views(spark)
      def answers = queries.map(q => spark.sql(q).collect().toSeq.sortBy(_.toString))
      val on = answers
      val cache = LineageCache.forContext(spark.sparkContext)
      val cachesAJoin = CacheTestShim.cachedPlans(spark).exists(p => joins(p).nonEmpty)
      val result = (on, cachesAJoin, cache.stats.get(CacheStats.Counter.RefusedBroadcastJoin), cache.entryRows(_.reason))
      spark.conf.set(MemphisConf.Enabled.key, "false")
      assert(on == answers)
      afterEach() // the next run gets a context of its own
      result
    }
    val (broadcastOn, broadcastCachesAJoin, broadcastRefused, reasons) = run("10MB")
    assert(broadcastRefused > 0 && !broadcastCachesAJoin)
    assert(reasons.exists(_.contains("broadcasts a side")), reasons)
    val (shuffledOn, shuffledCachesAJoin, shuffledRefused, shuffledReasons) = run("-1")
    assert(shuffledRefused == 0 && shuffledCachesAJoin, s"the entries' reasons: $shuffledReasons")
    assert(broadcastOn == shuffledOn)
  }
}
