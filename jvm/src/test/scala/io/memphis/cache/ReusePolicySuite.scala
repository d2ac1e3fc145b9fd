package io.memphis.cache

import io.memphis.cache.ReusePolicy.{Candidate, Past}
import io.memphis.cache.ReusePolicy.Observation._
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.internal.SQLConf
import org.scalatest.funsuite.AnyFunSuite

/** The reuse policy on plain inputs: no Spark session, no plans, no cache. */
class ReusePolicySuite extends AnyFunSuite {
  private def settings(min: Int = 2, retain: Boolean = true, ahead: Boolean = false) =
    QueryConf(min, retainShuffles = retain, persistAhead = ahead, sql = new SQLConf)

  private def decide(candidates: Seq[Candidate], past: Map[String, Past] = Map.empty, recent: Seq[String] = Nil,
      conf: QueryConf = settings()) = ReusePolicy.decide(candidates.toIndexedSeq, past, recent, 16, conf)

  /** An entry of `table` met `occurrences` times. */
  private def remembered(table: EntryTable, id: String, occurrences: Int) = {
    val e = table.remember(id, LineageKey(id, "Join", Nil, Nil, 1), "alice", 0L)
    e.occurrences = occurrences
    e
  }

  private val join = Candidate(Right("j"))
  private val agg = Candidate(Right("a"), keepsShuffle = true)

  test("a first occurrence is seen; an aggregate's keeps its shuffle; nothing is due before the k-th") {
    val d = decide(Seq(join, agg.copy(within = Set(0))))
    assert(d.observed == Seq(FirstSeen(0), FirstSeen(1)))
    assert(d.due.isEmpty && d.served.isEmpty && d.ahead.isEmpty)
    assert(d.retain == Seq(1))
    assert(decide(Seq(agg), conf = settings(retain = false)).retain.isEmpty)
    assert(decide(Seq(join, agg), conf = settings(min = 1)).due == Seq(0, 1))
  }

  test("an aggregate inside another that keeps its shuffle does not keep its own, unless the other is the answer") {
    val answer = agg.copy(key = Right("root"), answer = true)
    val outer = agg.copy(key = Right("outer"), within = Set(0))
    val inner = agg.copy(key = Right("inner"), within = Set(0, 1))
    // Its mark would change the outer one's input, which then no longer matches that one planned alone.
    assert(decide(Seq(answer, outer, inner)).retain == Seq(0, 1))
    assert(decide(Seq(outer.copy(within = Set.empty), inner.copy(within = Set(0)))).retain == Seq(0))
    assert(decide(Seq(answer, inner.copy(within = Set(0)))).retain == Seq(0, 1))
  }

  test("the k-th occurrence is due; an evicted entry is due when it returns") {
    val seen = Map("j" -> Past(EntryState.Seen, 1))
    assert(decide(Seq(join), seen).observed == Seq(Miss(0)))
    assert(decide(Seq(join), seen).due == Seq(0))
    assert(decide(Seq(join), seen, conf = settings(min = 3)).due.isEmpty)
    assert(decide(Seq(join), Map("j" -> Past(EntryState.Evicted, 0)), conf = settings(min = 3)).due == Seq(0))
  }

  test("a subplan on its k-th occurrence is held back while the recently due ones did not come back") {
    val seen = Map("j" -> Past(EntryState.Seen, 1))
    val held = ReusePolicy.decide(IndexedSeq(join), seen, Nil, 16, settings(), persistRecurring = false)
    assert(held.observed == Seq(Miss(0)) && held.due.isEmpty && held.heldBack == Seq(0))
    assert(held.recentlyDue == Seq(0), "it joins the recently due ones, to show whether it comes back")
    // Back once more: it recurs, and is due whatever the others did.
    val back = ReusePolicy.decide(IndexedSeq(join), Map("j" -> Past(EntryState.Seen, 2)), Nil, 16, settings(),
      persistRecurring = false)
    assert(back.due == Seq(0) && back.heldBack.isEmpty && back.recentlyDue.isEmpty)
    // An evicted one already proved its reuse.
    assert(ReusePolicy.decide(IndexedSeq(join), Map("j" -> Past(EntryState.Evicted, 2)), Nil, 16, settings(),
      persistRecurring = false).due == Seq(0))
    assert(decide(Seq(join), seen).due == Seq(0) && decide(Seq(join), seen).recentlyDue == Seq(0))
  }

  test("a due subplan is held back while persisting does not pay") {
    def decideNow(past: Past, min: Int = 2) = ReusePolicy.decide(IndexedSeq(join), Map("j" -> past), Nil, 16,
      settings(min = min), persistsRead = false)
    val held = decideNow(Past(EntryState.Seen, 2))
    assert(held.observed == Seq(Miss(0)) && held.due.isEmpty && held.heldBack == Seq(0) && held.heldUnpaid == Seq(0))
    assert(held.recentlyDue.isEmpty)
    // Back once more: held back again, until the recent bets pay.
    assert(decideNow(Past(EntryState.Seen, 3)).heldUnpaid == Seq(0))
    // The k-th occurrence too, and it still joins the recently due ones; an evicted one and minOccurrences=1 are untouched.
    val kth = decideNow(Past(EntryState.Seen, 1))
    assert(kth.due.isEmpty && kth.heldUnpaid == Seq(0) && kth.recentlyDue == Seq(0))
    assert(decideNow(Past(EntryState.Evicted, 2)).due == Seq(0))
    assert(decideNow(Past(EntryState.Seen, 1), min = 1).due == Seq(0))
    assert(decide(Seq(join), Map("j" -> Past(EntryState.Seen, 2))).due == Seq(0))
  }

  test("a persist pays once read again, a held-back one once it comes back, each judged after a few queries") {
    val table = new EntryTable(shared = true, recentSize = 16)
    def entry(id: String) = remembered(table, id, occurrences = 3)
    val persisted = (1 to 3).map(i => entry(s"p$i"))
    persisted.foreach(table.persisted)
    val held = entry("h")
    table.heldBack(held)
    assert(table.recentPersists.judged.isEmpty, "none had the time to be read")
    (1 to EntryTable.DueSettlesAfter).foreach(_ => table.queryObserved())
    assert(table.recentPersists.judged == Seq(false, false, false, false))
    assert(!RecentRecurrence.pays(table.recentPersists.judged))
    persisted(0).occurrences += 1 // asked again without reading it (it was let go): not paid
    assert(!RecentRecurrence.pays(table.recentPersists.judged))
    persisted(1).hits += 1
    assert(table.recentPersists.judged == Seq(false, true, false, false))
    assert(!RecentRecurrence.pays(table.recentPersists.judged), "one of four paid")
    held.occurrences += 1
    assert(table.recentPersists.judged.last && RecentRecurrence.pays(table.recentPersists.judged), "two of four paid")
  }

  test("a due subplan not met again counts as not recurring only after a few more queries") {
    val table = new EntryTable(shared = true, recentSize = 16)
    def entry(id: String) = remembered(table, id, occurrences = 2)
    val due = (1 to 4).map(i => entry(s"d$i"))
    due.foreach(table.due)
    assert(table.recentlyDue.judged.isEmpty, "none had the time to come back")
    (1 until EntryTable.DueSettlesAfter).foreach(_ => table.queryObserved())
    assert(table.recentlyDue.judged.isEmpty)
    table.queryObserved()
    assert(table.recentlyDue.judged == Seq(false, false, false, false))
    assert(!RecentRecurrence.recurs(table.recentlyDue.judged))
    due(1).occurrences += 1 // met again
    assert(RecentRecurrence.recurs(table.recentlyDue.judged))
    // Back before its time is up counts at once.
    val soon = entry("soon")
    table.due(soon)
    soon.occurrences += 1
    assert(table.recentlyDue.judged.last)
  }

  test("a first occurrence keeps its shuffle while the session's aggregates recur") {
    val none = (1 to 4).map(i => s"r$i")
    val seen = none.map(_ -> Past(EntryState.Seen, 1)).toMap
    assert(decide(Seq(agg), seen, recent = none.take(3)).retain == Seq(0)) // too few to tell
    assert(decide(Seq(agg), seen, recent = none).retain.isEmpty) // four met, none recurred
    assert(decide(Seq(agg), seen + ("r2" -> Past(EntryState.Seen, 2)), recent = none).retain == Seq(0))
  }

  test("the same subplan twice in one query counts once: Spark's exchange reuse computes it once") {
    val twice = Seq(join.copy(key = Right("x")), agg.copy(key = Right("x"), within = Set(0)))
    val first = decide(twice)
    assert(first.observed == Seq(FirstSeen(0)) && first.due.isEmpty)
    // An aggregate twice in one query keeps no shuffle: the mark on one place would keep Spark from reusing it at the other.
    assert(decide(Seq(agg, agg)).retain.isEmpty && decide(Seq(agg)).retain == Seq(0))
    // Asked by an earlier query: this query is its second occurrence, counted at its first place in the plan.
    val again = decide(twice, Map("x" -> Past(EntryState.Seen, 1)))
    assert(again.observed == Seq(Miss(0)) && again.due == Seq(0))
    // Held and substituted: served wherever it appears.
    val held = decide(twice.map(_.copy(cached = true, within = Set.empty)), Map("x" -> Past(EntryState.Materialized, 2)))
    assert(held.observed == Seq(Hit(0), Hit(1)) && held.served == Seq(0, 1))
  }

  test("a held entry that Spark substitutes is served, and nothing under it is looked at") {
    val held = Map("j" -> Past(EntryState.Materialized, 3))
    val inner = agg.copy(within = Set(0))
    val d = decide(Seq(join.copy(cached = true), inner), held)
    assert(d.observed == Seq(Hit(0)) && d.served == Seq(0) && d.due.isEmpty)
    // Held but not substituted (another plan cached it as something else): counted, not served.
    val missed = decide(Seq(join, inner), held)
    assert(missed.observed == Seq(Miss(0), FirstSeen(1)) && missed.served.isEmpty && missed.due == Seq(0))
  }

  test("no key, a colliding hash and another user's entry are refusals") {
    val d = decide(Seq(Candidate(Left("nondeterministic")), join.copy(collides = true), agg.copy(othersHold = true)),
      Map("j" -> Past(EntryState.Seen, 4)))
    assert(d.observed == Seq(NoKey(0, "nondeterministic"), Collision(1), OtherUsers(2), FirstSeen(2)))
    assert(d.due.isEmpty)
  }

  test("an aggregate is persisted ahead when at least half of the recent ones recurred") {
    val recent = Seq("r1", "r2", "r3")
    val past = Map("r1" -> Past(EntryState.Seen, 2), "r2" -> Past(EntryState.Seen, 1), "r3" -> Past(EntryState.Seen, 1))
    val on = settings(ahead = true)
    assert(decide(Seq(agg), past, recent, on).due.isEmpty, "1 of 3 recurred")
    val d = decide(Seq(agg), past + ("r2" -> Past(EntryState.Seen, 3)), recent, on)
    assert(d.due == Seq(0) && d.retain.isEmpty && d.recentlyMet == Seq(0))
    assert(d.ahead == Map("a" -> "occurrence 1: persisted ahead, 2 of the last 3 aggregates first met inside a query recurred"))
    // Never the query's answer, nor over a held result; those are not judged (nor remembered) either.
    Seq(agg.copy(answer = true), agg.copy(heldInside = true)).foreach { c =>
      val no = decide(Seq(c), past + ("r2" -> Past(EntryState.Seen, 3)), recent, on)
      assert(no.due.isEmpty && no.retain == Seq(0) && no.recentlyMet.isEmpty)
    }
  }

  test("an occurrence counted earlier in the same query counts as recurred for persisting ahead") {
    val d = decide(Seq(join.copy(key = Right("r1")), agg), Map("r1" -> Past(EntryState.Seen, 1)), Seq("r1"), settings(ahead = true))
    assert(d.due == Seq(0, 1) && d.ahead.keySet == Set("a"))
  }

  test("a due subplan inside another due one is persisted only when it recurred more often; innermost first") {
    val candidates = IndexedSeq(join, agg.copy(within = Set(0)), Candidate(Right("b"), within = Set(0, 1)))
    val occurrences = Map(0 -> 2, 1 -> 2, 2 -> 5)
    assert(ReusePolicy.choose(candidates, Seq(0, 1, 2), occurrences) == List(2, 0))
    assert(ReusePolicy.choose(candidates, Seq(1, 2), occurrences) == List(2, 1))
    assert(ReusePolicy.choose(candidates, Seq(0, 1), occurrences) == List(0))
  }
}
