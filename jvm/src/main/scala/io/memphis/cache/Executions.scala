package io.memphis.cache

import org.apache.spark.SparkContext
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.execution.command.ExplainCommand

/**
 * Whether the query whose plan is normalized on this thread is being executed, or only planned (an
 * explain, a look at its optimized or executed plan, `cache()`, a Spark Connect AnalyzePlan): only
 * an executed query counts an occurrence. Decided on the thread, as the plan is normalized.
 *
 * Executed: a SQL execution runs on this thread (a classic action sets its id before it plans, so a
 * fresh Dataset's action is normalized inside its execution), unless it is an EXPLAIN statement,
 * which plans the query it explains inside its own execution; or a Spark Connect ExecutePlan
 * operation runs on this thread: Connect tags the operation's jobs before it plans, but plans before
 * it starts the SQL execution, so the execution id alone would miss it. In both, not when Spark's
 * CacheManager is the one normalizing.
 */
object Executions {
  /** The SQL execution running on this thread, if any. */
  def current(sc: SparkContext): Option[Long] =
    Option(sc.getLocalProperty(SQLExecution.EXECUTION_ID_KEY)).map(_.toLong)

  def executing(sc: SparkContext): Boolean =
    current(sc).fold(sc.getJobTags().exists(_.startsWith(ConnectOperationTag)))(id => !explains(id)) && !byCacheManager

  /**
   * Spark's CacheManager normalizes a plan it is asked to cache or uncache inside the command that
   * asks (`CACHE TABLE`, a temporary view dropped, as Spark Connect does after every
   * `spark.sql("… {df} …", df=df)`): a lookup, not a query run. Told by the stack, the one trace of
   * it the rule can see; read only for a plan that would otherwise count.
   */
  private[memphis] def byCacheManager: Boolean = Thread.currentThread.getStackTrace.exists(_.getClassName == CacheManagerClass)

  /**
   * Whether Spark's CacheManager normalizes the plan to cache it (`Dataset.persist`, `CACHE TABLE`):
   * memphis's own caching runs with the rules off, so this is a user's.
   */
  private[memphis] def cachingForUser: Boolean = Thread.currentThread.getStackTrace.exists(f =>
    f.getClassName == CacheManagerClass && f.getMethodName.startsWith("cacheQuery"))

  private val CacheManagerClass = "org.apache.spark.sql.execution.CacheManager"

  private def explains(execution: Long): Boolean =
    Option(SQLExecution.getQueryExecution(execution)).exists(_.logical.isInstanceOf[ExplainCommand])

  /** How the job tag of a Spark Connect ExecutePlan operation starts (Connect's ExecuteJobTag, Spark 3.5 on). */
  private[memphis] val ConnectOperationTag = "SparkConnect_OperationTag_"
}
