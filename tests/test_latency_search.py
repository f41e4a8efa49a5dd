"""The latency heuristics (order split, local search) and the IP's warm start, against the
exhaustive search written for the tests (`latency_brute`) and against every start."""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from latency_brute import brute_latency, instances

import devplace_lite.single_sample.model as latency_mod
import devplace_lite.single_sample.bounds as bounds_mod
import devplace_lite.single_sample.search as search_mod
import devplace_lite.single_sample.ip as ip_mod
from devplace_lite import methods
from devplace_lite.cli import main
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.io import load_graph, save_graph
from devplace_lite.single_sample.model import call_latency, evaluate_latency, latency_of, reentry_pieces
from devplace_lite.single_sample.search import (fit_calls, greedy_latency, improve, latency_local_search, order_split,
                                                start_splits, unit_orders)
from devplace_lite.single_sample.ip import latency_ip

FAMILIES = ["layered", "series_parallel", "skip_chain", "cells", "random"]


def one_call_each(graph: Graph, cluster: Cluster, a: np.ndarray) -> bool:
    """Every accelerator's nodes form one convex call, and nothing breaks a rule of the model."""
    ev = evaluate_latency(graph, cluster, a)
    counts = np.bincount([c.device for c in ev.calls], minlength=cluster.k)
    return ev.feasible and not ev.deadlock and bool(np.all(counts <= 1))


@pytest.mark.parametrize("module", [latency_mod, bounds_mod, search_mod, ip_mod])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_order_split_is_exact_on_a_chain():
    """On a chain every split runs its calls one after another, so the best cut of the only
    order is the optimum (checked against the exhaustive search)."""
    rng = np.random.default_rng(7)
    for trial in range(8):
        n = 6
        nodes = [Node(f"v{i}", p_acc=float(rng.integers(1, 5)), p_cpu=float(rng.integers(2, 30)),
                      comm=float(rng.integers(0, 4)) / 2, memory=float(rng.integers(1, 3))) for i in range(n)]
        g = Graph(nodes, [(f"v{i}", f"v{i + 1}") for i in range(n - 1)])
        c = Cluster(2, 1, memory=float(rng.integers(3, 6)))
        blocks = unit_orders(g, c)
        a, value = order_split(blocks, blocks.orders()["topological"])
        assert one_call_each(g, c, a)
        assert call_latency(g, c, a) == pytest.approx(value)
        assert value == pytest.approx(brute_latency(g, c)), trial


def test_order_split_value_bounds_its_latency_from_above():
    for seed in range(6):
        g = generate(FAMILIES[seed % 5], 30, seed=seed)
        c = Cluster(4, 1, memory=float(g.memory.sum()) / 3)
        blocks = unit_orders(g, c)
        for name, order in blocks.orders().items():
            a, value = order_split(blocks, order)
            if math.isfinite(value):
                assert one_call_each(g, c, a), name
                assert call_latency(g, c, a) <= value + 1e-9, name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_nodes=5))
def test_local_search_is_a_feasible_split_never_below_the_optimum(inst):
    g, c = inst
    truth = brute_latency(g, c)
    r = latency_local_search(g, c, seed=1)
    if r.status in ("infeasible", "unknown"):  # infeasible only with a proof
        assert r.assignment is None and (r.status == "unknown" or not math.isfinite(truth))
        return
    assert one_call_each(g, c, r.assignment)
    assert r.objective == pytest.approx(latency_of(r))
    assert truth - 1e-9 <= r.objective <= min(r.extra["starts"].values()) + 1e-9
    assert r.bound <= truth + 1e-9
    assert (r.status == "optimal") == (r.bound >= r.objective - 1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_nodes=5))
def test_ip_finds_the_optimum_of_the_exhaustive_search(inst):
    g, c = inst
    truth = brute_latency(g, c)
    r = latency_ip(g, c, 1, solver="highs")
    if not math.isfinite(truth):
        assert r.status == "infeasible" and r.assignment is None
        return
    assert r.status == "optimal" and r.objective == pytest.approx(truth, abs=1e-6)
    assert r.bound == r.objective and one_call_each(g, c, r.assignment)


def instances_with_memory(seed: int):
    g = generate(FAMILIES[seed % 5], 24 + 4 * (seed % 3), seed=seed)
    c = Cluster(3, 1, memory=float(g.memory.sum()) / 2.2)
    return g, c


@pytest.mark.parametrize("seed", range(5))
def test_ip_is_never_worse_than_any_start(seed):
    """Each start the library knows (greedy, the partition methods' splits, the order splits)
    scored on its own: the IP's answer is at most the least of them, with a valid bound."""
    g, c = instances_with_memory(seed)
    starts = start_splits(g, c, seed=0)
    r = latency_ip(g, c, 1, time_limit=6.0, seed=0)
    assert r.assignment is not None and one_call_each(g, c, r.assignment)
    assert r.objective == pytest.approx(latency_of(r))
    # under a time limit the slower partition methods may be skipped, and all of them once a
    # start meets the lower bound (then it is optimal)
    tried = r.extra["starts"]
    assert {"greedy", "topological order", "depth-first order", "late order"} <= set(tried)
    assert "dp split" in tried or (r.status == "optimal" and min(tried.values()) <= r.bound + 1e-9)
    for name, a, val in starts:
        assert val == pytest.approx(call_latency(g, c, a))
        if name in tried:
            assert tried[name] == pytest.approx(val) and r.objective <= val + 1e-9, name
    assert r.bound <= r.objective and r.gap is not None
    assert r.extra["starts"]["greedy"] == pytest.approx(greedy_latency(g, c).objective)


def test_improve_never_returns_worse_and_keeps_one_call_each():
    g, c = instances_with_memory(2)
    a = greedy_latency(g, c).assignment
    b, val, moves = improve(g, c, a, seed=3)
    assert one_call_each(g, c, b) and val == pytest.approx(call_latency(g, c, b))
    assert val <= call_latency(g, c, a) + 1e-9 and moves >= 0


def test_fit_calls_moves_returning_pieces_to_free_accelerators():
    g = Graph([Node(x, p_acc=1.0, p_cpu=3.0, comm=0.5) for x in "abc"], [("a", "b"), ("b", "c")])
    a = np.array([0, 1, 0])  # acc0 runs a, then c after acc1's b: two pieces
    assert reentry_pieces(g, Cluster(3, 1), a).tolist() == [0, 0, 1]
    fixed = fit_calls(g, Cluster(3, 1), a)
    assert fixed.tolist() == [0, 1, 2] and one_call_each(g, Cluster(3, 1), fixed)
    assert fit_calls(g, Cluster(2, 1), a) is None  # no free accelerator


def test_call_latency_rejects_splits_that_are_not_one_convex_call_each():
    g = Graph([Node(x, p_acc=1.0, p_cpu=3.0, comm=0.5) for x in "abc"], [("a", "b"), ("b", "c")])
    c = Cluster(2, 1)
    assert call_latency(g, c, np.array([0, 1, 0])) == math.inf  # a path leaves acc0 and comes back
    assert call_latency(g, c, np.array([0, 0, 1])) == pytest.approx(evaluate_latency(g, c, [0, 0, 1]).latency)


def test_local_search_is_registered_and_runs_from_the_cli(tmp_path, capsys):
    assert methods.resolve(methods.LATENCY, "local-search") is latency_local_search
    g = generate("cells", 16, seed=3)
    path = tmp_path / "g.json"
    save_graph(g, path)
    assert main(["latency", str(path), "--method", "local-search", "-k", "3", "--cpus", "1",
                 "--memory", str(float(g.memory.sum()) / 2), "--time-limit", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] in ("feasible", "optimal") and out["bound"] <= out["objective"]
    assert out["objective"] <= out["starts"]["greedy"] + 1e-9
    assert main(["latency", str(path), "--method", "no-such-search"]) == 2
    assert "local-search" in capsys.readouterr().err


def test_infeasible_instance_gives_no_split():
    g = Graph([Node("a", p_acc=1.0, memory=5.0)], [])
    r = latency_local_search(g, Cluster(1, 0, memory=1.0))
    assert r.status == "infeasible" and r.assignment is None


@pytest.mark.reference
@pytest.mark.parametrize("name", ["LayerGraphs/bert24_inference", "OperatorGraphs/bert_l-3_inference"])
def test_published_inputs_ip_beats_greedy_and_dp_split(reference_dir, name):
    """The issue's "Done when" on two of the authors' latency inputs, with a short limit: the
    IP's answer is at or below the greedy's and the throughput DP split's latency, with a gap;
    BERT-24's is proven optimal (the path bound meets the greedy's 100.22 ms)."""
    g = load_graph(reference_dir / "latency-inputs" / f"{name}.json")
    c = Cluster.for_graph(g)
    r = latency_ip(g, c, 1, time_limit=8.0)
    dp_split = methods.resolve(methods.PARTITION, "dp")(g, c, time_limit=10.0, seed=0).assignment
    assert r.objective <= greedy_latency(g, c).objective + 1e-9
    assert r.objective <= evaluate_latency(g, c, dp_split).latency + 1e-9
    assert r.bound <= r.objective and r.gap is not None
    if name.startswith("LayerGraphs/bert24"):
        assert r.status == "optimal" and round(r.objective, 2) == 100.22


@pytest.mark.parametrize("family", ["layered", "cells", "series_parallel"])
def test_training_graphs_are_searched(family):
    """A training graph's backward edges made cycles between blocks: the block DAG's orders
    raised networkx's NetworkXUnfeasible (a traceback from `devplace latency`)."""
    g = generate(family, 40, seed=0, training=True)
    c = Cluster(3, 1)
    r = latency_local_search(g, c, time_limit=2.0)
    assert r.assignment is not None and r.status in ("feasible", "optimal")
    assert evaluate_latency(g, c, r.assignment).latency == pytest.approx(r.objective)


def test_a_cpu_branch_moves_whole_to_an_idle_accelerator():
    """s -> a1 -> a2 -> t with a skip s -> t; s and t fill their accelerators, the branch runs on
    the slow CPU. Either branch node alone on the idle accelerator pays a1's large output in a
    transfer (29 ms either way, worse than 25); the two together receive and send the small
    tensors only (9 ms). The chain move of the local search offers exactly that."""
    nodes = [Node("s", p_acc=1.0, p_cpu=50.0, comm=1.0, memory=4.0), Node("a1", p_acc=1.0, p_cpu=10.0, comm=12.0,
             memory=1.0), Node("a2", p_acc=1.0, p_cpu=10.0, comm=1.0, memory=1.0),
             Node("t", p_acc=1.0, p_cpu=50.0, comm=1.0, memory=4.0)]
    g = Graph(nodes, [("s", "a1"), ("a1", "a2"), ("a2", "t"), ("s", "t")])
    c = Cluster(3, 1, memory=4.0)
    a = np.array([0, 3, 3, 1])
    assert call_latency(g, c, a) == pytest.approx(25.0)
    blocks = unit_orders(g, c)
    moves = search_mod._moves(blocks, a, np.random.default_rng(0))
    runs = [m for m in moves if m[0] == "run"]
    assert runs == [("run", (int(blocks.unit[1]), int(blocks.unit[2])), 2)]
    singles = [search_mod._apply(blocks, a, ("block", int(blocks.unit[v]), 2)) for v in (1, 2)]
    assert all(call_latency(g, c, b) == pytest.approx(29.0) for b in singles)
    assert call_latency(g, c, search_mod._apply(blocks, a, runs[0])) == pytest.approx(9.0)
    assert call_latency(g, c, a) >= brute_latency(g, c) == pytest.approx(9.0)


def test_unfold_sends_a_block_to_the_cpu_then_its_long_branch_to_an_idle_accelerator():
    """u -> [s -> x1 -> x2 -> t, s -> y -> t] -> w; u and w fill their accelerators, the block
    holds a third and pays u's and t's large tensors twice (47). On the CPU alone the block is
    slower (50: the long branch takes 24); with that branch on the idle accelerator it is 30,
    which no single move reaches from the call. `_unfold` takes both steps."""
    def node(x, p_cpu, comm, memory):
        return Node(x, p_acc=1.0, p_cpu=p_cpu, comm=comm, memory=memory)

    nodes = [node("u", 100.0, 10.0, 4.0), node("s", 2.0, 1.0, 1.0), node("x1", 12.0, 1.0, 0.5),
             node("x2", 12.0, 1.0, 0.5), node("y", 2.0, 1.0, 0.5), node("t", 2.0, 10.0, 1.0), node("w", 100.0, 1.0, 4.0)]
    g = Graph(nodes, [("u", "s"), ("s", "x1"), ("x1", "x2"), ("x2", "t"), ("s", "y"), ("y", "t"), ("t", "w")])
    c = Cluster(4, 1, memory=4.0)
    a = np.array([0, 2, 2, 2, 2, 2, 1])
    assert one_call_each(g, c, a) and call_latency(g, c, a) == pytest.approx(47.0)
    blocks = unit_orders(g, c)
    on_cpu = search_mod._apply(blocks, a, ("call", 2, c.k))
    assert call_latency(g, c, on_cpu) == pytest.approx(50.0)
    for seed in range(4):
        b = search_mod._unfold(blocks, a, 47.0, np.random.default_rng(seed), lambda: False)
        assert b is not None and one_call_each(g, c, b)
        assert call_latency(g, c, b) == pytest.approx(30.0)
        assert b[2] == b[3] < c.k and b[1] == b[4] == b[5] == c.k  # x1, x2 on the idle accelerator
    # a split at which no call unfolds to anything better comes back as None
    assert search_mod._unfold(blocks, b, call_latency(g, c, b), np.random.default_rng(0), lambda: False) is None
