package io.memphis

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShim
import org.apache.spark.sql.types.{LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * SQL table function `memphis_stats()`: one row (name, value) per counter of the lineage cache.
 * A table function rather than a py4j-only call so that it also answers over Spark Connect and
 * from plain SQL. The rows are read when the query is analyzed.
 */
object MemphisStatsFunction {
  val Name = "memphis_stats"

  val description: (FunctionIdentifier, ExpressionInfo, Seq[Expression] => LogicalPlan) = (
    FunctionIdentifier(Name),
    new ExpressionInfo(getClass.getName.stripSuffix("$"), null, Name,
      s"$Name() - Returns the memphis cache counters as rows (name STRING, value BIGINT).",
      ""),
    build)

  private def build(args: Seq[Expression]): LogicalPlan = {
    if (args.nonEmpty) {
      throw new IllegalArgumentException(s"$Name() takes no arguments, got ${args.size}")
    }
    val output = Seq(
      AttributeReference("name", StringType, nullable = false)(),
      AttributeReference("value", LongType, nullable = false)())
    val cache = LineageCache.forContext(SparkSession.active.sparkContext)
    val rows = cache.statsRows(SQLConf.get).map { case (name, value) =>
      InternalRow(UTF8String.fromString(name), value)
    }
    SparkShim.localRelation(output, rows)
  }
}
