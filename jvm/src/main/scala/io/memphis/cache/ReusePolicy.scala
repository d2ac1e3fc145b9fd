package io.memphis.cache

import scala.collection.mutable

/**
 * What memphis does with one query's candidate subplans, as a function of plain values: the
 * candidates (outermost first, as the plan is walked) and what the cache knew before the query.
 * No Spark, no shared state: [[io.memphis.LineageCache.consider]] gathers the input under the
 * cache's lock and carries the decisions out.
 *
 * Per candidate with a key: a first occurrence is seen (persisted at once when `minOccurrences` is
 * 1; an aggregate's is persisted ahead when at least half of the recent ones recurred, else keeps
 * its shuffle, unless it is inside another that keeps its shuffle and is not the query's answer: the
 * mark would change that one's input, whose second occurrence, planned alone, would then not match
 * its kept shuffle); a held one that Spark substitutes is served, and nothing under it is looked at (it
 * is not computed); any other counts an occurrence and is due on its `minOccurrences`-th, or at
 * once when it was evicted (it already proved its reuse). Only another query's ask is an occurrence:
 * the same subplan again in one query (a WITH clause inlined twice, a self-join) is computed once by
 * Spark's own exchange reuse, and persisting it there only adds the cost of filling a cache; nor
 * does such a subplan keep its shuffle, whose mark on one of its places would make that place differ
 * from the others, so that Spark computes it twice. And a first occurrence keeps its shuffle only
 * while the session's aggregates recur ([[RecentRecurrence.recurs]]): the mark keeps filters
 * and column pruning out of the aggregate, a price paid for a second occurrence that may never come.
 * Likewise, one due on its `minOccurrences`-th occurrence is persisted only while the ones due before
 * it came back (`persistRecurring`): a notebook whose queries changed since (other years, other
 * filters) meets their shared subplans a second time and often never a third, and filling a cached
 * relation that no query reads only slows the query that fills it. One held back that comes back
 * is due again, and the recurrence it shows lets it through. Either is persisted only while
 * persisting pays (`persistsRead`: at least half of the recent persists were read again, or of the
 * ones held back for that reason came back): in such a notebook a third or fourth occurrence is
 * often the last too (TPC-DS' edited pass at e879ba0: 8 persisted on their third occurrence, none
 * read, the queries that filled them 2–3× slower), and a re-run whose kept rows were let go meets
 * every subplan a second time and never a third (a 640 MiB driver at b7dc203: 36 persisted, 2 read).
 * Of the due ones that admission lets through, [[choose]] picks which to persist.
 */
object ReusePolicy {
  /**
   * A candidate subplan. `key`: its entry's id, or why it has no key. `within`: the positions of
   * the candidates that hold it (its own node elsewhere in the plan included). `cached`: Spark
   * substitutes its entry's cached relation for it. `othersHold`: another user's entry of the same
   * key holds a relation. `keepsShuffle`: an aggregate, whose first occurrence may keep its shuffle
   * or be persisted ahead. `answer`: part of the query's answer (its root and presentation), never
   * persisted ahead. `heldInside`: a held entry's subplan is inside it (ahead, it would nest).
   */
  final case class Candidate(key: Either[String, String], within: Set[Int] = Set.empty, collides: Boolean = false,
      cached: Boolean = false, othersHold: Boolean = false, keepsShuffle: Boolean = false, answer: Boolean = false,
      heldInside: Boolean = false)

  /** What the cache knew of an entry before the query. */
  final case class Past(state: EntryState.Value, occurrences: Int)

  /** What to count for one candidate (by position). */
  sealed trait Observation { def at: Int }
  object Observation {
    final case class NoKey(at: Int, reason: String) extends Observation
    final case class OtherUsers(at: Int) extends Observation
    final case class Collision(at: Int) extends Observation
    final case class FirstSeen(at: Int) extends Observation
    final case class Hit(at: Int) extends Observation
    final case class Miss(at: Int) extends Observation
  }

  /**
   * The decisions on one query, by candidate position: what to count, in order; which candidates
   * are served; which are due (in order), with why for those persisted ahead (by entry id);
   * which keep their first occurrence's shuffle; which aggregates join the recent ones, in order;
   * which reached their `minOccurrences`-th occurrence (they join the recently due ones), and which
   * are held back, not persisted: on that occurrence as the recently due ones did not come back, or
   * on any (`heldUnpaid`, they join the recent persists' outcomes) as persisting did not pay.
   */
  final case class Decisions(observed: Seq[Observation], served: Seq[Int], due: Seq[Int], ahead: Map[String, String],
      retain: Seq[Int], recentlyMet: Seq[Int], recentlyDue: Seq[Int], heldBack: Seq[Int], heldUnpaid: Seq[Int])

  /**
   * Decides on `candidates` given `past` (by entry id: the candidates' entries and the recent
   * aggregates'), `recent` (the ids of the aggregates first met inside earlier queries, oldest
   * first, at most `recentSize`), `persistRecurring` (whether the subplans due on their
   * `minOccurrences`-th occurrence in earlier queries came back: [[RecentRecurrence.recurs]]) and
   * `persistsRead` (whether persisting pays: [[RecentRecurrence.pays]] of the recent persists, read
   * again or not, and of those held back as it did not, back or not).
   */
  def decide(candidates: IndexedSeq[Candidate], past: Map[String, Past], recent: Seq[String], recentSize: Int,
      conf: QueryConf, persistRecurring: Boolean = true, persistsRead: Boolean = true): Decisions = {
    import Observation._
    var known = past
    var window = recent
    val observed = mutable.ArrayBuffer.empty[Observation]
    val served, due, retain, met, dueMet, heldBack, heldUnpaid = mutable.ArrayBuffer.empty[Int]
    val ahead = mutable.Map.empty[String, String]
    val metInQuery = mutable.Set.empty[String]
    val repeated = candidates.flatMap(_.key.toOption).groupBy(identity).collect { case (id, at) if at.size > 1 => id }.toSet
    candidates.indices.foreach { i =>
      val c = candidates(i)
      if (!served.exists(c.within.contains)) c.key match {
        case Left(reason) => observed += NoKey(i, reason)
        case Right(id) =>
          if (c.othersHold) observed += OtherUsers(i)
          val again = !metInQuery.add(id)
          known.get(id) match {
            case _ if c.collides => observed += Collision(i)
            case None =>
              known += id -> Past(EntryState.Seen, 1)
              observed += FirstSeen(i)
              if (conf.minOccurrences <= 1) due += i
              else if (c.keepsShuffle) {
                val recurred = window.map(known.get(_).exists(_.occurrences > 1))
                val why = if (conf.persistAhead && !c.answer && !c.heldInside) {
                  window = (window :+ id).takeRight(recentSize)
                  met += i
                  RecentRecurrence.reason(recurred, "aggregates first met inside a query")
                } else None
                why match {
                  case Some(w) =>
                    ahead(id) = s"occurrence 1: persisted ahead, $w"
                    due += i
                  case None => if (conf.retainShuffles && !repeated(id) && RecentRecurrence.recurs(recurred) &&
                      !retain.exists(o => c.within.contains(o) && !candidates(o).answer)) {
                    retain += i
                  }
                }
              }
            case Some(p) if again =>
              // Again in this same query (a WITH clause inlined twice, a self-join): Spark's own exchange and
              // subquery reuse computes it once; only another query's ask counts as a recurrence.
              if (EntryState.Holding.contains(p.state) && c.cached) {
                observed += Hit(i)
                served += i
              }
            case Some(p) =>
              val occurrences = p.occurrences + 1
              known += id -> p.copy(occurrences = occurrences)
              if (EntryState.Holding.contains(p.state) && c.cached) {
                observed += Hit(i)
                served += i
              } else {
                observed += Miss(i)
                if (p.state == EntryState.Evicted) due += i
                else if (occurrences >= conf.minOccurrences) {
                  if (occurrences == conf.minOccurrences) dueMet += i
                  if (occurrences == conf.minOccurrences && !persistRecurring) heldBack += i
                  else if (conf.minOccurrences > 1 && !persistsRead) {
                    heldBack += i
                    heldUnpaid += i
                  } else due += i
                }
              }
          }
      }
    }
    Decisions(observed.toList, served.toList, due.toList, ahead.toMap, retain.toList, met.toList, dueMet.toList,
      heldBack.toList, heldUnpaid.toList)
  }

  /**
   * Of the admitted due candidates (in order, outermost first), those to persist, innermost first
   * (an outer one's cached plan then reads the inner one's relation, and one job fills both). One
   * inside another is persisted only when it recurred more often than that one (it is shared
   * beyond it): otherwise the outer one serves every query that needs it.
   */
  def choose(candidates: IndexedSeq[Candidate], admitted: Seq[Int], occurrences: Int => Int): List[Int] =
    admitted.foldLeft(List.empty[Int]) { (picked, i) =>
      if (picked.filter(candidates(i).within.contains).forall(o => occurrences(i) > occurrences(o))) i :: picked else picked
    }
}
