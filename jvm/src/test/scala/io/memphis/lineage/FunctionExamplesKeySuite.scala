package io.memphis.lineage

import java.util.concurrent.Executors

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
  // Interpreted, not generated code: each of the thousand examples would compile its own classes (the suite
  // alone took 109 s so, 95 s interpreted); and without adaptive execution, whose stage-by-stage planning
  // the examples that run a job waited on (alone, another day: 126 s with it, 108 s without). Keys come
  // from the analyzed plan, and answers repeat either way.
  private lazy val spark: SparkSession = SparkSession.builder().master("local[2]").appName("function-examples")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.codegen.wholeStage", "false").config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    .config("spark.sql.adaptive.enabled", "false")
    .getOrCreate()

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

  /** What one example showed: None when it is not a query alone; else its key (or why none), and its problems. */
  private def check(name: String, sql: String): Option[(Either[String, String], Seq[String])] =
    analyzed(sql).map { case (df, plan) =>
      // Non-deterministic by Spark's flag, once a seeded rand/randn (which repeats) is taken out.
      val random = plan.exists(_.expressions.exists(e =>
        !e.transform { case r if Determinism.isSeededRandom(r) => Literal(0.0) }.deterministic))
      PythonFacade.keyOf(spark, plan) match {
        case Left(reason) => (Left(reason), Nil)
        case Right(key) =>
          val again = analyzed(sql)
          val (first, second) = (rows(df), again.map(a => rows(a._1)))
          (Right(key.hash), Seq(
            Some(s"$name: `$sql` holds a non-deterministic expression and has a key").filter(_ => random),
            again.map(a => PythonFacade.keyOf(spark, a._2)) match {
              case Some(Right(k)) if k.hash == key.hash => None
              case other => Some(s"$name: `$sql` keys apart on a second analysis: $other")
            },
            if (first.isSuccess && !second.contains(first)) Some(s"$name: `$sql` has a key and answered $first then $second")
            else None).flatten)
      }
    }

  test("Spark's examples of its built-in functions: a key is stable and its answer repeats; non-deterministic ones have none") {
    val queries = FunctionRegistry.expressions.toSeq.sortBy(_._1).flatMap { case (name, (info, _)) =>
      examples(info).filter(_.toUpperCase.startsWith("SELECT")).map(name -> _)
    }
    // Two at a time (each is a few milliseconds of driver work): a session runs queries from many threads.
    val pool = Executors.newFixedThreadPool(2)
    val seen = try queries.map { case (name, sql) => name -> pool.submit(() => check(name, sql)) }
      .flatMap { case (name, outcome) => outcome.get().map(name -> _) }
    finally pool.shutdown()
    val keyed = seen.collect { case (name, (Right(_), _)) => name }
    val refused = seen.collect { case (name, (Left(reason), _)) => name -> reason }
    val problems = seen.flatMap(_._2._2)
    info(s"${queries.size} examples of ${FunctionRegistry.expressions.size} functions: ${keyed.size} keyed, " +
      s"${refused.size} without a key (${refused.map(_._1).distinct.mkString(", ")})")
    assert(problems.isEmpty, problems.mkString("\n"))
    assert(keyed.size > 500, "Spark documents hundreds of deterministic examples: most must have a key")
    Seq("rand", "randn", "uuid", "shuffle").foreach { f =>
      assert(refused.exists(_._1 == f), s"an example of $f() is refused: ${refused.filter(_._1 == f)}")
    }
  }
}
