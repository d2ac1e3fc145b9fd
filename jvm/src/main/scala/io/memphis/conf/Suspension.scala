package io.memphis.conf

/** memphis's own Spark calls on a thread, during which its normalization leaves plans alone. */
object Suspension {
  // A ThreadLocal because Spark gives no other way in: the CacheManager normalizes, on the caller's
  // thread, the plans memphis hands it, and the rule must know those calls are memphis's own. It
  // is a re-entrancy guard, not state passed between phases.
  private val suspendedHere: ThreadLocal[Boolean] = ThreadLocal.withInitial(() => false)

  /** Whether memphis's own Spark calls run on this thread (the phases then leave plans alone). */
  def isSuspended: Boolean = suspendedHere.get()

  /**
   * Runs `f` with memphis's phases off on this thread. Spark's CacheManager normalizes every plan
   * it is asked to cache or uncache, which runs them again: memphis's own calls must not count as
   * queries (an uncache would persist the subplans of what it lets go).
   */
  def suspended[T](f: => T): T = {
    val before = suspendedHere.get()
    suspendedHere.set(true)
    try f finally suspendedHere.set(before)
  }
}
