"""The single-sample latency evaluator: hand-checked cases and the rules it must satisfy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, GraphError, Node
from devplace_lite.single_sample.model import evaluate_latency, exhaustive_latency, level_pieces, reentry_pieces


def chain4() -> Graph:
    return Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5) for x in "abcd"],
                 [("a", "b"), ("b", "c"), ("c", "d")])


def test_pipeline_split_adds_stage_times_and_transfers():
    g, c = chain4(), Cluster(2, 1)
    ev = evaluate_latency(g, c, {"a": "acc0", "b": "acc0", "c": "acc1", "d": "acc1"})
    # stage 0: compute 2 + send b 0.5; stage 1: receive b 0.5 + compute 2
    assert ev.latency == pytest.approx(5.0)
    assert [(x.device, x.start, x.finish) for x in ev.calls] == [(0, 0.0, 2.5), (1, 2.5, 5.0)]
    assert evaluate_latency(g, c, [0, 0, 0, 0]).latency == pytest.approx(4.0)


def test_cpu_runs_branches_in_parallel():
    nodes = [Node("s", p_acc=1, p_cpu=1, comm=0.25), Node("x", p_acc=9, p_cpu=3), Node("y", p_acc=9, p_cpu=3),
             Node("t", p_acc=1, p_cpu=1)]
    g = Graph(nodes, [("s", "x"), ("s", "y"), ("x", "t"), ("y", "t")])
    ev = evaluate_latency(g, Cluster(1, 1), {"s": "cpu0", "x": "cpu0", "y": "cpu0", "t": "cpu0"})
    assert ev.latency == pytest.approx(5.0)  # 1 + max(3, 3) + 1, not 1 + 3 + 3 + 1
    assert len({lane for lane, *_ in ev.tasks(g, Cluster(1, 1))}) == 2


def test_deadlocking_cut_falls_back_to_levels():
    g = Graph([Node(x, p_acc=1, p_cpu=3, comm=0.5) for x in "abcd"], [("a", "b"), ("c", "d")])
    c = Cluster(2, 1)
    split = {"a": "acc0", "d": "acc0", "b": "acc1", "c": "acc1"}
    assert math.isinf(evaluate_latency(g, c, split, pieces=[0, 0, 0, 0]).latency)
    ev = evaluate_latency(g, c, split)
    assert ev.cut == "levels" and not ev.deadlock and ev.latency == pytest.approx(3.0)
    assert evaluate_latency(g, c, split, pieces=ev.pieces).latency == pytest.approx(3.0)


def test_non_contiguous_device_gets_two_calls():
    g, c = chain4(), Cluster(2, 1)
    a = np.array([0, 1, 0, 1])
    assert reentry_pieces(g, c, a).tolist() == [0, 0, 1, 1]
    ev = evaluate_latency(g, c, a)
    assert ev.cut == "reentry" and len(ev.calls) == 4
    assert ev.latency == pytest.approx(4 * 1.0 + 0.5 + 2 * 0.5 * 2 + 0.5)


def test_bad_pieces_are_refused():
    g, c = chain4(), Cluster(2, 1)
    with pytest.raises(GraphError):
        evaluate_latency(g, c, [0, 0, 1, 1], pieces=[0, -1, 0, 0])
    with pytest.raises(GraphError):
        evaluate_latency(g, c, [0, 0, 1, 1], pieces={"zz": 0})


@settings(max_examples=40, derandomize=True, deadline=None)
@given(seed=st.integers(0, 10_000), fam=st.sampled_from(["layered", "cells", "random", "skip_chain"]),
       k=st.integers(1, 3))
def test_schedule_satisfies_the_rules_and_is_tight(seed, fam, k):
    """Finish times meet every rule of the model with equality where the model says 'max'."""
    g = generate(fam, 14, seed=seed)
    c = Cluster(k, 1)
    a = np.random.default_rng(seed).integers(0, c.size, g.n)
    ev = evaluate_latency(g, c, a)
    assert not ev.deadlock and math.isfinite(ev.latency)
    F = ev.finish
    for v in np.flatnonzero(a >= k):
        ready = max([F[u] for u in g.pred[v]], default=0.0)
        assert F[v] == pytest.approx(g.p_cpu[v] + ready)
    prev: dict[int, float] = {}
    for call in sorted(ev.calls, key=lambda x: (x.device, x.slot)):
        inside = set(call.nodes)
        inputs = {u for v in call.nodes for u in g.pred[v] if u not in inside}
        outputs = {u for u in call.nodes if any(w not in inside for w in g.succ[u])}
        assert call.compute == pytest.approx(g.p_acc[call.nodes].sum())
        assert call.transfers == pytest.approx(g.comm[list(inputs)].sum() + g.comm[list(outputs)].sum())
        start = max([F[u] for u in inputs] + [prev.get(call.device, 0.0), 0.0])
        assert call.start == pytest.approx(start)
        assert call.finish == pytest.approx(start + call.compute + call.transfers)
        assert np.allclose(F[call.nodes], call.finish)
        prev[call.device] = call.finish
    assert ev.latency == pytest.approx(F.max())


@settings(max_examples=25, derandomize=True, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 3))
def test_level_cut_never_deadlocks(seed, k):
    g = generate("random", 12, seed=seed)
    c = Cluster(k, 1)
    a = np.random.default_rng(seed + 1).integers(0, c.size, g.n)
    ev = evaluate_latency(g, c, a, pieces=level_pieces(g, c, a))
    assert not ev.deadlock and math.isfinite(ev.latency)


def test_more_calls_never_hurt_the_exhaustive_optimum():
    g = generate("layered", 5, seed=0)
    c = Cluster(2, 1)
    one, two = exhaustive_latency(g, c, q=1), exhaustive_latency(g, c, q=2)
    assert two.objective <= one.objective + 1e-12
    assert two.objective < one.objective  # this case gains from a second call
    for r in (one, two):
        assert evaluate_latency(g, c, r.assignment, r.extra["pieces"]).latency == pytest.approx(r.objective)
