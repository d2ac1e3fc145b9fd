package io.memphis.cache

/**
 * Which materialized entry to let go of first when memphis holds more than its budget
 * (`spark.memphis.evictionPolicy`); the lowest score goes first, ties to the least recently used.
 *
 *  - `costnsize` (default, MEMPHIS): measured compute cost × (1 + hits + misses) / size. Keeps what
 *    is dear to recompute, often reused and small; a returning evicted entry (misses) counts more.
 *  - `lru`: last access. Suits sessions that move on and rarely look back.
 *  - `dagheight`: 1 / height of the subplan, so the deepest (most specific) goes first. Suits
 *    mini-batch loops, whose shallow shared inputs recur.
 */
object EvictionPolicy {
  def score(policy: String, e: CacheEntry): Double = policy match {
    case "lru" => e.lastAccess.toDouble
    case "dagheight" => 1.0 / e.key.height
    case _ => valuePerByte(e.costMs, e.hits + e.misses, e.sizeBytes)
  }

  /** `costnsize`'s score of anything memphis holds: what it saves per byte it takes. */
  def valuePerByte(costMs: Long, uses: Long, bytes: Long): Double = costMs.toDouble * (1 + uses) / math.max(bytes, 1L)

  /** Entries in the order they should be evicted. */
  def evictionOrder(policy: String, entries: Seq[CacheEntry]): Seq[CacheEntry] =
    entries.sortBy(e => (score(policy, e), e.lastAccess))
}
