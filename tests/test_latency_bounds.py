"""Latency lower bounds against an exhaustive search written for the tests (`latency_brute`),
on tiny random graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from latency_brute import brute_latency, instances

from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph, Node
from devplace_lite.single_sample.model import exhaustive_latency
from devplace_lite.single_sample.bounds import critical_path_bound, interval_bound, latency_bound, memory_levels, path_bound, ready_bounds, work_bound


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
