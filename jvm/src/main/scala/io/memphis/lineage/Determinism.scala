package io.memphis.lineage

import org.apache.spark.sql.catalyst.expressions.{Expression, Literal, Rand, Randn}
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * Which plans may have a key. Spark's own `deterministic` flag decides, with these corrections:
 *  - seeded `rand(s)`/`randn(s)` and `sample(seed)` repeat their values for the same input
 *    partitions, so they are allowed when every operator below keeps the rows of a scan in their
 *    order (no shuffle, whose arrival order varies); the key then records the partitioning confs;
 *  - a sample without a seed (Spark 4.2's unseeded `TABLESAMPLE`, drawn at run time) is refused;
 *  - functions Spark treats as constants within a query but that change between queries
 *    (current time and date, current user, catalog and database) are refused, and so are those it
 *    marks deterministic that draw random values (`aes_encrypt`'s initialization vector).
 */
object Determinism {
  // By simple class name: these classes move between Spark versions, their names do not.
  private val ContextDependent = Set("CurrentTimestamp", "Now", "CurrentDate", "CurrentTime", "LocalTimestamp",
    "CurrentTimeZone", "CurrentUser", "SessionUser", "CurrentDatabase", "CurrentCatalog", "CurrentBatchTimestamp")
  // Marked deterministic by Spark, but drawing random values at every run (found by FunctionExamplesKeySuite):
  // aes_encrypt's GCM and CBC modes draw the initialization vector, so each run's ciphertext differs.
  private val RandomDespiteFlag = Map("AesEncrypt" -> "aes_encrypt draws a random initialization vector at every run")
  private val Refused = ContextDependent ++ RandomDespiteFlag.keySet

  /** Why `e` (an expression of `node`) rules out a key, if it does. */
  def refusal(e: Expression): Option[String] =
    if (e.deterministic && !e.exists(c => Refused(name(c)))) None
    else e.collectFirst { case c if ContextDependent.contains(name(c)) => s"${c.prettyName}() changes between queries" }
      .orElse(e.collectFirst { case c if RandomDespiteFlag.contains(name(c)) => RandomDespiteFlag(name(c)) })
      .orElse {
        val withoutSeeded = e.transform { case r if isSeededRandom(r) => Literal(0.0) }
        if (withoutSeeded.deterministic) None
        else {
          val culprit = withoutSeeded.collectFirst {
            case x if !x.deterministic && x.children.forall(_.deterministic) => x
          }.getOrElse(withoutSeeded)
          Some(s"${culprit.prettyName} is non-deterministic" +
            (if (isUnseededRandom(culprit)) " (no seed)" else ""))
        }
      }

  private def name(e: Expression): String = e.getClass.getSimpleName

  /** Why `node` itself, apart from its expressions, rules out a key, if it does. */
  def nodeRefusal(node: LogicalPlan): Option[String] = node match {
    case s: Sample if !hasSeed(s) => Some("a sample without a seed (TABLESAMPLE) draws other rows at every run")
    case _ => None
  }

  // From Spark 4.2 a sample's seed is optional (none: drawn when it runs); earlier lines always hold one.
  private def hasSeed(s: Sample): Boolean = (s.seed: Any) match {
    case seed: Option[_] => seed.isDefined
    case _ => true
  }

  def isSeededRandom(e: Expression): Boolean = e match {
    case r: Rand => !r.hideSeed && r.child.foldable
    case r: Randn => !r.hideSeed && r.child.foldable
    case _ => false
  }

  private def isUnseededRandom(e: Expression): Boolean = e match {
    case r: Rand => r.hideSeed
    case r: Randn => r.hideSeed
    case _ => false
  }

  /** Whether `node` draws seeded random values whose order depends on its input's row order. */
  def usesSeededRandom(node: LogicalPlan): Boolean =
    node.isInstanceOf[Sample] || node.expressions.exists(_.exists(isSeededRandom))

  /** Operators that keep a scan's rows in order, partition by partition. */
  def keepsScanOrder(plan: LogicalPlan): Boolean = plan match {
    case _: Project | _: Filter | _: SubqueryAlias | _: View | _: LocalLimit | _: Sample => plan.children.forall(keepsScanOrder)
    case _: LeafNode => true
    case _ => false
  }
}
