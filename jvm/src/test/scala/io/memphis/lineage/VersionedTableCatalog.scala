package io.memphis.lineage

import java.util

import scala.collection.concurrent.TrieMap

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog._
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read._
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * A DSv2 catalog of one-column tables that name an id and a version, as lakehouse tables do
 * (`Table.id()`, `Table.version()`, from Spark 4.1; [[VersionedTable]]). Tests change a table by
 * replacing it with a new version.
 */
class VersionedTableCatalog extends TableCatalog {
  override def name(): String = "versioned"
  override def initialize(name: String, options: CaseInsensitiveStringMap): Unit = ()
  override def listTables(namespace: Array[String]): Array[Identifier] =
    VersionedTableCatalog.tables.keys.map(Identifier.of(Array.empty, _)).toArray
  override def loadTable(ident: Identifier): Table = VersionedTableCatalog.tables(ident.name())
  // The schema form of createTable: abstract in 3.5, and what the column form calls on later lines.
  override def createTable(ident: Identifier, schema: StructType, partitions: Array[Transform],
      properties: util.Map[String, String]): Table = throw new UnsupportedOperationException
  override def alterTable(ident: Identifier, changes: TableChange*): Table = throw new UnsupportedOperationException
  override def dropTable(ident: Identifier): Boolean = VersionedTableCatalog.tables.remove(ident.name()).isDefined
  override def renameTable(from: Identifier, to: Identifier): Unit = throw new UnsupportedOperationException
}

object VersionedTableCatalog {
  val tables = TrieMap.empty[String, VersionedTable]

  def put(name: String, version: Option[String], rows: Seq[Long]): Unit =
    tables.put(name, new VersionedTable(name, version.orNull, rows.toArray))
}

case class RowsPartition(rows: Seq[Long]) extends InputPartition

/** The scan of a [[VersionedTable]]: its rows in one partition. */
class RowsScanBuilder(schema: StructType, rows: Seq[Long]) extends ScanBuilder {
  override def build(): Scan = new Scan with Batch {
    override def readSchema(): StructType = schema
    override def toBatch: Batch = this
    override def planInputPartitions(): Array[InputPartition] = Array(RowsPartition(rows))
    override def createReaderFactory(): PartitionReaderFactory = RowsReaderFactory
  }
}

object RowsReaderFactory extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = new PartitionReader[InternalRow] {
    private val it = partition.asInstanceOf[RowsPartition].rows.iterator
    private var current: Long = 0
    override def next(): Boolean = it.hasNext && { current = it.next(); true }
    override def get(): InternalRow = InternalRow(current)
    override def close(): Unit = ()
  }
}
