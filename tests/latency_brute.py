"""An exhaustive latency search written for the tests, sharing no code with the library.

It tries every labelling of the nodes with (accelerator, CPU), keeps those that respect
support, CPU times and memory caps and whose accelerators hold convex sets, and finds the
least schedule of the model (one call per accelerator) by fixed-point iteration. `instances`
draws tiny random graphs and clusters for hypothesis.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import strategies as st

from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph, Node


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
