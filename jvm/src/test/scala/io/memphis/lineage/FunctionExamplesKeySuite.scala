package io.memphis.lineage

import scala.collection.mutable.ArrayBuffer
import scala.util.Try

import io.memphis.PythonFacade
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry
import org.apache.spark.sql.catalyst.expressions.{ExpressionInfo, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{Command, LogicalPlan}
import org.apache.spark.sql.memphis.SparkShimImpl
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The audit of non-deterministic expressions, on the Spark line this jar is built for: every example
 * Spark documents for its built-in functions (`DESCRIBE FUNCTION EXTENDED`), as a query. One with a key
 * keys alike on a second analysis and answers alike on a second run; one that holds an expression Spark
 * marks non-deterministic has no key, unless its only randomness is a seeded `rand`/`randn`. A line that
 * adds a random function brings its examples, so it is checked here without a list to keep up.
 */
class FunctionExamplesKeySuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = SparkSession.builder().master("local[2]").appName("function-examples")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "2").getOrCreate()

  override def afterAll(): Unit = spark.stop()

  /** The statements of a function's examples: from a line starting "> " to the line ending with ";". */
  private def examples(info: ExpressionInfo): Seq[String] = {
    val found = ArrayBuffer.empty[String]
    var statement: Option[StringBuilder] = None
    Option(info.getExamples).getOrElse("").split("\n").map(_.trim).foreach { line =>
      if (line.startsWith("> ")) statement = Some(new StringBuilder(line.drop(2)))
      else statement.foreach(_.append(' ').append(line))
      statement.filter(_.toString.endsWith(";")).foreach { s =>
        found += s.toString.dropRight(1)
        statement = None
      }
    }
    found.toSeq
  }

  private def analyzed(sql: String): Option[(DataFrame, LogicalPlan)] =
    Try(spark.sql(sql)).toOption.flatMap(df => Try(SparkShimImpl.analyzedPlan(df)).toOption.map(df -> _))
      .filterNot(_._2.isInstanceOf[Command])

  private def rows(df: DataFrame): Try[Seq[Any]] = Try(df.collect().toSeq.map(value))

  // Binary values compared by content (an array's equals is its identity), NaN as equal to itself.
  private def value(v: Any): Any = v match {
    case b: Array[Byte] => b.toSeq
    case d: Double if d.isNaN => "NaN"
    case f: Float if f.isNaN => "NaN"
    case r: Row => r.toSeq.map(value)
    case s: scala.collection.Seq[_] => s.map(value)
    case m: scala.collection.Map[_, _] => m.map { case (k, x) => value(k) -> value(x) }
    case other => other
  }

  test("Spark's examples of its built-in functions: a key is stable and its answer repeats; non-deterministic ones have none") {
    val queries = FunctionRegistry.expressions.toSeq.sortBy(_._1).flatMap { case (name, (info, _)) =>
      examples(info).filter(_.toUpperCase.startsWith("SELECT")).map(name -> _)
    }
    val keyed, refused = ArrayBuffer.empty[(String, String)]
    val problems = ArrayBuffer.empty[String]
    queries.foreach { case (name, sql) =>
      analyzed(sql).foreach { case (df, plan) =>
        // Non-deterministic by Spark's flag, once a seeded rand/randn (which repeats) is taken out.
        val random = plan.exists(_.expressions.exists(e =>
          !e.transform { case r if Determinism.isSeededRandom(r) => Literal(0.0) }.deterministic))
        PythonFacade.keyOf(spark, plan) match {
          case Left(reason) => refused += name -> s"$sql: $reason"
          case Right(key) =>
            keyed += name -> sql
            if (random) problems += s"$name: `$sql` holds a non-deterministic expression and has a key"
            val again = analyzed(sql)
            again.map { case (_, plan) => PythonFacade.keyOf(spark, plan) } match {
              case Some(Right(k)) if k.hash == key.hash =>
              case other => problems += s"$name: `$sql` keys apart on a second analysis: $other"
            }
            val (first, second) = (rows(df), again.map(a => rows(a._1)))
            if (first.isSuccess && !second.contains(first))
              problems += s"$name: `$sql` has a key and answered ${first.get} then $second"
        }
      }
    }
    info(s"${queries.size} examples of ${FunctionRegistry.expressions.size} functions: ${keyed.size} keyed, " +
      s"${refused.size} without a key (${refused.map(_._1).distinct.mkString(", ")})")
    assert(problems.isEmpty, problems.mkString("\n"))
    assert(keyed.size > 500, "Spark documents hundreds of deterministic examples: most must have a key")
    Seq("rand", "randn", "uuid", "shuffle").foreach { f =>
      assert(refused.exists(_._1 == f), s"an example of $f() is refused: ${refused.filter(_._1 == f)}")
    }
  }
}
