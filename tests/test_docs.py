"""The docs' generated parts are what docs/generate.py writes from their one source (the jar's conf
table, the benchmark scripts' results), and every relative link in README.md and docs/ resolves."""
import glob
import importlib.util
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", os.path.join(ROOT, "docs", "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_docs_are_what_the_generator_writes():
    for path, text in _generator().generated().items():
        with open(path, encoding="utf-8") as f:
            assert f.read() == text, (f"{os.path.relpath(path, ROOT)} differs from what its sources say: "
                                      "run `python docs/generate.py` (after `make jar` for the conf table)")


def test_a_section_without_its_markers_is_refused():
    generator = _generator()
    assert generator.with_section("a <!-- generated: x (python docs/generate.py) -->old<!-- end generated: x --> b",
                                  "x", "new") == \
        "a <!-- generated: x (python docs/generate.py) -->\nnew\n<!-- end generated: x --> b"
    try:
        generator.with_section("no markers", "x", "new")
    except ValueError:
        pass
    else:
        raise AssertionError("a doc without markers was accepted")


def test_the_readme_stays_short():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 210, "README.md is the front page: details belong in docs/"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_resolves():
    problems = []
    for doc in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(doc), file)) if file else doc
            if not os.path.exists(path):
                problems.append(f"{os.path.relpath(doc, ROOT)}: {target}")
            elif anchor and path.endswith(".md"):
                with open(path, encoding="utf-8") as f:
                    anchors = {_anchor(line.lstrip("#")) for line in f if line.startswith("#")}
                if anchor not in anchors:
                    problems.append(f"{os.path.relpath(doc, ROOT)}: {target} (no such heading)")
    assert not problems, problems
