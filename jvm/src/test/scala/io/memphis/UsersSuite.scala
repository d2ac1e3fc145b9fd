package io.memphis

import java.nio.file.Files
import java.security.PrivilegedExceptionAction

import io.memphis.conf.CacheStats.Counter
import io.memphis.facade.LineageCache
import org.apache.hadoop.security.UserGroupInformation
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.CurrentUserContext
import org.apache.spark.sql.execution.columnar.InMemoryRelation
import org.apache.spark.sql.functions.{broadcast, col, sum}
import org.apache.spark.sql.memphis.SparkRuntime
import org.scalatest.funsuite.AnyFunSuite

/**
 * Entries belong to the user whose query produced them (`spark.memphis.shareAcrossUsers`). Users
 * are switched the two ways Spark knows: a Hadoop `doAs` (what `spark-submit --proxy-user` and
 * Hadoop-secured services use) and the Thrift server's per-statement user (`CurrentUserContext`).
 */
class UsersSuite extends AnyFunSuite with LocalSessions {
  private def as[T](user: String)(f: => T): T =
    UserGroupInformation.createRemoteUser(user).doAs(new PrivilegedExceptionAction[T] { override def run(): T = f })

  /** As the Thrift server runs a statement for a connected user. */
  private def asStatementOf[T](user: String)(f: => T): T = {
    CurrentUserContext.CURRENT_USER.set(user)
    try f finally CurrentUserContext.CURRENT_USER.remove()
  }

  private def parquet(spark: SparkSession): String = {
    val path = Files.createTempDirectory("memphis-users").resolve("t").toString
    spark.range(2000).write.parquet(path)
    path
  }

  /**
   * An aggregate over Parquet, its answer, and whether Spark read it from a cached relation (looked
   * at once it ran: a plan looked at before would count its occurrence only when it ran).
   */
  private def query(spark: SparkSession, path: String): (Seq[(Long, Long)], Boolean) = {
    val df = spark.read.parquet(path).groupBy((col("id") % 7).as("b")).agg(sum("id"))
    val answer = df.collect().map(r => r.getLong(0) -> r.getLong(1)).toSeq.sorted
    (answer, df.queryExecution.withCachedData.exists(_.isInstanceOf[InMemoryRelation]))
  }

  // Broadcasts are registered when Spark's listeners see their query end: wait for them first.
  private def stat(spark: SparkSession, counter: Counter.Value): Long = {
    SparkRuntime.awaitListeners(spark.sparkContext, 30000)
    LineageCache.forContext(spark.sparkContext).stats.get(counter)
  }

  private def owners(spark: SparkSession): Seq[(String, String)] =
    LineageCache.forContext(spark.sparkContext).entryRows(e => e.owner -> e.state.toString).sorted

  test("by default an entry serves only its owner's queries; other users compute, and keep their own") {
    val spark = newSession(NoKeptResults)
    val path = parquet(spark)
    assert(as("alice")(spark.sql("SELECT current_user()").head().getString(0)) == "alice")
    assert(asStatementOf("carol")(spark.sql("SELECT current_user()").head().getString(0)) == "carol")

    val alice = (1 to 3).map(_ => as("alice")(query(spark, path)))
    assert(alice.map(_._2) == Seq(false, true, true), "persisted at the 2nd occurrence, then served")
    assert(stat(spark, Counter.Hits) == 1)

    val bob = (1 to 3).map(_ => as("bob")(query(spark, path)))
    assert(!bob.head._2, "alice's cached relation is not substituted into bob's plan")
    assert(bob.map(_._2) == Seq(false, true, true), "bob's own entry, persisted at his 2nd occurrence")
    assert(stat(spark, Counter.Hits) == 2, "one hit of bob's own entry, none of alice's")
    assert(stat(spark, Counter.RefusedOtherUser) == 3, "each of bob's occurrences, while alice held hers")
    assert(owners(spark) == Seq("alice" -> "materialized", "bob" -> "materialized"))
    assert(spark.sql("SELECT owner FROM memphis_cache()").collect().map(_.getString(0)).sorted.toSeq == Seq("alice", "bob"))

    val carol = asStatementOf("carol")(query(spark, path))
    assert(!carol._2 && stat(spark, Counter.RefusedOtherUser) == 4)

    spark.conf.set("spark.memphis.enabled", "false")
    val plain = query(spark, path)._1
    assert((alice ++ bob :+ carol).forall(_._1 == plain))
  }

  test("a kept shuffle and a join broadcast serve only their owner's queries") {
    val spark = newSession("spark.memphis.reuse.minOccurrences" -> "1000") // nothing persisted: only shuffles and broadcasts
    val path = parquet(spark)
    as("alice")(query(spark, path))
    as("bob")(query(spark, path))
    val kept = LineageCache.forContext(spark.sparkContext).entryRows(e => e.owner -> e.firstShuffles.size).sorted
    assert(kept == Seq("alice" -> 1, "bob" -> 1), "each user's first occurrence keeps its own shuffle")

    def join(i: Int): Seq[(Long, Long)] = spark.range(20000).where(col("id") % 7 =!= i).withColumn("k", col("id") % 500)
      .join(broadcast(spark.range(500).select(col("id").as("k"), (col("id") % 5).as("g"))), "k")
      .groupBy("g").agg(sum("id")).collect().map(r => r.getLong(0) -> r.getLong(1)).toSeq.sorted
    val reused = () => stat(spark, Counter.BroadcastsReused)
    val first = Seq(as("alice")(join(0)), as("bob")(join(1)))
    assert(stat(spark, Counter.BroadcastsSeen) == 2, "bob's first build is his own, not a second of alice's")
    val second = Seq(as("alice")(join(2)), as("bob")(join(3)))
    assert(reused() == 0 && stat(spark, Counter.BroadcastsRegistered) == 2, "each keeps their own, at its second build")
    val again = Seq(as("alice")(join(4)), as("bob")(join(5)))
    assert(reused() == 2, "each reads their own")
    spark.conf.set("spark.memphis.enabled", "false")
    assert(first ++ second ++ again == (0 to 5).map(join))
  }

  test("with shareAcrossUsers=true one entry serves every user") {
    val spark = newSession("spark.memphis.shareAcrossUsers" -> "true", NoKeptResults)
    val path = parquet(spark)
    val alice = (1 to 2).map(_ => as("alice")(query(spark, path)))
    val bob = as("bob")(query(spark, path))
    assert(bob._2 && stat(spark, Counter.Hits) == 1 && stat(spark, Counter.RefusedOtherUser) == 0)
    assert(owners(spark) == Seq("alice" -> "materialized"))
    spark.conf.set("spark.memphis.enabled", "false")
    assert((alice :+ bob).forall(_._1 == query(spark, path)._1))
  }

  test("shareAcrossUsers is checked at session start and cannot change at run time") {
    val e = intercept[IllegalArgumentException](newSession("spark.memphis.shareAcrossUsers" -> "maybe"))
    assert(e.getMessage.contains("spark.memphis.shareAcrossUsers=maybe") && e.getMessage.contains("a boolean (true or false)"))
    afterEach()
    val spark = newSession()
    val refused = intercept[Exception](spark.conf.set("spark.memphis.shareAcrossUsers", "true"))
    assert(refused.getMessage.contains("spark.memphis.shareAcrossUsers"), refused.getMessage)
    assert(!LineageCache.forContext(spark.sparkContext).shareAcrossUsers)
  }
}
