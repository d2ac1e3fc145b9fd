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
 * (`Table.id()`, `Table.version()`). Tests change a table by replacing it with a new version.
 */
class VersionedTableCatalog extends TableCatalog {
  override def name(): String = "versioned"
  override def initialize(name: String, options: CaseInsensitiveStringMap): Unit = ()
  override def listTables(namespace: Array[String]): Array[Identifier] =
    VersionedTableCatalog.tables.keys.map(Identifier.of(Array.empty, _)).toArray
  override def loadTable(ident: Identifier): Table = VersionedTableCatalog.tables(ident.name())
  override def createTable(ident: Identifier, columns: Array[Column], partitions: Array[Transform],
      properties: util.Map[String, String]): Table = throw new UnsupportedOperationException
  override def alterTable(ident: Identifier, changes: TableChange*): Table = throw new UnsupportedOperationException
  override def dropTable(ident: Identifier): Boolean = VersionedTableCatalog.tables.remove(ident.name()).isDefined
  override def renameTable(from: Identifier, to: Identifier): Unit = throw new UnsupportedOperationException
}

object VersionedTableCatalog {
  val tables = TrieMap.empty[String, VersionedTable]

  def put(name: String, version: Option[String], rows: Seq[Long]): Unit =
    tables.put(name, new VersionedTable(name, version, rows))
}

class VersionedTable(tableName: String, tableVersion: Option[String], rows: Seq[Long]) extends Table with SupportsRead {
  override def name(): String = tableName
  override def id(): String = s"id-of-$tableName"
  override def version(): String = tableVersion.orNull
  override def schema(): StructType = StructType(Seq(StructField("v", LongType)))
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = () => new Scan with Batch {
    override def readSchema(): StructType = schema()
    override def toBatch: Batch = this
    override def planInputPartitions(): Array[InputPartition] = Array(RowsPartition(rows))
    override def createReaderFactory(): PartitionReaderFactory = RowsReaderFactory
  }
}

case class RowsPartition(rows: Seq[Long]) extends InputPartition

object RowsReaderFactory extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = new PartitionReader[InternalRow] {
    private val it = partition.asInstanceOf[RowsPartition].rows.iterator
    private var current: Long = 0
    override def next(): Boolean = it.hasNext && { current = it.next(); true }
    override def get(): InternalRow = InternalRow(current)
    override def close(): Unit = ()
  }
}
