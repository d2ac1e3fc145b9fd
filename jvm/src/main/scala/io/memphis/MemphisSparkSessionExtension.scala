package io.memphis

import io.memphis.cache.RemoveOwnerMarks
import io.memphis.checkpoint.CheckpointFiles
import io.memphis.conf.{MemphisConf, MemphisSetupException}
import io.memphis.durable.DurableLayout
import io.memphis.lineage.ServedSubplanStrategy
import io.memphis.reuse.{BroadcastReuseRule, KeepResultStrategy, RetainShuffleStrategy, ShuffleReuseRule, SortCollectedRows}
import org.apache.spark.memphis.ui.MemphisTab
import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.execution.ColumnarRule
import org.apache.spark.sql.memphis.SparkRuntime

/**
 * Entry point named by `spark.sql.extensions=io.memphis.MemphisSparkSessionExtension`. It only
 * checks that it may run and registers; the behaviour lives in the registered pieces.
 *
 * Spark applies it while a session is created, after the SparkContext has started, so a bad
 * `spark.memphis.*` value or an unsupported Spark version stops the session from starting.
 */
class MemphisSparkSessionExtension extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    SparkRuntime.unsupportedSparkReason().foreach(reason => throw new MemphisSetupException(reason))
    MemphisConf.register()
    SparkRuntime.activeSparkContext.foreach { sc =>
      MemphisConf.validate(sc.getConf.getAll, MemphisSparkSessionExtension.directoryProblems(sc))
      // The memphis tab of the Spark UI, once per context (a Spark Connect server's sessions share it).
      MemphisTab.attach(sc)
    }
    MemphisTableFunctions.all.foreach(extensions.injectTableFunction)
    // One plan-normalization rule runs memphis's phases on each query, in the order it writes down.
    extensions.injectPlanNormalizationRule(session => new QueryNormalization(session))
    extensions.injectPlannerStrategy(_ => ServedSubplanStrategy)
    extensions.injectPlannerStrategy(_ => KeepResultStrategy)
    extensions.injectOptimizerRule(_ => RemoveOwnerMarks)
    extensions.injectOptimizerRule(_ => SortCollectedRows)
    // The shuffle a first occurrence keeps, and its reuse when the second occurrence is persisted.
    extensions.injectPlannerStrategy(_ => RetainShuffleStrategy)
    extensions.injectQueryStagePrepRule(_ => new ShuffleReuseRule(asQueryStage = true))
    extensions.injectColumnar(_ => new ColumnarRule {
      override def preColumnarTransitions = new ShuffleReuseRule(asQueryStage = false)
    })
    // Broadcasts built by earlier queries, read again by later ones (same two hooks).
    extensions.injectQueryStagePrepRule(session => new BroadcastReuseRule(session, asQueryStage = true))
    extensions.injectColumnar(session => new ColumnarRule {
      override def preColumnarTransitions = new BroadcastReuseRule(session, asQueryStage = false)
    })
  }
}

object MemphisSparkSessionExtension {
  import MemphisConf.{CheckpointDir, DurableDir}

  /**
   * The problems with `checkpoint.dir` and `durable.dir` in the SparkConf, if any: a directory memphis
   * cannot make or write. (The durable tier's default folder is not checked here: when it cannot be
   * used, the tier is off, with a warning.)
   */
  def directoryProblems(sc: org.apache.spark.SparkContext): Seq[String] = {
    val checkpoints = sc.getConf.getOption(CheckpointDir.key).flatMap(CheckpointDir.parse).filter(_.nonEmpty)
    val durableRoot = sc.getConf.getOption(DurableDir.key).flatMap(DurableLayout.explicitRoot)
    Seq(CheckpointDir -> checkpoints, DurableDir -> durableRoot).flatMap { case (entry, dir) =>
      dir.toSeq.flatMap(d => CheckpointFiles.unusable(d, sc.hadoopConfiguration)
        .map(why => s"${entry.key}=$d is not allowed: $why; expected ${entry.allowed}"))
    }
  }
}
