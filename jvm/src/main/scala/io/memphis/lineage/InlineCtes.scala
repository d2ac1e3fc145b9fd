package io.memphis.lineage

import scala.util.control.NonFatal

import io.memphis.conf.CacheStats
import org.apache.spark.sql.catalyst.optimizer.InlineCTE
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * Inlines a query's `WITH` clauses the way Spark's optimizer will (its own `InlineCTE` rule: every
 * deterministic CTE, and any referenced once): the first phase of memphis's plan normalization
 * ([[io.memphis.QueryNormalization]]).
 *
 * Why: the analyzed plan of a query with a CTE holds its definitions apart (`WithCTE`) and reads them
 * through `CTERelationRef`s, which carry an id Spark draws from a counter at each analysis. A subplan
 * over such a reference is not a computation on its own (it cannot be cached or planned apart from
 * the definition) and would key differently at every ask. Inlined, each reference is the subplan it
 * stands for, so it keys, is matched and is cached like any other; the optimizer would have inlined
 * the same CTEs before planning, so what runs is unchanged. A CTE Spark keeps apart (one that is not
 * deterministic, a recursive one) stays, and its reads get no key.
 */
object InlineCtes {
  /**
   * `plan` (analyzed) with its CTEs inlined: what memphis's other phases see of it, and key.
   * InlineCTE leaves a plan without a CTE (in it or its subqueries) as it is, at the cost of a look
   * at its tree bits.
   */
  def inlined(plan: LogicalPlan): LogicalPlan =
    try InlineCTE().apply(plan)
    catch {
      case NonFatal(e) =>
        CacheStats.log.warn(s"memphis: left this query's WITH clauses as they were after an internal error: $e", e)
        plan
    }
}
