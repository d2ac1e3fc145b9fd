package io.memphis

import java.nio.file.Files
import java.util.concurrent.{Callable, ConcurrentHashMap, Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.locks.LockSupport

import io.memphis.conf.CacheStats.Counter
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.functions.{col, count, sum}
import org.apache.spark.sql.memphis.{SparkRuntime, SparkShimImpl}
import org.scalatest.funsuite.AnyFunSuite

/**
 * memphis persists on a kept clone of the user's session ([[io.memphis.cache.CachingSession]]):
 * the confs Spark's CacheManager wants for a cached plan are set there, never on the user's
 * session, which other threads read meanwhile.
 */
class CachingSessionSuite extends AnyFunSuite with LocalSessions {
  private def queries(spark: SparkSession, path: String): Seq[() => DataFrame] = {
    val t = () => spark.read.parquet(path)
    Seq(
      () => t().groupBy((col("id") % 7).as("g")).agg(sum("id")),
      () => t().groupBy((col("id") % 7).as("g")).agg(sum("id")).where(col("g") > 2),
      () => t().groupBy((col("id") % 5).as("g")).agg(count("*").as("n")),
      () => t().select((col("id") % 11).as("g")).distinct(),
      () => t().groupBy((col("id") % 5).as("g")).agg(count("*").as("n"))
        .join(t().groupBy((col("id") % 7).as("g")).agg(sum("id")), "g"))
  }

  private def answer(df: DataFrame): Seq[String] = df.collect().map(_.toString).toSeq.sorted

  test("queries on several threads while memphis persists never see the user's session conf change") {
    val spark = newSession(NoKeptResults)
    val path = Files.createTempDirectory("memphis-caching").resolve("t").toString
    spark.range(5000).write.parquet(path)
    val conf = SparkShimImpl.sqlConf(spark)
    val watched = SparkRuntime.CachedPlanPartitioningConf +: SparkShimImpl.cachedPlanConfsOff
    def read(): Map[String, Option[String]] = {
      val set = conf.getAllConfs
      watched.map(k => k -> set.get(k)).toMap
    }

    spark.conf.set("spark.memphis.enabled", "false")
    val plain = queries(spark, path).map(q => answer(q()))
    spark.conf.set("spark.memphis.enabled", "true")
    val before = read()

    val seen = ConcurrentHashMap.newKeySet[Map[String, Option[String]]]()
    val done = new AtomicBoolean(false)
    // Every 100 µs, not in a tight loop: that took a whole core of two from the queries it watches.
    val sampler = new Thread(() => while (!done.get()) { seen.add(read()); LockSupport.parkNanos(100000L) })
    sampler.start()
    val pool = Executors.newFixedThreadPool(4)
    val answers = try {
      val runs = (0 until 4).map { thread =>
        pool.submit(new Callable[Seq[(Int, Seq[String])]] {
          override def call(): Seq[(Int, Seq[String])] = (0 until 3).flatMap { round =>
            queries(spark, path).indices.map(i => (i + thread + round) % 5).map(i => i -> answer(queries(spark, path)(i)()))
          }
        })
      }
      runs.flatMap(_.get(5, TimeUnit.MINUTES))
    } finally {
      pool.shutdownNow()
      done.set(true)
      sampler.join()
    }
    seen.add(read())

    val stats = LineageCache.forContext(spark.sparkContext).stats
    assert(stats.get(Counter.Persisted) > 0 && stats.get(Counter.Hits) > 0, stats.snapshot)
    assert(seen.size == 1 && seen.contains(before), s"the user's session showed ${seen} (before: $before)")
    answers.foreach { case (i, rows) => assert(rows == plain(i), s"query $i") }
  }
}
