package io.memphis.durable

/**
 * Whether a materialized entry is worth writing to the durable tier, asked once per entry when it
 * becomes materialized: its measured compute time must exceed the time to write its bytes and read
 * them back, and be at least [[DurableAdmission.MinCostMs]] (below it estimates of I/O time are
 * noise, as for the host tier's spill). The write bandwidth is learned from this tier's writes,
 * starting from a conservative guess; the read bandwidth is a conservative constant (a read happens
 * inside a user's query, whose scan time memphis does not take apart). A write's fixed cost (a Spark
 * job's start) is not charged: it runs in the background, off the user's queries.
 */
final class DurableAdmission {
  import DurableAdmission._

  // Invariant: `writeBytesPerMs` changes only under this object's lock.
  private var writeBytesPerMs: Double = InitialWriteBytesPerMs

  /** Right(why) to write an entry computed in `costMs` of `bytes` in Spark storage; Left(why) not to. */
  def verdict(costMs: Long, bytes: Long): Either[String, String] = synchronized {
    val ioMs = bytes / writeBytesPerMs + bytes / ReadBytesPerMs
    if (costMs < MinCostMs) Left(s"computed in $costMs ms, under $MinCostMs ms")
    else if (costMs <= ioMs) Left(f"computed in $costMs ms, no more than writing and reading its $bytes bytes ($ioMs%.0f ms)")
    else Right(f"computed in $costMs ms, more than writing and reading its $bytes bytes ($ioMs%.0f ms)")
  }

  /** A write of `bytes` took `ms`: learned when it is large enough for its bandwidth to show over a job's fixed cost. */
  def wrote(bytes: Long, ms: Long): Unit = if (bytes >= LearnFromBytes && ms > 0) synchronized {
    writeBytesPerMs = (writeBytesPerMs + bytes.toDouble / ms) / 2
  }

  def writeBandwidth: Double = synchronized(writeBytesPerMs)
}

object DurableAdmission {
  val MinCostMs = 10L
  /** 50 MB/s: slower than a local disk, about an object store's single stream. */
  val InitialWriteBytesPerMs = 50000.0
  /** 200 MB/s: Parquet read back by the query's tasks. */
  val ReadBytesPerMs = 200000.0
  val LearnFromBytes: Long = 1L << 20
}
