"""Exercises of chapter 04 (the latency integer program)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle

import numpy as np

from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import batch_loads
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.single_sample.model import evaluate_latency, reachability
from devplace_lite.single_sample.bounds import critical_path_bound, latency_caps
from .core import Case, close, register

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
                                       f"(from devplace_course.exercises.ch04 import with_device_limits)")


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


def _caps_slips(case: Case) -> list:
    return [(_fastest_path_caps(*case.args),
             "those are ub minus the fastest path after u: not valid here, since a successor in u's own call "
             "is ready at the same moment as u (exercise 1), so an accelerator successor may add nothing"),
            (_fastest_path_caps(*case.args, own=True),
             "that also subtracts u's own time: the cap bounds when u's output is ready, after u has run"),
            (_caps_no_transfer(*case.args),
             "a call that reads u's output from another device first receives it: add c(u) to p_acc(w)")]


register(id="04.2", name="my_latency_caps", title="per-node caps on the ready times of the latency IP",
         reference=latency_caps, cases=_caps_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_caps_slips,
         fixed=2, n=20, forbidden=("devplace_lite.single_sample.ip", "devplace_lite.single_sample.bounds:latency_caps"), hint="walk the nodes in reverse topological order: tail(u) = max over successors w of "
                    "delta(u, w) + tail(w); delta is 0 when u and w may share a call, else the cheapest way "
                    "w can run after u (p_cpu(w) on the CPU, p_acc(w) + c(u) in another call)")

# -- 04.3  serving with a throughput floor -------------------------------------------------------------


def _no_violation(graph: Graph, cluster: Cluster, A: np.ndarray) -> np.ndarray:
    """Rows of ``A`` for which `devplace_lite.cost.violations` is empty, for a batch at once."""
    k = cluster.k
    ok = ~np.any((A < k) & ~graph.supported, axis=1) & ~np.any((A >= k) & np.isnan(graph.p_cpu), axis=1)
    for d in range(k):
        ok &= np.where(A == d, graph.memory, 0.0).sum(axis=1) <= cluster.memory
    for unit in np.unique(graph.units):
        members = np.flatnonzero(graph.units == unit)
        if len(members) > 1:
            ok &= np.all(A[:, members] == A[:, members[:1]], axis=1)
    return ok


def _splits(graph: Graph, cluster: Cluster) -> "_Splits":
    """`_Splits` of a graph and cluster, kept for the few calls that ask again (reference, slips)."""
    key = pickle.dumps((graph, cluster))
    if key not in _SPLITS:
        if len(_SPLITS) >= 16:
            _SPLITS.pop(next(iter(_SPLITS)))
        _SPLITS[key] = _Splits(graph, cluster)
    return _SPLITS[key]


_SPLITS: dict[bytes, "_Splits"] = {}


class _Splits:
    """Every assignment of a tiny graph's nodes to the (labelled) devices, and what the filters
    of 04.3 say of each: no violation, each accelerator's node set convex, the max-load."""

    def __init__(self, graph: Graph, cluster: Cluster) -> None:
        self.graph, self.cluster, k = graph, cluster, cluster.k
        A = np.array(list(itertools.product(range(cluster.size), repeat=graph.n)), dtype=np.int64)
        self.A = A.reshape(-1, graph.n)
        self.feasible = _no_violation(graph, cluster, self.A)
        R = reachability(graph).astype(np.int64)
        self.convex = np.ones(len(self.A), dtype=bool)
        for d in range(k):  # a part is convex unless some outside y has x -> y -> z with x, z inside
            inside = (self.A == d).astype(np.int64)
            self.convex &= ~np.any(((inside @ R) > 0) & ((inside @ R.T) > 0) & (inside == 0), axis=1)
        loads = batch_loads(graph, cluster, self.A)
        self.loads = loads.max(axis=1)
        # lower bounds on the latency: one call per accelerator lasts its whole load; several calls
        # at least its compute
        self.call_bound = loads[:, :k].max(axis=1, initial=0.0)
        self.work_bound = np.stack([np.where(self.A == d, graph.p_acc, 0.0).sum(axis=1) for d in range(k)]
                                   + [np.zeros(len(self.A))]).max(axis=0)
        self._scores: dict[tuple[bool, int], float] = {}

    def within(self, floor: float, strict: bool = False) -> np.ndarray:
        slack = 1e-9 * max(1.0, abs(floor))
        return self.loads < floor - slack if strict else self.loads <= floor + slack

    def latency(self, b: int, one_call: bool = True) -> float:
        """Latency of assignment ``b``: one call per accelerator (pieces 0), or the evaluator's own cut."""
        if (one_call, b) not in self._scores:
            a = self.A[b]
            pieces = np.where(a < self.cluster.k, 0, -1) if one_call else None
            self._scores[one_call, b] = evaluate_latency(self.graph, self.cluster, a, pieces).latency
        return self._scores[one_call, b]

    def least(self, mask: np.ndarray, one_call: bool = True) -> float:
        """The least latency over the assignments of ``mask`` (``inf`` if none), best bounds first."""
        rows = np.flatnonzero(mask)
        bound = (self.call_bound if one_call else self.work_bound)[rows]
        best = math.inf
        for b, low in zip(rows[np.argsort(bound, kind="stable")], np.sort(bound, kind="stable")):
            if low >= best:
                break
            best = min(best, self.latency(int(b), one_call))
        return best


def latency_with_floor(graph: Graph, cluster: Cluster, floor: float) -> tuple[float, int]:
    """``(latency, splits)``: over every assignment of the nodes to the devices ``0 .. size - 1``
    with no violation, each accelerator's nodes a convex set (one call) and max-load at most
    ``floor`` (relative slack ``1e-9``), the least one-call latency (pieces 0 on accelerators;
    ``inf`` when none, or all deadlock) and how many assignments pass those filters. By
    enumeration: tiny graphs only."""
    s = _splits(graph, cluster)
    keep = s.feasible & s.convex & s.within(floor)
    return s.least(keep), int(keep.sum())


def _tightest_floor(s: _Splits) -> float | None:
    """The least max-load of a feasible one-call split that does not deadlock (None: no such split)."""
    rows = np.flatnonzero(s.feasible & s.convex)
    for b in rows[np.argsort(s.loads[rows], kind="stable")]:
        if math.isfinite(s.latency(int(b))):
            return float(s.loads[b])
    return None


def _floor_cases(rng: np.random.Generator, i: int) -> Case:
    if i < 2:  # the chapter's chain on two accelerators: the best pipeline (2.5 ms) costs 1 ms of latency
        g, text = _chain()
        floor = 2.5 if i == 0 else 4.0
        return Case((g, Cluster(accelerators=2, cpus=1), floor),
                    text=f"{text}; cluster = Cluster(accelerators=2, cpus=1); floor = {floor}")
    while True:
        family = str(rng.choice(FAMILIES))
        k, cpus = [(1, 1), (2, 0), (2, 1), (3, 0)][int(rng.integers(0, 4))]
        n, seed = int(rng.integers(4, 6)), int(rng.integers(0, 1000))
        g = generate(family, n, seed=seed)
        # operators the accelerators lack (when a core can run them) and a memory cap: the filters must matter
        cpu_only = sorted(rng.choice([v.id for v in g.nodes], size=int(rng.integers(1, 3)), replace=False).tolist()) \
            if cpus and rng.random() < 0.7 else []
        g = with_device_limits(g, cpu_only)
        memory = float(np.round(g.memory.sum() * rng.uniform(0.4, 0.8))) if rng.random() < 0.6 else math.inf
        cluster = Cluster(accelerators=k, cpus=cpus, memory=memory)
        s = _splits(g, cluster)
        best = _tightest_floor(s)
        if best is not None:
            break
    # the floor is the max-load of some split at or above the tightest one, so that a strict comparison matters
    loads = np.unique(s.loads[s.feasible & s.convex & (s.loads >= best)])
    floor = float(loads[int(rng.integers(0, max(1, len(loads) // 3)))])
    mem = "" if memory == math.inf else f", memory={memory!r}"
    return Case((g, cluster, floor), text=f"graph = with_device_limits(generate({family!r}, {n}, seed={seed}), "
                                          f"cpu_only={cpu_only}); cluster = Cluster(accelerators={k}, cpus={cpus}{mem}); "
                                          f"floor = {floor!r}  (from devplace_course.exercises.ch04 import with_device_limits)")


def _floor_slips(case: Case) -> list:
    graph, cluster, floor = case.args
    s = _splits(graph, cluster)
    feasible, convex, under, strict = s.feasible, s.convex, s.within(floor), s.within(floor, strict=True)

    def pair(mask, one_call=True):
        return s.least(mask, one_call), int(mask.sum())
    return [(pair(feasible & convex), "that is the best latency with no floor: keep only the splits whose max-load is "
                                      "at most the floor"),
            (pair(feasible & convex & strict), "a split whose max-load equals the floor meets it: compare with <= "
                                               "(and a small tolerance)"),
            ((s.least(feasible & convex & under), int((feasible & under).sum())),
             "the latency is right but too many splits pass: keep only those whose accelerator sets are convex "
             "(no path leaves a set and comes back)"),
            (pair(convex & under), "splits with a violation pass: drop those for which violations(graph, cluster, a) "
                                   "is not empty (an operator the accelerator lacks, memory over the cap)"),
            (pair(feasible & under, one_call=False),
             "that lets an accelerator run several calls (evaluate_latency's default cut of a non-convex set); with "
             "q = 1 keep convex accelerator sets and pass pieces = 0 on accelerators")]


def _pair(expected, got) -> str | None:
    """``(latency, splits)``: the latency within 1e-9, the count exactly."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (latency, splits), got {type(got).__name__} {got!r:.80}"
    problems = []
    latency = close(rtol=1e-9, atol=1e-9)(expected[0], got[0])
    if latency is not None:
        problems.append(f"latency: {latency}")
    try:
        count_ok = int(got[1]) == got[1] == expected[1]
    except (TypeError, ValueError, OverflowError):
        count_ok = False
    if not count_ok:
        problems.append(f"splits that pass the filters: expected {expected[1]}, got {got[1]!r:.40}")
    return "; ".join(problems) or None


register(id="04.3", name="my_latency_with_floor", title="least latency among splits meeting a throughput floor",
         reference=latency_with_floor, cases=_floor_cases, compare=_pair, slips=_floor_slips, fixed=2, n=10, tries=5,
         forbidden=("devplace_lite.single_sample.model:exhaustive_latency", "devplace_lite.mip"),
         hint="enumerate every assignment a of the nodes to the devices 0 .. cluster.size - 1; keep those with no "
              "violations, convex accelerator sets and max_load at most floor; count them, and score each with "
              "evaluate_latency(graph, cluster, a, pieces), pieces 0 on accelerators and -1 on the CPU; return "
              "(least latency, count)")
