package org.apache.spark.sql.memphis

import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.execution.{DoNotCleanup, QueryExecution}
import org.apache.spark.sql.internal.SQLConf

/** Spark 4.1 to 4.3: a query's shuffle cleanup mode from its conf, DSv2 tables with id and version. */
object SparkShimImpl extends Spark4Shims {
  def shuffleFilesKept(conf: SQLConf): Boolean =
    QueryExecution.determineShuffleCleanupMode(conf) == DoNotCleanup &&
      !conf.getConfString("spark.sql.connect.shuffleDependency.fileCleanup.enabled", "false").toBoolean

  def tableIdAndVersion(table: Table): Option[(String, String)] =
    for (id <- Option(table.id()); version <- Option(table.version())) yield (id, version)
}
