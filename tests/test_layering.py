"""The Python package in layers: no module imports a layer above its own, and no imports go round in a cycle.

Every import counts, at module level or inside a function: an import hidden in a function is an
import all the same.
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python" / "memphis"

# Low to high: a module may import modules of its own layer and of the layers below. A name is that
# module; ``package.*`` is the package and every module under it.
LAYERS = [
    ("base", ["memphis._version", "memphis.errors", "memphis.jar_facts"]),  # jar_facts: the conf table from the jar
    ("backends", ["memphis.backends.*"]),  # what memphis knows of numpy and device arrays
    ("tiers", ["memphis.tiers.*"]),  # host, disk, GPU; the shared core; the Runtime of one cache
    ("tracing", ["memphis.tracing.*", "memphis.sklearn"]),  # lineage items, traced arrays, rewrites, @reuse; sklearn's memory
    ("spark", ["memphis.spark.*"]),  # the session, the jar and the JVM side, DataFrame keys, collect, broadcasts
    ("public", ["memphis", "memphis.__main__", "memphis.local", "memphis.gpu", "memphis.cli", "memphis.demo"]),
]


def module_names(root: pathlib.Path, package: str) -> dict:
    """{module name: its file} of every module under ``root``, the package ``package``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(root: pathlib.Path, package: str) -> dict:
    """{module: the modules of the package it imports}, module-level and function-level imports alike."""
    modules = module_names(root, package)
    graph = {}
    for name, path in modules.items():
        imported = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, one level up per extra dot
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from a import b`` imports the module a.b when there is one, else a name of a.
                imported.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                                for alias in node.names)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def layer_of(module: str, layers=LAYERS) -> int:
    """The index of ``module``'s layer; KeyError when no layer names it."""
    for index, (_, names) in enumerate(layers):
        for name in names:
            package = name.removesuffix(".*")
            if module == package or (name.endswith(".*") and module.startswith(package + ".")):
                return index
    raise KeyError(f"{module} is in no layer: add it to LAYERS in tests/test_layering.py")


def upward_imports(graph: dict, layers=LAYERS) -> list:
    """'importer (layer) -> imported (higher layer)' for every import of a layer above the importer's."""
    return [f"{a} ({layers[layer_of(a, layers)][0]}) -> {b} ({layers[layer_of(b, layers)][0]})"
            for a in sorted(graph) for b in sorted(graph[a]) if layer_of(b, layers) > layer_of(a, layers)]


def cycles(graph: dict) -> list:
    """The import cycles of ``graph``: each strongly connected set of two or more modules, sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_every_module_is_in_a_layer():
    unassigned = []
    for module in import_graph(PACKAGE, "memphis"):
        try:
            layer_of(module)
        except KeyError:
            unassigned.append(module)
    assert not unassigned, f"modules in no layer of LAYERS: {unassigned}"


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(import_graph(PACKAGE, "memphis")) == []


def test_no_imports_go_round_in_a_cycle():
    assert cycles(import_graph(PACKAGE, "memphis")) == []


# --- the detector itself, on packages and graphs made to fail ---------------------------------------

FAKE_LAYERS = [("low", ["pkg.low.*"]), ("high", ["pkg.high", "pkg"])]


def fake_package(root: pathlib.Path, files: dict) -> pathlib.Path:
    """The package ``pkg`` under ``root``, of ``files`` ({path in it: source})."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "pkg"


def test_the_detector_finds_an_upward_import_hidden_in_a_function(tmp_path):
    root = fake_package(tmp_path, {"__init__.py": "", "low/__init__.py": "",
                                   "low/core.py": "def f():\n    from pkg.high import g\n    return g()\n",
                                   "high.py": "from pkg.low import core\n\n\ndef g():\n    return 1\n"})
    graph = import_graph(root, "pkg")
    assert graph["pkg.low.core"] == {"pkg.high"} and graph["pkg.high"] == {"pkg.low.core"}
    assert upward_imports(graph, FAKE_LAYERS) == ["pkg.low.core (low) -> pkg.high (high)"]
    assert cycles(graph) == [["pkg.high", "pkg.low.core"]]


def test_the_detector_reads_relative_imports_and_submodules_named_in_from_imports(tmp_path):
    root = fake_package(tmp_path, {"__init__.py": "from .low import core\n", "low/__init__.py": "",
                                   "low/core.py": "from . import other\nfrom .. import high\n", "low/other.py": "",
                                   "high.py": ""})
    graph = import_graph(root, "pkg")
    assert graph["pkg"] == {"pkg.low.core"}
    assert graph["pkg.low.core"] == {"pkg.low.other", "pkg.high"}
    assert upward_imports(graph, FAKE_LAYERS) == ["pkg.low.core (low) -> pkg.high (high)"]


def test_the_detector_names_every_cycle_and_passes_a_layered_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert upward_imports({"pkg.high": {"pkg.low.x"}, "pkg.low.x": set()}, FAKE_LAYERS) == []
    with pytest.raises(KeyError, match="pkg.other is in no layer"):
        layer_of("pkg.other", FAKE_LAYERS)
