package io.memphis

import java.nio.file.{Files, Path}

import scala.collection.mutable

import io.memphis.cache.{CacheEntry, EntryState, EvictionPolicy, Executions}
import io.memphis.lineage.LineageKey
import io.memphis.facade.LineageCache
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.CurrentUserContext
import org.apache.spark.sql.execution.columnar.InMemoryRelation
import org.apache.spark.sql.functions.{col, count, sum}
import org.apache.spark.sql.memphis.{CacheTestShim, SparkShimImpl}
import org.apache.spark.sql.types.StructType
import org.scalacheck.Gen
import org.scalactic.anyvals.PosInt
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite
import org.scalatestplus.scalacheck.ScalaCheckDrivenPropertyChecks

/**
 * Property-based tests of the lineage cache's state machine: random sequences of what happens to
 * it (queries of two users over two CSV sources, their cached relations filled by block updates,
 * partitions and executors lost, running readers, budget changes, sources changed outside Spark,
 * unpersists outside memphis, everything released) against a real session, after each of which:
 *  - every entry moved along an edge of the state diagram (`EntryState.Edges`: never back to seen,
 *    never materialized without passing through to-persist);
 *  - only to-persist and materialized entries hold a cached relation, partitions or bytes;
 *  - every cached relation Spark substituted into a query is a held entry of that query's user
 *    whose sources are unchanged: nothing invalid, stale or another user's is served;
 *  - once eviction has run (an entry materialized), memphis holds no more than its budget unless
 *    the next entry to go is read by a running query or only entries being filled hold data.
 *
 * No job runs: the block updates are the ones Spark would post, sent as its listener does. A query
 * is planned as the one a run executes (under a Spark Connect operation's job tag), so that it counts.
 */
class CacheStatePropertySuite extends AnyFunSuite with BeforeAndAfterAll with ScalaCheckDrivenPropertyChecks {
  import CacheStatePropertySuite._
  import EntryState._

  private lazy val spark: SparkSession = SparkSession.builder().master("local[2]").appName("memphis-states")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "3").config("spark.sql.adaptive.enabled", "false")
    .config("spark.sql.extensions", classOf[MemphisSparkSessionExtension].getName)
    // The model is delayed caching: an entry is persisted by a query, never while this suite plans
    // a cached relation to build its RDD. Persisting ahead: tests/test_persist_ahead.py.
    .config("spark.memphis.reuse.persistAhead", "false")
    .getOrCreate()
  private lazy val cache = LineageCache.forContext(spark.sparkContext)

  override implicit val generatorDrivenConfig: PropertyCheckConfiguration =
    PropertyCheckConfiguration(minSuccessful = PosInt.from(Sequences).get)

  override def afterAll(): Unit = spark.stop()

  private val schema = StructType.fromDDL("a INT, b INT")
  private def csv(dir: Path): DataFrame = spark.read.schema(schema).csv(dir.toString)

  /** The queries: aggregates, one shared by two queries, a join, a distinct. */
  private def queries(d0: Path, d1: Path): Seq[() => DataFrame] = Seq(
    () => csv(d0).groupBy("a").agg(count("*").as("n")),
    () => csv(d0).groupBy("a").agg(count("*").as("n")).where(col("n") > 1),
    () => csv(d1).groupBy("a").agg(sum("b")),
    () => csv(d0).join(csv(d1).withColumnRenamed("b", "c"), "a").groupBy("a").agg(sum("c")),
    () => csv(d1).distinct())

  private def writeFile(dir: Path, rows: Int): Unit =
    Files.write(dir.resolve(s"part-${System.nanoTime()}.csv"), (0 until rows).map(i => s"${i % 5},$i").mkString("\n").getBytes)

  private def states: Map[CacheEntry, EntryState.Value] = cache.entryRows(e => e -> e.state).toMap

  private def budget: Long = cache.storageBudgetBytes(SparkShimImpl.sqlConf(spark))

  /** Runs one sequence of operations from an empty cache, checking the invariants after each. */
  private def run(ops: Seq[Op]): Unit = {
    cache.releases.clear(spark)
    val dirs = Seq(Files.createTempDirectory("memphis-states-0"), Files.createTempDirectory("memphis-states-1"))
    dirs.foreach(writeFile(_, 20))
    val plans = queries(dirs(0), dirs(1))
    val readers = mutable.Queue.empty[Long]
    var nextReader = 1000000L
    spark.conf.set("spark.memphis.storage.maxBytes", "4k")
    def held(state: EntryState.Value) = cache.entryRows(identity).filter(_.state == state)
    def pick[T](items: Seq[T], i: Int): Option[T] = if (items.isEmpty) None else Some(items(i % items.size))

    ops.foreach { op =>
      val before = states
      op match {
        case Query(q, user) =>
          CurrentUserContext.CURRENT_USER.set(Users(user))
          spark.sparkContext.addJobTag(Executed)
          val served = try plans(q)().queryExecution.withCachedData.collect { case r: InMemoryRelation => r.cacheBuilder.tableName }
            finally { spark.sparkContext.removeJobTag(Executed); CurrentUserContext.CURRENT_USER.remove() }
          val entries = cache.entryRows(identity)
          served.foreach { name =>
            val e = entries.find(_.relation.map(_.name) == name)
            assert(e.exists(e => EntryState.Holding.contains(e.state)), s"$op served $name, held by no entry")
            assert(e.get.owner == Users(user), s"$op served ${e.get.owner}'s entry to ${Users(user)}")
            assert(e.get.key.sourcesUnchanged, s"$op served a stale entry")
          }
        case Materialize(i, bytes, executor) =>
          pick(held(EntryState.ToPersist), i).foreach { e =>
            val r = e.relation.get
            val built = r.rddId.map(_ -> r.partitions).orElse(CacheTestShim.buildCachedRdd(spark, r.plan))
            built.foreach { case (rdd, partitions) =>
              (0 until partitions).foreach(p => cache.events.blockUpdated(rdd, p, isStored = true, bytes, Executors(executor)))
            }
            // Over the budget only while eviction waits: for the next to go to be read no more, or
            // for entries still being filled.
            val next = EvictionPolicy.evictionOrder("costnsize", held(EntryState.Materialized)).headOption
            val waits = next.forall(_.readers.nonEmpty)
            assert(cache.heldBytes <= budget || waits, s"$op: ${cache.heldBytes} bytes held over a budget of $budget, $next idle")
          }
        case LosePartition(i) =>
          pick(held(EntryState.Materialized), i).foreach(e =>
            cache.events.blockUpdated(e.relation.get.rddId.get, i % e.relation.get.partitions, isStored = false, 0, Executors(i % Executors.size)))
        case LoseExecutor(x) => cache.events.executorRemoved(Executors(x))
        case ReadStart(i) =>
          pick(cache.entryRows(identity).filter(_.relation.exists(_.rddId.isDefined)), i).foreach { e =>
            nextReader += 1
            readers += nextReader
            val r = e.relation.get
            cache.events.jobStarted(nextReader.toInt, Some(nextReader), Seq(r.rddId.get -> s"In-memory table ${r.name}"))
          }
        case ReadEnd => if (readers.nonEmpty) cache.events.readerEnded(readers.dequeue())
        case SetBudget(bytes) => spark.conf.set("spark.memphis.storage.maxBytes", bytes.toString)
        case ChangeSource(d) => writeFile(dirs(d), 3)
        case UnpersistOutside(i) => pick(cache.entryRows(identity).filter(_.relation.exists(_.rddId.isDefined)), i).foreach(e => cache.events.rddUnpersisted(e.relation.get.rddId.get))
        case ReleaseAll => cache.releases.releaseAll(spark, "memphis turned off")
      }
      val after = states
      after.foreach { case (e, to) =>
        before.get(e).foreach(from => assert(from == to || Edges(from).contains(to), s"$op moved ${e.id} from $from to $to"))
        if (!before.contains(e)) assert(to == EntryState.Seen || to == EntryState.ToPersist, s"$op made ${e.id} $to")
        if (!EntryState.Holding.contains(to)) {
          assert(e.relation.isEmpty && e.sizeBytes == 0, s"$op left ${e.id} ($to) holding data")
        } else if (to == EntryState.Materialized) {
          val r = e.relation.get
          assert(r.stored.size == r.partitions, s"${e.id} materialized with ${r.stored.size} of ${r.partitions} partitions")
        }
      }
      assert(cache.heldBytes == after.collect { case (e, s) if EntryState.Holding.contains(s) => e.sizeBytes }.sum)
    }
    readers.foreach(cache.events.readerEnded)
  }

  test("random sequences of operations keep the cache's state machine and budget") {
    forAll(Gen.choose(5, MaxOps).flatMap(Gen.listOfN(_, genOp))) { ops => run(ops) }
  }

  test("an entry moves along the state diagram's edges only; a move off them is refused and changes nothing") {
    val paths = Map(Seen -> Nil, ToPersist -> List(ToPersist), Materialized -> List(ToPersist, Materialized),
      Evicted -> List(ToPersist, Evicted), Invalid -> List(ToPersist, Invalid))
    def at(state: EntryState.Value): CacheEntry = {
      val e = new CacheEntry("k", LineageKey("k", "Aggregate", Nil, Nil, 1), "alice", 0L)
      paths(state).foreach(e.moveTo(_, s"to $state"))
      e
    }
    for (from <- EntryState.values.toSeq; to <- EntryState.values.toSeq) {
      val e = at(from)
      val reason = e.reason
      if (Edges(from).contains(to)) {
        e.moveTo(to, "allowed")
        assert(e.state == to && e.reason == "allowed")
      } else {
        val refused = intercept[IllegalStateException](e.moveTo(to, "refused"))
        assert(refused.getMessage.contains(s"from $from to $to"))
        assert(e.state == from && e.reason == reason, s"$from -> $to")
      }
    }
  }

  test("an entry stored again with larger blocks after a lost partition stays within the budget") {
    // Found by the property above: the lost partition came back first, making the entry materialized
    // within the budget; its other partitions, stored again larger, took it over the budget unnoticed.
    run(Seq(Query(0, 0), Query(0, 0), Materialize(4, 828, 0), LosePartition(6), Materialize(0, 1557, 0)))
  }

  test("an entry built on one let go is let go with it when Spark has not finished storing it") {
    // Found by the property above: the outer aggregate's relation, begun but not stored, was re-cached by
    // Spark when the source relation under it was uncached; a query read the new relation, tracked by no entry.
    run(Seq(Query(2, 1), Query(3, 1), Query(3, 1), Materialize(1, 965, 1), Materialize(0, 217, 0), Query(1, 1),
      UnpersistOutside(6), Query(3, 1)))
    assert(cache.entryRows(identity).forall(_.state != EntryState.Materialized))
  }

  test("a long fixed sequence reaches every state") {
    val seen = mutable.Set.empty[EntryState.Value]
    // Both first entries fit the 4k budget together (3 partitions of 600 bytes each), so which of them
    // eviction would pick (by measured cost) does not matter: the second is held when its source changes.
    val ops = Seq(Query(0, 0), Query(0, 0), Materialize(0, 600, 0), Query(0, 0), Query(2, 1), Query(2, 1),
      Materialize(0, 600, 1), ChangeSource(1), Query(2, 1), Query(3, 0), Query(3, 0), Materialize(0, 5000, 0),
      Query(4, 1), Query(4, 1), ReadStart(0), SetBudget(100), Materialize(0, 600, 0), ReadEnd, LosePartition(0))
    ops.indices.foreach { n =>
      run(ops.take(n + 1))
      seen ++= states.values
    }
    assert(seen == EntryState.values.toSet, seen)
  }
}

object CacheStatePropertySuite {
  /** The job tag a query is planned under, as Spark Connect plans an ExecutePlan operation's ([[Executions]]). */
  val Executed: String = Executions.ConnectOperationTag + "User_states_Session_states_Operation_query"
  val Users = Seq("alice", "bob")
  val Executors = Seq("driver", "exec-1")
  /** How many random sequences, of at most how many operations (`-Dmemphis.states.sequences=` for more). */
  val Sequences: Int = sys.props.get("memphis.states.sequences").map(_.toInt).getOrElse(12)
  val MaxOps = 30

  sealed trait Op
  final case class Query(query: Int, user: Int) extends Op
  final case class Materialize(pick: Int, bytesPerPartition: Int, executor: Int) extends Op
  final case class LosePartition(pick: Int) extends Op
  final case class LoseExecutor(executor: Int) extends Op
  final case class ReadStart(pick: Int) extends Op
  case object ReadEnd extends Op
  final case class SetBudget(bytes: Int) extends Op
  final case class ChangeSource(dir: Int) extends Op
  final case class UnpersistOutside(pick: Int) extends Op
  case object ReleaseAll extends Op

  val genOp: Gen[Op] = Gen.frequency(
    8 -> Gen.zip(Gen.choose(0, 4), Gen.choose(0, Users.size - 1)).map(Query.tupled),
    4 -> Gen.zip(Gen.choose(0, 9), Gen.choose(1, 2000), Gen.choose(0, Executors.size - 1)).map(Materialize.tupled),
    1 -> Gen.choose(0, 9).map(LosePartition),
    1 -> Gen.choose(0, Executors.size - 1).map(LoseExecutor),
    1 -> Gen.choose(0, 9).map(ReadStart),
    1 -> Gen.const(ReadEnd),
    1 -> Gen.oneOf(200, 1000, 4096, 16384).map(SetBudget),
    1 -> Gen.choose(0, 1).map(ChangeSource),
    1 -> Gen.choose(0, 9).map(UnpersistOutside),
    1 -> Gen.const(ReleaseAll))
}
