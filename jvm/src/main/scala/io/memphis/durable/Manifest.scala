package io.memphis.durable

import scala.util.Try

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.ObjectNode
import io.memphis.lineage.LineageKey
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.types.{DataType, StructField, StructType}

/**
 * A data file of a durable entry: its path relative to the entry's folder, its bytes and modification
 * time, and the SHA-256 of its content where the reader checks it (collected rows; empty for Parquet).
 */
final case class DataFile(path: String, bytes: Long, modifiedMs: Long, sha256: String = "")

/** What the filesystem says of a data file at lookup: its bytes, modification time, and whether this user owns it. */
final case class FileSeen(bytes: Long, modifiedMs: Long, ownedByUser: Boolean)

/**
 * The manifest of a durable entry, committed last (a rename into place), so that a reader never
 * sees a partial result: what the data is (the lineage key's hash, its shape, its canonical forms
 * with the source fingerprints, `lineage`), whose it is (`owner`), how to read it (`schema`: the
 * columns as written, `c0`, `c1`, … with the subplan's types and nullability; `files`) and what it
 * cost (`costMs`, the measured compute time; `bytes`, `rows`, when it was written).
 */
final case class Manifest(format: String, key: String, shape: String, owner: String, lineage: JsonNode, schema: String,
    rows: Long, bytes: Long, costMs: Long, writtenMs: Long, files: Seq[DataFile]) {
  def toJson: String = {
    val node = Manifest.json.createObjectNode()
    node.put("format", format).put("key", key).put("shape", shape).put("owner", owner)
    node.set[JsonNode]("lineage", lineage)
    node.put("schema", schema).put("rows", rows).put("bytes", bytes).put("cost_ms", costMs).put("written_ms", writtenMs)
    val list = node.putArray("files")
    files.foreach { f =>
      val file = list.addObject().put("path", f.path).put("bytes", f.bytes).put("modified_ms", f.modifiedMs)
      if (f.sha256.nonEmpty) file.put("sha256", f.sha256)
    }
    Manifest.json.writerWithDefaultPrettyPrinter().writeValueAsString(node)
  }

  /** The data folders its files are in (one, as memphis writes them). */
  def dataFolders: Set[String] = files.map(_.path.takeWhile(_ != '/')).toSet

  /** The height of its subplan (from its canonical forms). */
  def height: Int = lineage.path("height").asInt(0)
}

object Manifest {
  /** The format of the tier's manifests of Spark results (Parquet); a manifest of another is not read. */
  val Format = "memphis-durable-spark-v1"

  private val json = new ObjectMapper()

  /** A data file's path as memphis writes it: one level under the entry's folder, in a data folder. */
  private val SafePath = (java.util.regex.Pattern.quote(DurableLayout.DataPrefix) + "[0-9a-f-]{36}/[A-Za-z0-9._=-]+").r

  /** The key's canonical forms and source fingerprints as JSON: equal JSON is equal lineage. */
  def lineageOf(key: LineageKey): JsonNode = {
    val node: ObjectNode = json.createObjectNode()
    node.put("hash", key.hash).put("height", key.height).put("local", key.local)
    val sources = node.putArray("sources")
    key.sources.foreach(s => sources.add(s.digest))
    val children = node.putArray("children")
    key.children.foreach(c => children.add(lineageOf(c)))
    node
  }

  /** The columns a subplan's result is written with: `c0`, `c1`, … (unique, valid in Parquet) with its types and nullability. */
  def schemaOf(output: Seq[Attribute]): StructType =
    StructType(output.zipWithIndex.map { case (a, i) => StructField(s"c$i", a.dataType, a.nullable) })

  /** The columns of collected rows, which carry types only: `c0`, `c1`, … of `types`, nullable. */
  def schemaOfTypes(types: Seq[DataType]): StructType =
    StructType(types.zipWithIndex.map { case (t, i) => StructField(s"c$i", t, nullable = true) })

  /** The manifest in `text`, or why it is not one. */
  def parse(text: String): Either[String, Manifest] = Try {
    val node = json.readTree(text)
    def text_(field: String): String = {
      val v = node.get(field)
      if (v == null || !v.isTextual) throw new IllegalArgumentException(s"no text field $field")
      v.asText
    }
    def number(n: JsonNode, field: String): Long = {
      val v = n.get(field)
      if (v == null || !v.isIntegralNumber) throw new IllegalArgumentException(s"no number field $field")
      v.asLong
    }
    val lineage = Option(node.get("lineage")).filter(_.isObject).getOrElse(throw new IllegalArgumentException("no lineage"))
    val list = Option(node.get("files")).filter(_.isArray).getOrElse(throw new IllegalArgumentException("no files"))
    val files = (0 until list.size).map(list.get).map { f =>
        val path = Option(f.get("path")).filter(_.isTextual).map(_.asText).getOrElse(throw new IllegalArgumentException("a file without a path"))
        val sha256 = Option(f.get("sha256")).filter(_.isTextual).map(_.asText).getOrElse("")
        DataFile(path, number(f, "bytes"), number(f, "modified_ms"), sha256)
      }.toList
    Manifest(text_("format"), text_("key"), text_("shape"), text_("owner"), lineage, text_("schema"), number(node, "rows"),
      number(node, "bytes"), number(node, "cost_ms"), number(node, "written_ms"), files)
  }.toEither.left.map(e => s"not a manifest (${e.getClass.getSimpleName}: ${e.getMessage})")

  /** What a reader does with a manifest. */
  sealed trait Verdict
  /** Its data is the subplan's result: read it. */
  final case class Serve(manifest: Manifest) extends Verdict
  /** The subplan's sources changed since it was written: remove it. */
  final case class Stale(why: String) extends Verdict
  /** Not to be trusted; removed when it is this user's and broken, left alone when it is someone else's. */
  final case class Refused(why: String, remove: Boolean) extends Verdict

  /**
   * Whether manifest `m` (parsed from an entry's folder, whose files are `seen` by their path there;
   * `manifestOwned`: whether this user owns the manifest file) serves the subplan of `key`, whose
   * result has `schema` (JSON) in `format`, for `user`. Checked in order: format, owner, shape, key (a
   * different key of the same shape is the same plan over changed sources), canonical forms and
   * fingerprints, schema, and every listed file: where memphis writes it, present with its bytes and
   * modification time, this user's, and no other data file beside them. (A checksum is the reader's
   * to check, on the bytes it reads.)
   */
  def verdict(m: Manifest, key: LineageKey, format: String, schema: String, user: String, shared: Boolean,
      manifestOwned: Boolean, seen: Map[String, FileSeen]): Verdict = {
    lazy val listed = m.files.map(_.path).toSet
    lazy val beside = seen.keys.filter(p => m.dataFolders.contains(p.takeWhile(_ != '/')) && !listed.contains(p))
    if (m.format != format) Refused(s"format ${m.format}, not $format", remove = false)
    else if (!shared && (m.owner != user || !manifestOwned)) {
      Refused(s"written for ${m.owner}${if (manifestOwned) "" else ", in a file another user owns"}, not $user", remove = false)
    } else if (m.shape != key.shapeHash) Refused(s"shape ${m.shape} in the folder of ${key.shapeHash}", remove = true)
    else if (m.key != key.hash) Stale(s"written for key ${m.key}: a source of the subplan changed since")
    else if (m.lineage != lineageOf(key)) Refused("its canonical forms or fingerprints differ from the subplan's (hash collision or tampering)", remove = true)
    else if (m.schema != schema) Refused("its schema differs from the subplan's output", remove = true)
    else if (m.files.isEmpty || m.dataFolders.size != 1) Refused("it lists no data files, or files in several folders", remove = true)
    else m.files.collectFirst {
      case f if !SafePath.pattern.matcher(f.path).matches() => s"file ${f.path} is not where memphis writes data"
      case f if !seen.contains(f.path) => s"file ${f.path} is missing"
      case f if seen(f.path).bytes != f.bytes || seen(f.path).modifiedMs != f.modifiedMs => s"file ${f.path} changed since it was written"
      case f if !shared && !seen(f.path).ownedByUser => s"file ${f.path} is owned by another user"
    }.orElse(beside.headOption.map(p => s"file $p lies among its data but is not listed")) match {
      case Some(why) => Refused(why, remove = !why.contains("another user"))
      case None => Serve(m)
    }
  }
}
