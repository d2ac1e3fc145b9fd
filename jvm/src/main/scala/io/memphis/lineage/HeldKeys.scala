package io.memphis.lineage

import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable

/**
 * The lineage keys memphis holds (its entries', its kept results'), each distinct node once, and
 * the bytes they take on the driver heap.
 *
 * A session's keys repeat: a query's subplans are subtrees of its own key, and later queries scan,
 * filter and join the same tables again. Measured on TPC-DS' 91 queries asked twice, the entries'
 * keys held 10.5 million characters of canonical forms counted per key, 2.7 million as distinct
 * objects and 0.95 million as distinct nodes. So a key is held as the node already held
 * for its hash when their lineage is the same (`sameLineage`: canonical forms and sources, all the
 * way down), and a node counts once, while anything holds it. A node of a held hash and another
 * lineage (a collision) is held apart, unshared.
 *
 * Each [[hold]] is matched by one [[release]] of the key it returned. Its lock is taken last, under
 * the cache's or the kept results' own, and calls nothing out.
 */
final class HeldKeys {
  // Invariant: `nodes` and their counts change only under this object's lock; `held` is the sum of
  // the bytes of the nodes in `nodes` and of the unshared keys held, read without the lock.
  private val nodes = mutable.HashMap.empty[String, HeldKeys.Node]
  private val held = new AtomicLong

  /** Bytes of the keys held, approximately. */
  def bytes: Long = held.get

  /** Distinct nodes held (shared ones). */
  def size: Int = synchronized(nodes.size)

  /** `key` as held: made of the nodes already held where their lineage is the same. */
  def hold(key: LineageKey): LineageKey = synchronized(intern(key))

  /** Lets go of a key [[hold]] returned: its nodes that nothing else holds are forgotten. */
  def release(key: LineageKey): Unit = synchronized(drop(key))

  private def intern(key: LineageKey): LineageKey = nodes.get(key.hash) match {
    case Some(n) if n.key.sameLineage(key) =>
      n.holders += 1
      n.key
    case Some(_) =>
      val apart = key.copy() // an object of its own: never taken for a held node when released
      held.addAndGet(HeldKeys.treeBytes(apart))
      apart
    case None =>
      val children = key.children.map(intern)
      val shared = if (children.corresponds(key.children)(_ eq _)) key else key.copy(children = children)
      nodes(key.hash) = new HeldKeys.Node(shared)
      held.addAndGet(HeldKeys.nodeBytes(shared))
      shared
  }

  private def drop(key: LineageKey): Unit = nodes.get(key.hash) match {
    case Some(n) if n.key eq key =>
      n.holders -= 1
      if (n.holders == 0) {
        nodes.remove(key.hash)
        held.addAndGet(-HeldKeys.nodeBytes(key))
        key.children.foreach(drop)
      }
    case _ => held.addAndGet(-HeldKeys.treeBytes(key))
  }
}

object HeldKeys {
  /** A held node and how many hold it: keys held, and the held nodes it is a child of. */
  private final class Node(val key: LineageKey) {
    var holders = 1
  }

  /** Bytes of a node's own objects besides its canonical text, estimated: the key, its 32-character hash, its lists. */
  val NodeBytes = 256L

  /** A node's bytes: its objects and its canonical text (one byte a character while all are Latin-1, as the JVM stores it). */
  def nodeBytes(key: LineageKey): Long =
    NodeBytes + (if (key.local.forall(_ < 256)) key.local.length else 2L * key.local.length)

  private def treeBytes(key: LineageKey): Long = nodeBytes(key) + key.children.map(treeBytes).sum
}
