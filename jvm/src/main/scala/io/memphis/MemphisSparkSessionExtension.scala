package io.memphis

import io.memphis.cache.RemoveOwnerMarks
import io.memphis.conf.{MemphisConf, MemphisSetupException}
import io.memphis.lineage.ServedSubplanStrategy
import io.memphis.reuse.{BroadcastReuseRule, KeepResultStrategy, RetainShuffleStrategy, ShuffleReuseRule, SortCollectedRows}
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
    SparkRuntime.activeSparkContext.foreach(sc => MemphisConf.validate(sc.getConf.getAll, MemphisConf.directoryProblems(sc)))
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
