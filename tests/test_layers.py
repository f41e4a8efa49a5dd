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

# lowest first; a module's layer is that of its longest listed prefix. The rooms (subpackages
# named after a problem) sit above the core modules at the package root, and one room may use
# another only downwards: latency builds on throughput, never the reverse.
LAYERS = [
    {"errors", "dag", "files", "compiled", "progress", "methods"},  # no dependency inside the package
    {"graph", "devices"},                                # the data model
    {"units"},                                           # the one unit model
    {"cost"},                                            # the one cost model
    {"result", "io", "generators", "sim", "plot", "options"},  # what methods return, read, generate, draw
    {"mip"},                                             # the integer-program engine
    {"throughput"},                                      # the max-load problem: methods and bounds
    {"single_sample", "schedules", "multidim", "rl"},    # problems that build on it
    {"solve"},                                           # the front door: budget, certificate, status
    {"", "cli", "commands", "pipeline", "zoo"},          # what users, chapters and the course call
]
#: The rooms: subpackages named after the problem they solve (docs/design.md says why each).
ROOMS = ("throughput", "single_sample", "schedules", "multidim", "rl", "pipeline", "mip", "commands", "zoo")
#: The course (book build, student edition, grader) is a package of its own beside the library: it
#: imports the library, never the reverse.
COURSE = "devplace_course"


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


#: Calls down from the front door into the model planner above it: `solve.plan` runs the planner
#: under its budget, and the planner calls `solve` back for its chain split and its Budget (issue
#: 41: solve owns the budget and status of every plan). The one edge that reaches up, and the
#: one cycle, by design: imported inside the function only (`test_the_front_doors_call_up_on_call_only`),
#: so that importing `solve` loads no planner and no torch.
FRONT_DOOR_CALLS = {("solve", "pipeline.mesh_plan")}


def import_graph(calls: bool = False) -> nx.DiGraph:
    """The package's import graph; without ``calls``, less `FRONT_DOOR_CALLS`."""
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
                if target is not None and target != mod and not mod.startswith(target + ".") \
                        and (calls or (mod, target) not in FRONT_DOOR_CALLS):
                    g.add_edge(mod, target)
    return g


def room(mod: str) -> str:
    """The room a module lives in: ``core`` for the shared model at the package root, and the
    front door (``solve``), the command line (``cli``) and the public surface (``__init__``) apart."""
    top = mod.split(".")[0]
    return top if top in ROOMS else {"": "__init__", "solve": "solve", "cli": "cli"}.get(mod, "core")


def room_graph() -> nx.DiGraph:
    """Which room imports which (the picture in docs/design.md)."""
    g = nx.DiGraph()
    for a, b in import_graph().edges:
        if room(a) != room(b):
            g.add_edge(room(a), room(b))
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


def test_the_front_doors_call_up_on_call_only():
    """`FRONT_DOOR_CALLS` are imports inside a function, never at module level, and importing the
    front door loads none of their targets."""
    g = import_graph(calls=True)
    for a, b in FRONT_DOOR_CALLS:
        assert g.has_edge(a, b), f"{a} no longer imports {b}: drop it from FRONT_DOOR_CALLS"
        top = ast.parse(MODULES[a].read_text(encoding="utf-8")).body
        at_top = [n for n in top if isinstance(n, (ast.Import, ast.ImportFrom)) and ".pipeline" in ast.unparse(n)]
        assert not at_top, f"{a} imports {b} at module level"
    code = ("import sys, devplace_lite.solve; "
            "print(sorted(m for m in sys.modules if m.startswith('devplace_lite.pipeline') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_module_imports_from_a_layer_above_its_own():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges if layer(b) > layer(a)]
    assert not bad, "imports that reach up: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_the_import_graph_has_no_cycle():
    g = import_graph()
    cycles = [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_the_rooms_import_one_way():
    g = room_graph()
    cycles = [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"rooms that import each other: {cycles}"


def test_the_package_root_holds_the_core_and_the_rooms_only():
    """A new module goes into the room of its problem; the root keeps the shared model."""
    core = {"", "cli", "compiled", "cost", "dag", "devices", "errors", "files", "generators", "graph", "io",
            "methods", "options", "plot", "progress", "result", "sim", "solve", "units"}
    stray = sorted(m for m in MODULES if room(m) not in ROOMS and m not in core)
    assert not stray, f"modules at the package root outside the core: {stray}; put each in the room of its problem"
    assert {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()} == set(ROOMS)


@pytest.mark.parametrize("mod,forbidden", [("sim", "plot"), ("single_sample.model", "plot"), ("throughput.brkga", "throughput.bounds"),
                                           ("cost", "throughput"), ("graph", "cost"), ("throughput", "single_sample"),
                                           ("throughput", "pipeline"),
                                           ("pipeline.planner", "pipeline.torchrun"), ("pipeline.planner", "pipeline.calibration"),
                                           ("pipeline.mesh_plan", "pipeline.mesh_run"), ("pipeline.mesh_plan", "pipeline.torchrun")])
def test_named_rules(mod, forbidden):
    """The rules the issues name, spelled out (most also follow from the layers; planning never
    imports running, issue 41)."""
    g = import_graph()
    reach = nx.descendants(g, mod)
    assert not any(r == forbidden or r.startswith(forbidden + ".") for r in reach), (mod, forbidden)


#: The pipeline road's planning modules (capture, measure, plan, write the script) and its running
#: modules (launch, each rank, memory, the check, the figures, calibration by running): planning
#: never imports running (issue 41), so a plan is made, written and read without the runner.
PLANNING = ("pipeline.split_points", "pipeline.capture", "pipeline.torch_split", "pipeline.split", "pipeline.measure",
            "pipeline.segments", "pipeline.costs", "pipeline.planner", "pipeline.baseline_splits", "pipeline.pipeline_plan",
            "pipeline.mesh_plan", "pipeline.script", "pipeline.titan", "pipeline.tensor_parallel", "pipeline.tp_cost",
            "pipeline.tracer", "pipeline.profile")
RUNNING = ("pipeline.torchrun", "pipeline.rank", "pipeline.activations", "pipeline.check", "pipeline.run_figures",
           "pipeline.calibration", "pipeline.mesh_run")


def test_planning_never_imports_running():
    assert set(PLANNING + RUNNING) <= set(MODULES), "a module named here is gone: update PLANNING and RUNNING"
    g = import_graph()
    bad = [(m, r) for m in PLANNING for r in nx.descendants(g, m) if r in RUNNING]
    assert not bad, "planning imports running: " + ", ".join(f"{m} -> {r}" for m, r in bad)


#: Lines a module of the road (`pipeline/`) may hold (issue 41: "no module of the road over about
#: 600 lines"); `profile` is beside the road (the cost model of the partitioning chapters).
ROAD_MAX_LINES = 600
#: Over it still, and why; each must be over it (a module split since leaves this list).
ROAD_OVER = {"pipeline.profile": "beside the road"}


def test_no_module_of_the_road_is_over_its_length():
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items() if m.startswith("pipeline.")}
    over = sorted(f"{m} ({n} lines)" for m, n in lines.items() if n > ROAD_MAX_LINES and m not in ROAD_OVER)
    assert not over, f"modules of the road over {ROAD_MAX_LINES} lines: {', '.join(over)}; split each by its ideas"
    stale = sorted(m for m in ROAD_OVER if lines.get(m, 0) <= ROAD_MAX_LINES)
    assert not stale, f"no longer over {ROAD_MAX_LINES} lines: {stale}; drop them from ROAD_OVER"


def test_the_package_and_its_public_surface_import_without_torch():
    code = ("import sys, devplace_lite as d; d.partition, d.bound, d.load_graph, d.Cluster, d.evaluate; "
            "import devplace_lite.cli, devplace_lite.throughput.dp, devplace_lite.throughput.bounds, devplace_lite.throughput.ip; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def _course_imports(path: Path) -> list[str]:
    """The imports of the course in one file of the library, however spelled: ``import``,
    ``from ... import``, and a module named to `importlib.import_module` or ``__import__``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []  # relative: inside the library by construction
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__"):
            names = [node.args[0].value]
        else:
            continue
        out += [f"{path.relative_to(PKG.parent)}:{node.lineno}: {n}" for n in names if n == COURSE or n.startswith(COURSE + ".")]
    return out


def test_the_library_never_imports_the_course():
    """Read from every file of the library: the course uses the library, the library knows no course
    (`devplace grade` comes in through the CLI's entry-point group)."""
    assert (PKG.parent / COURSE / "__init__.py").is_file()  # the course is where this test looks for it
    bad = [hit for p in sorted(PKG.rglob("*.py")) for hit in _course_imports(p)]
    assert not bad, "the library imports the course: " + "; ".join(bad)


def test_the_course_check_sees_each_spelling(tmp_path, monkeypatch):
    """The static check above finds the course however a module names it."""
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path)
    f = tmp_path / "m.py"
    f.write_text(f"import {COURSE}.book\nfrom {COURSE}.exercises import check\nimport importlib\n"
                 f"importlib.import_module('{COURSE}.grade')\nfrom .course import x\nimport devplace_lite.cost\n")
    assert [h.rsplit(": ", 1)[1] for h in _course_imports(f)] == [f"{COURSE}.book", f"{COURSE}.exercises", f"{COURSE}.grade"]


def test_importing_the_library_and_its_cli_loads_no_module_of_the_course():
    code = ("import sys, devplace_lite, devplace_lite.cli; devplace_lite.cli.build_parser(['evaluate']); "
            f"print(sorted(m for m in sys.modules if m == {COURSE!r} or m.startswith({COURSE!r} + '.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_package_is_typed():
    assert (PKG / "py.typed").is_file()


if __name__ == "__main__":  # python tests/test_layers.py: the room graph, for docs/design.md
    for a, b in sorted(room_graph().edges):
        print(f"{a} -> {b}")
