"""The throughput DP against exhaustive search, and on the authors' workloads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from devplace_lite.devices import Cluster
from devplace_lite.throughput.dp import dp, linear, pipedream
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import FAMILIES, generate, layered, with_backward
from devplace_lite.graph import Graph, Node
from devplace_lite.io import load_graph
from devplace_lite.methods import PARTITION, resolve
from devplace_lite.errors import LimitError


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def random_instance(seed: int) -> tuple[Graph, Cluster]:
    """A small graph of any family with the model's awkward cases drawn at random: colour
    classes on inference graphs, unsupported and CPU-less nodes, zero-time nodes that hold
    memory, memory caps, CPU cores; about a third are training graphs."""
    rng = np.random.default_rng(seed)
    fam = sorted(FAMILIES)[seed % len(FAMILIES)]
    training = rng.random() < 0.35
    g = generate(fam, int(rng.integers(3, 6 if training else 9)), seed=seed)
    nodes = []
    colours = rng.integers(0, max(2, g.n // 2), g.n) if not training and rng.random() < 0.3 else None
    heavy_leaf = -1
    if rng.random() < 0.2:  # a free sink holding much memory: folding it must be certified
        heavy_leaf = int(rng.choice([v for v in range(g.n) if not g.succ[v]]))
    for i, v in enumerate(g.nodes):
        change: dict = {}
        r = rng.random()
        if i == heavy_leaf:
            change.update(p_acc=0.0, p_cpu=0.0, memory=float(g.memory.sum()))
        elif r < 0.1:
            change.update(supported=False)
        elif r < 0.2:
            change.update(p_cpu=None)
        elif r < 0.3:
            change.update(p_acc=0.0, p_cpu=0.0)  # a free node, maybe holding memory
        if colours is not None and rng.random() < 0.5:
            change.update(color=f"c{colours[i]}")
        nodes.append(Node(**{**v.__dict__, **change}))
    g = Graph(nodes, g.edges, name=f"{g.name}-x{seed}")
    if training:
        g = with_backward(g)
    k = int(rng.integers(1, 4))
    l_ = int(rng.integers(0, 3)) if k < 3 else int(rng.integers(0, 2))
    if (~g.supported).any() and rng.random() < 0.8:
        l_ = max(l_, 1)
    memory = math.inf
    if heavy_leaf >= 0:
        memory = float(g.memory.max() * rng.uniform(1.0, 1.05))
    elif rng.random() < 0.5:
        memory = float(g.memory.sum() * rng.uniform(0.25, 0.8))
    return g, Cluster(accelerators=k, cpus=l_, memory=memory)


def assert_sound(r, g: Graph) -> None:
    """A returned split is feasible, a chain of ideals, and scores to its objective."""
    assert r.assignment is not None
    ev = r.check()
    assert ev.feasible, ev.violations
    assert ev.split == "chain"
    assert r.objective == ev.max_load


@pytest.mark.parametrize("seed", range(320))
def test_dp_equals_exhaustive_chain_optimum(seed):
    g, c = random_instance(seed)
    truth = exhaustive(g, c, kind="chain")
    r = dp(g, c)
    if truth.status == "infeasible":
        assert r.status == "infeasible" and r.objective is None and r.assignment is None
        return
    assert r.status == "optimal" and close(r.objective, truth.objective)
    assert r.bound == r.objective
    assert_sound(r, g)
    for other in (linear(g, c), pipedream(g, c)):
        assert other.status != "infeasible"  # a chain split fits: a heuristic may only say unknown
        if other.status != "unknown":
            assert other.status == "feasible"
            assert_sound(other, g)
            assert other.objective >= r.objective - 1e-9


def test_the_random_instances_cover_the_hard_cases():
    """The suite above is only as good as its instances: check they exercise each case."""
    seen = {"training": 0, "unsupported": 0, "no_cpu": 0, "free": 0, "cap": 0, "cpus": 0, "colour": 0,
            "refolded": 0, "infeasible": 0}
    for seed in range(320):
        g, c = random_instance(seed)
        seen["training"] += g.is_training
        seen["unsupported"] += bool((~g.supported).any())
        seen["no_cpu"] += bool(np.isnan(g.p_cpu).any())
        seen["free"] += bool(((g.p_acc == 0) & (g.p_cpu == 0)).any())
        seen["cap"] += math.isfinite(c.memory)
        seen["cpus"] += c.l > 0
        seen["colour"] += not g.is_training and any(v.color for v in g.nodes)
        r = dp(g, c)
        seen["refolded"] += bool(r.extra.get("refolded"))
        seen["infeasible"] += r.status == "infeasible"
    assert all(v >= 5 for v in seen.values()), seen


def test_memory_on_a_folded_leaf_is_certified_or_refolded():
    # z takes no time and hangs off a; folded into a it would break the cap of 9
    nodes = [Node("a", p_acc=1, p_cpu=9, memory=5, comm=0.1), Node("b", p_acc=1, p_cpu=9, memory=5),
             Node("z", p_acc=0, p_cpu=0, memory=5)]
    g = Graph(nodes, [("a", "b"), ("a", "z")])
    c = Cluster(accelerators=3, memory=9)
    r = dp(g, c)
    assert r.extra.get("refolded") is True
    assert r.status == "optimal" and close(r.objective, exhaustive(g, c).objective)
    assert_sound(r, g)


def test_orphan_backward_nodes_are_attached_and_the_split_is_sound():
    # a classless backward node: placed with its heaviest neighbour; the exhaustive search
    # places it freely, so it can only be as good or better
    base = with_backward(generate("skip_chain", 5, seed=3))
    extra = Node("acc.grad", p_acc=0.7, p_cpu=9.0, comm=0.05, backward=True)
    g = Graph(list(base.nodes) + [extra], list(base.edges) + [("2.grad", "acc.grad"), ("acc.grad", "1.grad")])
    for c in (Cluster(2), Cluster(3, 1)):
        r = dp(g, c)
        assert r.status == "optimal"
        assert_sound(r, g)
        assert r.objective >= exhaustive(g, c).objective - 1e-9
        a = r.assignment
        assert a[g.index["acc.grad"]] in (a[g.index["2.grad"]], a[g.index["1.grad"]])


@pytest.mark.parametrize("fam", sorted(FAMILIES))
@pytest.mark.parametrize("training", [False, True])
def test_pruning_keeps_the_optimum_on_larger_graphs(fam, training):
    g = generate(fam, 22 if not training else 14, seed=11, training=training)
    for c in (Cluster(3, 1), Cluster(4, 0, memory=float(g.memory.sum() / 3)), Cluster(1, 0)):
        full, fast = dp(g, c, prune=False), dp(g, c)
        assert full.status == fast.status
        if full.status == "optimal":
            assert close(full.objective, fast.objective)
            assert fast.extra["pairs"] <= full.extra["pairs"]
            assert_sound(fast, g)
            lin = linear(g, c)  # may find nothing when memory is tight: it searches less
            assert lin.status == "infeasible" or lin.objective >= fast.objective - 1e-9


def test_time_limit_returns_incumbent_and_bound():
    g = layered(40, seed=5, width=4)
    c = Cluster(4, 1)
    best = dp(g, c)
    r = dp(g, c, time_limit=0.0)
    assert r.status == "time_limit"
    assert_sound(r, g)
    assert r.bound is not None and r.bound <= best.objective + 1e-9 <= r.objective + 2e-9
    assert close(r.objective, linear(g, c).objective)


def test_infeasible_and_limit():
    g = generate("cells", 11, seed=1)
    r = dp(g, Cluster(2, 0, memory=float(g.memory.max() / 2)))
    assert r.status == "infeasible" and r.objective is None and r.assignment is None
    assert linear(g, Cluster(2, 0, memory=float(g.memory.max() / 2))).status == "infeasible"
    with pytest.raises(LimitError, match="ideals"):
        dp(layered(30, seed=2, width=6), Cluster(2), limit=100)


def test_single_device_kinds():
    g = generate("series_parallel", 12, seed=4)
    only_cpu = dp(g, Cluster(accelerators=0, cpus=1))
    assert only_cpu.status == "optimal" and close(only_cpu.objective, float(g.p_cpu.sum()))
    one_acc = dp(g, Cluster(accelerators=1))
    assert close(one_acc.objective, float(g.p_acc.sum()))


def test_methods_are_registered():
    for name, fn in (("dp", dp), ("linear", linear), ("pipedream", pipedream)):
        assert resolve(PARTITION, name) is fn


def test_json_contract():
    g = generate("cells", 16, seed=2, training=True)
    out = dp(g, Cluster(3, 1)).to_json()
    assert out["status"] == "optimal" and out["bound"] == out["objective"] and out["gap"] == 0.0
    assert out["split"] == "chain" and set(out["placement"]) == set(g.ids)
    assert out["ideals"] >= out["units"] + 1


# --- the authors' workloads (their optima: tests/test_reference.py) -------------------------
@pytest.mark.reference
def test_reference_pruning_is_exact(reference_dir):
    # GNMT is the widest graph with a small pair count: visit every nested pair and compare
    g = load_graph(reference_dir / "throughput-inputs" / "LayerGraphs" / "gnmt_inference.json")
    c = Cluster.for_graph(g)
    full, fast = dp(g, c, prune=False), dp(g, c)
    assert close(full.objective, fast.objective)
    assert full.extra["pairs"] == 15_488_764  # the authors' count of nested pairs: 15.5 M
    assert fast.extra["pairs"] < full.extra["pairs"] / 2


@pytest.mark.parametrize("seed", range(60))
def test_the_kernels_table_lists_every_ideal_and_its_maximal_units(seed):
    """`_Table`: colexicographic order (every sub-ideal first), rows that decode to each ideal's
    maximal units and the index of the ideal without each, bit-set words equal to the masks."""
    import devplace_lite.throughput.dp as dp_module
    from devplace_lite.throughput.ideals import enumerate_ideals
    from devplace_lite.units import unit_graph

    g, _ = random_instance(seed)
    poset = unit_graph(g, fold=True)
    ideals = enumerate_ideals(poset)
    t = dp_module._Table.of(ideals)
    assert sorted(t.masks) == t.masks and sorted(ideals.masks) == t.masks
    start = {int(r): i for i, r in enumerate(t.row)}
    for i, m in enumerate(t.masks):
        r = int(t.row[i])
        assert t.mx[r - 2] == i
        units = []
        while t.mx[r] != dp_module._SENTINEL:
            x, child = int(t.mx[r] & dp_module._LOW), start[int(t.mx[r] >> 32)]
            assert t.masks[child] == m & ~(1 << x) and child < i
            units.append(x)
            r += 1
        maximal = [x for x in range(poset.size) if m >> x & 1 and not any(m >> y & 1 for y in poset.succ[x])]
        assert units == maximal
        assert sum(int(w) << (32 * j) for j, w in enumerate(t.words[i])) == m


@pytest.mark.parametrize("seed", range(0, 320, 8))
def test_the_kernel_resumes_between_calls(seed, monkeypatch):
    """The kernel stops after a budget of pairs and resumes at the next ideal, rebuilding its
    per-ideal hyperedge counts from that ideal's bits: one pair per call gives the same answer."""
    import devplace_lite.throughput.dp as dp_module

    g, c = random_instance(seed)
    whole = dp(g, c)
    monkeypatch.setattr(dp_module, "_CHUNK_PAIRS", 1)
    piecewise = dp(g, c)
    assert piecewise.status == whole.status and piecewise.objective == whole.objective
    assert piecewise.extra["pairs"] == whole.extra["pairs"]
