package io.memphis.lineage;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A one-column DSv2 table that names an id and a version. In Java, so that one source serves every
 * Spark line: `Table.id()` and `version()` exist from Spark 4.1, and a Java method implements them
 * there without having to say `override` where they do not exist.
 */
public class VersionedTable implements SupportsRead {
  private final String tableName;
  private final String tableVersion;
  private final long[] rows;

  public VersionedTable(String tableName, String tableVersion, long[] rows) {
    this.tableName = tableName;
    this.tableVersion = tableVersion;
    this.rows = rows;
  }

  @Override public String name() { return tableName; }
  public String id() { return "id-of-" + tableName; }
  public String version() { return tableVersion; }

  @Override public StructType schema() {
    return new StructType(new StructField[] {DataTypes.createStructField("v", DataTypes.LongType, true)});
  }

  @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }

  @Override public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new RowsScanBuilder(schema(), scala.Predef.wrapLongArray(rows).toSeq());
  }
}
