package io.memphis

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import org.scalatest.funsuite.AnyFunSuite

/**
 * The JVM packages' layers, bottom to top (what `tests/test_layering.py` checks for Python):
 *
 *  1. `org.apache.spark.sql.memphis`: access to Spark's internals (in Spark's package, for `private[sql]`).
 *  1. `io.memphis.conf`: the settings, the counters and log, the events memphis posts, the user of a session.
 *  1. `org.apache.spark.memphis.ui`: the memphis tab of the Spark UI and the History Server (in Spark's
 *     package, for `private[spark]`), built from memphis's events only.
 *  1. `io.memphis.lineage`: lineage keys.
 *  1. `io.memphis.cache`: the cache's own types (entries, eviction policy, admission, the entry table,
 *     the stores' trait, the marks it puts on plans) and the pieces that decide on entries.
 *  1. the stores: `checkpoint`, `collected`, `broadcasts`, `durable`.
 *  1. `io.memphis.facade`: `LineageCache`, the one object over the cache and the stores that the rules
 *     and the public faces talk to, with what it is made of (the stores built, releases, the heap's
 *     pressure valve, Spark's listener, the stats rows, the memory accounts).
 *  1. `io.memphis.reuse`: the Spark rules, the per-query context and the plan nodes.
 *  1. `io.memphis`: the extension, its one normalization rule and its public faces.
 *
 * A package imports from its own layer or below, and no packages import each other around a cycle.
 */
class LayeringSuite extends AnyFunSuite {
  import Layering._

  private lazy val mainUses = uses(mainSources)

  test("no import from a lower layer to a higher one and no cycle between the packages of the main sources") {
    val found = problems(mainUses, Layers)
    assert(found.isEmpty, found.mkString("\n", "\n", ""))
  }

  test("the checker fails on a planted upward import, naming file, line and packages") {
    val planted = uses(Seq(
      Source("conf/Planted.scala", "package io.memphis.conf\n\nimport io.memphis.reuse.{LineageCache, ReuseRule}\n"),
      Source("reuse/LineageCache.scala", "package io.memphis.reuse\n\nobject LineageCache\n")))
    assert(problems(planted, Layers) ==
      Seq("conf/Planted.scala:3: io.memphis.conf imports io.memphis.reuse, a higher layer"))
  }

  test("the checker fails on a planted cycle, and counts chained package clauses as imports") {
    val planted = uses(Seq(
      Source("collected/A.scala", "package io.memphis.collected\n\nobject A { val b = io.memphis.broadcasts.B }\n"),
      Source("broadcasts/B.scala", "package io.memphis\npackage broadcasts\n\n// PythonFacade, named in a comment, is not used\nobject B { def a = collected.A }\n"),
      Source("checkpoint/C.scala", "package io.memphis\npackage checkpoint\n\nobject C { def facade = PythonFacade }\n"),
      Source("PythonFacade.scala", "package io.memphis\n\nobject PythonFacade\n")))
    assert(problems(planted, Layers) == Seq(
      "checkpoint/C.scala:4: io.memphis.checkpoint imports io.memphis, a higher layer",
      "a cycle: io.memphis.broadcasts -> io.memphis.collected (broadcasts/B.scala:5) -> io.memphis.broadcasts (collected/A.scala:3)"))
  }
}

/** Reads the packages main sources declare and import; finds upward imports and cycles between packages. */
object Layering {
  val Layers: Seq[Set[String]] = Seq(Set("org.apache.spark.sql.memphis"), Set("io.memphis.conf"),
    Set("org.apache.spark.memphis.ui"), Set("io.memphis.lineage"),
    Set("io.memphis.cache"), Set("checkpoint", "collected", "broadcasts", "durable").map("io.memphis." + _),
    Set("io.memphis.facade"), Set("io.memphis.reuse"), Set("io.memphis"))

  final case class Source(file: String, text: String)

  /** `file`, at `line`, in package `from`, uses package `to`. */
  final case class Use(file: String, line: Int, from: String, to: String)

  /** Every main source (each Spark line's shims included), named relative to `src/main`. */
  def mainSources: Seq[Source] = {
    val root = Seq("src/main", "jvm/src/main").map(Paths.get(_)).find(Files.isDirectory(_))
      .getOrElse(sys.error(s"no src/main under ${Paths.get("").toAbsolutePath}"))
    val walk = Files.walk(root)
    val paths = try walk.toArray.toList.map(_.asInstanceOf[Path]) finally walk.close()
    paths.filter(_.toString.endsWith(".scala")).sortBy(_.toString).map(p =>
      Source(root.relativize(p).toString, new String(Files.readAllBytes(p), StandardCharsets.UTF_8)))
  }

  private val PackageClause = """(?m)^\s*package\s+([\w.]+)\s*$""".r
  private val Import = """\bimport\s+([\w.]+)""".r
  private val Qualified = """(?<![\w.])((?:_root_\.)?[a-z]\w*(?:\.[a-z]\w*)*)\.[A-Z]""".r
  private val Definition = """\b(?:class|object|trait)\s+(\w+)""".r

  /** The packages each source uses: by import, by qualified name, and through chained package clauses. */
  def uses(sources: Seq[Source]): Seq[Use] = {
    val code = sources.map(s => s -> blanked(s.text)).toMap
    def clauses(s: Source): Seq[String] = PackageClause.findAllMatchIn(code(s)).map(_.group(1)).toSeq
      .scanLeft("")((outer, p) => if (outer.isEmpty) p else s"$outer.$p").tail
    val packageOf = sources.map(s => s -> clauses(s).lastOption.getOrElse("")).toMap
    val known = packageOf.values.toSet
    val definedIn = sources.groupBy(packageOf).map { case (p, ss) => p -> ss.flatMap(s => Definition.findAllMatchIn(code(s)).map(_.group(1))).toSet }
    sources.flatMap { s =>
      val text = code(s)
      val from = packageOf(s)
      val visible = clauses(s)
      def line(at: Int) = text.substring(0, at).count(_ == '\n') + 1
      // A name resolves absolutely or against any package whose clause encloses the file.
      def resolve(path: String): Option[String] = {
        val parts = path.stripPrefix("_root_.").split('.').toSeq
        val candidates = (parts.length to 1 by -1).map(parts.take(_).mkString("."))
        (candidates ++ visible.reverse.flatMap(v => candidates.map(c => s"$v.$c"))).find(known)
      }
      val named = (Import.findAllMatchIn(text) ++ Qualified.findAllMatchIn(text)).flatMap(m =>
        resolve(m.group(1)).map(p => Use(s.file, line(m.start), from, p)))
      val outer = visible.init.flatMap { o =>
        definedIn.getOrElse(o, Set.empty).iterator.map(n => s"\\b$n\\b".r.findFirstMatchIn(text)).collectFirst {
          case Some(m) => Use(s.file, line(m.start), from, o)
        }
      }
      (named ++ outer).filter(_.to != from).toList.groupBy(_.to).values.map(_.minBy(_.line)).toSeq
    }.sortBy(u => (u.file, u.line, u.to))
  }

  /** Uses of a higher layer, then cycles between packages, each with where it is made. */
  def problems(uses: Seq[Use], layers: Seq[Set[String]]): Seq[String] = {
    def layer(p: String) = layers.indexWhere(_.contains(p))
    val unlayered = uses.flatMap(u => Seq(u.from, u.to)).distinct.filter(layer(_) < 0).map(p => s"$p is in no layer")
    val upward = uses.filter(u => layer(u.from) >= 0 && layer(u.from) < layer(u.to))
      .map(u => s"${u.file}:${u.line}: ${u.from} imports ${u.to}, a higher layer")
    val edges = uses.groupBy(_.from).map { case (p, us) => p -> us.groupBy(_.to).map { case (q, qs) => q -> qs.head } }
    unlayered ++ upward ++ cycles(edges).map { path =>
      val steps = path.zip(path.tail :+ path.head).map { case (a, b) => edges(a)(b) }
      s"a cycle: ${path.head}" + steps.map(u => s" -> ${u.to} (${u.file}:${u.line})").mkString
    }
  }

  /** One cycle per strongly connected group of packages, from its first package in order. */
  private def cycles(edges: Map[String, Map[String, Use]]): Seq[Seq[String]] = {
    def reach(from: String): Set[String] = {
      var seen = Set.empty[String]
      var todo = List(from)
      while (todo.nonEmpty) {
        val next = edges.getOrElse(todo.head, Map.empty).keys.filterNot(seen).toList
        seen ++= next
        todo = next ++ todo.tail
      }
      seen
    }
    val reached = edges.keys.map(p => p -> reach(p)).toMap
    val groups = edges.keys.toSeq.sorted.filter(p => reached(p).contains(p))
      .map(p => reached(p).filter(q => reached.getOrElse(q, Set.empty).contains(p))).distinct
    groups.map { group =>
      // The shortest way back to the group's first package, through the group.
      val start = group.min
      var paths = Seq(Seq(start))
      while (!paths.exists(p => p.length > 1 && p.last == start))
        paths = paths.flatMap(p => edges.getOrElse(p.last, Map.empty).keys.toSeq.sorted.filter(group).map(p :+ _))
      paths.find(p => p.length > 1 && p.last == start).get.init
    }
  }

  /** `text` with comments and string and character literals blanked out, line breaks kept. */
  private def blanked(text: String): String = {
    val out = new StringBuilder(text.length)
    var i = 0
    def blank(until: Int): Unit = { while (i < until) { out += (if (text(i) == '\n') '\n' else ' '); i += 1 } }
    def endOf(token: String, from: Int) = { val e = text.indexOf(token, from); if (e < 0) text.length else e + token.length }
    while (i < text.length) {
      if (text.startsWith("//", i)) blank(endOf("\n", i) - 1)
      else if (text.startsWith("/*", i)) blank(endOf("*/", i + 2))
      else if (text.startsWith("\"\"\"", i)) blank(endOf("\"\"\"", i + 3))
      else if (text(i) == '"') {
        var e = i + 1
        while (e < text.length && text(e) != '"' && text(e) != '\n') e += (if (text(e) == '\\') 2 else 1)
        blank(math.min(e + 1, text.length))
      } else if (text(i) == '\'' && i + 2 < text.length && (text(i + 2) == '\'' || text(i + 1) == '\\'))
        blank(endOf("'", if (text(i + 1) == '\\') i + 3 else i + 2))
      else { out += text(i); i += 1 }
    }
    out.toString
  }
}
