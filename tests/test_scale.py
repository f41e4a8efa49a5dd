"""Issue 17, the algorithmic half: the empty graph through every registry entry, statuses that
claim only what is proven, and graph sizes where quadratic memory used to be allocated.

Scale tests stay cheap (10^4 to 3 x 10^4 nodes) and assert on memory (tracemalloc peaks, which
load cannot move) and on what is refused before any work, never on wall time; the 10^6 runs
live in benchmarks/scale.
"""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite import methods
from devplace_lite.throughput.baselines import balance_by_time, random_best_of
from devplace_lite.throughput.bounds.best import best_bound
from devplace_lite.throughput.bounds.combinatorial import combinatorial_bound
from devplace_lite.cli import main
from devplace_lite.cost import chain_order, evaluate
from devplace_lite.devices import Cluster
from devplace_lite.throughput.dp import dp, linear, pipedream
from devplace_lite.errors import LimitError
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.heuristics.list_scheduling import etf, heft
from devplace_lite.throughput.ideals import count_ideals, enumerate_ideals, width
from devplace_lite.throughput import ip as throughput
from devplace_lite.result import unplaceable
from devplace_lite.throughput import slicing
from devplace_lite.units import unit_graph

EMPTY = {"format": "devplace-graph", "version": 1, "nodes": [], "edges": []}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- the empty graph ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def empty(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.json"
    path.write_text(json.dumps(EMPTY))
    return path


def _answered_zero_or_refused(code: int, out: str, err: str, exact: bool) -> None:
    if code == 2:  # a method that needs accelerators on a cluster without any
        assert err.count("\n") == 1 and err.startswith("devplace: error: ") and out == "", err
        return
    assert code == 0 and err == "", err
    ans = json.loads(out)
    assert ans["objective"] == 0.0 and ans["placement"] == {}
    assert ans["status"] in ("optimal", "feasible"), ans
    assert not exact or ans["status"] == "optimal"
    assert ans["bound"] == 0.0 and ans["gap"] == 0.0  # the certifying bound proves 0


@pytest.mark.parametrize("k, cpus", [(2, 1), (0, 1)])
@pytest.mark.parametrize("name", sorted(methods.PARTITION))
def test_empty_graph_through_every_partition_method(capsys, empty, name, k, cpus):
    code, out, err = run(capsys, "partition", empty, "--method", name, "-k", k, "--cpus", cpus, "--json",
                         "--time-limit", 20)
    _answered_zero_or_refused(code, out, err, methods.PARTITION[name].exact)


@pytest.mark.parametrize("name", sorted(methods.LATENCY))
def test_empty_graph_through_every_latency_method(capsys, empty, name):
    code, out, err = run(capsys, "latency", empty, "--method", name, "-k", 2, "--cpus", 1, "--json")
    assert code == 0 and err == "", err
    ans = json.loads(out)
    assert ans["objective"] == 0.0 and ans["status"] in ("optimal", "feasible") and ans["placement"] == {}
    assert not methods.LATENCY[name].exact or ans["status"] == "optimal"


@pytest.mark.parametrize("name", sorted(methods.BOUND))
def test_empty_graph_through_every_bound(capsys, empty, name):
    code, out, err = run(capsys, "bound", empty, "--method", name, "-k", 2, "--json", "--time-limit", 20)
    assert code == 0 and err == "", err
    ans = json.loads(out)
    assert ans["bound"] == 0.0 and ans["status"] in ("optimal", "trivial"), ans


def test_empty_graph_info(capsys, empty):
    code, out, _ = run(capsys, "info", empty, "--json")
    info = json.loads(out)
    assert code == 0 and info["nodes"] == 0 and info["ideals"] == 1 and info["width"] == 0


# -- statuses claim only what is proven --------------------------------------------------------
def test_a_heuristic_over_a_cap_says_unknown_when_a_split_fits(capsys, tmp_path):
    """`time --memory 1` broke every cap and said infeasible with gap 0; all of it fits on the CPU."""
    g = generate("layered", 30, seed=2)
    path = tmp_path / "g.json"
    from devplace_lite.io import save_graph
    save_graph(g, path)
    code, out, _ = run(capsys, "partition", path, "--method", "time", "-k", 2, "--cpus", 1, "--memory", 1, "--json")
    ans = json.loads(out)
    assert code == 0 and ans["status"] == "unknown" and ans["gap"] is None and ans["violations"]
    code, out, _ = run(capsys, "partition", path, "--method", "dp", "-k", 2, "--cpus", 1, "--memory", 1, "--json")
    assert json.loads(out)["status"] == "optimal"  # the split the heuristic missed exists


@pytest.mark.parametrize("fn", [heft, etf])
def test_list_schedulers_prove_infeasible_when_a_node_runs_nowhere(fn):
    g = Graph([Node("a", p_acc=1, p_cpu=2), Node("b", p_acc=1, p_cpu=3, supported=False), Node("c", p_acc=1)],
              [("a", "b"), ("b", "c")])
    for c, culprit in ((Cluster(accelerators=2), "b"), (Cluster(accelerators=0, cpus=2), "c")):
        r = fn(g, c)
        assert r.status == "infeasible" and r.gap is None and f"node {culprit} " in r.extra["reason"]
        assert unplaceable(g, c) == r.extra["reason"]
    assert fn(g, Cluster(accelerators=1, cpus=1)).status == "feasible"


@settings(max_examples=40, deadline=None, database=None)
@given(st.integers(0, 10**6), st.integers(0, 3), st.integers(0, 2), st.floats(0.2, 3.0))
def test_infeasible_is_said_only_when_no_placement_fits(seed, k, cpus, cap_share):
    """Every heuristic's `infeasible` agrees with `unplaceable`, whatever the cluster."""
    if k + cpus == 0:
        return
    g = generate("series_parallel", 12, seed=seed % 97, training=bool(seed % 2))
    c = Cluster(accelerators=k, cpus=cpus, memory=float(g.memory.max()) * cap_share)
    proof = unplaceable(g, c)
    for name in ("single", "greedy", "topo-fill", "heft", "etf", "kl", "linear", "pipedream"):
        if k == 0 and name in ("uniform", "parameters", "time"):
            continue
        r = methods.resolve(methods.PARTITION, name)(g, c, time_limit=5.0, seed=0)
        assert (r.status == "infeasible") == (proof is not None), (name, r.status, proof)
        assert r.status not in ("infeasible", "unknown") or r.gap is None


# -- sizes ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big():
    return generate("layered", 30_000, seed=0)


def peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_info_evaluate_and_bounds_take_linear_memory(big):
    """At 30,000 nodes an n x n table of booleans is 900 MB and of floats 7 GB; these stay
    within a few hundred bytes a node."""
    c = Cluster(accelerators=4, cpus=1)
    a = balance_by_time(big, c).assignment
    budget = 150  # MB
    assert peak_mb(lambda: count_ideals(big, 100_000)) < budget
    assert peak_mb(lambda: width(big)) < budget
    assert peak_mb(lambda: evaluate(big, c, a)) < budget
    assert peak_mb(lambda: evaluate(big, Cluster(accelerators=30_000), np.arange(big.n) % 30_000)) < budget
    assert peak_mb(lambda: combinatorial_bound(big, c)) < budget
    assert peak_mb(lambda: best_bound(big, c, time_limit=2.0, upper=1e9)) < 2 * budget


def test_ideal_counts_refuse_by_size_before_any_work(big):
    poset = unit_graph(big, fold=True)
    assert count_ideals(poset, limit=poset.size) is None  # the U + 1 prefixes alone pass it
    with pytest.raises(LimitError, match="more than 1,000 ideals"):
        enumerate_ideals(poset, limit=1_000)
    from devplace_lite.throughput import ideals
    small = unit_graph(generate("layered", 300, seed=1), fold=True)
    expected = len(enumerate_ideals(small, 10**6))
    old = ideals.MASK_BYTES
    ideals.MASK_BYTES = 1_000  # 30,000 units need 56 MB of masks at least, 300 units 5.6 kB
    try:
        with pytest.raises(LimitError, match="ideals would take more than"):
            enumerate_ideals(poset, limit=10**8)
        assert count_ideals(small, 10**6) == expected  # counted testing predecessors bit by bit
    finally:
        ideals.MASK_BYTES = old


def test_chain_test_needs_no_device_square_table(big):
    a = np.arange(big.n) // 3  # 10,000 devices, one per layer slice: a chain
    assert peak_mb(lambda: chain_order(big, Cluster(accelerators=10_000), a)) < 50


def test_what_does_not_scale_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    g = generate("layered", 400, seed=3)
    c = Cluster(accelerators=3)
    monkeypatch.setattr(slicing, "MAX_BLOCKS", 1_000)
    with pytest.raises(LimitError, match="slicing an order of"):
        linear(g, c)
    # the DP's refusal names the DP and what answers instead, not its first step
    with pytest.raises(LimitError, match=r"the DP cannot take a graph this large .*use a method that scales \(time,"):
        dp(g, c)
    from devplace_lite.throughput import dp as dp_module
    # exhaustive search suggests the DP only where the DP answers
    with pytest.raises(LimitError, match="use dp or ip for"):
        exhaustive(g, c)
    monkeypatch.setattr("devplace_lite.throughput.exhaustive.DP_UNITS", 100)
    with pytest.raises(LimitError, match=r"use a method that scales \(time, greedy"):
        exhaustive(g, c)
    monkeypatch.setattr(dp_module, "PIPEDREAM_WORK", 1e4)
    with pytest.raises(LimitError, match="PipeDream"):
        pipedream(g, c)
    assert random_best_of(g, c).status == "feasible"  # scored without the slicer


def test_ip_past_its_size_returns_the_warm_start_within_the_limit(reach):
    g = generate("layered", 300, seed=4)
    c = Cluster(accelerators=3)
    from devplace_lite.methods import PARTITION

    reach(PARTITION, "ip", 100)
    r = throughput.ip_chain(g, c, time_limit=5.0)
    assert r.status == "time_limit" and r.extra["warm_start"] and "binaries" in r.extra["reason"]
    assert r.objective == r.check().max_load and r.check().feasible
    assert r.bound is not None and r.bound <= r.objective
    with pytest.raises(LimitError, match="give --time-limit"):
        throughput.ip_chain(g, c)


def test_random_draws_stay_linear_on_large_graphs(big):
    r = random_best_of(big, Cluster(accelerators=4))
    assert r.status == "feasible" and r.extra["samples"] <= 5_000_000 // big.n
    assert math.isfinite(r.objective)


def test_info_leaves_the_width_out_past_its_size(capsys, tmp_path, monkeypatch):
    """Past WIDTH_NODES `info` says the width was not computed (null in --json), instead of
    spending half a minute on the max-flow at a million nodes."""
    from devplace_lite import cli
    from devplace_lite.commands import info
    from devplace_lite.io import save_graph

    monkeypatch.setattr(info, "WIDTH_NODES", 10)
    p = tmp_path / "g.json"
    save_graph(generate("layered", 30, seed=0), p)
    assert cli.main(["info", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["width"] is None
    assert cli.main(["info", str(p)]) == 0
    assert "width            not computed past 10 nodes" in capsys.readouterr().out
