"""Exercises of chapter 02 (the exact DP over ideals)."""

from __future__ import annotations

import numpy as np

from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.ideals import count_ideals
from devplace_lite.units import unit_graph
from .core import Case, close, exact, register

# -- 02.2  count the ideals of a small DAG ----------------------------------------------------


def ideal_count(graph: Graph) -> int:
    """Number of predecessor-closed node sets of an inference graph (empty and full included)."""
    return int(count_ideals(unit_graph(graph)))


def _small_graph(rng: np.random.Generator, i: int, low: int, high: int) -> tuple[Graph, str]:
    if i == 0:  # the chapter's diamond
        g = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.1) for x in "abcd"],
                  [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], name="diamond")
        return g, ('graph = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.1) for x in "abcd"], '
                   '[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])')
    if i == 1:  # no edges at all: every subset is an ideal
        g = Graph([Node(str(j), p_acc=1.0, p_cpu=10.0) for j in range(5)], [], name="flat")
        return g, 'graph = Graph([Node(str(j), p_acc=1.0, p_cpu=10.0) for j in range(5)], [])'
    family = str(rng.choice(["cells", "layered", "random", "series_parallel", "skip_chain"]))
    n, seed = int(rng.integers(low, high + 1)), int(rng.integers(0, 1000))
    return generate(family, n, seed=seed), f"graph = generate({family!r}, {n}, seed={seed})"


def _count_cases(rng: np.random.Generator, i: int) -> Case:
    g, text = _small_graph(rng, i, 3, 14)
    return Case((g,), text=text)


def _count_slips(case: Case) -> list:
    g = case.args[0]
    expected = ideal_count(g)
    return [(g.n + 1, "that is n + 1: the prefixes of one topological order, or the empty set and the down-closure "
                      "of each node; other orders, and unions of down-closures, are ideals too (grow each ideal by "
                      "one node at a time, from every ideal found)"),
            (2 ** g.n, "that counts every subset; an ideal must contain each predecessor of each of its nodes"),
            (expected - 1, "one short: the empty set and the whole graph both count (is one of them left out?)"),
            (expected - 2, "two short: count the empty set and the whole graph as ideals")]


register(id="02.2", name="my_ideal_count", title="number of ideals of a small DAG",
         reference=ideal_count, cases=_count_cases, compare=exact(), slips=_count_slips, fixed=2, n=20,
         forbidden=("devplace_lite.throughput.ideals:count_ideals", "devplace_lite.throughput.ideals:enumerate_ideals",
                    "devplace_lite.throughput.ideals:_count", "devplace_lite.throughput.dp"),
         hint="grow ideals from the empty set: a node may join an ideal when all its predecessors are in "
              "it; keep the ideals in a set (a frozenset or a bit mask each) so each is counted once")

# -- 02.3  the recurrence for one kind of device ------------------------------------------------


def dp_accelerators(graph: Graph, k: int) -> float:
    """Least max-load of a chain-of-ideals split on ``k`` accelerators (no CPU, no memory cap)."""
    from devplace_lite.throughput.dp import dp  # compiled on first use: keep it out of the exercise registry's import

    return float(dp(graph, Cluster(accelerators=int(k))).objective)


def _dp_cases(rng: np.random.Generator, i: int) -> Case:
    g, text = _small_graph(rng, i, 4, 10)
    k = 2 if i < 2 else int(rng.integers(1, 5))
    return Case((g, k), text=f"{text}; k = {k}")


def _dp_slips(case: Case) -> list:
    from devplace_lite.throughput.dp import linear

    g, k = case.args
    free = g.with_nodes([Node(**{**v.__dict__, "comm": 0.0}) for v in g.nodes])
    return [(float(linear(g, Cluster(accelerators=int(k))).objective),
             "that is the best split into blocks of one topological order; the recurrence ranges over all ideals J of I"),
            (dp_accelerators(free, k), "that is the optimum with no transfers: acc(S) also pays c(u) for each producer "
                                       "u with an edge leaving or entering S"),
            (float(g.p_acc.sum()) / k, "that is the total work divided by k, a lower bound, not a split")]


def _dp_diagnose(case: Case, expected: float, got) -> str | None:
    if float(got) < expected - 1e-9 * max(1.0, abs(expected)):
        return "lower than the optimum: is the transfer cost of each part counted (producers with an edge leaving or entering it)?"
    return None


register(id="02.3", name="my_dp_accelerators", title="the DP over ideals for accelerators only",
         reference=dp_accelerators, cases=_dp_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_dp_slips,
         diagnose=_dp_diagnose, fixed=2, n=12,
         forbidden=("devplace_lite.throughput.dp", "devplace_lite.throughput.exhaustive", "devplace_lite.mip",
                    "devplace_lite.throughput.baselines:exhaustive_chain"), hint="D[f][I] = min over ideals J inside I of max(D[f-1][J], acc(I - J)), D[f][empty] = 0, answer "
                    "D[k][all]; acc(S) is the load of acc0 when S is on acc0 and the rest on acc1")
