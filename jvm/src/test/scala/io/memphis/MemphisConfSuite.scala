package io.memphis

import io.memphis.conf.MemphisConf
import org.scalatest.funsuite.AnyFunSuite

class MemphisConfSuite extends AnyFunSuite {
  private def rejection(settings: (String, String)*): String =
    intercept[IllegalArgumentException](MemphisConf.validate(settings)).getMessage

  test("defaults and valid values pass") {
    MemphisConf.validate(MemphisConf.All.map(e => e.key -> e.default))
    MemphisConf.validate(Seq(
      "spark.memphis.enabled" -> "FALSE",
      "spark.memphis.storage.fraction" -> "1",
      "spark.memphis.storage.maxBytes" -> "512m",
      "spark.executor.memory" -> "anything: not ours"))
  }

  test("a wrong type names the key, the value and what is allowed") {
    val msg = rejection("spark.memphis.enabled" -> "maybe")
    assert(msg.contains("spark.memphis.enabled=maybe"))
    assert(msg.contains("a boolean (true or false)"))
  }

  test("out-of-range and malformed numbers are rejected") {
    for (bad <- Seq("0", "1.5", "-0.2", "NaN", "half")) {
      val msg = rejection("spark.memphis.storage.fraction" -> bad)
      assert(msg.contains(s"spark.memphis.storage.fraction=$bad"), msg)
      assert(msg.contains("greater than 0 and at most 1"), msg)
    }
    for (bad <- Seq("0", "-5", "2.5", "1e9")) {
      assert(rejection("spark.memphis.lineage.maxListedFiles" -> bad).contains("a whole number from 1"), bad)
    }
    for (bad <- Seq("-1", "12 apples", "1.5g", "99999999999p")) {
      assert(rejection("spark.memphis.storage.maxBytes" -> bad).contains("a byte size"), bad)
    }
  }

  test("an unknown key is rejected with the known keys listed") {
    val msg = rejection("spark.memphis.enable" -> "true")
    assert(msg.contains("spark.memphis.enable=true: unknown memphis key"))
    assert(msg.contains("spark.memphis.enabled"))
  }

  test("every problem is reported at once") {
    val msg = rejection("spark.memphis.enabled" -> "yes", "spark.memphis.storage.fraction" -> "2")
    assert(msg.contains("spark.memphis.enabled=yes") && msg.contains("spark.memphis.storage.fraction=2"))
  }

  test("byte sizes use binary units") {
    assert(MemphisConf.parseBytes("0").contains(0L))
    assert(MemphisConf.parseBytes("6000").contains(6000L))
    assert(MemphisConf.parseBytes("2k").contains(2048L))
    assert(MemphisConf.parseBytes("4G").contains(4L << 30))
    assert(MemphisConf.parseBytes("3mb").contains(3L << 20))
  }
}
