package io.memphis.durable

import java.io.File
import java.nio.file.Files

import io.memphis.conf.CacheStats
import io.memphis.conf.CacheStats.Counter
import io.memphis.lineage.{LineageKey, LocalContent}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

/** One eviction pass over a user's folder on the local filesystem: the budget, the grace period, leftovers. */
class DurableEvictionSuite extends AnyFunSuite {
  private val now = System.currentTimeMillis()
  private val old = now - DurableEviction.GraceMs - 60000

  /** An entry folder with a committed manifest of `bytes` computed in `costMs`, its data folder written `at`. */
  private def entry(folder: File, name: String, bytes: Long, costMs: Long, at: Long = now): File = {
    val key = LineageKey(name, s"Aggregate($name)", Nil, Seq(LocalContent(1, name)), 1)
    val dir = new File(folder, name)
    val data = new File(dir, s"${DurableLayout.DataPrefix}00000000-0000-0000-0000-00000000000$name")
    data.mkdirs()
    Files.write(new File(data, "part-0.parquet").toPath, new Array[Byte](bytes.toInt))
    data.setLastModified(at)
    val m = Manifest(Manifest.Format, key.hash, key.shapeHash, "ada", Manifest.lineageOf(key), "{}", 1, bytes, costMs, at,
      Seq(DataFile(s"${data.getName}/part-0.parquet", bytes, at)))
    Files.write(new File(dir, DurableLayout.ManifestName).toPath, m.toJson.getBytes("UTF-8"))
    dir
  }

  test("over the budget the entry of least compute time per byte is removed; its data stays for the grace period") {
    val folder = Files.createTempDirectory("durable-eviction").toFile
    val cheap = entry(folder, "1", bytes = 1000, costMs = 10)
    val dear = entry(folder, "2", bytes = 1000, costMs = 1000)
    val stats = new CacheStats
    new DurableEviction(new DurableFiles(new Configuration(), shared = false), stats).pass(Seq(new Path(folder.toURI)), 1500, now)
    assert(stats.get(Counter.DurableEvicted) == 1)
    assert(!new File(cheap, DurableLayout.ManifestName).exists() && new File(dear, DurableLayout.ManifestName).exists())
    assert(cheap.list().count(_.startsWith(DurableLayout.RemovedPrefix)) == 1)
    assert(cheap.list().count(_.startsWith(DurableLayout.DataPrefix)) == 1) // a query may still read it
    assert(stats.get(Counter.DurableCleaned) == 0)
  }

  test("a user's Spark results and collected rows share one budget") {
    val user = Files.createTempDirectory("durable-eviction").toFile
    val spark = new File(user, DurableLayout.SparkFolder)
    val collected = new File(user, DurableLayout.CollectedFolder)
    val dearRows = entry(collected, "1", bytes = 1000, costMs = 1000)
    val cheapParquet = entry(spark, "2", bytes = 1000, costMs = 10)
    val stats = new CacheStats
    new DurableEviction(new DurableFiles(new Configuration(), shared = false), stats)
      .pass(Seq(spark, collected).map(f => new Path(f.toURI)), 1500, now)
    assert(stats.get(Counter.DurableEvicted) == 1)
    assert(!new File(cheapParquet, DurableLayout.ManifestName).exists() && new File(dearRows, DurableLayout.ManifestName).exists())
  }

  test("data no manifest lists is deleted once it is old: removed entries' and killed writers'") {
    val folder = Files.createTempDirectory("durable-eviction").toFile
    val live = entry(folder, "1", bytes = 10, costMs = 10, at = old)
    val killed = new File(live, s"${DurableLayout.DataPrefix}killed")
    val writing = new File(live, s"${DurableLayout.DataPrefix}writing")
    Seq(killed, writing).foreach(_.mkdirs())
    killed.setLastModified(old)
    val removed = entry(folder, "2", bytes = 10, costMs = 10, at = old)
    new File(removed, DurableLayout.ManifestName).renameTo(new File(removed, s"${DurableLayout.RemovedPrefix}$old-x.json"))
    val stats = new CacheStats
    new DurableEviction(new DurableFiles(new Configuration(), shared = false), stats).pass(Seq(new Path(folder.toURI)), 1L << 30, now)
    assert(!killed.exists() && writing.exists(), "an old folder no manifest lists goes; a young one is a write in progress")
    assert(live.list().count(_.startsWith(DurableLayout.DataPrefix)) == 2) // its own data and the write in progress
    assert(!removed.exists() || removed.list().isEmpty, "the removed entry's manifest and data went after the grace period")
    assert(stats.get(Counter.DurableCleaned) == 2 && stats.get(Counter.DurableEvicted) == 0)
  }
}
