package io.memphis.reuse

import scala.collection.mutable

/**
 * The last `size` things met for the first time, newest last, and whether the session's work
 * recurs: when at least half of them (and at least one) came back, the next new one is likely to
 * come back too, and is kept at its first occurrence instead of its second. Guarded by its owner's lock.
 */
final class RecentRecurrence[T](size: Int, recurred: T => Boolean) {
  private val recent = mutable.Queue.empty[T]

  /** Records `t`, met for the first time; when it is worth keeping now, says why. */
  def firstMet(t: T, what: String): Option[String] = {
    val before = recent.size
    val came = recent.count(recurred)
    recent.enqueue(t)
    if (recent.size > size) recent.dequeue()
    if (came > 0 && 2 * came >= before) Some(s"$came of the last $before $what recurred") else None
  }

  def clear(): Unit = recent.clear()
}
