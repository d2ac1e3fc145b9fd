package io.memphis.cache

import scala.collection.mutable

/**
 * The last `size` things met for the first time (or found due), newest last, and whether the
 * session's work recurs: when at least half of them (and at least one) came back, the next new one
 * is likely to come back too, and is kept at its first occurrence instead of its second. One that
 * has not come back counts as not recurring only once `settled` (given time to come back). Guarded
 * by its owner's lock.
 */
final class RecentRecurrence[T](size: Int, recurred: T => Boolean, settled: T => Boolean = (_: T) => true) {
  private val recent = mutable.Queue.empty[T]

  /** Records `t`, met for the first time; when it is worth keeping now, says why. */
  def firstMet(t: T, what: String): Option[String] = {
    val why = RecentRecurrence.reason(recent.map(recurred).toSeq, what)
    add(t)
    why
  }

  /** Records `t`, met for the first time, already judged. */
  def add(t: T): Unit = {
    recent.enqueue(t)
    if (recent.size > size) recent.dequeue()
  }

  /** Oldest first. */
  def items: Seq[T] = recent.toList

  /** Whether each recent one recurred, oldest first, leaving out those not back yet and not settled. */
  def judged: Seq[Boolean] = recent.toList.filter(t => recurred(t) || settled(t)).map(recurred)

  def clear(): Unit = recent.clear()
}

object RecentRecurrence {
  /** How many recent ones, none recurring, show that a session's work of their kind does not recur. */
  val NoRecurrenceAfter = 4

  /**
   * Whether the session's work of a kind still recurs, given whether each recent one recurred:
   * unless [[NoRecurrenceAfter]] or more were met and none came back. What memphis keeps for a
   * next occurrence is paid for now: a first occurrence's kept shuffle costs the query its filters
   * and column pruning inside the aggregate (TPC-DS' first pass: 141 shuffles kept, none read, its
   * queries up to 2× slower); a second occurrence's persist costs filling a cached relation, and
   * the filters Spark would push into that subplan's other uses.
   */
  def recurs(recurred: Seq[Boolean]): Boolean = recurred.size < NoRecurrenceAfter || recurred.contains(true)

  /**
   * Whether persisting a subplan that recurred still pays, given whether each recent bet paid (a
   * persist read again, a held-back one back): a fill costs about one computation of the subplan and
   * each read saves one, so a persist pays once read; it stops paying when [[NoRecurrenceAfter]] or
   * more were judged and fewer than half of them paid.
   */
  def pays(paid: Seq[Boolean]): Boolean = paid.size < NoRecurrenceAfter || 2 * paid.count(identity) >= paid.size

  /**
   * Whether a dearer bet is worth making, given whether each recent bet paid: a persist whose fill
   * computes more than its query needs (the query's filters reach into it) is made while none was
   * judged yet or one of them paid. A session whose persists are read (an exploration over one
   * aggregate by year) keeps filling at the second occurrence; one whose persists went unread (an
   * edited notebook) waits for a third.
   */
  def paysDearer(paid: Seq[Boolean]): Boolean = paid.isEmpty || paid.contains(true)

  /** Why the next new one is worth keeping now, given whether each recent one recurred: when at least half (and one) did. */
  def reason(recurred: Seq[Boolean], what: String): Option[String] = {
    val came = recurred.count(identity)
    if (came > 0 && 2 * came >= recurred.size) Some(s"$came of the last ${recurred.size} $what recurred") else None
  }
}
