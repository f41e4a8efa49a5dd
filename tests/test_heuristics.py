"""The heuristics of chapter 06: feasible, honest objectives, never better than the optimum."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite import cli
from devplace_lite.throughput.baselines import single_device, uniform
from devplace_lite.cost import device_loads, evaluate, split_kind
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import Graph, GraphError, Node
from devplace_lite.throughput.heuristics import etf, heft, kl, local_search, local_search_method, topo_fill
from devplace_lite.throughput.heuristics.blocks import block_structure
from devplace_lite.throughput.heuristics.incremental import LoadState
from devplace_lite.throughput.heuristics.intervals import BothWays
from devplace_lite.io import load_graph, save_graph
from devplace_lite.methods import PARTITION, resolve
from devplace_lite.errors import UsageError

from conftest import reference_files

CHAIN = {"kl": kl, "topo-fill": topo_fill, "local-search": local_search_method}
ANY = {"etf": etf, "heft": heft}
ALL = {**CHAIN, **ANY}

small_cases = st.tuples(
    st.sampled_from(sorted(FAMILIES)),
    st.integers(min_value=3, max_value=7),   # forward nodes
    st.integers(min_value=0, max_value=10_000),  # seed
    st.booleans(),                            # training graph
    st.integers(min_value=1, max_value=3),    # accelerators
    st.integers(min_value=0, max_value=1),    # CPU cores
)


def _tol(x: float) -> float:
    return 1e-9 * max(1.0, abs(x))


def _case(family, n, seed, training, k, l):
    return generate(family, n, seed=seed, training=training), Cluster(accelerators=k, cpus=l)


def test_registered_under_the_names_other_chapters_use():
    for name, fn in {**ALL}.items():
        assert resolve(PARTITION, name) is fn


@settings(max_examples=40, deadline=None, derandomize=True)
@given(small_cases)
def test_objective_is_the_evaluated_load_and_never_beats_exhaustive(case):
    g, c = _case(*case)
    best = {kind: exhaustive(g, c, kind=kind).objective for kind in ("chain", "any")}
    for name, fn in ALL.items():
        r = fn(g, c)
        ev = r.check()
        assert r.objective == ev.max_load, name
        assert r.status == "feasible" and ev.feasible, (name, ev.violations)
        assert r.assignment.shape == (g.n,)
        if name in CHAIN:
            assert ev.split == "chain", name
            assert r.objective >= best["chain"] - _tol(best["chain"]), name
        else:
            assert r.objective >= best["any"] - _tol(best["any"]), name


@settings(max_examples=25, deadline=None, derandomize=True)
@given(small_cases)
def test_local_search_keeps_the_kind_and_never_worsens_its_start(case):
    g, c = _case(*case)
    chain_opt = exhaustive(g, c, kind="chain").objective
    any_opt = exhaustive(g, c, kind="any").objective
    for start in (single_device(g, c), uniform(g, c), etf(g, c)):
        r = local_search(g, c, start.assignment)
        assert r.objective == r.check().max_load
        assert r.objective <= start.objective + _tol(start.objective)
        if split_kind(g, c, start.assignment) == "chain":
            assert r.check().split == "chain"
            assert r.objective >= chain_opt - _tol(chain_opt)
        assert r.objective >= any_opt - _tol(any_opt)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(small_cases, st.floats(min_value=0.25, max_value=1.5))
def test_memory_caps(case, tightness):
    """With a cap, a feasible answer respects it; with a CPU core to spill to, the chain
    heuristics always find a feasible answer (the CPU takes what does not fit)."""
    g, c0 = _case(*case)
    per_acc = g.memory.sum() / max(c0.k, 1)
    cap = max(tightness * per_acc, float(np.bincount(g.units, weights=g.memory).max()))
    c = Cluster(accelerators=c0.k, cpus=1, memory=cap)
    for name, fn in ALL.items():
        r = fn(g, c)
        ev = r.check()
        assert r.objective == ev.max_load
        assert (r.status == "feasible") == ev.feasible
        if ev.feasible:
            assert np.all(ev.memory[: c.k] <= cap)
    assert topo_fill(g, c).status == "feasible"


def _with_unsupported(g: Graph, seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    bad = set(rng.choice(g.n, size=max(1, g.n // 5), replace=False).tolist())
    color_bad = {g.nodes[i].color for i in bad if g.nodes[i].color is not None}
    nodes = [replace(v, supported=not (i in bad or (v.color is not None and v.color in color_bad)))
             for i, v in enumerate(g.nodes)]
    return g.with_nodes(nodes)


@pytest.mark.parametrize("seed", range(4))
def test_unsupported_nodes_go_to_a_cpu_core(seed):
    g = _with_unsupported(generate("layered", 30, seed=seed, training=seed % 2 == 1), seed)
    c = Cluster(accelerators=3, cpus=1)
    for name, fn in ALL.items():
        r = fn(g, c)
        ev = r.check()
        assert ev.feasible, (name, ev.violations)
        assert np.all(r.assignment[~g.supported] >= c.k), name


def test_cpu_only_cluster():
    g = generate("cells", 30, seed=2)
    c = Cluster(accelerators=0, cpus=3)
    for name, fn in ALL.items():
        r = fn(g, c)
        assert r.objective == r.check().max_load and r.status == "feasible", name


def test_list_schedulers_chase_schedule_length():
    """ETF and HEFT answer for one sample's makespan, which is never below the critical path."""
    g, c = generate("series_parallel", 60, seed=3), Cluster(accelerators=3)
    for fn in (etf, heft):
        r = fn(g, c)
        cp = np.zeros(g.n)
        for v in g.topological_order():
            cp[v] = g.p_acc[v] + max((cp[u] for u in g.pred[v]), default=0.0)
        assert r.extra["makespan"] >= cp.max() - 1e-9


def test_colour_cycles_become_one_block():
    """Classes {a1, a2} and {b}: a1 -> b -> a2 ties them into one block, which no chain split can cut."""
    nodes = [Node("a1", p_acc=1, comm=1, color="A"), Node("b", p_acc=1, comm=1), Node("a2", p_acc=1, comm=1, color="A"),
             Node("c", p_acc=3, comm=1)]
    g = Graph(nodes, [("a1", "b"), ("b", "a2"), ("a2", "c")])
    b = block_structure(g)
    assert b.count == 2 and b.of_node[0] == b.of_node[1] == b.of_node[2] != b.of_node[3]
    for fn in CHAIN.values():
        r = fn(g, Cluster(accelerators=2))
        assert r.check().split == "chain" and r.check().feasible


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(5, 40), st.integers(0, 10_000), st.booleans(),
       st.integers(0, 10_000))
def test_incremental_loads_match_the_evaluator(family, n, seed, training, move_seed):
    g = generate(family, n, seed=seed, training=training)
    c = Cluster(accelerators=3, cpus=1)
    b = block_structure(g)
    rng = np.random.default_rng(move_seed)
    state = LoadState(g, c, b, rng.integers(0, c.size, size=b.count))
    for _ in range(20):
        x, t = int(rng.integers(b.count)), int(rng.integers(c.size))
        s = int(state.block_device[x])
        predicted = state.delta(x, t)
        state.move(x, t)
        loads = np.sum(device_loads(g, c, state.assignment), axis=0)
        assert np.allclose(state.loads, loads)
        assert np.allclose(predicted, (loads[s], loads[t]))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(5, 25), st.integers(0, 10_000), st.booleans(), st.booleans())
def test_interval_loads_match_the_evaluator(family, n, seed, training, shuffle):
    g = generate(family, n, seed=seed, training=training)
    c = Cluster(accelerators=3)
    b = block_structure(g)
    rng = np.random.default_rng(seed)
    order = rng.permutation(b.order) if shuffle else b.order
    order = order[rng.random(len(order)) < 0.85]  # blocks left out count as outside
    il, G = BothWays(g, b, order), len(order)
    for a in range(G + 1):
        row = il.row(a)
        for e in range(a, G + 1):
            part = np.full(b.count, 2)
            part[order[a:e]] = 1
            assert np.isclose(row[e], np.sum(device_loads(g, c, part[b.of_node]), axis=0)[1])
            assert np.isclose(il.column(e)[a], row[e])


def test_bad_input_is_one_clear_error():
    g, c = generate("layered", 10, seed=0), Cluster(accelerators=2)
    with pytest.raises(UsageError, match="split kind"):
        local_search(g, c, np.zeros(g.n, dtype=int), kind="ring")
    with pytest.raises(GraphError, match="shape"):
        local_search(g, c, np.zeros(3, dtype=int))


@pytest.mark.parametrize("method", sorted(ALL))
def test_cli_json_contract(tmp_path, capsys, method):
    import json

    path = tmp_path / "g.json"
    save_graph(generate("cells", 40, seed=1, training=True), path)
    assert cli.main(["partition", str(path), "--method", method, "-k", "3", "--cpus", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = load_graph(path)
    # a heuristic proves nothing itself: its answer is optimal only where the certificate meets it
    assert out["status"] == "feasible" or (out["status"] == "optimal" and out["gap"] <= 1e-9)
    assert out["bound"] is not None and out["bound"] <= out["objective"] * (1 + 1e-9)
    assert out["objective"] == pytest.approx(evaluate(g, Cluster(3, 1), out["placement"]).max_load, rel=1e-12)
    assert set(out["placement"]) == set(g.ids)


# every layer-graph training workload, and operator graphs from the smallest to the largest
REFERENCE = [p for p in reference_files() if p.stem.endswith("training")
             and (p.parent.name == "LayerGraphs" or p.stem in ("bert_l-3_training", "bert_L-12_training"))]


@pytest.mark.reference
@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reference_workloads(reference_dir, path):
    g = load_graph(path)
    c = Cluster.for_graph(g)
    for name, fn in ALL.items():
        r = fn(g, c)
        ev = r.check()
        assert r.objective == ev.max_load and ev.feasible, name
        if name in CHAIN:
            assert ev.split == "chain", name


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(10, 40), st.integers(0, 10_000), st.booleans())
def test_local_search_only_goes_down(family, n, seed, training):
    """Stopped after j moves, for j = 0, 1, 2, ...: the max load never rises (a search whose
    move scores disagreed with the loads it produces would wander up and down)."""
    g, c = generate(family, n, seed=seed, training=training), Cluster(accelerators=3, cpus=1)
    start = etf(g, c).assignment
    values = [local_search(g, c, start, max_moves=j, seed=1).objective for j in range(0, 30, 3)]
    assert all(b <= a + _tol(a) for a, b in zip(values, values[1:])), values
