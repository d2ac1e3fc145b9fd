package io.memphis

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.memphis.SparkShim

/** Coarse entry points for the Python package: one py4j round trip per call. */
object PythonFacade {
  /** The `memphis_stats()` rows as a flat JSON object of numbers. */
  def statsJson(session: SparkSession): String = {
    val rows = LineageCache.forContext(session.sparkContext).statsRows(SparkShim.sqlConf(session))
    rows.map { case (name, value) => s""""$name": $value""" }.mkString("{", ", ", "}")
  }
}
