"""The registry says what each method is, and every method keeps what its entry says.

For each registered partition method on small training and inference graphs: the objective is
the evaluator's, the split is of the declared kind, an exact method proves the optimum of that
kind (the library's exhaustive search of the same kind), a heuristic never says ``optimal``
and is never below that optimum; an anytime method given almost no time still answers with a
valid status. Every bound stays below the optimum it declares it bounds.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

import devplace_lite as dl
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import generate, layered
from devplace_lite import methods
from devplace_lite.methods import BOUND, LATENCY, LATENCY_BOUND, LIMITS, PARALLELIZE, PARTITION, PROBLEMS, SPLITS, resolve
from devplace_lite.result import STATUSES
from test_exact import training_instance

ALLOWED = {"chain": {"chain"}, "contiguous": {"chain", "contiguous"}, "any": {"chain", "contiguous", "none"}}
SEEDS = [3, 8, 21, 34, 55, 89, 144, 233]


def _optimum(g, c, split: str) -> float:
    r = exhaustive(g, c, kind=split)
    return math.inf if r.objective is None else r.objective


REGISTRIES = {"PARTITION": PARTITION, "LATENCY": LATENCY, "BOUND": BOUND, "LATENCY_BOUND": LATENCY_BOUND,
              "PARALLELIZE": PARALLELIZE}
PKG = Path(methods.__file__).resolve().parent
#: Lists of method names the registry does not own yet, each with its reason; a new one fails.
KNOWN_LISTS = {
    ("devplace_course/experts.py", "BASELINES"): "the paper's baselines with the labels chapter 02 prints",
}


def test_every_entry_is_complete_and_loads():
    for registry, problem in ((PARTITION, "throughput"), (LATENCY, "latency"), (BOUND, "bound"),
                              (LATENCY_BOUND, "bound"), (PARALLELIZE, "parallelize")):
        for name, m in registry.items():
            assert m.problem == problem and m.problem in PROBLEMS and m.split in SPLITS and m.limit in LIMITS, name
            assert callable(m.load()) and m.summary, name
            assert m.reach is None or (m.reach.limit > 0 and m.reach.what and m.reach.advice()), name


SEP = r"\s*[,|/]\s*|,?\s+or\s+"
#: Words joined by commas, bars, slashes or "or": the lists a message or a usage line would hold.
SERIES = re.compile(rf"[a-z][\w-]*(?:(?:{SEP})[a-z][\w-]*){{2,}}")


def _name_lists(path: Path, names: set[str]) -> list[tuple[int, str, str]]:
    """``(line, assigned name or "", what)`` for each literal collection of two or more strings
    that are all method names, and each string naming three or more of them (a message's list)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    target = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name) and node.value is not None:
                    target[id(node.value)] = t.id
    out = []
    for node in ast.walk(tree):
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
            [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else None
        if elts and len(elts) >= 2 and all(isinstance(e, ast.Constant) and e.value in names for e in elts):
            out.append((node.lineno, target.get(id(node), ""), repr([e.value for e in elts])))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for run in SERIES.finditer(node.value):
                if sum(w in names for w in re.split(SEP, run.group())) >= 3:
                    out.append((node.lineno, target.get(id(node), ""), repr(run.group())))
    return out


def test_no_list_of_method_names_outside_the_registry():
    """The registry is the one source of facts about a method: a tuple of names, a dict keyed by
    them or a message listing them elsewhere in the package or the course would go stale when a method is
    added (the list of scalable methods, the RL yardsticks, Piper's methods all come from it)."""
    names = {n for reg in REGISTRIES.values() for n in reg}
    found = {}
    for path in sorted([*PKG.rglob("*.py"), *(PKG.parent / "devplace_course").rglob("*.py")]):  # the library, the course
        rel = path.relative_to(PKG.parent).as_posix()
        if rel == "devplace_lite/methods.py":
            continue
        for line, name, what in _name_lists(path, names):
            if (rel, name) not in KNOWN_LISTS:
                found[f"{rel}:{line} {name}"] = what
    assert not found, f"method names listed outside devplace_lite/methods.py: {found}"


def test_the_name_list_check_can_fail(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('FAST = ("kl", "heft")\nmsg = f"{x}: use one that scales (time, greedy or kl)"\n'
                 'ok = ("chain", "kl")\nusage = "[--method dp|kl]"\n')
    assert [line for line, _, _ in _name_lists(p, set(PARTITION))] == [1, 2]


def test_the_facts_come_from_the_entries(reach):
    """A reach, the RL yardsticks and Piper's methods read from the registry where they act."""
    from devplace_lite.errors import LimitError
    from devplace_lite.rl.compare import registry_baselines
    from devplace_lite.sim import Simulator
    from devplace_lite.throughput.bounds import pinned

    g, c = layered(12, seed=2), Cluster(accelerators=2)
    assert set(registry_baselines(Simulator(g, c))) == {n for n, m in PARTITION.items() if m.yardstick}
    reach(BOUND, "pinned", 5)
    with pytest.raises(LimitError, match="more than the 5 the MIP bound pinned"):
        pinned(g, c)
    reach(PARTITION, "dp", 3)
    with pytest.raises(LimitError, match="more than 3 ideals"):
        dl.partition(g, c, "dp")
    assert dl.parallelize.__module__ == "devplace_lite" and set(PARALLELIZE) >= {"exact", "piper"}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(PARTITION))
def test_partition_methods_keep_their_entry(name, seed):
    g, c = training_instance(seed)
    m = PARTITION[name]
    if c.k == 0 and name in ("uniform", "parameters", "time"):
        return
    r = resolve(PARTITION, name)(g, c, time_limit=20.0, seed=0)
    assert r.status in STATUSES
    truth = _optimum(g, c, m.split)
    if r.assignment is None:
        assert r.status in ("infeasible", "unknown", "time_limit")
        assert r.status != "infeasible" or not math.isfinite(truth), name  # infeasible is a proof
        return
    ev = r.check()
    assert r.objective == ev.max_load, name
    if not ev.feasible:
        assert r.status in ("infeasible", "unknown") and r.gap is None, name
        assert r.status != "infeasible" or not math.isfinite(truth), name
        return
    assert ev.split in ALLOWED[m.split], (name, ev.split)
    if m.exact:
        assert r.status == "optimal" and math.isclose(r.objective, truth, rel_tol=1e-6, abs_tol=1e-9), (name, truth)
    else:
        assert r.status != "optimal", name
        assert r.objective >= truth - 1e-9 * max(1.0, truth), name


@pytest.mark.parametrize("name", sorted(n for n, m in PARTITION.items() if m.limit == "anytime"))
def test_anytime_methods_answer_when_the_time_is_up(name):
    g = layered(60 if name != "exhaustive" else 11, seed=2, width=4)  # 4^11 placements for exhaustive
    c = Cluster(accelerators=3, cpus=1)
    r = resolve(PARTITION, name)(g, c, time_limit=0.05, seed=0)
    assert r.status in STATUSES
    if PARTITION[name].exact and r.status == "time_limit" and r.objective is not None:
        assert r.bound is None or r.bound <= r.objective + 1e-9


@pytest.mark.parametrize("seed", SEEDS[:4])
@pytest.mark.parametrize("name", sorted(BOUND))
def test_bounds_stay_below_the_optimum_they_bound(name, seed):
    g, c = training_instance(seed)
    truth = _optimum(g, c, BOUND[name].split)
    b = dl.bound(g, c, method=name, time_limit=5.0)
    assert b.bound <= truth * (1 + 1e-6) + 1e-9, (name, b.bound, truth)
    if BOUND[name].exact and b.status == "optimal" and math.isfinite(truth):
        assert math.isclose(b.bound, truth, rel_tol=2e-6), (name, b.bound, truth)


@pytest.mark.parametrize("name", sorted(LATENCY))
def test_latency_methods_answer(name):
    g = generate("series_parallel", 8, seed=1)
    r = resolve(LATENCY, name)(g, Cluster(accelerators=2, cpus=1), time_limit=20.0, seed=0)
    assert r.status in STATUSES and (r.status == "optimal") <= LATENCY[name].exact


def test_the_package_root_runs_a_method_by_name(tmp_path):
    from devplace_lite.io import save_graph

    g = generate("layered", 10, seed=1)
    path = tmp_path / "g.json"
    save_graph(g, path)
    r = dl.partition(path, dl.Cluster(accelerators=2))
    assert r.status == "optimal" and r.method == "dp"
    with pytest.raises(dl.UsageError, match="unknown method"):
        dl.partition(g, dl.Cluster(accelerators=2), method="nope")
