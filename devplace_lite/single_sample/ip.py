"""The latency integer program (inference, one sample), warm-started from every cheap split.

Problem: place every node on an accelerator or on the CPU so that the single-sample latency
of `devplace_lite.single_sample.model` is least. Each accelerator runs at most ``q`` calls (*slots*), each
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
    start[s] >= L[u] - cap(u) (1 - r[u,s])             a call waits for what it reads
    L[v] >= finish[s] - (UB - low(v)) (1 - x[v,s])     ...and its outputs wait for the call
    start[d,j] >= finish[d,j-1]                        calls of one accelerator in turn
    L[v] >= p_cpu(v) x_cpu[v],  L[w] >= L[u] + p_cpu(w) x_cpu[w]          CPU nodes
    low(v) <= L[v] <= cap(v),  L[v] >= low_acc(v) + (low_cpu(v) - low_acc(v)) x_cpu[v]
    T >= L[v]                                          (sinks suffice)

The big-M rows switch a time row off when its indicator is 0, and an ``M`` must exceed every
time it can meet in the splits we care about. We start from the best split we know (its
latency ``UB``) and ask for no worse, so every time is at most ``UB``; each node's ready time
is at least ``low(v)`` (by device type, `devplace_lite.single_sample.bounds.ready_bounds`) and at
most ``cap(v) = UB - tail(v)`` (`devplace_lite.single_sample.bounds.latency_caps`), which gives
each row its own ``M``. With the 0/1 variables fractional every big-M row is mostly off, so
the relaxation proves what those ready-time bounds prove and little more; the solver's bound
rises above them only by branching.

The start: the best of `devplace_lite.single_sample.search.start_splits` (the greedy, the
throughput DP's split and the baselines cut into calls, the order splits) improved by the
local search, so the answer is never worse than any of them. When the path bound already
meets it, the start is proven optimal and no solver runs.

Complexity: NP-hard; ``(k q + 1) n`` binaries and ``O((n + m) k q)`` rows.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.single_sample.model import latency_of
>>> from devplace_lite.single_sample.search import greedy_latency
>>> g, c = generate("series_parallel", 8, seed=2), Cluster(accelerators=2, cpus=1)
>>> r = latency_ip(g, c, q=1, solver="highs")
>>> r.status, abs(r.objective - latency_of(r)) < 1e-9, r.objective <= greedy_latency(g, c).objective
('optimal', True, True)

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020.
"""

from __future__ import annotations

import time

import numpy as np

from ..cost import as_assignment
from ..devices import Cluster
from ..graph import Graph, GraphError
from .model import evaluate_latency, pieces_dict, reentry_pieces
from .bounds import ReadyBounds, critical_path_bound, earliest_finish, latency_caps, ready_bounds, work_bound
from .search import finish_share, improve, start_splits, unit_orders
from ..result import Result
from ..mip.solve import LinearModel, Solution, solve
from ..throughput.ip import canonical_labels, memory_share
from ..units import UnitCosts, unit_graph

#: Share of the time limit the starts and the local search may use before the solver runs.
SEARCH_SHARE = 0.4
#: CPU seconds per nonzero to hand a model to SCIP (measured on this project's machine).
TRANSFER_SECONDS = 1e-5


def _solve(model: LinearModel, solver: str, time_limit: float | None, gap: float, seed: int, threads: int,
           start: np.ndarray | None, slowdown: float = 1.0) -> Solution | None:
    """The one call into the integer-program layer (`devplace_lite.mip.solve`). SCIP's clock
    starts after the rows are handed over, which takes time on large models: that share
    (about 10 microseconds of CPU per nonzero, times the machine's ``slowdown``: wall over CPU
    seconds of our own work so far) comes off the limit first; ``None`` when nothing is left."""
    if time_limit is not None and solver == "scip":
        time_limit -= TRANSFER_SECONDS * model.matrix().nnz * slowdown
    if time_limit is not None and time_limit < 0.1:
        return None
    return solve(model, solver, time_limit=time_limit, gap=gap, seed=seed, threads=threads, start=start)


# -- the formulation -------------------------------------------------------------------------------------
class _LatencyModel:
    """The rows of the module docstring for ``q`` slots per accelerator. ``big_m``: a latency no
    split of interest exceeds (the ``UB``); ``ready``: lower bounds on each node's ready time
    (`devplace_lite.single_sample.bounds.ReadyBounds`, or ``None`` for the critical path alone);
    ``caps``: upper bounds on them (``None``: ``big_m``)."""

    def __init__(self, data: UnitCosts, q: int, big_m: float, symmetry: bool, ready: ReadyBounds | None = None,
                 caps: np.ndarray | None = None) -> None:
        self.data, self.q = data, q
        g, c = data.graph, data.cluster
        n, k, U = g.n, c.k, data.U
        S = self.S = k * q
        unit = data.unit
        m = self.model = LinearModel()
        ub = data.allowed[:, :k].astype(float)
        if symmetry:
            rank = np.cumsum(data.acc_supported[data.units.first_order]) - 1
            r = np.empty(U, dtype=np.int64)
            r[data.units.first_order] = rank
            for d in range(k):
                ub[d > r, d] = 0.0
        self.w = m.add_vars((U, k), ub=ub, integer=True)
        self.wc = m.add_vars(U, ub=data.cpu_ok.astype(float), integer=True)
        for u in range(U):
            m.add_row([(self.w[u, d], 1.0) for d in range(k)] + [(self.wc[u], 1.0)], lo=1.0, hi=1.0)
        if data.memory_binds:
            share = memory_share(data)
            for d in range(k):
                m.add_row([(self.w[u, d], share[u]) for u in range(U)], hi=1.0)
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
        # the relaxation of the big-M rows proves nothing: lower bounds on the ready times keep
        # what the path bound proves, upper ones (caps) shrink each row's M
        lower = earliest_finish(g, c) if ready is None else ready.ready
        lower = np.minimum(lower, big_m)
        cap = np.full(n, big_m) if caps is None else np.clip(caps, lower, big_m)
        self.L = m.add_vars(n, lb=lower, ub=cap)
        self.start = m.add_vars(S, ub=big_m)
        self.finish = m.add_vars(S, ub=big_m)
        self.T = m.add_vars(1, ub=big_m)[0]
        m.obj[self.T] = 1.0
        L = self.L
        for s in range(S):
            terms = [(self.finish[s], 1.0), (self.start[s], -1.0)]
            terms += [(x[v, s], -g.p_acc[v]) for v in range(n)]
            for u, i in self.prow.items():
                terms += [(self.r[i, s], -g.comm[u]), (self.o[i, s], -g.comm[u])]
            m.add_row(terms, lo=0.0, hi=0.0)
            for u, i in self.prow.items():  # off: start >= L[u] - cap[u], true as start >= 0
                m.add_row([(self.start[s], 1.0), (L[u], -1.0), (self.r[i, s], -cap[u])], lo=-cap[u])
            for v in range(n):  # off: L[v] >= finish - (UB - lower[v]), true as finish <= UB
                mv = big_m - lower[v]
                m.add_row([(L[v], 1.0), (self.finish[s], -1.0), (x[v, s], -mv)], lo=-mv)
            if s % q:
                m.add_row([(self.start[s], 1.0), (self.finish[s - 1], -1.0)], lo=0.0)
        if ready is not None:  # the bound of the device type the node ends up on
            for v in range(n):
                on_cpu, on_acc = min(ready.cpu[v], big_m), min(ready.acc[v], big_m)
                if on_cpu != on_acc:  # L >= on_acc + (on_cpu - on_acc) x_cpu
                    m.add_row([(L[v], 1.0), (xc[v], on_acc - on_cpu)], lo=on_acc)
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
        dev = data.units.unit_devices(assignment)
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

    Parameters
    ----------
    graph, cluster : the instance.
    q : calls per accelerator.
    solver : ``"scip"`` or ``"highs"``.
    time_limit : seconds for everything (starts, local search, bounds, building the model,
        solving); ``None``: run to the proven optimum.
    gap : stop when the solver's relative gap is at most this.
    seed, threads : the solver's.
    warm_start : ``"auto"`` (the best of `start_splits`, improved by the local search), a
        latency `Result` (with ``extra["pieces"]``), a placement (cut by the re-entry rule) or
        ``None`` (none: the model's ``M`` is `universal_big_m`).
    symmetry : fix the labels of identical accelerators (off: the solvers do better alone).

    Returns
    -------
    Result
        ``objective``: `devplace_lite.single_sample.model.evaluate_latency` of the placement with the pieces
        in ``extra["pieces"]``; ``bound``: the larger of the solver's and
        `devplace_lite.single_sample.bounds`' bounds; ``status`` ``optimal`` only when the two meet.
        ``extra["starts"]`` has the latency of every start tried, ``extra["warm_start"]`` names
        the best, and ``extra["warm_start_beaten"]`` says that the solver improved on it.

    Raises
    ------
    GraphError
        ``q`` below 1 or an unknown solver.
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    solver = str(solver).lower()
    if solver not in ("scip", "highs"):
        raise GraphError(f"unknown solver {solver!r}; known: highs, scip")
    q = int(q)
    if q < 1:
        raise GraphError(f"q (calls per accelerator) must be at least 1, got {q}")
    deadline = None if time_limit is None else t0 + finish_share(time_limit)
    seconds = lambda: time.perf_counter() - t0  # noqa: E731
    data = unit_graph(graph, chain=False).on(cluster)
    extra: dict = {"objective_kind": "latency", "q": q, "solver": solver}
    if graph.n == 0:
        return Result("ip", graph, cluster, np.zeros(0, dtype=np.int64), 0.0, "optimal", 0.0, bound=0.0,
                      extra={**extra, "pieces": {}})
    nowhere = np.flatnonzero(~(data.allowed[:, :cluster.k].any(axis=1) | data.cpu_ok))
    if len(nowhere):
        v = graph.nodes[int(np.flatnonzero(data.unit == nowhere[0])[0])].id
        extra["reason"] = f"node {v} fits on no device (memory, support or CPU time)"
        return Result("ip", graph, cluster, None, None, "infeasible", seconds(), extra=extra)
    ready = ready_bounds(graph, cluster, q)
    lower = max(critical_path_bound(graph, cluster), work_bound(graph, cluster), ready.bound)
    start = _pick_start(graph, cluster, q, warm_start, time_limit, seed, lower, extra)
    scored = [] if start is None else [(start[3], start[1], start[2], start[0])]
    if start is not None and lower >= start[3] * (1 - 1e-9):
        status, sol = "optimal", None  # the path bound meets the start: nothing left to solve
    else:
        slowdown = max(1.0, (time.perf_counter() - t0) / max(1e-3, time.process_time() - cpu0))
        sol, form = _run_model(graph, cluster, data, q, start, ready, symmetry, solver, gap, seed, threads,
                               deadline, slowdown, extra)
        if sol is None:  # too little time to hand the model over: the local search goes on instead
            status = "time_limit"
            if start is not None and warm_start == "auto":
                a, val, _ = improve(graph, cluster, start[1], deadline=deadline, seed=seed + 1, target=lower)
                if val < start[3]:
                    scored.append((val, a, np.where(a < cluster.k, 0, -1), "local search"))
                    extra["starts"]["local search"] = min(val, extra["starts"].get("local search", val))
            extra["solver_skipped"] = "too little time left to hand the model over"
        elif sol.status == "infeasible":
            return Result("ip", graph, cluster, None, None, "infeasible", seconds(), extra=extra)
        else:
            status = {"optimal": "optimal", "gap": "feasible", "time_limit": "time_limit"}[sol.status]
            if sol.values is not None:
                a, p = form.decode(sol.values)
                ev = evaluate_latency(graph, cluster, a, p)
                if ev.feasible:
                    scored.append((ev.latency, a, p, "ip"))
                else:  # only solver tolerances can get here
                    extra["rejected"] = "; ".join(ev.violations) or "deadlock"
                    status = "feasible" if status == "optimal" else status
            if sol.bound is not None:
                lower = max(lower, sol.bound)
    if not scored:
        return Result("ip", graph, cluster, None, None, "time_limit", seconds(), bound=lower, extra=extra)
    objective, a, p, source = min(scored, key=lambda t: t[0])
    if source == "ip":
        extra["warm_start_beaten"] = True
    if lower >= objective * (1 - 1e-9):
        status = "optimal"  # stopped early, but the bounds meet the answer
    bound = objective if status == "optimal" else min(lower, objective)  # tolerances: never above
    extra["pieces"] = pieces_dict(graph, cluster, a, p)
    return Result("ip", graph, cluster, np.asarray(a, dtype=np.int64), float(objective), status, seconds(),
                  bound=float(bound), extra=extra)


def _run_model(graph, cluster, data, q, start, ready, symmetry, solver, gap, seed, threads, deadline, slowdown,
               extra):
    """Build the model around the start and solve it until the deadline."""
    big_m = universal_big_m(graph, cluster, q)
    caps = None
    if start is not None:
        big_m = min(big_m, start[3])
        data = data.units.on(cluster, cap=start[3])  # no better split runs a unit where it alone is slower
        caps = latency_caps(graph, cluster, start[3])
    t_build = time.perf_counter()
    form = _LatencyModel(data, q, big_m, symmetry, ready, caps)
    vec = None
    if start is not None:
        a = canonical_labels(data, start[1]) if symmetry else start[1]
        vec = form.encode(a, start[2])
        if form.model.violation(vec) > 1e-6 * max(1.0, big_m):
            raise AssertionError(f"warm start {start[0]} violates the latency model")
    extra.update(variables=form.model.n_vars, rows=form.model.n_rows, big_m=big_m,
                 build_seconds=round(time.perf_counter() - t_build, 3))
    left = None if deadline is None else deadline - time.perf_counter()
    sol = _solve(form.model, solver, left, gap, seed, threads, vec, slowdown)
    if sol is not None:
        extra.update(nodes=sol.nodes, solve_seconds=round(sol.seconds, 3))
    return sol, form


def _pick_start(graph: Graph, cluster: Cluster, q: int, warm_start, time_limit: float | None, seed: int,
                lower: float, extra: dict):
    """``(name, assignment, pieces, latency)`` of the start, or ``None``; records every start
    tried in ``extra["starts"]``. The search stops early when a start meets ``lower``."""
    if warm_start is None or warm_start is False:
        return None
    if isinstance(warm_start, str) and warm_start == "auto":
        t0 = time.perf_counter()
        blocks = unit_orders(graph, cluster)
        cands = start_splits(graph, cluster, deadline=None if time_limit is None else t0 + 0.15 * time_limit,
                             seed=seed, blocks=blocks, target=lower)
        if not cands:
            return None
        extra["starts"] = {name: val for name, _, val in cands}
        name, a, val = min(cands, key=lambda s: s[2])
        deadline = None if time_limit is None else t0 + SEARCH_SHARE * time_limit
        a, val2, _ = improve(graph, cluster, a, deadline=deadline, seed=seed, blocks=blocks, target=lower)
        if val2 < val:
            extra["starts"]["local search"] = val2
            name = f"local search from {name}"
        extra["warm_start"], extra["start_objective"] = name, val2
        return name, a, np.where(a < cluster.k, 0, -1), val2
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
    counts = np.bincount([c.device for c in ev.calls], minlength=cluster.k)
    if not ev.feasible or ev.deadlock or np.any(counts > q):
        return None
    extra["warm_start"], extra["start_objective"] = "given", ev.latency
    extra["starts"] = {"given": ev.latency}
    return "given", np.asarray(a, dtype=np.int64), p, ev.latency


def ip(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0, solver: str = "scip",
       q: int = 1) -> Result:
    """The registry's latency IP (``devplace latency --method ip``): ``q`` = 1 call per accelerator."""
    return latency_ip(graph, cluster, q, solver=solver, time_limit=time_limit, seed=seed)
