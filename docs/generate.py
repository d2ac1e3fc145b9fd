"""Writes the generated parts of the docs, so that a fact is written once:

- configuration.md's table of ``spark.memphis.*`` keys, from the conf table the build writes into the
  jar (``io.memphis.conf.MemphisConf`` declares it; ``memphis.jar_facts.conf_table()`` reads it);
- benchmarks.md's results, from the files the benchmark scripts write into ``benchmarks/results/``.

Each goes between a pair of marker comments; the text around them is hand-written. Run
``python docs/generate.py`` after changing a doc string in MemphisConf.scala (and building the jar) or
the results; ``tests/test_docs.py`` fails while a committed doc differs from what this writes. Not
imported by the package.
"""
import glob
import os
import sys

from memphis import jar_facts

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# Where each key is explained at length: links belong to the docs, not to the JVM's doc strings
# (`SET -v` prints those).
SEE = {
    "spark.memphis.shareAcrossUsers": "[reliability](reliability.md#who-may-read-what-jvm-tier)",
    "spark.memphis.reuse.retainedShuffles": "[reuse of Spark subplans](architecture.md#reuse-of-spark-subplans)",
    "spark.memphis.reuse.persistAhead": "[reuse of Spark subplans](architecture.md#reuse-of-spark-subplans)",
    "spark.memphis.checkpoint.minHeight": "[Rules](architecture.md#rules)",
    "spark.memphis.checkpoint.dir": "[Rules](architecture.md#rules)",
    "spark.memphis.loop.speculative": "[Rules](architecture.md#rules)",
    "spark.memphis.collected.maxBytes": "[Rules](architecture.md#rules)",
    "spark.memphis.durable.dir": "[the durable tier](architecture.md#the-durable-tier) and "
                                 "[local reuse](local-reuse.md#tiers-and-entry-states)",
    "spark.memphis.host.maxBytes": "[local reuse](local-reuse.md)",
    "spark.memphis.broadcast.maxBytes": "[the user guide](user-guide.md#broadcasting-driver-values)",
    "spark.memphis.broadcast.joinMaxBytes": "[Rules](architecture.md#rules)",
    "spark.memphis.gpu.memoryFraction": "[the GPU tier](gpu.md)",
    "spark.memphis.ui.retained": "[the memphis tab](user-guide.md#what-it-did-the-memphis-tab-of-the-spark-ui)",
}


def _cell(text: str) -> str:
    """Plain text (as `SET -v` prints it) that a table cell shows as written."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def conf_table_markdown(table: dict) -> str:
    """The table of keys, in the JVM's declaration order."""
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for key, row in table.items():
        default = f"`{row['default']}`" if row["default"] else "empty"
        meaning = row["doc"] + (f" See {SEE[key]}." if key in SEE else "")
        lines.append(f"| `{key}` | {default} | {_cell(row['allowed'])} | {_cell(meaning)} |")
    return "\n".join(lines)


def results_markdown(results: str = RESULTS) -> str:
    """Every results file the benchmark scripts wrote, by path, its headings put below this section's."""
    parts = []
    for path in sorted(glob.glob(os.path.join(results, "**", "*.md"), recursive=True)):
        name = os.path.relpath(path, ROOT).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            body = f.read().strip()
        body = "\n".join("###" + line if line.startswith("#") else line for line in body.splitlines())
        parts.append(f"### `{name}`\n\n{body}")
    return "\n\n".join(parts)


def with_section(text: str, name: str, body: str) -> str:
    """``text`` with what lies between the markers of section ``name`` replaced by ``body``."""
    begin, end = f"<!-- generated: {name} (python docs/generate.py) -->", f"<!-- end generated: {name} -->"
    head, found, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not (found and found_end):
        raise ValueError(f"no {begin} ... {end} markers")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def generated() -> dict:
    """``{path: the text it should have}`` for every doc with a generated section."""
    sections = {"configuration.md": ("conf table", conf_table_markdown(jar_facts.conf_table())),
                "benchmarks.md": ("results", results_markdown())}
    docs = {}
    for file, (name, body) in sections.items():
        path = os.path.join(DOCS, file)
        with open(path, encoding="utf-8") as f:
            docs[path] = with_section(f.read(), name, body)
    return docs


def main() -> int:
    for path, text in generated().items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
