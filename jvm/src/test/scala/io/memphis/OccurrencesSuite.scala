package io.memphis

import java.nio.file.Files

import io.memphis.cache.Executions
import io.memphis.conf.CacheStats
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.functions.{col, sum}
import org.apache.spark.sql.memphis.SparkRuntime
import org.scalatest.funsuite.AnyFunSuite

/**
 * An occurrence is counted once per executed query: a plan only looked at (explain, the optimized
 * or executed plan) counts nothing, and counts when that very plan runs.
 */
class OccurrencesSuite extends AnyFunSuite with LocalSessions {
  private def parquet(spark: SparkSession): String = {
    val path = Files.createTempDirectory("memphis-occurrences").resolve("t").toString
    spark.range(2000).write.parquet(path)
    path
  }

  /** An aggregate over Parquet: the query's one candidate subplan. */
  private def query(spark: SparkSession, path: String): DataFrame =
    spark.read.parquet(path).groupBy((col("id") % 7).as("b")).agg(sum("id"))

  /** The entries' occurrences and states, once Spark's listeners have seen every execution end. */
  private def entries(spark: SparkSession): Seq[(Int, String)] = {
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    LineageCache.forContext(spark.sparkContext).entryRows(e => e.occurrences -> e.state.toString)
  }

  private def misses(spark: SparkSession): Long = LineageCache.forContext(spark.sparkContext).stats.get(CacheStats.Counter.Misses)

  private def rows(df: DataFrame): Seq[(Long, Long)] = df.collect().map(r => r.getLong(0) -> r.getLong(1)).toSeq.sorted

  test("explain and a look at a query's plans count nothing; that DataFrame's run then counts one occurrence") {
    val spark = newSession()
    val path = parquet(spark)
    val df = query(spark, path)
    df.explain()
    query(spark, path).queryExecution.optimizedPlan
    query(spark, path).queryExecution.executedPlan
    spark.sql(s"EXPLAIN SELECT id % 7 AS b, sum(id) FROM parquet.`$path` GROUP BY 1").collect()
    assert(entries(spark).isEmpty && misses(spark) == 0, "only planned: nothing seen")

    val answer = rows(df)
    assert(entries(spark) == Seq(1 -> "seen"), "the explained plan ran: its first occurrence")
    assert(rows(df) == answer && entries(spark) == Seq(1 -> "seen"), "one DataFrame plans once, however often it runs")
    assert(misses(spark) == 1)

    assert(rows(query(spark, path)) == answer && entries(spark) == Seq(2 -> "materialized"), "persisted on the 2nd run")
    assert(rows(query(spark, path)) == answer && entries(spark) == Seq(3 -> "materialized"))
    spark.conf.set("spark.memphis.enabled", "false")
    assert(rows(query(spark, path)) == answer)
  }

  test("a held entry is served to a plan only looked at, without counting a hit until it runs") {
    val spark = newSession(NoKeptResults)
    val path = parquet(spark)
    Seq.fill(2)(rows(query(spark, path)))
    val stats = LineageCache.forContext(spark.sparkContext).stats
    val df = query(spark, path)
    assert(df.queryExecution.executedPlan.toString.contains("In-memory table memphis"), "explain shows what a run reads")
    assert(entries(spark).map(_._1) == Seq(2) && stats.get(CacheStats.Counter.Hits) == 0)
    rows(df)
    assert(entries(spark).map(_._1) == Seq(3) && stats.get(CacheStats.Counter.Hits) == 1, "counted once its run ended")
  }

  test("a plan made under a Spark Connect ExecutePlan operation counts at once: Connect plans before the execution starts") {
    val spark = newSession()
    val path = parquet(spark)
    val operation = Executions.ConnectOperationTag + "User_u_Session_s_Operation_o"
    spark.sparkContext.addJobTag(operation)
    try query(spark, path).queryExecution.executedPlan finally spark.sparkContext.removeJobTag(operation)
    assert(entries(spark) == Seq(1 -> "seen"))
  }
}
