package io.memphis.durable

import io.memphis.durable.Manifest.{Refused, Serve, Stale, Verdict}
import io.memphis.lineage.{LineageKey, LocalContent, TableVersion}
import org.apache.spark.sql.catalyst.expressions.AttributeReference
import org.apache.spark.sql.types.{ArrayType, LongType, StringType}
import org.scalatest.funsuite.AnyFunSuite

/** The durable tier's manifests, their checks and its folder names, on plain values: no Spark session, no files. */
class DurableManifestSuite extends AnyFunSuite {
  private def table(version: String) = TableVersion("t.Class", "table-1", version)(() => None)
  private def key(version: String, hash: String): LineageKey = {
    val scan = LineageKey(s"scan-$hash", "table(out=[long])", Nil, Seq(table(version)), 1)
    LineageKey(hash, "Aggregate(c0.0,[alias(sum(c0.0))])", Seq(scan), Seq(LocalContent(2, "abc")), 2)
  }
  private val current = key("7", "k7")
  private val output = Seq(AttributeReference("k", LongType, nullable = false)(), AttributeReference("tags", ArrayType(StringType))())
  private val data = "data-0123abcd-0000-0000-0000-000000000000"
  private val file = DataFile(s"$data/part-00000.parquet", 1200, 1700000000000L)
  private val written = Manifest(Manifest.Format, current.hash, current.shapeHash, "ada", Manifest.lineageOf(current),
    Manifest.schemaOf(output).json, 10, 1200, 450, 1700000000001L, Seq(file))
  private val seen = Map(file.path -> FileSeen(1200, 1700000000000L, ownedByUser = true))

  private def verdict(m: Manifest = written, k: LineageKey = current, user: String = "ada", shared: Boolean = false,
      manifestOwned: Boolean = true, files: Map[String, FileSeen] = seen): Verdict =
    Manifest.verdict(m, k, Manifest.Format, Manifest.schemaOf(output).json, user, shared, manifestOwned, files)

  private def refusal(v: Verdict): (String, Boolean) = v match {
    case Refused(why, remove) => (why, remove)
    case other => fail(s"expected a refusal, got $other")
  }

  test("a manifest survives its JSON; a truncated or foreign text is not a manifest") {
    val text = written.toJson
    assert(Manifest.parse(text) == Right(written))
    assert(Manifest.parse(text.take(text.length / 2)).isLeft)
    assert(Manifest.parse("""{"format": "x"}""").isLeft)
    assert(Manifest.parse(text.replace("\"cost_ms\" : 450", "\"cost_ms\" : \"450\"")).isLeft)
  }

  test("the same plan over the same sources is served") {
    assert(verdict() == Serve(written))
    assert(verdict(user = "grace", shared = true) == Serve(written))
  }

  test("the same plan over a source that changed has the same shape and another key: stale") {
    val changed = key("8", "k8")
    assert(changed.shapeHash == current.shapeHash && changed.hash != current.hash)
    assert(verdict(k = changed).isInstanceOf[Stale])
    // Another source, or another plan, is another shape: another folder, never this entry.
    assert(LineageKey("k7", "Aggregate(other)", current.children, current.sources, 2).shapeHash != current.shapeHash)
    assert(LineageKey("k7", current.local, Seq(current.children.head.copy(sources = Seq(TableVersion("t.Class", "table-2", "7")(() => None)))),
      current.sources, 2).shapeHash != current.shapeHash)
  }

  test("another user's entry is refused and left alone, unless entries are shared") {
    assert(refusal(verdict(user = "grace")) match { case (why, remove) => why.contains("ada") && !remove })
    assert(!refusal(verdict(manifestOwned = false))._2)
    assert(!refusal(verdict(files = Map(file.path -> FileSeen(1200, 1700000000000L, ownedByUser = false))))._2)
    assert(verdict(manifestOwned = false, shared = true) == Serve(written))
  }

  test("a broken entry of this user is refused and removed") {
    val tampered = written.copy(lineage = Manifest.lineageOf(key("7", "other")))
    val broken = Seq(
      written.copy(shape = "elsewhere"),
      written.copy(lineage = Manifest.lineageOf(current.copy(local = "Aggregate(changed)"))),
      written.copy(schema = Manifest.schemaOf(output.map(_.withNullability(true))).json),
      written.copy(files = Nil),
      written.copy(files = Seq(file.copy(path = "../../elsewhere/part-0.parquet"))),
      written.copy(files = Seq(file.copy(bytes = 1100))),
      written.copy(files = Seq(file.copy(modifiedMs = 1))))
    (tampered +: broken).foreach(m => assert(refusal(verdict(m))._2, m))
    assert(refusal(verdict(files = Map.empty))._1.contains("missing"))
    assert(refusal(verdict(files = seen + (s"$data/part-00001.parquet" -> FileSeen(5, 1, ownedByUser = true))))._1
      .contains("not listed"))
  }

  test("a manifest of another format is refused and left to the memphis that wrote it") {
    assert(refusal(verdict(written.copy(format = "memphis-durable-spark-v0"))) == ("format memphis-durable-spark-v0, not " +
      Manifest.Format, false))
  }

  test("folder names come from plain user names or their hash, never from a path") {
    assert(DurableLayout.userFolder("ada", shared = false) == "ada")
    assert(DurableLayout.userFolder("ada", shared = true) == "shared")
    Seq("../etc", "a/b", "", "shared", "x" * 65, "ünï").foreach { name =>
      val folder = DurableLayout.userFolder(name, shared = false)
      assert(folder.matches("u-[0-9a-f]{16}"), name)
    }
    assert(DurableLayout.sparkFolder("/tmp/durable", "ada", shared = false).toString == "/tmp/durable/ada/spark")
    assert(DurableLayout.root("none", localMaster = true).isEmpty && DurableLayout.root("", localMaster = true).isEmpty)
    assert(DurableLayout.root("auto", localMaster = false).isEmpty)
    assert(DurableLayout.root("auto", localMaster = true).exists(_.endsWith("memphis/durable")))
    assert(DurableLayout.root(" s3a://bucket/memphis ", localMaster = false).contains("s3a://bucket/memphis"))
  }

  test("the default root is under an absolute XDG_CACHE_HOME, else under ~/.cache: a relative one is ignored") {
    assert(DurableLayout.defaultRoot("/var/cache/ada", "/home/ada") == "/var/cache/ada/memphis/durable")
    Seq("relative/cache", "", null).foreach { cacheHome =>
      assert(DurableLayout.defaultRoot(cacheHome, "/home/ada") == "/home/ada/.cache/memphis/durable", String.valueOf(cacheHome))
    }
  }

  test("admission: computed longer than written and read back, and at least the floor") {
    val admission = new DurableAdmission
    assert(admission.verdict(5, 10).isLeft)
    assert(admission.verdict(500, 10000).isRight)
    assert(admission.verdict(1000, 100L << 20).isLeft) // 100 MiB: about 2.6 s to write and read at the first guesses
    admission.wrote(200L << 20, 100) // a fast disk (2 GB/s) halves the guess's distance: 0.1 s to write, 0.5 s to read
    assert(admission.verdict(1000, 100L << 20).isRight)
    admission.wrote(100, 1000) // too small to say anything of bandwidth
    assert(admission.verdict(1000, 100L << 20).isRight)
  }
}
