package io.memphis.durable

import java.nio.ByteBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/** The file of collected rows: what goes in comes out, and a damaged or foreign file is refused, never read out of bounds. */
class CollectedRowsFileSuite extends AnyFunSuite {
  private val types = Seq(LongType, StringType, DecimalType(30, 4), BinaryType, DoubleType, DecimalType(10, 2))

  private val rows: Seq[InternalRow] = {
    val project = UnsafeProjection.create(types.zipWithIndex.map { case (t, i) => BoundReference(i, t, true) })
    Seq(
      InternalRow(1L, UTF8String.fromString("ein Straße ✓"), Decimal(BigDecimal("12345678901234567890.1234"), 30, 4),
        Array[Byte](1, 2, 3), 0.5, Decimal(BigDecimal("12.34"), 10, 2)),
      InternalRow(null, null, null, null, null, null),
      InternalRow(-7L, UTF8String.fromString(""), Decimal(BigDecimal("-1"), 30, 4), Array.emptyByteArray, Double.NaN,
        Decimal(BigDecimal("0"), 10, 2))
    ).map(r => project(r).copy())
  }

  test("rows come back equal, nulls, empty and multi-byte values included") {
    val back = CollectedRowsFile.decode(CollectedRowsFile.encode(rows, types.size), types)
    assert(back.map(_.map(_.asInstanceOf[UnsafeRow])) == Right(rows.map(_.asInstanceOf[UnsafeRow])))
  }

  test("only flat columns are written") {
    assert(CollectedRowsFile.unstorable(types).isEmpty)
    Seq(ArrayType(LongType), MapType(StringType, LongType), new StructType().add("a", LongType), CalendarIntervalType)
      .foreach(t => assert(CollectedRowsFile.unstorable(Seq(LongType, t)).exists(_.contains(t.simpleString)), t))
  }

  test("a truncated, padded, foreign or damaged file is refused") {
    val file = CollectedRowsFile.encode(rows, types.size)
    def refused(bytes: Array[Byte], as: Seq[DataType] = types) = CollectedRowsFile.decode(bytes, as).isLeft
    assert(refused(file.take(file.length - 8)))
    assert(refused(file ++ Array[Byte](0, 0, 0, 0)))
    assert(refused(file, types.take(2)), "rows of other columns")
    assert(refused("PAR1 not rows at all".getBytes("UTF-8")))
    assert(refused(ByteBuffer.allocate(8).putInt(types.size).putInt(Int.MaxValue).array()), "more rows than the file holds")
    // The first row's string points beyond its row: its offset-and-size word (column 1) made huge.
    val bitset = UnsafeRow.calculateBitSetWidthInBytes(types.size)
    val damaged = file.clone()
    ByteBuffer.wrap(damaged).putLong(8 + 4 + bitset + 8, (1L << 40) | 12L)
    assert(CollectedRowsFile.decode(damaged, types).left.exists(_.contains("outside the row")))
  }
}
