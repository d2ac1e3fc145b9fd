package io.memphis

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkRuntime
import io.memphis.reuse.EvictionPolicy
import org.apache.spark.sql.types.{DataType, DoubleType, IntegerType, LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * SQL table functions over the lineage cache of the session's SparkContext: `memphis_stats()`
 * (one row per counter) and `memphis_cache()` (one row per entry). Table functions rather than
 * py4j-only calls, so that they also answer over Spark Connect and from plain SQL. The rows are
 * read when the query is analyzed.
 */
object MemphisTableFunctions {
  type Description = (FunctionIdentifier, ExpressionInfo, Seq[Expression] => LogicalPlan)

  val stats: Description = tableFunction("memphis_stats",
    "Returns the memphis cache counters as rows (name, value).",
    Seq("name" -> StringType, "value" -> LongType),
    cache => cache.statsRows(SQLConf.get).map { case (name, value) => InternalRow(UTF8String.fromString(name), value) })

  val entries: Description = tableFunction("memphis_cache",
    "Returns one row per memphis cache entry: its key, state, counts, size and last decision.",
    Seq("key" -> StringType, "state" -> StringType, "occurrences" -> IntegerType, "hits" -> LongType,
      "misses" -> LongType, "consumers" -> IntegerType, "readers" -> IntegerType, "size_bytes" -> LongType, "partitions_stored" -> IntegerType,
      "partitions" -> IntegerType, "cost_ms" -> LongType, "score" -> DoubleType, "height" -> IntegerType,
      "last_access_ms" -> LongType, "retained_shuffles" -> IntegerType, "estimated_bytes" -> LongType,
      "reason" -> StringType, "owner" -> StringType),
    cache => {
      val policy = MemphisConf.EvictionPolicyName.get(SQLConf.get)
      cache.entryRows(e => InternalRow(UTF8String.fromString(e.key.hash),
        UTF8String.fromString(e.state.toString), e.occurrences, e.hits, e.misses, e.consumers.size, e.readers.size, e.sizeBytes, e.relation.fold(0)(_.stored.size),
        e.relation.fold(0)(_.partitions), e.costMs, EvictionPolicy.score(policy, e), e.key.height, e.lastAccess, e.firstShuffles.size,
        e.estimatedBytes.fold(-1L)(b => if (b.isValidLong) b.toLong else Long.MaxValue), UTF8String.fromString(e.reason), UTF8String.fromString(e.owner)))
    })

  private def tableFunction(name: String, usage: String, columns: Seq[(String, DataType)],
      rows: LineageCache => Seq[InternalRow]): Description = {
    val build = (args: Seq[Expression]) => {
      if (args.nonEmpty) throw new IllegalArgumentException(s"$name() takes no arguments, got ${args.size}")
      val output = columns.map { case (column, dataType) => AttributeReference(column, dataType, nullable = false)() }
      SparkRuntime.localRelation(output, rows(LineageCache.forContext(SparkSession.active.sparkContext)))
    }
    (FunctionIdentifier(name), new ExpressionInfo(getClass.getName.stripSuffix("$"), null, name, s"$name() - $usage", ""),
      build)
  }
}
