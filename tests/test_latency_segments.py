"""The segment bound (`devplace_lite.latency_segments`) against the exhaustive searches written
for the tests (`latency_brute`) and the library's (`exhaustive_latency`, more calls per
accelerator), on tiny random graphs and on chains of small blocks like the published ones."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from latency_brute import brute_latency, instances

from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph, Node
from devplace_lite.latency import exhaustive_latency
from devplace_lite.latency_segments import segment_bound


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


def _check(g, c, truth):
    b = segment_bound(g, c)
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
@given(blocks())
def test_segment_bound_never_exceeds_the_optimum_on_chains_of_blocks(inst):
    g, c = inst
    _check(g, c, brute_latency(g, c))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(max_nodes=5))
def test_segment_bound_holds_with_two_calls_per_accelerator(inst):
    g, c = inst
    r = exhaustive_latency(g, c, q=2)
    _check(g, c, math.inf if r.objective is None else r.objective)
