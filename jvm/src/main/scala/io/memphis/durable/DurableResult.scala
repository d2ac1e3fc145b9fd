package io.memphis.durable

import io.memphis.lineage.{LineageKey, ServedSubplan}
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.memphis.{CheckpointRelations, SparkShimImpl}
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * A subplan served from the durable tier: a Parquet scan of its entry's data folder, its columns
 * rebound to the subplan's output (types and nullability kept), under this node, which says what it
 * stands for ([[ServedSubplan]]). The optimized plan (`explain(true)`) shows it as
 * `DurableResult memphis <key>, <folder>`; the physical plan shows the scan of that folder.
 */
final case class DurableResult(hash: String, folder: String, child: LogicalPlan)(val standsForKey: LineageKey,
    val replaced: LogicalPlan, val savedMs: Long) extends ServedSubplan {
  override protected def otherCopyArgs: Seq[AnyRef] = Seq(standsForKey, replaced, Long.box(savedMs))
  override protected def withNewChildInternal(newChild: LogicalPlan): DurableResult =
    copy(child = newChild)(standsForKey, replaced, savedMs)
  def servedFrom: String = "the durable tier"
  override protected def stringArgs: Iterator[Any] = Iterator(s"memphis $hash", folder)
}

object DurableResult {
  /**
   * `subplan` (of key `key`) read from the entry in `entry` whose manifest is `m` (checked: its files
   * are exactly those of its one data folder). Only the folder is named to the reader: a scan of one
   * path is listed on the driver, where one path per file could start a listing job.
   */
  def apply(session: SparkSession, key: LineageKey, subplan: LogicalPlan, entry: Path, m: Manifest): DurableResult = {
    val folder = new Path(entry, m.dataFolders.head).toString
    val schema = DataType.fromJson(m.schema).asInstanceOf[StructType]
    val scan = SparkShimImpl.analyzedPlan(session.read.schema(schema).parquet(folder))
    DurableResult(key.hash, folder, CheckpointRelations.rebind(scan, subplan.output))(key, subplan, m.costMs)
  }
}
