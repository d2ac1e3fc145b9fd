package org.apache.spark.sql.memphis

import scala.reflect.ClassTag

import org.apache.spark.rdd.{CheckpointRDD, RDD, RDDCheckpointData, ReliableCheckpointRDD}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, KnownNotNull}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.execution.LogicalRDD

/** The relations memphis cuts a growing plan with: lazily materialized local and reliable checkpoints. */
object CheckpointRelations {
  /**
   * `plan` as a lazily materialized local checkpoint (what `Dataset.localCheckpoint(eager = false)`
   * builds): a `LogicalRDD` over an RDD marked for local checkpointing, and that RDD. Nothing runs
   * for the last stage until a job reads the RDD; under adaptive execution the stages below it run now.
   */
  def localCheckpoint(session: SparkSession, plan: LogicalPlan): (LogicalPlan, RDD[_]) = {
    val relation = checkpointRelation(session, plan)
    (relation, relation.rdd)
  }

  /**
   * `plan` as a lazily materialized reliable checkpoint written to the folder `dir`: built like
   * [[localCheckpoint]] (its blocks are kept while the job that fills it runs, so writing the files
   * reads them instead of computing the plan again), then, once that job has filled it, written to
   * `dir` and read from there; its blocks are dropped. Unlike `Dataset.checkpoint`, the folder is
   * memphis's own, not `SparkContext.checkpointDir`, which belongs to the user.
   */
  def reliableCheckpoint(session: SparkSession, plan: LogicalPlan, dir: String): (LogicalPlan, RDD[_]) = {
    val relation = checkpointRelation(session, plan)
    relation.rdd.checkpointData = Some(new FolderCheckpointData(relation.rdd, dir))
    (relation, relation.rdd)
  }

  private def checkpointRelation(session: SparkSession, plan: LogicalPlan): LogicalRDD =
    SparkShimImpl.lazyLocalCheckpoint(session, plan) match {
      case r: LogicalRDD => r
      case other => throw new IllegalStateException(s"localCheckpoint made ${other.nodeName}, not a LogicalRDD")
    }

  /** Writes an RDD to `dir` after the first job that computes it (Spark calls `doCheckpoint` then). */
  private final class FolderCheckpointData[T: ClassTag](@transient private val rdd: RDD[T], dir: String)
      extends RDDCheckpointData[T](rdd) {
    override protected def doCheckpoint(): CheckpointRDD[T] = {
      val written = ReliableCheckpointRDD.writeRDDToCheckpointDirectory(rdd, dir)
      rdd.unpersist(blocking = false)
      written
    }
  }

  /**
   * A fresh instance of a relation that holds a subplan's result (a checkpoint's, a durable entry's
   * files) whose output carries the expression ids of `output` (the subplan's), so that the operators
   * above it stay resolved; a column the relation reads as nullable (file sources read every column
   * so) but the subplan knows to be non-null stays non-null.
   */
  def rebind(relation: LogicalPlan, output: Seq[Attribute]): LogicalPlan = {
    val fresh = relation match {
      case r: LogicalRDD => r.newInstance()
      case other => other
    }
    Project(output.zip(fresh.output).map { case (want, have) =>
      Alias(if (have.nullable && !want.nullable) KnownNotNull(have) else have, want.name)(
        exprId = want.exprId, qualifier = want.qualifier)
    }, fresh)
  }

  /** Bytes (memory + disk) of the blocks Spark stores for `rdd` now. */
  def storedBytes(rdd: RDD[_]): Long =
    rdd.sparkContext.getRDDStorageInfo(_.id == rdd.id).map(i => i.memSize + i.diskSize).sum

  /** Whether a local checkpoint's RDD has been materialized (its lineage is cut now). */
  def isCheckpointed(rdd: RDD[_]): Boolean = rdd.isCheckpointed
}
