package io.memphis.conf

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}

/**
 * Every `spark.memphis.*` key as JSON ({"key", "default", "allowed", "doc", "static"}, in
 * [[MemphisConf.All]]'s order). The build writes it into the jar (`io/memphis/confs.json`), where
 * the Python package reads its keys and defaults, so that [[MemphisConf]] is their one source.
 */
object ConfTable {
  def json: String = MemphisConf.All.map { e =>
    Seq("key" -> quoted(e.key), "default" -> quoted(e.default), "allowed" -> quoted(e.allowed),
      "doc" -> quoted(e.doc), "static" -> e.static.toString)
      .map { case (name, value) => s""""$name": $value""" }.mkString("{", ", ", "}")
  }.mkString("[\n", ",\n", "\n]\n")

  private def quoted(text: String): String = "\"" + text.flatMap {
    case '"' => "\\\""
    case '\\' => "\\\\"
    case c if c < ' ' => f"\\u${c.toInt}%04x"
    case c => c.toString
  } + "\""

  /** Writes the table to the file named by the one argument (the build's call). */
  def main(args: Array[String]): Unit = {
    val path = Paths.get(args(0))
    Files.createDirectories(path.getParent)
    Files.write(path, json.getBytes(StandardCharsets.UTF_8))
  }
}
