"""The segment bound (`devplace_lite.single_sample.segments`) against the exhaustive searches written
for the tests (`latency_brute`) and the library's (`exhaustive_latency`, more calls per
accelerator), on tiny random graphs and on chains of small blocks like the published ones."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from latency_brute import brute_latency, instances

from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph, Node
from devplace_lite.single_sample.model import exhaustive_latency
from devplace_lite.single_sample.bounds import critical_path_bound, latency_bound, work_bound
from devplace_lite.cost import violations
from devplace_lite.single_sample.model import call_latency
from devplace_lite.single_sample.segments import (articulation_split, articulation_units, best_latency_bound,
                                                  one_call_relaxation, segment_bound)


@st.composite
def blocks(draw, max_nodes: int = 7):
    """A stem node, then blocks (one node, or a fork into two or three short branches that
    join), sometimes a second source or sink: graphs with articulation nodes and without."""
    nodes, edges = [], []

    def node():
        i = len(nodes)
        supported = draw(st.sampled_from([True, True, True, True, False]))
        p_cpu = draw(st.sampled_from([None, 0.0, 1.0, 3.0, 6.0, 12.0])) if supported else \
            draw(st.sampled_from([0.0, 2.0, 7.0]))
        nodes.append(Node(f"v{i}", p_acc=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0])), p_cpu=p_cpu,
                          comm=draw(st.sampled_from([0.0, 0.25, 1.0, 3.0])),
                          memory=float(draw(st.integers(0, 4))), supported=supported))
        return f"v{i}"

    last = node()
    while len(nodes) < max_nodes:
        room = max_nodes - len(nodes)
        if room >= 3 and draw(st.booleans()):
            ends = []
            for _ in range(draw(st.integers(2, 3))):
                if len(nodes) >= max_nodes - 1:
                    break
                prev = last
                for _ in range(draw(st.integers(1, 2))):
                    if len(nodes) >= max_nodes - 1:
                        break
                    x = node()
                    edges.append((prev, x))
                    prev = x
                ends.append(prev)
            join = node()
            edges += [(e, join) for e in ends]
            if draw(st.booleans()):
                edges.append((last, join))  # a skip connection around the block
            last = join
        else:
            x = node()
            edges.append((last, x))
            last = x
        if draw(st.integers(0, 3)) == 0:
            break
    edges = list(dict.fromkeys(edges))
    k = draw(st.integers(0, 2))
    cpus = 1 if k == 0 else draw(st.integers(0, 1))
    memory = draw(st.sampled_from([math.inf, 3.0, 4.0, 5.0, 7.0]))
    return Graph(nodes, edges), Cluster(accelerators=k, cpus=cpus, memory=memory)


def _check(g, c, truth, q=None, count=False):
    b = segment_bound(g, c, q=q, count_calls=count)
    assert b is not None
    assert b <= truth + 1e-9, (b, truth)
    if math.isinf(b):  # a node that may run nowhere: nothing is feasible
        assert math.isinf(truth)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_segment_bound_never_exceeds_the_exhaustive_optimum(inst):
    g, c = inst
    _check(g, c, brute_latency(g, c))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=6))
def test_segment_bound_never_exceeds_the_optimum_on_chains_of_blocks(inst):
    g, c = inst
    _check(g, c, brute_latency(g, c))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=5))
def test_segment_bound_holds_with_two_calls_per_accelerator(inst):
    g, c = inst
    r = exhaustive_latency(g, c, q=2)
    _check(g, c, math.inf if r.objective is None else r.objective)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 5), st.data())
def test_segment_bound_is_exact_on_a_chain_with_a_call_per_node_to_spare(n, data):
    """A chain with as many accelerators as nodes and memory in whole quarters of the cap:
    every node is an articulation node, nothing the bound relaxes can bind, so it is the optimum."""
    draw = data.draw
    nodes = [Node(f"v{i}", p_acc=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
                  p_cpu=draw(st.sampled_from([None, 1.0, 3.0, 8.0])), comm=draw(st.sampled_from([0.0, 0.5, 2.0])),
                  memory=float(draw(st.integers(0, 4)))) for i in range(n)]
    g = Graph(nodes, [(f"v{i}", f"v{i + 1}") for i in range(n - 1)])
    c = Cluster(accelerators=n, cpus=1, memory=4.0)
    assert segment_bound(g, c) == pytest.approx(brute_latency(g, c))


@st.composite
def colocated(draw, max_nodes: int = 7):
    """A graph of `blocks` with operator-graph colocation drawn on top: weight sources of an
    operator's class, dead-end outputs of its class, an operator with its successor, and now
    and then a class of two nodes far apart (the tied embedding of a language model)."""
    g, c = draw(blocks(max_nodes=max_nodes - 2))
    nodes, edges = list(g.nodes), list(g.edges)
    order = [v.id for v in nodes]
    color = {}
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["weight", "output", "pair", "far", "tied"]))
        v = draw(st.sampled_from(order))
        if kind == "tied" and len(nodes) + 3 <= max_nodes:  # a weight read through two nodes of its class
            w = draw(st.sampled_from(order))
            x, e1, e2 = (f"w{len(nodes) + i}" for i in range(3))
            tag = f"c{len(color)}"
            nodes.append(Node(x, p_acc=0.0, p_cpu=0.0, comm=draw(st.sampled_from([0.5, 3.0])), memory=0.5))
            for e, into in ((e1, v), (e2, w)):
                nodes.append(Node(e, p_acc=0.5, p_cpu=draw(st.sampled_from([None, 1.0])),
                                  comm=draw(st.sampled_from([0.5, 3.0])), memory=float(draw(st.integers(0, 1)))))
                edges += [(x, e), (e, into)]
            color[x] = color[e1] = color[e2] = tag
        elif kind in ("weight", "output") and len(nodes) < max_nodes:
            x = f"w{len(nodes)}"
            nodes.append(Node(x, p_acc=draw(st.sampled_from([0.0, 0.5])), p_cpu=draw(st.sampled_from([None, 0.0, 1.0])),
                              comm=draw(st.sampled_from([0.0, 0.5, 2.0])), memory=float(draw(st.integers(0, 2)))))
            edges.append((x, v) if kind == "weight" else (v, x))
            color[x] = color[v] = color.get(v, f"c{len(color)}")
        elif kind == "pair":
            succ = [w for u, w in edges if u == v]
            if succ:
                w = draw(st.sampled_from(succ))
                color[v] = color[w] = color.get(v, color.get(w, f"c{len(color)}"))
        else:
            w = draw(st.sampled_from(order))
            if w != v:
                color[v] = color[w] = f"c{len(color)}"
    nodes = [replace(x, color=color.get(x.id)) for x in nodes]
    return Graph(nodes, edges), Cluster(accelerators=c.k, cpus=c.l, memory=c.memory)


def _optimum(g, c, q):
    r = exhaustive_latency(g, c, q=q)
    return math.inf if r.objective is None else r.objective


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(colocated())
def test_segment_bound_with_one_call_per_accelerator_never_exceeds_the_optimum_with_colocation(inst):
    """``q = 1``: classes contracted or held to the CPU, calls counted; the library's exhaustive
    search checks colocation, memory per accelerator and convex calls."""
    g, c = inst
    truth = _optimum(g, c, 1)
    _check(g, c, truth, q=1)
    _check(g, c, truth, q=1, count=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_segment_bound_with_one_call_per_accelerator_never_exceeds_the_exhaustive_optimum(inst):
    g, c = inst
    _check(g, c, brute_latency(g, c), q=1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=6))
def test_segment_bound_counting_calls_never_exceeds_the_optimum_on_chains_of_blocks(inst):
    g, c = inst
    _check(g, c, brute_latency(g, c), q=1, count=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(colocated(max_nodes=6))
def test_segment_bound_counting_two_calls_per_accelerator_never_exceeds_the_optimum(inst):
    g, c = inst
    _check(g, c, _optimum(g, c, 2), q=2, count=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(colocated())
def test_one_call_relaxation_keeps_every_node_or_merges_it(inst):
    """Each node of the relaxation is a node of the graph; what is merged sums into it."""
    g, c = inst
    h = one_call_relaxation(g, c)
    if h is None:  # a class that fits no call and has a node no CPU runs: nothing is feasible
        assert math.isinf(_optimum(g, c, 1))
        return
    assert set(h.index) <= set(g.index)
    assert h.p_acc.sum() == pytest.approx(g.p_acc.sum())
    assert h.memory.sum() == pytest.approx(g.memory.sum())


def test_counting_calls_sees_that_a_block_has_no_accelerator_for_its_middle():
    """s -> {a, b} -> t, one accelerator whose memory holds two of the four: one call may hold
    s and a, the other branch must wait on the CPU; without the count a middle call is free."""
    spec = [("s", 1.0, 10.0, 0.5, 1.0), ("a", 1.0, 10.0, 0.5, 1.0), ("b", 1.0, 10.0, 0.5, 1.0),
            ("t", 1.0, 10.0, 0.5, 1.0)]
    g = Graph([Node(v, p_acc=pa, p_cpu=pc, comm=cm, memory=m) for v, pa, pc, cm, m in spec],
              [("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")])
    c = Cluster(1, 1, memory=2.0)
    truth = brute_latency(g, c)
    assert segment_bound(g, c) < segment_bound(g, c, q=1, count_calls=True) <= truth + 1e-9


def test_a_class_that_cannot_share_a_call_runs_on_the_cpu():
    """The first and last node of a chain in one class: with one call per accelerator the class
    holds the whole chain, which does not fit, so both run on the CPU."""
    g = Graph([Node(x, p_acc=1.0, p_cpu=5.0, comm=0.5, memory=1.0, color="e" if x in "ad" else None)
               for x in "abcd"], [("a", "b"), ("b", "c"), ("c", "d")])
    c = Cluster(2, 1, memory=2.0)
    h = one_call_relaxation(g, c)
    assert not h.supported[h.index["a"]] and not h.supported[h.index["d"]]
    truth = _optimum(g, c, 1)
    assert segment_bound(g, c) < segment_bound(g, c, q=1) <= truth + 1e-9


def test_a_tied_weight_read_first_and_last_is_paid_for_by_the_last_call():
    """A weight ``W`` read by an embedding ``E1`` before the first layer and by ``E2`` before the
    last, all three of one class: with one call per accelerator the class never shares the last
    layer's call (its hull would hold the whole chain), so that call receives ``E2``'s output."""
    spec = [("a", 0.5, 20.0, 0.5, 0.5, None), ("x0", 1.0, 20.0, 0.5, 1.0, None), ("x1", 1.0, 20.0, 0.5, 1.0, None),
            ("x2", 1.0, 20.0, 0.5, 1.0, None), ("x3", 1.0, 20.0, 0.5, 1.0, None), ("W", 0.0, 0.0, 3.0, 0.5, "e"),
            ("E1", 0.5, 1.0, 0.5, 0.5, "e"), ("E2", 0.5, 1.0, 3.0, 0.5, "e")]
    g = Graph([Node(v, p_acc=pa, p_cpu=pc, comm=cm, memory=m, color=col) for v, pa, pc, cm, m, col in spec],
              [("a", "x0"), ("x0", "x1"), ("x1", "x2"), ("x2", "x3"), ("W", "E1"), ("W", "E2"), ("E1", "x2"),
               ("E2", "x3")])
    c = Cluster(3, 1, memory=2.5)
    truth = _optimum(g, c, 1)
    assert segment_bound(g, c) < segment_bound(g, c, q=1) <= truth + 1e-9


def _block():
    """x -> s -> {a, b} -> t -> y, memory for two of a, b, t per accelerator: the best split cuts
    the block and pays both branches' transfers, which no single path sees."""
    spec = [("x", 2.0, 8.0, 2.0, 0.0), ("s", 0.5, 4.0, 0.5, 0.0), ("a", 0.5, 20.0, 2.0, 2.0),
            ("b", 1.0, 8.0, 3.0, 2.0), ("t", 1.0, 8.0, 2.0, 2.0), ("y", 0.5, 20.0, 2.0, 0.0)]
    g = Graph([Node(v, p_acc=pa, p_cpu=pc, comm=cm, memory=m) for v, pa, pc, cm, m in spec],
              [("x", "s"), ("s", "a"), ("s", "b"), ("a", "t"), ("b", "t"), ("t", "y")])
    return g, Cluster(3, 1, memory=4.0)


def test_segment_bound_sees_a_cut_through_a_whole_block():
    g, c = _block()
    truth = brute_latency(g, c)
    assert segment_bound(g, c) == pytest.approx(truth)
    assert latency_bound(g, c)[0] < truth - 1  # the path and interval programs miss it


def test_best_latency_bound_reports_each_step_and_stops_when_tight():
    g, c = _block()
    seen = []
    b = best_latency_bound(g, c, time_limit=30, on_progress=seen.append)
    assert b.method == "segments" and b.status == "time_limit" and b.kind == "any"
    assert [x.bound for x in seen] == sorted(x.bound for x in seen) and seen[-1].bound == b.bound
    assert b.bound == pytest.approx(brute_latency(g, c))
    assert set(b.extra["components"]) == {"critical-path", "path", "segments"}
    tight = best_latency_bound(g, c, upper=b.bound)
    assert tight.status == "optimal" and tight.extra["tight"]
    # an upper bound the path program already meets: the segment step never runs
    low = best_latency_bound(g, c, upper=latency_bound(g, c)[0])
    assert low.status == "optimal" and "segments" not in low.extra["components"]


def test_best_latency_bound_keeps_the_finished_steps_when_time_is_up():
    g, c = _block()
    b = best_latency_bound(g, c, time_limit=0.0)
    assert b.method in ("critical-path", "work") and b.status == "time_limit"
    assert b.bound == pytest.approx(max(critical_path_bound(g, c), work_bound(g, c)))


def test_best_latency_bound_says_infeasible_when_a_node_may_run_nowhere():
    g = Graph([Node("a", p_acc=1.0, p_cpu=None, memory=5.0), Node("b", p_acc=1.0, p_cpu=2.0)], [("a", "b")])
    b = best_latency_bound(g, Cluster(2, 1, memory=4.0))  # a fits no accelerator and has no CPU time
    assert b.status == "infeasible" and math.isinf(b.bound)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=6))
def test_best_latency_bound_never_exceeds_the_exhaustive_optimum(inst):
    g, c = inst
    truth = brute_latency(g, c)
    b = best_latency_bound(g, c, upper=truth if math.isfinite(truth) else None)
    assert b.bound <= truth + 1e-9
    assert (b.status == "optimal") == (math.isfinite(truth) and b.bound >= truth * (1 - 1e-9))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=6))
def test_articulation_split_is_a_feasible_split_never_below_the_optimum(inst):
    """The start the latency search cuts along the articulation chain: a split of the model
    (no violation, finite latency) whenever it returns one, so never below the optimum, and the
    places it cuts are in topological order."""
    g, c = inst
    place = articulation_units(g, c)
    assert all(place[u] <= place[w] for u, w in zip(g.src.tolist(), g.dst.tolist()))
    a = articulation_split(g, c)
    if a is None:
        return
    assert not violations(g, c, a)
    val = call_latency(g, c, a)
    assert math.isfinite(val) and val >= brute_latency(g, c) - 1e-9


def test_articulation_split_cuts_a_chain_of_blocks_where_one_tensor_crosses():
    """Two residual blocks, one per accelerator's memory: the cut falls between them, where the
    block output alone crosses, not inside a block where two tensors would."""
    spec = [("s", 4.0), ("a", 1.0), ("t", 4.0), ("b", 1.0), ("u", 4.0)]
    nodes = [Node(v, p_acc=1.0, p_cpu=None, comm=cm, memory=2.0) for v, cm in spec]
    g = Graph(nodes, [("s", "a"), ("a", "t"), ("s", "t"), ("t", "b"), ("b", "u"), ("t", "u")])
    c = Cluster(2, 0, memory=6.0)
    a = articulation_split(g, c)
    assert a is not None and a[0] == a[1] == a[2] != a[3] == a[4]
    assert call_latency(g, c, a) == pytest.approx(brute_latency(g, c))


def test_docstring_examples_run():
    import doctest

    import devplace_lite.single_sample.segments as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_segment_bound_and_the_articulation_start_refuse_graphs_past_the_table_limit(reach):
    """Both keep an n x n reachability table: past the reach of the latency bounds they refuse before allocating it,
    and the latency search's starts go on without the articulation ones."""
    from devplace_lite.errors import LimitError
    from devplace_lite.methods import LATENCY_BOUND
    from devplace_lite.single_sample.search import start_splits

    g, c = _block()
    reach(LATENCY_BOUND, "best", 4)
    with pytest.raises(LimitError):
        segment_bound(g, c)
    with pytest.raises(LimitError):
        articulation_units(g, c)
    names = [name for name, _, _ in start_splits(g, c)]
    assert names and not any(name.startswith("articulation") for name in names)


def test_the_front_door_certifies_a_latency_answer_with_the_segment_bound(capsys):
    """``dl.latency`` and ``devplace latency`` raise the answer's bound with `best_latency_bound`
    for the answer's ``q`` (the segment step included), and say so; the help states its time."""
    import devplace_lite as dl
    from devplace_lite.cli import main

    g, c = _block()
    r = dl.latency(g, c, "greedy")
    assert r.extra["bound_kind"] == "latency" and r.extra["bound_method"] == "segments"
    assert r.bound == pytest.approx(best_latency_bound(g, c, q=1).bound) and r.bound <= r.objective + 1e-9
    with pytest.raises(SystemExit):
        main(["latency", "--help"])
    assert "default 15" in " ".join(capsys.readouterr().out.split())


def test_the_certificate_bounds_as_many_calls_as_the_answer_runs():
    """An answer whose pieces put two calls on one accelerator is certified for two calls per
    accelerator, whatever ``q`` it states (the one-call relaxation would not hold for it)."""
    from devplace_lite import methods

    fam = methods.BOUND_FAMILIES["latency"]
    assert fam.kwargs({"q": 1, "pieces": {"a": 0, "b": 1}}) == {"q": 2}
    assert fam.kwargs({"q": 1, "pieces": {"a": 0, "b": 0}}) == {"q": 1}
    assert fam.kwargs({}) == {"q": 1}
