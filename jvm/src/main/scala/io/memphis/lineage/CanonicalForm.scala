package io.memphis.lineage

import scala.collection.mutable

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.types.DataType
import org.apache.spark.unsafe.types.UTF8String

/** Thrown while building a canonical form when a node cannot have a key; carries the reason. */
final class NoKey(val reason: String) extends Exception(reason, null, false, false)

/**
 * The canonical text of one plan node, with its children left as `$0`, `$1`, ….
 *
 * Attribute references become positions in a child's output (`c1.3`: child 1, column 3), so
 * expression ids and alias names (which do not change results) drop out and the form is the same
 * in every JVM. Ids the node defines itself (aliases' targets, generator and aggregate results,
 * lambda variables, subquery expressions, a `With` expression's common operands) become local
 * ordinals in order of appearance: nothing Spark draws while analyzing enters the form. Operands of commutative
 * operators are ordered by their text, conjuncts and disjuncts flattened and ordered. Every value
 * is written from its content (class names, strings, numbers, JSON of types); a value with no
 * such text (a closure, an RDD, a connection) means no key.
 *
 * @param outer the scope of the enclosing node, for correlated subqueries
 * @param subquery writes out a subquery's plan held by this node, with this node as its outer scope
 */
private[lineage] final class CanonicalForm(node: LogicalPlan, outer: Option[CanonicalForm],
    subquery: (LogicalPlan, CanonicalForm) => String) {
  private val childPositions: Map[ExprId, String] = {
    val positions = for ((child, i) <- node.children.zipWithIndex; (a, j) <- child.output.zipWithIndex)
      yield a.exprId -> s"c$i.$j"
    positions.reverse.toMap // the first child that outputs an id names it
  }
  private val locals = mutable.LinkedHashMap.empty[ExprId, Int]
  private val drawn = mutable.LinkedHashMap.empty[Any, Int]

  private def local(id: ExprId): Int = locals.getOrElseUpdate(id, locals.size)

  private def ref(id: ExprId): String = childPositions.getOrElse(id, s"d${local(id)}")

  /** The node's text, with `child(i)` standing for its i-th child. */
  def text(child: Int => String): String = {
    // By identity: plans compare structurally, which costs a walk of the subtree.
    def index(p: Any): Int = node.children.indexWhere(_.asInstanceOf[AnyRef] eq p.asInstanceOf[AnyRef])
    name(node) + node.productIterator.map {
      case p: LogicalPlan if index(p) >= 0 => child(index(p))
      case ps: Seq[_] if ps.nonEmpty && ps.forall(index(_) >= 0) => ps.map(p => child(index(p))).mkString("[", ",", "]")
      case v => value(v)
    }.mkString("(", ",", ")")
  }

  def expression(e: Expression): String = e match {
    case a: AttributeReference => childPositions.getOrElse(a.exprId, s"d${local(a.exprId)}:${a.dataType.json}")
    case Alias(a: AttributeReference, _) => expression(a) // a rename
    case a: Alias => s"alias(${expression(a.child)})"
    case o: OuterReference =>
      val enclosing = outer.getOrElse(throw new NoKey("an outer reference outside a subquery"))
      s"outer(${enclosing.expression(o.e)})"
    case v: NamedLambdaVariable => s"lambda${local(v.exprId)}:${v.dataType.json}"
    case l: Literal => s"lit(${l.dataType.json},${literalText(l)})"
    case u: PythonUDF =>
      val code = Canonical.sha(u.func.command.toArray)
      s"pyudf(${u.evalType},${u.dataType.json},$code,${u.func.pythonVer}," +
        s"${u.children.map(expression).mkString("[", ",", "]")})"
    case _ if e.isInstanceOf[And] || e.isInstanceOf[Or] =>
      val parts = flatten(e, e.getClass).map(expression).sorted
      s"${name(e)}${parts.mkString("[", ",", "]")}"
    case b: BinaryExpression if Commutative.contains(b.getClass.getSimpleName) =>
      val operands = Seq(expression(b.left), expression(b.right)).sorted
      val others = b.productIterator.filterNot(v => (v.asInstanceOf[AnyRef] eq b.left) || (v.asInstanceOf[AnyRef] eq b.right))
      s"${name(b)}(${(others.map(value).toSeq ++ operands).mkString(",")})"
    case other => name(other) + other.productIterator.map(value).mkString("(", ",", ")")
  }

  // Swapping the two operands never changes these results; regrouping could (overflow, rounding),
  // so only And/Or are flattened.
  private val Commutative = Set("Add", "Multiply", "EqualTo", "EqualNullSafe", "BitwiseAnd", "BitwiseOr", "BitwiseXor")

  /** Class names without Spark's common package prefix: shorter forms, still unambiguous. */
  private def name(x: AnyRef): String = {
    val full = x.getClass.getName
    if (full.startsWith(CanonicalForm.SparkSql)) full.substring(CanonicalForm.SparkSql.length) else full
  }

  private def flatten(e: Expression, cls: Class[_]): Seq[Expression] =
    if (e.getClass == cls) e.children.flatMap(flatten(_, cls)) else Seq(e)

  private def literalText(l: Literal): String =
    try l.sql catch { case _: Exception => value(l.value) }

  private def value(v: Any): String = v match {
    case null => "null"
    case e: Expression => expression(e)
    case p: LogicalPlan => subquery(p, this)
    case id: ExprId => s"d${local(id)}"
    case id: Product with AnyRef if CanonicalForm.isIdentifier(id) =>
      if (!CanonicalForm.DrawnIds.contains(id.getClass.getSimpleName)) {
        throw new NoKey(s"${node.nodeName} holds a ${id.getClass.getName}, an identifier memphis does not know to be content")
      }
      s"${name(id)}#${drawn.getOrElseUpdate(id, drawn.size)}"
    case t: DataType => t.json
    case s: String => Canonical.quote(s)
    case s: UTF8String => Canonical.quote(s.toString)
    case _: Boolean | _: Byte | _: Short | _: Int | _: Long | _: Float | _: Double | _: Char => v.toString
    case None => "none"
    case Some(x) => s"some(${value(x)})"
    case m: scala.collection.Map[_, _] =>
      m.toSeq.map { case (k, x) => s"${value(k)}=${value(x)}" }.sorted.mkString("map(", ",", ")")
    case s: Iterable[_] => s.map(value).mkString("[", ",", "]")
    case a: Array[_] => a.map(value).mkString("[", ",", "]")
    case e: Enumeration#Value => e.toString
    case e: java.lang.Enum[_] => e.getDeclaringClass.getName + "." + e.name
    case c: Class[_] => c.getName
    case p: Product => name(p.asInstanceOf[AnyRef]) + p.productIterator.map(value).mkString("(", ",", ")")
    case other =>
      throw new NoKey(s"${node.nodeName} holds a ${other.getClass.getName}, which has no stable identity")
  }
}

private object CanonicalForm {
  val SparkSql = "org.apache.spark.sql."

  /**
   * Identifier classes whose values Spark draws from a counter while it analyzes a query (so the same
   * text gets new ones at every ask), by simple name since they are not on every line: each is written
   * as an ordinal in order of appearance within the node, as expression ids are. `CommonExpressionId`
   * names the shared operand of a `With` expression (Spark 4 analyzes `x BETWEEN a AND b` into one).
   * CTE ids are not here: [[InlineCtes]] removes the references that carry them.
   */
  val DrawnIds = Set("CommonExpressionId")

  /**
   * By rule, an identifier: a case class named `…Id` that holds only numbers, flags or UUIDs. One not
   * in [[DrawnIds]] means no key: it may be drawn at analysis (the form would differ at every ask) or
   * be content (an ordinal would make two computations one); which, memphis does not know.
   */
  def isIdentifier(p: Product): Boolean = p.getClass.getSimpleName.endsWith("Id") && p.productArity > 0 &&
    p.productIterator.forall {
      case _: Long | _: Int | _: Short | _: Byte | _: Boolean | _: java.util.UUID => true
      case _ => false
    }
}
