"""Exercises of chapter 04 (the latency integer program)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ..devices import Cluster
from ..exhaustive import batch_loads
from ..generators import generate
from ..graph import Graph, Node
from ..latency import evaluate_latency, reachability
from ..latency_bounds import critical_path_bound, latency_caps
from .core import Case, close, first_slip, register

FAMILIES = ["cells", "layered", "random", "series_parallel", "skip_chain"]


def with_device_limits(graph: Graph, cpu_only=(), acc_only=()) -> Graph:
    """A copy of ``graph`` where the nodes ``cpu_only`` are unsupported on accelerators and the
    nodes ``acc_only`` have no CPU time (how the checks of 04.2 vary which devices a node may use)."""
    cpu_only, acc_only = {str(v) for v in cpu_only}, {str(v) for v in acc_only}
    nodes = [dataclasses.replace(v, supported=v.supported and v.id not in cpu_only,
                                 p_cpu=None if v.id in acc_only else v.p_cpu) for v in graph.nodes]
    return Graph(nodes, graph.edges, name=graph.name)


def _chain(p_cpu: float | None = 10.0) -> tuple[Graph, str]:
    """The chapter's chain of four: a -> b -> c -> d, 1 ms each on an accelerator, c = 0.5."""
    g = Graph([Node(x, p_acc=1.0, p_cpu=p_cpu, comm=0.5) for x in "abcd"], [("a", "b"), ("b", "c"), ("c", "d")],
              name="four")
    return g, ('graph = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5) for x in "abcd"], '
               '[("a", "b"), ("b", "c"), ("c", "d")])')


def _may_run(graph: Graph, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes may run on an accelerator, and which on the CPU."""
    acc = graph.supported & (cluster.k > 0)
    cpu = ~np.isnan(graph.p_cpu) & (cluster.l > 0)
    return acc, cpu


# -- 04.2  per-node caps on the ready times --------------------------------------------------------


def _caps_cases(rng: np.random.Generator, i: int) -> Case:
    if i < 2:  # the chapter's chain: on accelerators nothing must follow a node; on the CPU alone, all of it
        g, text = _chain()
        cluster = Cluster(accelerators=2, cpus=1) if i == 0 else Cluster(accelerators=0, cpus=1)
        ub = 4.0 if i == 0 else 40.0
        return Case((g, cluster, ub), text=f"{text}; cluster = Cluster(accelerators={cluster.k}, cpus={cluster.l}); "
                                           f"ub = {ub}")
    family = str(rng.choice(FAMILIES))
    n, seed = int(rng.integers(4, 11)), int(rng.integers(0, 1000))
    k, cpus = [(0, 1), (1, 0), (1, 1), (2, 1), (2, 1), (3, 1)][int(rng.integers(0, 6))]
    g = generate(family, n, seed=seed)
    ids = [v.id for v in g.nodes]
    cpu_only = sorted(rng.choice(ids, size=int(rng.integers(1, max(2, n // 2))), replace=False).tolist()) if cpus else []
    rest = [v for v in ids if v not in cpu_only]
    acc_only = sorted(rng.choice(rest, size=int(rng.integers(0, 3)), replace=False).tolist()) if k and rest else []
    g = with_device_limits(g, cpu_only, acc_only)
    cluster = Cluster(accelerators=k, cpus=cpus)
    ub = round(critical_path_bound(g, cluster) * float(rng.uniform(1.2, 2.0)), 6)  # any bound will do
    return Case((g, cluster, ub), text=f"graph = with_device_limits(generate({family!r}, {n}, seed={seed}), "
                                       f"cpu_only={cpu_only}, acc_only={acc_only}); "
                                       f"cluster = Cluster(accelerators={k}, cpus={cpus}); ub = {ub!r}  "
                                       f"(from devplace_lite.exercises.ch04 import with_device_limits)")


def _fastest_path_caps(graph: Graph, cluster: Cluster, ub: float, own: bool = False) -> np.ndarray:
    """The tempting caps: ub minus the fastest path after u (each node at its fastest time)."""
    acc, cpu = _may_run(graph, cluster)
    fast = np.minimum(np.where(acc, graph.p_acc, np.inf), np.where(cpu, np.nan_to_num(graph.p_cpu), np.inf))
    tail = np.zeros(graph.n)
    for u in graph.topological_order()[::-1].tolist():
        for w in graph.succ[u]:
            tail[u] = max(tail[u], fast[w] + tail[w])
    return float(ub) - tail - (fast if own else 0.0)


def _caps_no_transfer(graph: Graph, cluster: Cluster, ub: float) -> np.ndarray:
    """The caps with delta(u, w) = p_acc(w) for a call that receives u's output: its transfer forgotten."""
    acc, cpu = _may_run(graph, cluster)
    tail = np.zeros(graph.n)
    for u in graph.topological_order()[::-1].tolist():
        for w in graph.succ[u]:
            options = ([0.0] if acc[u] and acc[w] else []) + ([graph.p_cpu[w]] if cpu[w] else []) \
                + ([graph.p_acc[w]] if acc[w] else [])
            tail[u] = max(tail[u], float(min(options)) + tail[w])
    return float(ub) - tail


def _caps_diagnose(case: Case, expected, got) -> str | None:
    g = np.asarray(got, dtype=float)
    if g.shape != np.shape(expected):
        return None
    slips = [(_fastest_path_caps(*case.args),
              "those are ub minus the fastest path after u: not valid here, since a successor in u's own call "
              "is ready at the same moment as u (exercise 1), so an accelerator successor may add nothing"),
             (_fastest_path_caps(*case.args, own=True),
              "that also subtracts u's own time: the cap bounds when u's output is ready, after u has run"),
             (_caps_no_transfer(*case.args),
              "a call that reads u's output from another device first receives it: add c(u) to p_acc(w)")]
    return first_slip(slips, expected, g)


register(id="04.2", name="my_latency_caps", title="per-node caps on the ready times of the latency IP",
         reference=latency_caps, cases=_caps_cases, compare=close(rtol=1e-9, atol=1e-9), diagnose=_caps_diagnose,
         n=20, hint="walk the nodes in reverse topological order: tail(u) = max over successors w of "
                    "delta(u, w) + tail(w); delta is 0 when u and w may share a call, else the cheapest way "
                    "w can run after u (p_cpu(w) on the CPU, p_acc(w) + c(u) in another call)")

# -- 04.3  serving with a throughput floor -------------------------------------------------------------


def _splits(graph: Graph, cluster: Cluster, convex: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Every feasible split (with ``convex``: each accelerator's nodes a convex set, one call), and
    its max-load; accelerators relabelled so that they are first used in order (identical devices)."""
    k, D = cluster.k, cluster.size
    A = np.array(list(itertools.product(range(D), repeat=graph.n)), dtype=np.int64).reshape(-1, graph.n)
    acc = np.where(A < k, A, -1)
    first_use = np.where(acc[:, :, None] == np.arange(k)[None, None, :], np.arange(graph.n)[None, :, None],
                         graph.n).min(axis=1)
    keep = np.all(np.diff(first_use, axis=1) >= 0, axis=1) if k > 1 else np.ones(len(A), dtype=bool)
    keep &= ~np.any((A < k) & ~graph.supported[None, :], axis=1)
    for d in range(k):
        keep &= (np.where(A == d, graph.memory[None, :], 0.0).sum(axis=1) <= cluster.memory)
    A = A[keep]
    loads = batch_loads(graph, cluster, A).max(axis=1)
    R = reachability(graph)
    ok = np.isfinite(loads)
    for b, a in enumerate(A):
        for d in range(k if convex else 0):
            inside = a == d
            if inside.any() and np.any(R[inside].any(axis=0) & R[:, inside].any(axis=1) & ~inside):
                ok[b] = False
                break
    return A[ok], loads[ok]


def _latency(graph: Graph, cluster: Cluster, a: np.ndarray) -> float:
    return evaluate_latency(graph, cluster, a, np.where(a < cluster.k, 0, -1)).latency


def _within(load: np.ndarray, floor: float) -> np.ndarray:
    return load <= floor + 1e-9 * max(1.0, abs(floor))


def latency_with_floor(graph: Graph, cluster: Cluster, floor: float) -> float:
    """The least single-sample latency over the splits with one convex call per accelerator
    (``pieces`` all 0) whose max-load is at most ``floor`` (relative slack ``1e-9``); ``inf`` when
    none. By enumeration: tiny graphs only."""
    A, loads = _splits(graph, cluster)
    return min((_latency(graph, cluster, a) for a in A[_within(loads, floor)]), default=math.inf)


def _floor_cases(rng: np.random.Generator, i: int) -> Case:
    if i < 2:  # the chapter's chain on two accelerators: the best pipeline (2.5 ms) costs 1 ms of latency
        g, text = _chain()
        floor = 2.5 if i == 0 else 4.0
        return Case((g, Cluster(accelerators=2, cpus=1), floor),
                    text=f"{text}; cluster = Cluster(accelerators=2, cpus=1); floor = {floor}")
    family = str(rng.choice(FAMILIES))
    k, cpus = [(1, 1), (2, 0), (2, 1), (3, 0)][int(rng.integers(0, 4))]
    n, seed = int(rng.integers(4, 7)), int(rng.integers(0, 1000))
    g, cluster = generate(family, n, seed=seed), Cluster(accelerators=k, cpus=cpus)
    A, loads = _splits(g, cluster)
    # the tightest floor some split meets without deadlock, loosened by a random slack
    best = next(float(loads[b]) for b in np.argsort(loads, kind="stable") if math.isfinite(_latency(g, cluster, A[b])))
    floor = best * float(rng.choice([1.0, 1.0, 1.1, 1.25, 1.5]))
    return Case((g, cluster, floor), text=f"graph = generate({family!r}, {n}, seed={seed}); "
                                          f"cluster = Cluster(accelerators={k}, cpus={cpus}); floor = {floor!r}")


def _floor_diagnose(case: Case, expected: float, got) -> str | None:
    graph, cluster, floor = case.args
    got = float(got)
    A, loads = _splits(graph, cluster)
    strict = loads < floor - 1e-9 * max(1.0, floor)

    def same(x: float) -> bool:
        return x == got or (math.isfinite(x) and abs(x - got) <= 1e-9 * max(1.0, abs(x)))

    if same(min(_latency(graph, cluster, a) for a in A)):
        return "that is the best latency with no floor: keep only the splits whose max-load is at most the floor"
    if same(min((_latency(graph, cluster, a) for a in A[strict]), default=math.inf)):
        return "a split whose max-load equals the floor meets it: compare with <= (and a small tolerance)"
    B, b_loads = _splits(graph, cluster, convex=False)
    if got < expected and same(min((evaluate_latency(graph, cluster, a).latency for a in B[_within(b_loads, floor)]),
                                   default=math.inf)):
        return ("that lets an accelerator run several calls (the default cut of evaluate_latency on a "
                "non-convex set); with q = 1 keep convex accelerator sets and pass pieces = 0 on accelerators")
    return None


register(id="04.3", name="my_latency_with_floor", title="least latency among splits meeting a throughput floor",
         reference=latency_with_floor, cases=_floor_cases, compare=close(rtol=1e-9, atol=1e-9),
         diagnose=_floor_diagnose, n=10,
         hint="enumerate every assignment of nodes to devices; keep those without violations whose accelerator "
              "sets are convex and whose max_load is at most floor; score each with evaluate_latency(graph, "
              "cluster, a, pieces) where pieces is 0 on accelerators, -1 on the CPU; return the least")
