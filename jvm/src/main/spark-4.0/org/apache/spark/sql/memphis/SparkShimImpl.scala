package org.apache.spark.sql.memphis

import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.internal.SQLConf

/** Spark 4.0: no per-query shuffle cleanup in classic sessions, no DSv2 table versions. */
object SparkShimImpl extends Spark4Shims {
  // 4.0 cleans up shuffle files only at the end of Spark Connect executions, when this is on.
  def shuffleFilesKept(conf: SQLConf): Boolean =
    !conf.getConfString("spark.sql.shuffleDependency.fileCleanup.enabled", "false").toBoolean

  def tableIdAndVersion(table: Table): Option[(String, String)] = None
}
