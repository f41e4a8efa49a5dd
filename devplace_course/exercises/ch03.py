"""Exercises of chapter 03 (integer programs for throughput, written in cvxpy).

Both exercises ask for the optimum of a small IP and compare it with brute force: every
assignment of the operators to the accelerators (``k^n``, a few thousand at most), so a check
costs what the learner's IPs cost, a tenth of a second each on these sizes.
"""

from __future__ import annotations

import itertools

import numpy as np

from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import batch_loads, exhaustive
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from .core import Case, close, register

FAMILIES = ("cells", "layered", "random", "series_parallel", "skip_chain")


def _two_chains() -> tuple[Graph, str]:
    """The chapter's two independent chains a -> b and c -> d."""
    g = Graph([Node("a", p_acc=1, comm=0.1), Node("b", p_acc=2), Node("c", p_acc=2, comm=0.1), Node("d", p_acc=3)],
              [("a", "b"), ("c", "d")], name="two chains")
    return g, ('graph = Graph([Node("a", p_acc=1, comm=0.1), Node("b", p_acc=2), Node("c", p_acc=2, comm=0.1), '
               'Node("d", p_acc=3)], [("a", "b"), ("c", "d")])')


def _generated(rng: np.random.Generator, low: int, high: int) -> tuple[Graph, str]:
    """A generated graph of ``low..high`` operators with at least one edge."""
    while True:
        family = str(rng.choice(FAMILIES))
        n, seed = int(rng.integers(low, high + 1)), int(rng.integers(0, 1000))
        g = generate(family, n, seed=seed)
        if len(g.src):
            return g, f"graph = generate({family!r}, {n}, seed={seed})"


# -- 03.2  forbidden (operator, device) pairs -------------------------------------------------


def forbidden_optimum(graph: Graph, cluster: Cluster, forbidden) -> float:
    """Least max-load of a split of any shape on ``cluster``'s accelerators in which no operator
    ``v`` runs on device ``d`` for a pair ``(v, d)`` of ``forbidden`` (node indices, device indices).

    Brute force over every assignment that respects the pairs; ``inf`` when none does.
    """
    D = cluster.size
    A = np.array(list(itertools.product(range(D), repeat=graph.n)), dtype=np.int64)
    for v, d in forbidden:
        A = A[A[:, int(v)] != int(d)]
    if not len(A):
        return float("inf")
    return float(batch_loads(graph, cluster, A).max(axis=1).min())


def _forbidden_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's two chains: a and d may not share accelerator 0
        g, text = _two_chains()
        k, forbidden = 2, [(0, 0), (3, 1)]
    else:
        g, text = _generated(rng, 4, 7)
        k = int(rng.integers(2, 4))
        if i % 2:  # the story of the exercise: accelerator 0 lacks the kernel of a few operators
            chosen = rng.choice(g.n, size=int(rng.integers(1, g.n // 2 + 1)), replace=False)
            forbidden = [(int(v), 0) for v in sorted(chosen)]
        else:  # any pairs, each operator keeping at least one device
            forbidden = []
            for v in range(g.n):
                banned = rng.random(k) < 0.3
                if banned.all():
                    banned[int(rng.integers(k))] = False
                forbidden += [(v, int(d)) for d in np.flatnonzero(banned)]
    return Case((g, Cluster(accelerators=k), forbidden),
                text=f"{text}; cluster = Cluster(accelerators={k}); forbidden = {forbidden}")


def _forbidden_slips(case: Case) -> list:
    graph, cluster, forbidden = case.args
    out = [(float(exhaustive(graph, cluster, kind="any").objective),
            "that is the optimum with no pair forbidden: are the rows x[v, d] == 0 in the problem you solve?")]
    swapped = [(d, v) for v, d in forbidden if d < graph.n and v < cluster.size]
    if len(swapped) == len(forbidden):
        out.append((forbidden_optimum(graph, cluster, swapped),
                    "that forbids (device, operator) pairs: each pair is (operator index, device index)"))
    return out


def _forbidden_diagnose(case: Case, expected: float, got) -> str | None:
    if float(got) < expected - 1e-9 * max(1.0, abs(expected)):
        return "below the optimum: some forbidden pair is still allowed, or an output that crosses is not paid"
    return None


register(id="03.2", name="my_forbidden_optimum", title="max-load IP with forbidden (operator, device) pairs",
         reference=forbidden_optimum, cases=_forbidden_cases, compare=close(rtol=1e-6, atol=1e-7),
         slips=_forbidden_slips, diagnose=_forbidden_diagnose, fixed=1, n=10,
         forbidden=("devplace_lite.throughput.exhaustive", "devplace_lite.mip"),
         hint="start from the first model of the chapter (x, y, T and the load rows over cluster.k "
              "accelerators) and add one row x[v, d] == 0 per pair; return the problem's value")

# -- 03.3  the contiguity rows ----------------------------------------------------------------


def contiguous_optimum(graph: Graph, cluster: Cluster) -> float:
    """Least max-load of a split whose part on each accelerator is contiguous (convex)."""
    return float(exhaustive(graph, cluster, kind="contiguous").objective)


def _scaled(graph: Graph, alpha: float) -> Graph:
    return graph.with_nodes([Node(**{**v.__dict__, "comm": v.comm * alpha}) for v in graph.nodes])


def _parallel_chains(rng: np.random.Generator) -> tuple[Graph, str]:
    """Two independent chains of two or three operators, random times and cheap transfers: their
    best convex split is often no pipeline, and their best split of any shape often not convex."""
    nodes, edges = [], []
    for c in range(2):
        names = [f"{'ab'[c]}{j}" for j in range(int(rng.integers(2, 4)))]
        nodes += [Node(x, p_acc=round(float(rng.uniform(0.5, 4.0)), 2), comm=round(float(rng.uniform(0.0, 0.3)), 2))
                  for x in names]
        edges += list(zip(names, names[1:]))
    g = Graph(nodes, edges, name="chains")
    text = ("graph = Graph([" + ", ".join(f"Node({v.id!r}, p_acc={v.p_acc}, comm={v.comm})" for v in nodes)
            + f"], {edges})")
    return g, text


def _contiguous_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's split that is contiguous on every device but no pipeline
        g, text = _two_chains()
        k = 2
    elif i == 1:  # a chain whose best split of any shape puts its two ends together
        g = Graph([Node("a", p_acc=2, comm=0.1), Node("b", p_acc=4, comm=0.1), Node("c", p_acc=2)],
                  [("a", "b"), ("b", "c")], name="three")
        text = ('graph = Graph([Node("a", p_acc=2, comm=0.1), Node("b", p_acc=4, comm=0.1), Node("c", p_acc=2)], '
                '[("a", "b"), ("b", "c")])')
        k = 2
    elif rng.random() < 0.7:  # side-by-side chains: convex parts that no order of stages can run
        g, text = _parallel_chains(rng)
        k = 2
    else:
        g, text = _generated(rng, 5, 8)
        k = int(rng.integers(2, 4))
        if i % 2:  # cheap transfers: mixing far-apart operators pays, so contiguity binds more often
            alpha = float(rng.choice([0.0, 0.25, 0.5]))
            g = _scaled(g, alpha)
            text = (f"{text}; graph = graph.with_nodes([Node(**{{**v.__dict__, 'comm': v.comm * {alpha}}}) "
                    f"for v in graph.nodes])")
    return Case((g, Cluster(accelerators=k)), text=f"{text}; cluster = Cluster(accelerators={k})")


def _contiguous_slips(case: Case) -> list:
    graph, cluster = case.args
    return [(float(exhaustive(graph, cluster, kind="any").objective),
             "that is the optimum of any shape: your rows still allow a part that a path leaves and then re-enters "
             "(are they there, and written for every device?)"),
            (float(exhaustive(graph, cluster, kind="chain").objective),
             "that is the best pipeline (chain of ideals): the rows ask for ordered stages, more than convex parts")]


def _contiguous_diagnose(case: Case, expected: float, got) -> str | None:
    got = float(got)
    tol = 1e-9 * max(1.0, abs(expected))
    if got < expected - tol:
        return "below the optimum: some non-convex part still passes the rows"
    if got > expected + tol:
        return "above the optimum: the rows forbid a convex part (z must be allowed to exceed x before the part)"
    return None


register(id="03.3", name="my_contiguous_optimum", title="the contiguity rows of the throughput IP",
         reference=contiguous_optimum, cases=_contiguous_cases, compare=close(rtol=1e-6, atol=1e-7),
         slips=_contiguous_slips, diagnose=_contiguous_diagnose, fixed=2, n=10, tries=40,
         forbidden=("devplace_lite.throughput.exhaustive", "devplace_lite.mip"),
         hint="per device d a z[:, d] in [0, 1] with z >= x (covers the part), z[w] <= z[p] for every "
              "edge p -> w (closed under predecessors) and z[w] <= x[w] - x[p] + 1 (empty after an exit)")
