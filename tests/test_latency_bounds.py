"""Latency lower bounds against an exhaustive search written here, on tiny random graphs.

The brute force below shares no code with the library's evaluator: it tries every labelling
of the nodes with (accelerator, CPU), keeps those whose accelerators hold convex sets, and
finds the least schedule of the model (one call per accelerator) by fixed-point iteration.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph, Node
from devplace_lite.latency import exhaustive_latency
from devplace_lite.latency_bounds import (critical_path_bound, interval_bound, latency_bound, memory_levels,
                                          path_bound, ready_bounds, work_bound)


def brute_latency(graph: Graph, cluster: Cluster) -> float:
    """The least latency over every split with one convex call per accelerator (``inf`` if none)."""
    n, k = graph.n, cluster.k
    succ = [[w for u, w in zip(graph.src, graph.dst) if u == v] for v in range(n)]
    pred = [[u for u, w in zip(graph.src, graph.dst) if w == v] for v in range(n)]
    reach = [[False] * n for _ in range(n)]
    for v in reversed(range(n)):  # generated graphs number their nodes topologically
        for w in succ[v]:
            reach[v][w] = True
            reach[v] = [a or b for a, b in zip(reach[v], reach[w])]
    labels = list(range(k)) + (["cpu"] if cluster.l else [])
    best = math.inf
    for lab in itertools.product(labels, repeat=n):
        if any(d == "cpu" and graph.nodes[v].p_cpu is None for v, d in enumerate(lab)):
            continue
        if any(d != "cpu" and not graph.nodes[v].supported for v, d in enumerate(lab)):
            continue
        if any(sum(graph.nodes[v].memory for v in range(n) if lab[v] == d) > cluster.memory for d in range(k)):
            continue
        convex = all(not (lab[u] == lab[w] != "cpu" and reach[u][x] and reach[x][w] and lab[x] != lab[u])
                     for u in range(n) for w in range(n) for x in range(n))
        if not convex:
            continue
        best = min(best, schedule(graph, lab, pred))
    return best


def schedule(graph: Graph, lab, pred) -> float:
    """Least finish times by iteration from zero; ``inf`` when they do not settle (a deadlock)."""
    n = graph.n
    F = [0.0] * n
    for _ in range(2 * n + 2):
        new = list(F)
        calls = {d for d in lab if d != "cpu"}
        for d in calls:
            inside = [v for v in range(n) if lab[v] == d]
            feeders = {u for v in inside for u in pred[v] if lab[u] != d}
            senders = {u for u in inside if any(lab[w] != d for w in range(n) if u in pred[w])}
            start = max([F[u] for u in feeders], default=0.0)
            finish = (start + sum(graph.nodes[v].p_acc for v in inside) + sum(graph.nodes[u].comm for u in feeders)
                      + sum(graph.nodes[u].comm for u in senders))
            for v in inside:
                new[v] = finish
        for v in range(n):
            if lab[v] == "cpu":
                new[v] = graph.nodes[v].p_cpu + max([F[u] for u in pred[v]], default=0.0)
        if new == F:
            return max(F, default=0.0)
        F = new
    return math.inf


@st.composite
def instances(draw, max_nodes: int = 6):
    n = draw(st.integers(2, max_nodes))
    edges = [(f"v{i}", f"v{j}") for i in range(n) for j in range(i + 1, n) if draw(st.booleans())
             and (j - i <= 2 or draw(st.booleans()))]
    nodes = []
    for i in range(n):
        supported = draw(st.sampled_from([True, True, True, True, False]))
        p_cpu = draw(st.sampled_from([None, 0.0, 1.0, 3.0, 6.0, 12.0])) if supported else \
            draw(st.sampled_from([0.0, 2.0, 7.0]))
        nodes.append(Node(f"v{i}", p_acc=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0])), p_cpu=p_cpu,
                          comm=draw(st.sampled_from([0.0, 0.25, 1.0, 3.0])),
                          memory=float(draw(st.integers(0, 4))), supported=supported))
    k = draw(st.integers(0, 2))
    cpus = 1 if k == 0 else draw(st.integers(0, 1))
    memory = draw(st.sampled_from([math.inf, 3.0, 4.0, 5.0, 7.0]))
    return Graph(nodes, edges), Cluster(accelerators=k, cpus=cpus, memory=memory)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_bounds_never_exceed_the_exhaustive_optimum(inst):
    g, c = inst
    truth = brute_latency(g, c)
    for name, b in (("critical path", critical_path_bound(g, c)), ("work", work_bound(g, c)),
                    ("path", path_bound(g, c).bound), ("path, coarse memory", path_bound(g, c, cells=16).bound),
                    ("interval", interval_bound(g, c).bound), ("interval, first order", interval_bound(g, c, late=False).bound),
                    ("best", latency_bound(g, c)[0])):
        assert b <= truth + 1e-9, (name, b, truth)
    ready = ready_bounds(g, c)
    if math.isfinite(truth):
        assert np.all(np.isfinite(ready.ready))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_nodes=5))
def test_path_bound_holds_with_two_calls_per_accelerator(inst):
    g, c = inst
    r = exhaustive_latency(g, c, q=2)
    truth = math.inf if r.objective is None else r.objective
    assert ready_bounds(g, c, q=2).bound <= truth + 1e-9


def test_brute_force_matches_the_library_exhaustive_search():
    """Two independent exhaustive searches agree (so each checks the other)."""
    rng = np.random.default_rng(3)
    for trial in range(12):
        n = int(rng.integers(3, 6))
        nodes = [Node(f"v{i}", p_acc=float(rng.integers(0, 4)), p_cpu=float(rng.integers(1, 9)),
                      comm=float(rng.integers(0, 3)) / 2, memory=float(rng.integers(0, 3))) for i in range(n)]
        edges = [(f"v{i}", f"v{j}") for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
        g, c = Graph(nodes, edges), Cluster(2, 1, memory=3.0)
        assert brute_latency(g, c) == pytest.approx(exhaustive_latency(g, c, q=1).objective), trial


def test_path_bound_is_exact_on_a_chain_that_must_be_cut():
    """Four layers, two fit per accelerator: the best split cuts once, paying the activation
    twice (sent and received), and the path bound sees exactly that."""
    g = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5, memory=1.0) for x in "abcd"],
              [("a", "b"), ("b", "c"), ("c", "d")])
    c = Cluster(2, 1, memory=2.0)
    assert critical_path_bound(g, c) == 4.0
    assert path_bound(g, c).bound == pytest.approx(brute_latency(g, c)) == pytest.approx(5.0)


def test_path_bound_charges_a_whole_residual_block_to_one_call():
    """x -> y -> z -> add and x -> add: a call holding x and add holds y and z too, so with
    room for three nodes the skip edge cannot stay inside a call."""
    g = Graph([Node(i, p_acc=1.0, p_cpu=50.0, comm=2.0, memory=1.0) for i in ("x", "y", "z", "add")],
              [("x", "y"), ("y", "z"), ("z", "add"), ("x", "add")])
    c = Cluster(2, 0, memory=3.0)
    truth = brute_latency(g, c)
    assert path_bound(g, c).bound == pytest.approx(truth)


def test_memory_levels_round_down_and_switch_off_when_memory_cannot_bind():
    g = Graph([Node(x, p_acc=1.0, memory=m) for x, m in zip("abc", (1.0, 1.0, 1.0))], [("a", "b"), ("b", "c")])
    S, units = memory_levels(g, Cluster(2, 0, memory=3.0), calls=2)
    assert S == 0 and not units.any()  # all three fit on one accelerator
    S, units = memory_levels(g, Cluster(2, 0, memory=2.0), calls=2, cells=8)
    assert S == 8 and units.tolist() == [3, 3, 3]  # 1/2 of 8 levels, rounded down
    assert units.sum() > S  # three nodes still overflow one call


def test_work_bound_counts_only_what_no_cpu_may_run():
    g = Graph([Node("a", p_acc=4.0), Node("b", p_acc=2.0, p_cpu=1.0)], [])
    assert work_bound(g, Cluster(2, 1)) == 2.0
    assert work_bound(g, Cluster(1, 1)) == 4.0


def test_interval_bound_charges_the_skip_connection_a_cut_crosses():
    """x -> y -> z -> add and x -> add, two nodes per accelerator: the cut between y and z also
    cuts x's large output to add. One path sees only y's small output or only x's; the interval
    bound sees that the call holding x and y sends both."""
    g = Graph([Node("x", p_acc=1.0, comm=5.0, memory=1.0), Node("y", p_acc=1.0, comm=0.1, memory=1.0),
               Node("z", p_acc=1.0, comm=0.1, memory=1.0), Node("add", p_acc=1.0, memory=1.0)],
              [("x", "y"), ("y", "z"), ("z", "add"), ("x", "add")])
    c = Cluster(2, 0, memory=2.0)
    truth = brute_latency(g, c)
    assert truth == pytest.approx(14.2)
    path, interval = path_bound(g, c).bound, interval_bound(g, c).bound
    assert path == pytest.approx(12.0) and path < interval <= truth + 1e-9
    assert latency_bound(g, c)[0] == pytest.approx(interval)
