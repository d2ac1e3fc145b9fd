package io.memphis.lineage

import java.util.IdentityHashMap

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.catalyst.expressions.{Alias, AttributeReference, NamedExpression, UnsafeProjection}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.memphis.SparkShimImpl
import org.apache.spark.sql.types.{StructField, StructType}

/**
 * The identity of a subplan's result: equal keys mean equal results.
 *
 * `hash` (128 bits of SHA-256, hex) is a Merkle hash over the node's canonical text (`local`,
 * see [[CanonicalForm]]), its height, the fingerprints of the sources it reads itself and its
 * children's hashes. It is built only from content, so it is the same in every JVM. The canonical
 * forms are kept, so that a hit can be verified ([[sameLineage]]): a hash collision never serves
 * another plan's data. Sources are re-checked with [[sourcesUnchanged]] before a key is trusted.
 * The keys memphis holds share their equal nodes ([[HeldKeys]]).
 */
final case class LineageKey(hash: String, local: String, children: Seq[LineageKey],
    sources: Seq[SourceFingerprint], height: Int) {

  /** Equal hash and equal canonical forms all the way down. */
  def sameLineage(other: LineageKey): Boolean =
    (this eq other) || (hash == other.hash && height == other.height && local == other.local &&
      sources.map(_.digest) == other.sources.map(_.digest) &&
      children.corresponds(other.children)(_ sameLineage _))

  def allSources: Seq[SourceFingerprint] = sources ++ children.flatMap(_.allSources)

  /** Whether the key of hash `other` is this one or one of its descendants'. */
  def contains(other: String): Boolean = hash == other || children.exists(_.contains(other))

  /**
   * The hash of this plan over these sources whatever their state: the canonical forms, with each
   * source by its identity (paths, table id) instead of its fingerprint; a source that cannot change
   * (local rows, a pinned version) has no identity and counts by its digest. Two keys of one shape
   * and different hashes are the same plan over a source that changed: the durable tier names its
   * entries by shape, so that a changed source finds, and removes, the entry of its former state.
   */
  lazy val shapeHash: String = Canonical.sha((Seq(LineageKey.FormatVersion, local, height.toString) ++
    sources.map(s => s.identity.getOrElse(s.digest)) ++ children.map(_.shapeHash)).map(p => s"${p.length}:$p").mkString)

  /** Looks at every source again; false when any changed since the key was made. */
  def sourcesUnchanged: Boolean = allSources.forall(s => Unavailable.unless(s.recheck()).digest == s.digest)

  /** The names of the sources it reads, each once, in plan order. */
  def tables: Seq[String] = allSources.map(_.named).distinct

  /**
   * The subplan's shape in words, for people (the memphis tab): its nodes' class names, each over
   * its input, e.g. `Aggregate ← Join(Filter ← files, files)`; at most `maxChars` characters.
   */
  def shape(maxChars: Int): String = {
    def words(k: LineageKey): String = {
      val name = k.local.takeWhile(c => c != '(' && c != ' ').split('.').last
      k.children match {
        case Seq() => name
        case Seq(only) => s"$name ← ${words(only)}"
        case many => many.map(words).mkString(s"$name(", ", ", ")")
      }
    }
    val all = words(this)
    if (all.length <= maxChars) all else all.take(maxChars - 1) + "…"
  }

  /** The canonical form as an indented tree, with the sources under the node that reads them. */
  def explain: String = {
    val out = new StringBuilder
    def walk(k: LineageKey, depth: Int): Unit = {
      out.append("  " * depth).append(k.local).append('\n')
      k.sources.foreach(s => out.append("  " * (depth + 1)).append("source: ").append(s.describe).append('\n'))
      k.children.foreach(walk(_, depth + 1))
    }
    walk(this, 0)
    out.toString
  }
}

/**
 * A plan node that stands for a subplan whose result it holds (rows memphis kept on the driver, see
 * [[io.memphis.collected.CollectedResult]]): its key is that subplan's, so that the keys of the plans
 * around it are those of the plan it replaced. Its children are not keyed.
 */
trait StandsFor extends LogicalPlan {
  def standsForKey: LineageKey
}

/**
 * What keys depend on besides the plan: the Hadoop conf for listings (made only when a file
 * source needs it: copying it costs milliseconds), confs that shape partitions, and the plan a
 * user's cached relation holds for a subplan (`userCached`, memphis's marks stripped): Spark
 * substitutes that relation for the subplan, so its rows are the cached plan's, of the files that
 * plan listed.
 */
final class KeyContext(newHadoopConf: () => Configuration, val caseSensitive: Boolean, val partitioning: String,
    val maxListedFiles: Int, userCaches: Option[LogicalPlan => Option[LogicalPlan]] = None) {
  lazy val hadoopConf: Configuration = newHadoopConf()

  /** Whether the user may have cached relations Spark substitutes (looked up only then). */
  def usersCache: Boolean = userCaches.isDefined

  def userCached(plan: LogicalPlan): Option[LogicalPlan] = userCaches.flatMap(_(plan))

  /** This context for keying a cached plan itself (which Spark would find cached, as itself). */
  def withoutCaches: KeyContext = new KeyContext(() => hadoopConf, caseSensitive, partitioning, maxListedFiles)
}

object LineageKey {
  /** A key, or why there is none. */
  type Result = Either[String, LineageKey]

  // v2: listings skip what Spark skips and carry each file's content digest; analysis-drawn ids are ordinals.
  private[lineage] val FormatVersion = "memphis-lineage-v2"

  def of(plan: LogicalPlan, context: KeyContext): Result = new Builder(context).result(plan)

  /**
   * Every subplan's result, root first (transparent nodes share their child's); not below a node
   * that stands for a subplan ([[StandsFor]]).
   */
  def ofSubplans(plan: LogicalPlan, context: KeyContext): Seq[(LogicalPlan, Result)] = {
    val builder = new Builder(context)
    val all = ArrayBuffer.empty[(LogicalPlan, Result)]
    def visit(p: LogicalPlan): Unit = {
      all += p -> builder.result(p)
      if (!p.isInstanceOf[StandsFor]) p.children.foreach(visit)
    }
    visit(plan)
    all.toSeq
  }

  private final class Builder(context: KeyContext) {
    private val memo = new IdentityHashMap[LogicalPlan, Result]()

    def result(plan: LogicalPlan): Result = {
      val known = memo.get(plan)
      if (known != null) known
      else {
        val computed = compute(plan)
        memo.put(plan, computed)
        computed
      }
    }

    private def compute(plan: LogicalPlan): Result = unwrap(plan) match {
      case s: StandsFor => Right(s.standsForKey)
      case p if p ne plan => result(p)
      // A subplan over files that the user cached: Spark reads the cache, whose rows come from the files
      // its own plan listed (maybe before a writer changed them), so it keys as that plan.
      case p if context.usersCache && readsFiles(p) =>
        context.userCached(p).filter(_ ne p).fold(fromChildren(p))(cached => new Builder(context.withoutCaches).result(cached))
      case p => fromChildren(p)
    }

    private def readsFiles(p: LogicalPlan): Boolean = p.exists {
      case l: LogicalRelation => l.relation.isInstanceOf[HadoopFsRelation]
      case _ => false
    }

    /** The key of `plan` itself, over its children's. */
    private def fromChildren(plan: LogicalPlan): Result = {
      val children = plan.children.map(result)
      children.collectFirst { case Left(reason) => reason } match {
        case Some(reason) => Left(reason)
        case None =>
          try Right(build(plan, children.collect { case Right(k) => k }))
          catch { case e: NoKey => Left(e.reason) }
      }
    }

    /** Names and wrappers that do not change the result stand for what they wrap. */
    private def unwrap(plan: LogicalPlan): LogicalPlan = plan match {
      case s: SubqueryAlias => unwrap(s.child)
      case v: View => unwrap(v.child)
      case p: Project if p.projectList.map(renamed) == p.child.output => unwrap(p.child)
      case _ => plan
    }

    private def renamed(e: NamedExpression): NamedExpression = e match {
      case Alias(a: AttributeReference, _) => a
      case other => other
    }

    private def build(plan: LogicalPlan, children: Seq[LineageKey]): LineageKey = {
      val sources = ArrayBuffer.empty[SourceFingerprint]
      val local = text(plan, None, sources, i => "$" + i)
      val height = children.map(_.height).foldLeft(0)(math.max) + 1
      val parts = Seq(FormatVersion, local, height.toString) ++ sources.map(_.digest) ++ children.map(_.hash)
      LineageKey(Canonical.sha(parts.map(p => s"${p.length}:$p").mkString), local, children, sources.toSeq, height)
    }

    /** One node's canonical text; throws [[NoKey]] when it cannot have a key. */
    private def text(plan: LogicalPlan, outer: Option[CanonicalForm], sources: ArrayBuffer[SourceFingerprint],
        child: Int => String): String = {
      (Determinism.nodeRefusal(plan) ++ plan.expressions.flatMap(Determinism.refusal)).headOption
        .foreach(r => throw new NoKey(r))
      val own = plan match {
        case leaf: LeafNode => leafText(leaf, sources)
        case _ => new CanonicalForm(plan, outer, (p, scope) => inline(p, scope, sources)).text(child)
      }
      if (!Determinism.usesSeededRandom(plan)) own
      else if (plan.children.forall(Determinism.keepsScanOrder)) s"$own partitioning(${context.partitioning})"
      else throw new NoKey(s"seeded random values in ${plan.nodeName} over a shuffled input depend on row arrival order")
    }

    /** A subquery's plan written out in full inside the node that holds it (its sources count there). */
    private def inline(plan: LogicalPlan, outer: CanonicalForm, sources: ArrayBuffer[SourceFingerprint]): String = {
      val p = unwrap(plan)
      text(p, Some(outer), sources, i => inline(p.children(i), outer, sources))
    }

    // Positions and types: names of a scan's columns are in its schema, a local relation's do not matter.
    private def output(attrs: Seq[AttributeReference]): String = attrs.map(_.dataType.json).mkString("[", ",", "]")

    private def leafText(leaf: LeafNode, sources: ArrayBuffer[SourceFingerprint]): String = leaf match {
      case l: LogicalRelation => l.relation match {
        case fs: HadoopFsRelation =>
          val roots = fs.location.rootPaths.map(_.toString)
          val glob = fs.options.collectFirst { case (k, v) if k.equalsIgnoreCase("pathGlobFilter") => v }
          sources += DeltaVersion.of(fs.location, roots, context.hadoopConf)
            .getOrElse(FileListing.read(fs.location, roots, context.hadoopConf, context.maxListedFiles, glob))
          val options = fs.options.toSeq.map { case (k, v) => s"${Canonical.quote(k.toLowerCase)}=${Canonical.quote(v)}" }
          s"files(${fs.fileFormat.getClass.getName},data=${fs.dataSchema.json},partition=${fs.partitionSchema.json}," +
            s"bucket=${fs.bucketSpec.map(b => Canonical.quote(b.toString)).getOrElse("none")}," +
            s"options=${options.sorted.mkString("[", ",", "]")},caseSensitive=${context.caseSensitive}," +
            s"out=${output(l.output)})"
        case other => throw new NoKey(s"source ${other.getClass.getName} has no fingerprint")
      }
      case r: LocalRelation =>
        val project = UnsafeProjection.create(StructType(r.output.map(a => StructField(a.name, a.dataType, a.nullable))))
        val rows = r.data.iterator.map { row =>
          val bytes = project(row).getBytes
          s"${bytes.length}:${bytes.map(b => f"${b & 0xff}%02x").mkString}"
        }
        sources += LocalContent(r.data.size, Canonical.sha(rows.mkString(",")))
        s"local(out=${output(r.output.collect { case a: AttributeReference => a })})"
      case r: DataSourceV2Relation => tableText(r, sources)
      case _: Range | _: OneRowRelation => new CanonicalForm(leaf, None, (_, _) => "").text(_ => "")
      case ref if ref.nodeName == "CTERelationRef" =>
        throw new NoKey("a WITH clause Spark does not inline (not deterministic, or recursive) is read here")
      case other => throw new NoKey(s"source ${other.nodeName} has no fingerprint")
    }

    private def tableText(r: DataSourceV2Relation, sources: ArrayBuffer[SourceFingerprint]): String = {
      val (id, version) = SparkShimImpl.tableIdAndVersion(r.table)
        .getOrElse(throw new NoKey(s"table ${r.table.name()} names no id and version"))
      val reload = () => for {
        catalog <- r.catalog
        ident <- r.identifier
        table <- scala.util.Try(catalog.asInstanceOf[org.apache.spark.sql.connector.catalog.TableCatalog]
          .loadTable(ident)).toOption
        (_, v) <- SparkShimImpl.tableIdAndVersion(table)
      } yield v
      sources += TableVersion(r.table.getClass.getName, id, version)(reload)
      val options = r.options.asCaseSensitiveMap().entrySet().toArray.map(_.toString).sorted
      s"table(options=${options.map(Canonical.quote).mkString("[", ",", "]")}," +
        s"out=${output(r.output.collect { case a: AttributeReference => a })})"
    }
  }
}
