"""The import layers hold: ``graph`` <- ``cost`` <- algorithms <- cli / chapters, and no cycles.

Every ``import`` of the package by the package is read from the source (at module level and
inside functions alike: a deferred import is still a dependency), resolved to a module, and
checked against the layer each module belongs to. A module may import from its own layer or
below, never above; and the module graph has no cycle at all (no ``brkga`` <-> ``bounds``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

PKG = Path(__file__).resolve().parent.parent / "devplace_lite"

# lowest first; a module's layer is that of its longest listed prefix
LAYERS = [
    {"errors", "dag", "files", "compiled", "progress"},  # no dependency inside the package
    {"graph", "devices"},                                # the data model
    {"units"},                                           # the one unit model
    {"cost"},                                            # the one cost model
    {"result", "io", "generators", "schedule"},          # what methods return, read and generate
    {"ideals", "slicing", "dp", "exhaustive", "baselines", "heuristics", "mip", "bounds", "brkga",
     "latency_model", "latency_bounds", "latency_search", "latency_segments", "multidim", "sim", "rebalance", "rl",
     "methods"},                                         # the algorithms (and their registry)
    {"solve"},                                           # the front door: budget, certificate, status
    {"", "cli", "commands", "exercises", "pipeline", "profile", "zoo", "plot", "student",
     "data_build", "schedule_sim", "schedule_search"},                                      # what users and chapters call
]


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module a dotted name inside the package refers to (a module, or a name in one)."""
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def import_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for mod, path in MODULES.items():
        g.add_node(mod)
        base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                b = base[:len(base) - node.level + 1]
                prefix = ".".join(b + ([node.module] if node.module else []))
                names = [prefix] if node.module else [f"{prefix}.{a.name}".strip(".") for a in node.names]
                names += [f"{prefix}.{a.name}".strip(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("devplace_lite"):
                prefix = node.module[len("devplace_lite"):].lstrip(".")
                names = [prefix] + [f"{prefix}.{a.name}".strip(".") for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name[len("devplace_lite."):] for a in node.names if a.name.startswith("devplace_lite.")]
            for name in names:
                target = _resolve(name)
                if target is not None and target != mod and not mod.startswith(target + "."):
                    g.add_edge(mod, target)
    return g


def layer(mod: str) -> int:
    best, rank = -1, None
    for i, names in enumerate(LAYERS):
        for prefix in names:
            if (mod == prefix or mod.startswith(prefix + ".") or prefix == "") and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"module {mod} is in no layer: add it to LAYERS"
    return rank


def test_every_module_has_a_layer():
    for mod in MODULES:
        layer(mod)


def test_no_module_imports_from_a_layer_above_its_own():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges if layer(b) > layer(a)]
    assert not bad, "imports that reach up: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_the_import_graph_has_no_cycle():
    g = import_graph()
    cycles = [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("mod,forbidden", [("sim", "plot"), ("latency_model", "plot"), ("brkga", "bounds"),
                                           ("cost", "dp"), ("graph", "cost")])
def test_named_rules(mod, forbidden):
    """The rules the issue names, spelled out (each also follows from the layers)."""
    g = import_graph()
    reach = nx.descendants(g, mod)
    assert not any(r == forbidden or r.startswith(forbidden + ".") for r in reach), (mod, forbidden)


def test_the_package_and_its_public_surface_import_without_torch():
    code = ("import sys, devplace_lite as d; d.partition, d.bound, d.load_graph, d.Cluster, d.evaluate; "
            "import devplace_lite.cli, devplace_lite.dp, devplace_lite.bounds, devplace_lite.mip.throughput; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_package_is_typed():
    assert (PKG / "py.typed").is_file()
