package io.memphis.lineage

import java.nio.file.Files

import org.apache.spark.sql.{Dataset, SparkSession}
import org.apache.spark.sql.memphis.SparkShim
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/** Delta sources: keys follow the table version; a time-travel read stays pinned. */
class DeltaKeySuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = SparkSession.builder().master("local[2]").appName("delta-keys")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "4")
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .getOrCreate()
  private lazy val path = Files.createTempDirectory("memphis-delta").resolve("table").toString

  override def afterAll(): Unit = spark.stop()

  private def key(df: Dataset[_]): LineageKey =
    LineageKey.of(SparkShim.analyzedPlan(df), SparkShim.keyContext(spark))
      .fold(reason => fail(s"no key: $reason"), identity)

  private def latest = spark.read.format("delta").load(path)
  private def pinned(version: Long) = spark.read.format("delta").option("versionAsOf", version).load(path)

  test("an append by another session changes the key of a latest read, not of a pinned one") {
    spark.range(100).write.format("delta").save(path)
    val before = key(latest.where("id > 10"))
    val v0 = key(pinned(0).where("id > 10"))
    assert(before.hash == v0.hash, "version 0 is the latest: same data, same key")
    assert(before.allSources.head.describe.contains("version 0"))

    spark.newSession().range(100, 150).write.format("delta").mode("append").save(path)
    assert(!before.sourcesUnchanged, "the latest read's source changed")
    assert(key(pinned(0).where("id > 10")).sourcesUnchanged)
    val after = key(latest.where("id > 10"))
    assert(after.hash != before.hash)
    assert(key(pinned(0).where("id > 10")).hash == v0.hash, "a pinned read keeps its key")
    assert(key(pinned(1).where("id > 10")).hash == after.hash)
    assert(latest.count() == 150 && pinned(0).count() == 100)
  }

  test("an overwrite changes the key") {
    val before = key(latest)
    spark.range(7).write.format("delta").mode("overwrite").save(path)
    assert(key(latest).hash != before.hash)
  }
}
