package io.memphis.cache

import io.memphis.conf.MemphisConf
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * The confs one query's reuse decisions read, taken once from the session's SQL conf when the
 * query is considered, so that every step of it decides on the same values.
 *
 * @param sql the conf itself, for the budgets, which are measured when asked ([[io.memphis.reuse.MemoryAccounts]])
 */
final case class QueryConf(minOccurrences: Int, retainShuffles: Boolean, persistAhead: Boolean, sql: SQLConf)

object QueryConf {
  def apply(conf: SQLConf): QueryConf = {
    val minOccurrences = MemphisConf.MinOccurrences.get(conf)
    QueryConf(minOccurrences,
      retainShuffles = minOccurrences > 1 && MemphisConf.RetainedShuffles.get(conf) > 0 && SparkShimImpl.shuffleFilesKept(conf),
      persistAhead = minOccurrences > 1 && MemphisConf.PersistAhead.get(conf),
      sql = conf)
  }
}
