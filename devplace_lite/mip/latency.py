"""The latency integer program (inference, one sample) and the greedy baseline it is judged by.

Problem: place every node on an accelerator or on the CPU so that the single-sample latency
of `devplace_lite.latency` is least. Each accelerator runs at most ``q`` calls (*slots*), each
a convex set of nodes, one after another; CPU work runs with unbounded parallelism; memory
caps hold per accelerator (over all its slots); colocation classes share a device; unsupported
nodes go to the CPU.

Formulation (after Tarnawski et al., 2020). Slots ``s = (d, j)``, ``j < q``; ``x[v,s]``: node
``v`` runs in slot ``s``; ``x_cpu[v]``: on the CPU; ``L[v]``: when ``v``'s output is ready::

    min T
    sum_s x[v,s] + x_cpu[v] = 1                        (per colocation unit and device)
    r[u,s] >= x[w,s] - x[u,s]                          u's output enters slot s  (u -> w)
    o[u,s] >= x[u,s] - x[w,s]                          u's output leaves slot s
    z[v,s] >= x[v,s], z[w,s] <= z[u,s], z[w,s] <= x[w,s] - x[u,s] + 1     slot s convex
    finish[s] = start[s] + sum_v p_acc(v) x[v,s] + sum_u c(u) (r[u,s] + o[u,s])
    start[s] >= L[u] - M (1 - r[u,s])                  a call waits for what it reads
    L[v] >= finish[s] - M (1 - x[v,s])                 ...and its outputs wait for the call
    start[d,j] >= finish[d,j-1]                        calls of one accelerator in turn
    L[v] >= p_cpu(v) x_cpu[v],  L[w] >= L[u] + p_cpu(w) x_cpu[w]          CPU nodes
    T >= L[v]                                          (sinks suffice)

The big-M rows switch a time row off when its indicator is 0. ``M`` must exceed every time
in the solutions we care about: we take the latency ``UB`` of the warm start (a feasible
split) and cap ``T`` and every time variable by it, so a row that is off can never bind and
no split better than the warm start is cut off. Without a warm start ``M`` is the longest any
schedule can take (every node's slower time plus every transfer in every slot). With the
0/1 variables fractional every big-M row is mostly off, so the relaxation alone proves
nothing; each ``L[v]`` therefore gets the valid lower bound `earliest_finish` (the fastest
path into ``v``), which lifts the relaxation to the critical path. The warm start's latency
also rules out placing a node where it alone takes longer (`UnitData`'s ``cap``).

Complexity: NP-hard; ``(k q + 1) n`` binaries and ``O((n + m) k q)`` rows.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.latency import latency_of
>>> g, c = generate("series_parallel", 8, seed=2), Cluster(accelerators=2, cpus=1)
>>> r = latency_ip(g, c, q=1, solver="highs")
>>> r.status, abs(r.objective - latency_of(r)) < 1e-9, r.objective <= greedy_latency(g, c).objective
('optimal', True, True)

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..cost import as_assignment
from ..devices import Cluster
from ..graph import Graph, GraphError
from ..latency import LatencyEvaluation, evaluate_latency, pieces_dict, reentry_pieces
from ..result import Result
from ..units import pipeline_units
from .solve import LinearModel, check_solver, solve
from .throughput import UnitData, canonical_labels


# -- the greedy baseline -----------------------------------------------------------------------------
def unit_blocks(graph: Graph) -> list[np.ndarray]:
    """Inseparable blocks in a topological order: colocation units, with the units that form a
    cycle once contracted fused into one block (`devplace_lite.units.pipeline_units`). Returns
    the node indices of each block."""
    order, follow = pipeline_units(graph)
    return [np.flatnonzero(follow == u) for u in order]


def greedy_latency(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """The greedy of Tarnawski et al.: walk the inseparable blocks in topological order and pack
    consecutive ones onto the current accelerator while its memory lasts; a block that fits on
    no accelerator (or that no accelerator supports) goes to the CPU and closes the current
    accelerator; once all ``k`` are used, the rest goes to the CPU. Each accelerator gets one
    convex call. ``time_limit`` and ``seed`` are accepted for the registry and unused."""
    t0 = time.perf_counter()
    k = cluster.k
    a = np.full(graph.n, -1, dtype=np.int64)
    cur, used = -1, 0.0  # current accelerator (-1: none open) and its memory
    for nodes in unit_blocks(graph):
        mem = float(graph.memory[nodes].sum())
        fits_alone = bool(graph.supported[nodes].all()) and mem <= cluster.memory
        if fits_alone and cur >= 0 and used + mem <= cluster.memory:
            used += mem
        elif fits_alone and cur + 1 < k:
            cur, used = cur + 1, mem
        elif cluster.l:
            a[nodes] = k  # the CPU; the next block opens a fresh accelerator
            if cur >= 0:
                used = math.inf
            continue
        else:  # no CPU to fall back on: stay on the last accelerator, over its cap
            cur = max(cur, 0)
        a[nodes] = cur
    ev = evaluate_latency(graph, cluster, a, np.where(a < k, 0, -1))
    status = "feasible" if ev.feasible else "infeasible"
    extra = {"objective_kind": "latency", "q": 1, "pieces": pieces_dict(graph, cluster, a, ev.pieces)}
    if ev.violations:
        extra["violations"] = ev.violations
    return Result("greedy", graph, cluster, a, ev.latency, status, time.perf_counter() - t0, extra=extra)


# -- warm starts ---------------------------------------------------------------------------------------
def _fits_q(ev: LatencyEvaluation, k: int, q: int) -> bool:
    counts = np.bincount([c.device for c in ev.calls], minlength=k)
    return ev.feasible and not ev.deadlock and bool(np.all(counts <= q))


def warm_candidates(graph: Graph, cluster: Cluster, q: int,
                    budget: float = 10.0) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Feasible starts for the latency IP: the greedy, throughput chain splits (DP when
    available, balanced by time) cut by the re-entry rule, one accelerator, and all-CPU."""
    from .. import baselines
    from .throughput import _dp_split

    out = []
    g = greedy_latency(graph, cluster)
    if g.status == "feasible":
        a = g.assignment
        out.append(("greedy", a, np.where(a < cluster.k, 0, -1)))
    splits = []
    dp = _dp_split(graph, cluster, budget)
    if dp is not None:
        splits.append(dp)
    for name, fn in (("time", baselines.balance_by_time), ("single", baselines.single_device)):
        try:
            r = fn(graph, cluster)
        except GraphError:
            continue
        if r.assignment is not None:
            splits.append((name, r.assignment))
    if cluster.l and not np.isnan(graph.p_cpu).any():
        splits.append(("cpu", np.full(graph.n, cluster.k, dtype=np.int64)))
    for name, a in splits:
        p = reentry_pieces(graph, cluster, a)
        ev = evaluate_latency(graph, cluster, a, p)
        if _fits_q(ev, cluster.k, q):
            out.append((name, np.asarray(a, dtype=np.int64), p))
    return out


# -- the formulation -------------------------------------------------------------------------------------
class _LatencyModel:
    """The rows of the module docstring, for ``q`` slots per accelerator and a given ``M``."""

    def __init__(self, data: UnitData, q: int, big_m: float, symmetry: bool) -> None:
        self.data, self.q = data, q
        g, c = data.graph, data.cluster
        n, k, U = g.n, c.k, data.U
        S = self.S = k * q
        unit = data.unit
        m = self.model = LinearModel()
        ub = data.allowed[:, :k].astype(float)
        if symmetry:
            rank = np.cumsum(data.acc_ok[data.unit_order]) - 1
            r = np.empty(U, dtype=np.int64)
            r[data.unit_order] = rank
            for d in range(k):
                ub[d > r, d] = 0.0
        self.w = m.add_vars((U, k), ub=ub, integer=True)
        self.wc = m.add_vars(U, ub=data.cpu_ok.astype(float), integer=True)
        for u in range(U):
            m.add_row([(self.w[u, d], 1.0) for d in range(k)] + [(self.wc[u], 1.0)], lo=1.0, hi=1.0)
        if data.memory_binds:
            for d in range(k):
                m.add_row([(self.w[u, d], data.memory_share[u]) for u in range(U)], hi=1.0)
        if q == 1:
            self.x = self.w[unit]  # one slot per accelerator: the node's slot is its unit's device
        else:
            self.x = m.add_vars((n, S), ub=1.0, integer=True)
            for v in range(n):
                for d in range(k):
                    m.add_row([(self.x[v, d * q + j], 1.0) for j in range(q)] + [(self.w[unit[v], d], -1.0)],
                              lo=0.0, hi=0.0)
        x, xc = self.x, self.wc[unit]
        edges = sorted(set(zip(g.src.tolist(), g.dst.tolist())))
        feeds = sorted({(u, w) for u, w in edges if unit[u] != unit[w] or q > 1})
        producers = sorted({u for u, _ in feeds})
        self.prow = {u: i for i, u in enumerate(producers)}
        self.r = m.add_vars((len(producers), S), ub=1.0)
        self.o = m.add_vars((len(producers), S), ub=1.0)
        for u, w in feeds:
            i = self.prow[u]
            for s in range(S):
                m.add_row([(self.r[i, s], 1.0), (x[w, s], -1.0), (x[u, s], 1.0)], lo=0.0)
                if g.comm[u] > 0:
                    m.add_row([(self.o[i, s], 1.0), (x[u, s], -1.0), (x[w, s], 1.0)], lo=0.0)
        # every slot is convex (all edges: a piece waits for all of its inputs)
        self.z = m.add_vars((n, S), ub=1.0)
        for v in range(n):
            for s in range(S):
                m.add_row([(self.z[v, s], 1.0), (x[v, s], -1.0)], lo=0.0)
        for u, w in edges:
            for s in range(S):
                m.add_row([(self.z[w, s], 1.0), (self.z[u, s], -1.0)], hi=0.0)
                if x[u, s] != x[w, s]:
                    m.add_row([(self.z[w, s], 1.0), (x[w, s], -1.0), (x[u, s], 1.0)], hi=1.0)
        # the relaxation of the big-M rows proves nothing; these bounds keep the critical path
        self.L = m.add_vars(n, lb=np.minimum(earliest_finish(g, c), big_m), ub=big_m)
        self.start = m.add_vars(S, ub=big_m)
        self.finish = m.add_vars(S, ub=big_m)
        self.T = m.add_vars(1, ub=big_m)[0]
        m.obj[self.T] = 1.0
        L, M = self.L, big_m
        for s in range(S):
            terms = [(self.finish[s], 1.0), (self.start[s], -1.0)]
            terms += [(x[v, s], -g.p_acc[v]) for v in range(n)]
            for u, i in self.prow.items():
                terms += [(self.r[i, s], -g.comm[u]), (self.o[i, s], -g.comm[u])]
            m.add_row(terms, lo=0.0, hi=0.0)
            for u, i in self.prow.items():
                m.add_row([(self.start[s], 1.0), (L[u], -1.0), (self.r[i, s], -M)], lo=-M)
            for v in range(n):
                m.add_row([(L[v], 1.0), (self.finish[s], -1.0), (x[v, s], -M)], lo=-M)
            if s % q:
                m.add_row([(self.start[s], 1.0), (self.finish[s - 1], -1.0)], lo=0.0)
        p_cpu = np.nan_to_num(g.p_cpu)
        for v in range(n):
            m.add_row([(L[v], 1.0), (xc[v], -p_cpu[v])], lo=0.0)
        for u, w in edges:
            m.add_row([(L[w], 1.0), (L[u], -1.0), (xc[w], -p_cpu[w])], lo=0.0)
        for v in range(n):
            if not g.succ[v]:
                m.add_row([(self.T, 1.0), (L[v], -1.0)], lo=0.0)

    def decode(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, q = self.data.cluster.k, self.q
        unit = self.data.unit
        on_cpu = values[self.wc][unit] > 0.5
        slot = np.argmax(values[self.x], axis=1) if k else np.zeros(self.data.graph.n, dtype=np.int64)
        a = np.where(on_cpu, k, slot // q)
        return a, np.where(on_cpu, -1, slot % q)

    def encode(self, assignment: np.ndarray, pieces: np.ndarray) -> np.ndarray:
        data, g = self.data, self.data.graph
        k, q, n = data.cluster.k, self.q, g.n
        v = np.zeros(self.model.n_vars)
        dev = data.unit_devices(assignment)
        on_acc = dev < k
        v[self.w[np.flatnonzero(on_acc), dev[on_acc]]] = 1.0
        v[self.wc[~on_acc]] = 1.0
        # slots: each accelerator's pieces renumbered 0, 1, ... in run order
        slot = np.full(n, -1, dtype=np.int64)
        for d in range(k):
            mine = np.flatnonzero(assignment == d)
            if len(mine):
                _, rank = np.unique(pieces[mine], return_inverse=True)
                slot[mine] = d * q + rank
        if q > 1:
            acc = np.flatnonzero(slot >= 0)
            v[self.x[acc, slot[acc]]] = 1.0
        for u, i in self.prow.items():
            for w in g.succ[u]:
                if slot[w] != slot[u]:
                    if slot[w] >= 0:
                        v[self.r[i, slot[w]]] = 1.0
                    if slot[u] >= 0 and g.comm[u] > 0:
                        v[self.o[i, slot[u]]] = 1.0
        for s in range(self.S):
            inside = slot == s
            out = [w for a in np.flatnonzero(inside) for w in g.succ[a] if not inside[w]]
            gone = np.zeros(n, dtype=bool)
            while out:
                w = out.pop()
                if not gone[w]:
                    gone[w] = True
                    out.extend(g.succ[w])
            v[self.z[:, s]] = (~gone).astype(float)
        ev = evaluate_latency(g, data.cluster, assignment, np.where(slot >= 0, slot % q, -1))
        v[self.L] = ev.finish
        v[self.T] = ev.latency
        for call in ev.calls:
            s = call.device * q + call.slot
            v[self.start[s]], v[self.finish[s]] = call.start, call.finish
        for s in range(self.S):  # an empty slot sits at the end of the one before it
            if not np.any(slot == s):
                t = v[self.finish[s - 1]] if s % q else 0.0
                v[self.start[s]] = v[self.finish[s]] = t
        return v


def universal_big_m(graph: Graph, cluster: Cluster, q: int) -> float:
    """No schedule of the model is longer than every node's slower time plus every transfer in
    every slot: a path of the event graph visits each CPU node and each call at most once."""
    slow = np.fmax(graph.p_acc, np.nan_to_num(graph.p_cpu))
    return float(slow.sum() + 2 * cluster.k * q * graph.comm.sum()) + 1.0


def latency_ip(graph: Graph, cluster: Cluster, q: int = 1, *, solver: str = "scip", time_limit: float | None = None,
               gap: float = 0.0, seed: int = 0, threads: int = 1, warm_start="auto", symmetry: bool = False) -> Result:
    """Minimise the single-sample latency with at most ``q`` convex calls per accelerator.

    Parameters are those of `devplace_lite.mip.throughput.throughput_ip`; ``warm_start`` is
    ``"auto"`` (the best of `warm_candidates`), a latency `Result` (with ``extra["pieces"]``),
    a placement (cut by the re-entry rule) or ``None``. The returned `Result` carries the
    slot of each accelerator node in ``extra["pieces"]``; its ``objective`` is
    `devplace_lite.latency.evaluate_latency` of the placement with those pieces.
    """
    t0 = time.perf_counter()
    solver = check_solver(solver)
    q = int(q)
    if q < 1:
        raise GraphError(f"q (calls per accelerator) must be at least 1, got {q}")
    data = UnitData(graph, cluster)
    extra: dict = {"objective_kind": "latency", "q": q, "solver": solver}
    if graph.n == 0:
        return Result("ip", graph, cluster, np.zeros(0, dtype=np.int64), 0.0, "optimal", 0.0, bound=0.0,
                      extra={**extra, "pieces": {}})
    nowhere = np.flatnonzero(~(data.allowed[:, :cluster.k].any(axis=1) | data.cpu_ok))
    if len(nowhere):
        v = graph.nodes[int(np.flatnonzero(data.unit == nowhere[0])[0])].id
        extra["reason"] = f"node {v} fits on no device (memory, support or CPU time)"
        return Result("ip", graph, cluster, None, None, "infeasible", time.perf_counter() - t0, extra=extra)
    budget = 10.0 if time_limit is None else 0.2 * time_limit  # for the DP's warm start
    start = _pick_start(graph, cluster, q, warm_start, budget)
    big_m = universal_big_m(graph, cluster, q)
    if start is not None:
        a, p = start[1], start[2]
        if symmetry:
            a = canonical_labels(data, a)
        start = (start[0], a, p, evaluate_latency(graph, cluster, a, p).latency)
        big_m = min(big_m, start[3])
        data = UnitData(graph, cluster, cap=start[3])  # no better split runs a unit where it alone is slower
        extra["warm_start"] = start[0]
        extra["start_objective"] = start[3]
    form = _LatencyModel(data, q, big_m, symmetry)
    start_vec = None
    if start is not None:
        start_vec = form.encode(start[1], start[2])
        if form.model.violation(start_vec) > 1e-6 * max(1.0, big_m):
            raise AssertionError(f"warm start {start[0]} violates the latency model")
    extra.update(variables=form.model.n_vars, rows=form.model.n_rows, big_m=big_m)
    left = None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - t0))
    sol = solve(form.model, solver, time_limit=left, gap=gap, seed=seed, threads=threads, start=start_vec)
    extra.update(nodes=sol.nodes, solve_seconds=round(sol.seconds, 3))
    seconds = lambda: time.perf_counter() - t0  # noqa: E731
    if sol.status == "infeasible":
        return Result("ip", graph, cluster, None, None, "infeasible", seconds(), extra=extra)
    status = {"optimal": "optimal", "gap": "feasible", "time_limit": "time_limit"}[sol.status]
    scored = []
    if sol.values is not None:
        a, p = form.decode(sol.values)
        ev = evaluate_latency(graph, cluster, a, p)
        if ev.feasible:
            scored.append((ev.latency, a, p))
        else:  # only solver tolerances can get here
            extra["rejected"] = "; ".join(ev.violations) or "deadlock"
            status = "feasible" if status == "optimal" else status
    if start is not None:
        scored.append((start[3], start[1], start[2]))
    lower = critical_path_bound(graph, cluster)
    bound = max(lower, sol.bound) if sol.bound is not None else lower
    if not scored:
        return Result("ip", graph, cluster, None, None, "time_limit", seconds(), bound=bound, extra=extra)
    objective, a, p = min(scored, key=lambda t: t[0])
    if bound >= objective - 1e-9 * max(1.0, abs(objective)) and status == "feasible":
        status = "optimal"  # stopped at a positive gap, but the gap happens to be closed
    bound = objective if status == "optimal" else min(bound, objective)  # tolerances: never above
    extra["pieces"] = pieces_dict(graph, cluster, a, p)
    return Result("ip", graph, cluster, np.asarray(a, dtype=np.int64), float(objective), status, seconds(),
                  bound=float(bound), extra=extra)


def _pick_start(graph: Graph, cluster: Cluster, q: int, warm_start, budget: float):
    if warm_start is None or warm_start is False:
        return None
    if isinstance(warm_start, str) and warm_start == "auto":
        cands = warm_candidates(graph, cluster, q, budget)
    else:
        if isinstance(warm_start, Result):
            if warm_start.assignment is None:
                return None
            a = warm_start.assignment
            p = warm_start.extra.get("pieces")
            p = reentry_pieces(graph, cluster, a) if p is None else evaluate_latency(graph, cluster, a, p).pieces
        else:
            a = as_assignment(graph, cluster, warm_start)
            p = reentry_pieces(graph, cluster, a)
        ev = evaluate_latency(graph, cluster, a, p)
        cands = [("given", np.asarray(a, dtype=np.int64), p)] if _fits_q(ev, cluster.k, q) else []
    best = None
    for name, a, p in cands:
        val = evaluate_latency(graph, cluster, a, p).latency
        if best is None or val < best[3]:
            best = (name, a, p, val)
    return best


def earliest_finish(graph: Graph, cluster: Cluster) -> np.ndarray:
    """A lower bound on each node's ready time in any split: the longest path into it (itself
    included) with every node at its fastest allowed time. Valid because the nodes of a path
    that share a call all compute inside it, after the inputs the call waits for."""
    acc = np.where(graph.supported & (cluster.k > 0), graph.p_acc, np.inf)
    cpu = np.where(np.isnan(graph.p_cpu) | (cluster.l == 0), np.inf, graph.p_cpu)
    t = np.minimum(acc, cpu)
    t = np.where(np.isfinite(t), t, 0.0)
    f = np.zeros(graph.n)
    for v in graph.topological_order().tolist():
        f[v] = t[v] + max((f[u] for u in graph.pred[v]), default=0.0)
    return f


def critical_path_bound(graph: Graph, cluster: Cluster) -> float:
    """A lower bound on any latency: the largest `earliest_finish`."""
    return float(earliest_finish(graph, cluster).max()) if graph.n else 0.0


def ip(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0, solver: str = "scip",
       q: int = 1) -> Result:
    """The registry's latency IP (``devplace latency --method ip``): ``q`` = 1 call per accelerator."""
    return latency_ip(graph, cluster, q, solver=solver, time_limit=time_limit, seed=seed)


def greedy(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """The registry's greedy (``devplace latency --method greedy``)."""
    return greedy_latency(graph, cluster, time_limit=time_limit, seed=seed)
