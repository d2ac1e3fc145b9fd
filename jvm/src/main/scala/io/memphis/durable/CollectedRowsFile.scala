package io.memphis.durable

import java.nio.{BufferUnderflowException, ByteBuffer}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.types.{BinaryType, DataType, DecimalType, StringType}

/**
 * The file a collected result is kept in by the durable tier: its rows as Spark's own row bytes
 * (`UnsafeRow`), so that a later process serves them without a job and without converting a value.
 * {{{
 *   int columns, int rows, then per row: int length, its bytes      (big-endian)
 * }}}
 * Only rows of flat columns (numbers, booleans, dates, timestamps, decimals, strings, binary) are
 * written: those [[decode]] can check completely before a row is trusted (every variable-length value
 * lies inside its row), so a damaged file is refused, never read out of bounds. The manifest holds the
 * file's SHA-256 and the Spark line it was written by ([[CollectedRowsFile.Format]]).
 */
object CollectedRowsFile {
  /** The manifest format of collected rows: the row bytes are Spark's, so the Spark line is part of it. */
  def format: String = s"memphis-durable-rows-v1 spark-${org.apache.spark.SPARK_VERSION.split('.').take(2).mkString(".")}"

  /** Why rows of columns of `types` are not written, if they are not. */
  def unstorable(types: Seq[DataType]): Option[String] =
    types.find(t => !UnsafeRow.isFixedLength(t) && !variable(t))
      .map(t => s"a column of type ${t.simpleString} (only flat columns are kept across processes)")

  private def variable(t: DataType): Boolean = t match {
    case _: StringType | BinaryType | _: DecimalType => true
    case _ => false
  }

  /** The file's bytes for `rows` (UnsafeRows of `columns` fields). */
  def encode(rows: Seq[InternalRow], columns: Int): Array[Byte] = {
    val bytes = rows.map(_.asInstanceOf[UnsafeRow].getBytes)
    val buffer = ByteBuffer.allocate(8 + bytes.map(_.length + 4).sum)
    buffer.putInt(columns).putInt(rows.size)
    bytes.foreach(b => buffer.putInt(b.length).put(b))
    buffer.array()
  }

  /** The rows in `file` for columns of `types`, or why it is not such a file. */
  def decode(file: Array[Byte], types: Seq[DataType]): Either[String, IndexedSeq[InternalRow]] = try {
    val in = ByteBuffer.wrap(file)
    val columns = in.getInt
    val count = in.getInt
    val fixed = UnsafeRow.calculateBitSetWidthInBytes(types.size) + 8 * types.size
    val varying = types.indices.filter(i => !UnsafeRow.isFixedLength(types(i)))
    if (columns != types.size) Left(s"rows of $columns columns, not ${types.size}")
    else if (count < 0 || count.toLong * (fixed + 4) > in.remaining) Left(s"$count rows cannot fit in ${file.length} bytes")
    else {
      val rows = (0 until count).map { n =>
        val length = in.getInt
        if (length < fixed || length % 8 != 0 || length > in.remaining) throw new IllegalArgumentException(s"row $n has $length bytes")
        val bytes = new Array[Byte](length)
        in.get(bytes)
        val row = new UnsafeRow(types.size)
        row.pointTo(bytes, length)
        varying.foreach { i =>
          if (!row.isNullAt(i)) {
            val at = row.getLong(i)
            val (offset, size) = ((at >>> 32).toInt, at.toInt)
            if (offset < fixed || size < 0 || offset.toLong + size > length) {
              throw new IllegalArgumentException(s"row $n's column $i lies outside the row")
            }
          }
        }
        row
      }
      if (in.hasRemaining) Left(s"${in.remaining} bytes after the last row") else Right(rows)
    }
  } catch {
    case e @ (_: IllegalArgumentException | _: BufferUnderflowException) => Left(s"not a file of rows (${e.getMessage})")
  }
}
