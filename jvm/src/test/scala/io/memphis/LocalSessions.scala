package io.memphis

import io.memphis.conf.MemphisConf
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.memphis.SparkRuntime
import org.scalatest.{BeforeAndAfterEach, Suite}

/** A fresh local[2] session with the memphis extension for each test; every context is stopped after it. */
trait LocalSessions extends BeforeAndAfterEach { this: Suite =>
  protected val Extension: String = classOf[MemphisSparkSessionExtension].getName

  /**
   * Collected results off: for tests of the Spark tier (cached relations, kept shuffles) that collect
   * one query again and again, whose repeats would otherwise read the rows the first collect kept.
   */
  protected val NoKeptResults: (String, String) = MemphisConf.CollectedMaxBytes.key -> "0"

  protected def newSession(confs: (String, String)*): SparkSession = {
    val builder = SparkSession.builder().master("local[2]").appName("memphis-test")
      .config("spark.ui.enabled", "false")
      .config("spark.driver.host", "127.0.0.1")
      .config("spark.sql.shuffle.partitions", "4")
      .config("spark.sql.extensions", Extension)
    confs.foldLeft(builder) { case (b, (k, v)) => b.config(k, v) }.getOrCreate()
  }

  override def afterEach(): Unit = {
    SparkSession.getActiveSession.foreach(_.stop())
    SparkSession.getDefaultSession.foreach(_.stop())
    SparkSession.clearActiveSession()
    SparkSession.clearDefaultSession()
    SparkRuntime.activeSparkContext.foreach(_.stop()) // left running by a session that failed to start
    super.afterEach()
  }
}
