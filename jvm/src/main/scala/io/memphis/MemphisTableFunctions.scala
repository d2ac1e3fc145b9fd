package io.memphis

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression, ExpressionInfo, SubqueryExpression}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkRuntime
import io.memphis.cache.EvictionPolicy
import io.memphis.conf.{ConnectSessions, MemphisConf}
import io.memphis.facade.LineageCache
import org.apache.spark.sql.types.{ArrayType, BooleanType, DataType, DoubleType, IntegerType, LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * SQL table functions over the lineage cache of the session's SparkContext. They are how memphis
 * answers from plain SQL and over Spark Connect, whose clients have no py4j gateway: reading
 * (`memphis_stats()`, `memphis_cache()`), keying a DataFrame passed as a `TABLE(...)` argument
 * (`memphis_lineage_key`, `memphis_subplans`; `spark.sql("… TABLE({df}) …", df=df)` from PySpark),
 * and acting (`memphis_persist_shared`, `memphis_clear`, `memphis_clear_durable`).
 *
 * Each runs when its query is analyzed (its rows are built then), so an action runs once per
 * analysis: the acting ones are idempotent, as a Connect client analyzes `spark.sql` once on the
 * call and again when it collects.
 */
object MemphisTableFunctions {
  type Description = (FunctionIdentifier, ExpressionInfo, Seq[Expression] => LogicalPlan)

  /** One call of a table function: its arguments, the session that analyzes it and its cache. */
  final case class Call(name: String, args: Seq[Expression], session: SparkSession, cache: LineageCache) {
    /** The plan of the `i`-th argument, a `TABLE(...)` (its analyzed plan: arguments resolve first). */
    def table(i: Int): LogicalPlan = args(i) match {
      case s: SubqueryExpression => s.plan
      case other => throw new IllegalArgumentException(s"$name: argument ${i + 1} must be TABLE(...), got ${other.sql}")
    }

    def string(i: Int): String = args(i) match {
      case e if e.foldable && e.dataType == StringType => String.valueOf(e.eval())
      case other => throw new IllegalArgumentException(s"$name: argument ${i + 1} must be a string literal, got ${other.sql}")
    }
  }

  val stats: Description = tableFunction("memphis_stats", 0, "()",
    "Returns the memphis cache counters as rows (name, value).",
    Seq("name" -> StringType, "value" -> LongType),
    call => PythonFacade.statsRows(call.session).map { case (name, value) => InternalRow(utf8(name), value) })

  /** The columns of `memphis_cache()` (name, type, nullable) in the jar's `io/memphis/entry-columns.json`, which Python reads too. */
  private val entryColumns: Seq[(String, DataType, Boolean)] = {
    val in = getClass.getResourceAsStream("/io/memphis/entry-columns.json")
    val columns = try new ObjectMapper().readTree(in).path("columns") finally in.close()
    def list(node: JsonNode): Seq[JsonNode] = (0 until node.size).map(node.get)
    list(columns).filter(c => list(c.path("in")).exists(_.asText == "memphis_cache"))
      .map(c => (c.path("name").asText, DataType.fromDDL(c.path("type").asText), c.path("nullable").asBoolean(false)))
  }

  val entries: Description = tableFunction("memphis_cache", 0, "()",
    "Returns one row per memphis cache entry (over Spark Connect, the calling user's): its key, state, counts, size and last decision.",
    entryColumns.map { case (name, dataType, _) => name -> dataType },
    call => {
      val policy = MemphisConf.EvictionPolicyName.get(SQLConf.get)
      val spark = call.cache.entryRowsFor(call.session, e => InternalRow(utf8("spark"), utf8(e.key.hash),
        utf8(e.state.toString), e.occurrences, e.hits, e.misses, e.consumers.size, e.readers.size, e.sizeBytes, e.relation.fold(0)(_.stored.size),
        e.relation.fold(0)(_.partitions), e.costMs, EvictionPolicy.score(policy, e), e.key.height, e.lastAccess, e.firstShuffles.size,
        e.estimatedBytes.fold(-1L)(b => if (b.isValidLong) b.toLong else Long.MaxValue), utf8(e.reason), utf8(e.owner), null, null))
      val now = System.currentTimeMillis()
      // The durable tier's entries of the calling user (all of them when shared), as their manifests say.
      val durable = call.cache.durable.entries(ConnectSessions.userOfQuery(call.session)).map { case (folder, m) =>
        InternalRow(utf8("durable"), utf8(m.key), utf8("durable"), 0, 0L, 0L, 0, 0, m.bytes, m.files.size, m.files.size, m.costMs,
          EvictionPolicy.valuePerByte(m.costMs, 0L, m.bytes), m.height, m.writtenMs, 0, -1L,
          utf8(s"written with ${m.rows} rows"), utf8(m.owner), utf8(folder.toString), (now - m.writtenMs) / 1000.0)
      }
      spark ++ durable
    }, nullable = entryColumns.collect { case (name, _, true) => name }.toSet)

  val lineageKey: Description = tableFunction("memphis_lineage_key", 1, "(TABLE(t))",
    "Returns the lineage key of t's result (null when it has none) and its explanation: its canonical form and sources, or why it has none.",
    Seq("key" -> StringType, "explain" -> StringType),
    call => {
      val key = PythonFacade.keyOf(call.session, call.table(0))
      Seq(InternalRow(key.toOption.map(k => utf8(k.hash)).orNull, utf8(PythonFacade.explanation(key))))
    }, nullable = Set("key"))

  val subplans: Description = tableFunction("memphis_subplans", 1, "(TABLE(t))",
    "Returns t's candidate subplans with a key, root first: key, height, and the keys of the candidates that contain it.",
    Seq("key" -> StringType, "height" -> IntegerType, "within" -> ArrayType(StringType, containsNull = false)),
    call => call.cache.candidateKeys(call.session, call.table(0)).map { case (key, within) =>
      InternalRow(utf8(key.hash), key.height, new GenericArrayData(within.map(utf8).toArray[Any]))
    })

  val persistShared: Description = tableFunction("memphis_persist_shared", 3, "(TABLE(t), key, reason)",
    "Persists t's candidate subplan with that key now, shared by several actions (memphis.run_all); returns whether memphis holds it.",
    Seq("held" -> BooleanType),
    call => Seq(InternalRow(PythonFacade.persistShared(call.session, call.table(0), call.string(1), call.string(2)))))

  val clear: Description = clearing("memphis_clear",
    "Lets go of what memphis holds (over Spark Connect, what the calling user's entries hold); returns the bytes held after.",
    _.clearFor(_))

  val clearDurable: Description = clearing("memphis_clear_durable",
    "Does what memphis_clear() does, then deletes the calling user's Spark entries of the durable tier; returns the bytes held after.",
    _.clearDurableFor(_))

  /** A table function that clears with `act` and returns the bytes memphis holds after. */
  private def clearing(name: String, usage: String, act: (LineageCache, SparkSession) => Unit): Description =
    tableFunction(name, 0, "()", usage, Seq("bytes_held" -> LongType), call => {
      act(call.cache, call.session)
      Seq(InternalRow(call.cache.heldBytes))
    })

  val all: Seq[Description] = Seq(stats, entries, lineageKey, subplans, persistShared, clear, clearDurable)

  private def utf8(s: String): UTF8String = UTF8String.fromString(s)

  private def tableFunction(name: String, arity: Int, arguments: String, usage: String, columns: Seq[(String, DataType)],
      rows: Call => Seq[InternalRow], nullable: Set[String] = Set.empty): Description = {
    val build = (args: Seq[Expression]) => {
      if (args.size != arity) {
        throw new IllegalArgumentException(s"$name$arguments takes ${if (arity == 0) "no" else arity} argument${if (arity == 1) "" else "s"}, got ${args.size}")
      }
      val output = columns.map { case (column, dataType) => AttributeReference(column, dataType, nullable(column))() }
      val session = SparkSession.active
      SparkRuntime.localRelation(output, rows(Call(name, args, session, LineageCache.forContext(session.sparkContext))))
    }
    (FunctionIdentifier(name), new ExpressionInfo(getClass.getName.stripSuffix("$"), null, name, s"$name$arguments - $usage", ""),
      build)
  }
}
