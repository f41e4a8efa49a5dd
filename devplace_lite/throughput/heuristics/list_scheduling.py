"""List scheduling: earliest task first (ETF) and HEFT, placements from a one-sample schedule.

Problem they solve: schedule one sample (one forward, or forward and backward, pass) on the
devices so that it finishes early, the *schedule length* or makespan. That is not our
objective: a pipeline's throughput is set by the most loaded device, and a schedule that
keeps one device busy on the critical path while the others idle can be short and still
badly balanced. Placeto (Addanki et al. 2019) uses them as baselines for that reason; here
they produce a placement that is then scored under the throughput model like every method.

Shared rules: a node runs on an accelerator only if supported, on a CPU core only with a CPU
time; a colocation class goes where its first scheduled node went; an accelerator takes a
class only while its memory cap holds (when no device fits, the cap is ignored and the
evaluator reports the violation). A transfer of ``u``'s output between devices takes
``c(u)`` per accelerator end (out to host memory, in from it; CPU cores pay none).

* `etf` (Hwang et al. 1989): at every step, among all ready nodes and all devices, start the
  pair that can start earliest (ties: the node with the longest path to the end).
  ``O(n x ready x devices)``.
* `heft` (Topcuoglu et al. 2002): order nodes by upward rank (mean cost plus the longest
  mean-cost path to an exit), then put each on the device where it finishes earliest, using
  idle gaps (insertion). ``O(n log n + n x devices x gaps)``.

Both give splits of any kind (not pipelines in general).

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> g, c = generate("series_parallel", 80, seed=1), Cluster(accelerators=3, cpus=1)
>>> r = heft(g, c)
>>> r.objective == r.check().max_load, r.extra["makespan"] > 0
(True, True)

References
----------
J.-J. Hwang, Y.-C. Chow, F. D. Anger, C.-Y. Lee, "Scheduling precedence graphs in systems with
interprocessor communication times", SIAM J. Computing, 1989.
H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task scheduling
for heterogeneous computing", IEEE TPDS, 2002.
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from ...devices import Cluster
from ...graph import Graph
from ...result import Result
from .common import finish


class _Rules:
    """Costs, transfer delays, colocation and memory shared by both schedulers."""

    def __init__(self, graph: Graph, cluster: Cluster) -> None:
        g, D, k = graph, cluster.size, cluster.k
        self.g, self.D = g, D
        self.is_acc = np.arange(D) < k
        acc = np.where(g.supported, g.p_acc, np.inf)
        cpu = np.where(np.isnan(g.p_cpu), np.inf, g.p_cpu)
        self.cost = np.where(self.is_acc[None, :], acc[:, None], cpu[:, None])
        self.units = g.units
        self.unit_mem = np.bincount(g.units, weights=g.memory)
        self.unit_dev = np.full(len(self.unit_mem), -1, dtype=np.int64)
        self.mem_used = np.zeros(D)
        self.cap = np.where(self.is_acc, cluster.memory, np.inf)
        self.a = np.full(g.n, -1, dtype=np.int64)
        self.finish = np.zeros(g.n)
        # Per node, a scheduler touches a few predecessors on a few devices: plain Python on
        # lists, since a dozen numpy calls on arrays of two or three cost ~30 us each (most of
        # the time at 10^6 nodes). Predecessors come from the edge arrays (no per-node lists).
        by_dst = np.argsort(g.dst, kind="stable")
        self.pred_ptr = np.concatenate([[0], np.cumsum(np.bincount(g.dst, minlength=g.n))]).tolist()
        self.pred_idx = g.src[by_dst].tolist()
        self.comm_of = g.comm.tolist()
        self.acc_of = [float(x) for x in self.is_acc]  # 1.0 on an accelerator: it pays comm
        self.a_of = [-1] * g.n
        self.finish_of = [0.0] * g.n

    def ready_time(self, v: int) -> list[float]:
        """Earliest time ``v``'s inputs can be on each device: a producer's output reaches
        another device after its comm once per accelerator end, its own device at once."""
        out = [0.0] * self.D
        acc = self.acc_of
        for p in self.pred_idx[self.pred_ptr[v]:self.pred_ptr[v + 1]]:
            f, dp, c = self.finish_of[p], self.a_of[p], self.comm_of[p]
            for d in range(self.D):
                t = f if d == dp else f + c * (acc[dp] + acc[d])
                if t > out[d]:
                    out[d] = t
        return out

    def allowed_one(self, v: int) -> list[bool]:
        """The devices node ``v`` may start on now (`allowed` for one node)."""
        u = int(self.units[v])
        fixed = int(self.unit_dev[u])
        if fixed >= 0:
            return [d == fixed for d in range(self.D)]
        ok = [c < np.inf for c in self.cost[v].tolist()]
        need, used, cap = float(self.unit_mem[u]), self.mem_used.tolist(), self.cap.tolist()
        fits = [o and used[d] + need <= cap[d] for d, o in enumerate(ok)]
        return fits if any(fits) else ok  # nothing fits: ignore the cap

    def allowed(self, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), D) mask of devices each node may start on now."""
        u = self.units[nodes]
        fixed = self.unit_dev[u]
        ok = np.isfinite(self.cost[nodes])
        fits = self.mem_used[None, :] + self.unit_mem[u][:, None] <= self.cap[None, :]
        free_ok = ok & fits
        free_ok = np.where(free_ok.any(axis=1, keepdims=True), free_ok, ok)  # nothing fits: ignore the cap
        pinned = np.zeros_like(ok)
        has = fixed >= 0
        pinned[np.flatnonzero(has), fixed[has]] = True
        return np.where(has[:, None], pinned, free_ok)

    def place(self, v: int, d: int, start: float) -> float:
        self.a[v] = self.a_of[v] = d
        self.finish[v] = self.finish_of[v] = start + float(self.cost[v, d])
        u = self.units[v]
        if self.unit_dev[u] < 0:
            self.unit_dev[u] = d
            self.mem_used[d] += self.unit_mem[u]
        return float(self.finish[v])


def _bottom_level(graph: Graph, weight: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """Longest path from each node to an exit: ``weight[v] + max(edge[v] + level[s])``."""
    ptr, succ = _successors(graph)
    level, w, e = [0.0] * graph.n, weight.tolist(), edge.tolist()
    for v in graph.topological_order()[::-1].tolist():
        s = succ[ptr[v]:ptr[v + 1]]
        level[v] = w[v] + (e[v] + max([level[x] for x in s]) if s else 0.0)
    return np.array(level)


def _successors(graph: Graph) -> tuple[list[int], list[int]]:
    """Successors of node ``v``: ``succ[ptr[v]:ptr[v + 1]]`` (the graph's edges are sorted by source)."""
    return np.concatenate([[0], np.cumsum(np.bincount(graph.src, minlength=graph.n))]).tolist(), graph.dst.tolist()


def etf(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Earliest task first under memory caps; scored under the throughput model."""
    t0 = time.perf_counter()
    R = _Rules(graph, cluster)
    cheapest = R.cost.min(axis=1)  # inf for a node no device runs: it weighs nothing in the level
    level = _bottom_level(graph, np.where(np.isfinite(cheapest), cheapest, 0.0), np.zeros(graph.n))
    indeg = np.bincount(graph.dst, minlength=graph.n).tolist()
    ready = [v for v, x in enumerate(indeg) if x == 0]
    drt = {v: R.ready_time(v) for v in ready}
    free = np.zeros(R.D)
    makespan = 0.0
    lv = level.tolist()
    ptr, succ = _successors(graph)
    while ready:
        if len(ready) * R.D <= 64:  # the usual case: a few ready nodes, scanned in Python
            fr = free.tolist()
            start, _, i, d = min((max(drt[v][d], fr[d]) if ok else np.inf, -lv[v], i, d)
                                 for i, v in enumerate(ready) for d, ok in enumerate(R.allowed_one(v)))
        else:  # earliest start, then the higher level, then the first listed (lexsort is stable)
            nodes = np.array(ready, dtype=np.int64)
            est = np.maximum(np.array([drt[v] for v in ready]), free[None, :])
            est = np.where(R.allowed(nodes), est, np.inf)
            i, d = np.unravel_index(np.lexsort((-np.repeat(level[nodes], R.D), est.ravel()))[0], est.shape)
            start = float(est[i, d])
        v = ready.pop(int(i))
        del drt[v]
        end = R.place(v, int(d), start)
        free[d] = end
        makespan = max(makespan, end)
        for w in succ[ptr[v]:ptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
                drt[w] = R.ready_time(w)
    return finish("etf", graph, cluster, R.a, t0, makespan=makespan)


def heft(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """HEFT with insertion under memory caps; scored under the throughput model."""
    t0 = time.perf_counter()
    R = _Rules(graph, cluster)
    D = R.D
    runs = np.isfinite(R.cost)  # a node no device runs has mean cost 0
    mean_cost = np.where(runs, R.cost, 0.0).sum(axis=1) / np.maximum(runs.sum(axis=1), 1)
    # mean transfer over ordered device pairs: c(u) per accelerator end, nothing on one device
    pair = (R.is_acc[:, None].astype(float) + R.is_acc[None, :]) * (1 - np.eye(D))
    rank = _bottom_level(graph, mean_cost, graph.comm * pair.mean())
    pos = np.empty(graph.n, dtype=np.int64)
    pos[graph.topological_order()] = np.arange(graph.n)
    starts: list[list[float]] = [[] for _ in range(D)]
    ends: list[list[float]] = [[] for _ in range(D)]
    makespan = 0.0
    for v in np.lexsort((pos, -rank)).tolist():
        ready_at = R.ready_time(v)
        ok = R.allowed_one(v)
        if not any(ok):  # no device may run it (an infeasible instance): the evaluator says so
            ok = [True] * D
        best = None
        for d in (d for d in range(D) if ok[d]):
            s = _slot(starts[d], ends[d], float(ready_at[d]), float(R.cost[v, d]))
            if best is None or s + R.cost[v, d] < best[0]:
                best = (s + R.cost[v, d], d, s)
        _, d, s = best
        end = R.place(v, d, s)
        j = bisect.bisect_left(starts[d], s)
        starts[d].insert(j, s)
        ends[d].insert(j, end)
        makespan = max(makespan, end)
    return finish("heft", graph, cluster, R.a, t0, makespan=makespan)


def _slot(starts: list[float], ends: list[float], ready: float, duration: float) -> float:
    """Earliest start at or after ``ready`` of an idle gap of ``duration`` between busy intervals."""
    i = bisect.bisect_left(ends, ready)
    while i < len(starts):
        begin = max(ready, ends[i - 1] if i else 0.0)
        if begin + duration <= starts[i]:
            return begin
        i += 1
    return max(ready, ends[-1] if ends else 0.0)
