"""The same integer programs written in cvxpy, to read next to the mathematics.

`throughput_problem` and `latency_problem` build, row block for row block, the models that
`devplace_lite.mip.throughput` and `devplace_lite.mip.latency` hand to the solvers. They are
the versions the chapters print: one vectorised line per family of constraints. Solve them
with any mixed-integer solver cvxpy knows (``problem.solve(solver=cp.HIGHS)`` or ``cp.SCIP``);
the tests check that their optimum equals the library's. The library solves its own copy
of the rows because cvxpy returns neither the incumbent nor the proven bound when a time
limit stops the solver, and does not pass a warm start on to SCIP or HiGHS.

Example
-------
>>> import cvxpy as cp
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> prob, v = throughput_problem(generate("layered", 8, seed=0), Cluster(accelerators=2), "contiguous")
>>> _ = prob.solve(solver=cp.HIGHS)
>>> prob.status
'optimal'
"""

from __future__ import annotations

import math

import numpy as np

from ..devices import Cluster
from ..graph import Graph
from ..units import order_vertices
from .throughput import UnitData, canonical_kind


def _edge_arrays(pairs):
    return (np.array([p for p, _ in pairs], dtype=np.int64), np.array([w for _, w in pairs], dtype=np.int64))


def throughput_problem(graph: Graph, cluster: Cluster, kind: str = "contiguous", relax: bool = False):
    """The max-load IP of ``kind`` as a ``cvxpy.Problem``; returns ``(problem, variables)``.

    ``relax=True`` gives the linear relaxation (0/1 variables anywhere in [0, 1]), whose
    optimum is the bound a solver starts from.

    ``variables["x"][u, d]`` places unit ``u`` (``graph.units``) on device ``d`` for the
    contiguous and non-contiguous flavours; the chain flavour has ``variables["g"][u, s]``
    (unit ``u`` in stage ``s`` or earlier) and ``variables["stage_is_acc"]``.
    """
    import cvxpy as cp

    kind = canonical_kind(kind)
    d = UnitData(graph, cluster)
    k, l, D, U = cluster.k, cluster.l, cluster.size, d.U
    producers, pairs = d.comm_pairs
    r, w = _edge_arrays(pairs)              # producer row r feeds unit w
    up = d.unit[np.array(producers, dtype=np.int64)][r] if len(r) else r  # the producer's unit
    c = graph.comm[producers] if producers else np.zeros(0)
    fwd = [(d.unit[a], d.unit[b]) for a, b in d.order_edges if d.unit[a] != d.unit[b]]
    T = cp.Variable(nonneg=True)

    if kind != "chain":
        x = cp.Variable((U, D), boolean=not relax, nonneg=relax)
        y = cp.Variable((len(producers), k), nonneg=True)
        rows = [cp.sum(x, axis=1) == 1,                       # every unit placed once
                x <= d.allowed.astype(float)]                 # where it may run (and fits)
        if len(r):
            rows += [y[r] >= x[up, :k] - x[w, :k],            # output leaves the device
                     y[r] >= x[w, :k] - x[up, :k]]            # output enters the device
        if k:
            rows += [d.p_acc @ x[:, :k] + c @ y <= T]         # accelerator loads
            if math.isfinite(cluster.memory):
                rows += [d.memory @ x[:, :k] <= cluster.memory]
        if l:
            rows += [d.p_cpu @ x[:, k:] <= T]                 # CPU loads
        variables = {"x": x, "y": y, "T": T}
        if kind == "contiguous":
            fwd_nodes = np.flatnonzero(order_vertices(graph))  # forward nodes and stand-ins
            col = -np.ones(graph.n, dtype=np.int64)
            col[fwd_nodes] = np.arange(len(fwd_nodes))
            a_, b_ = _edge_arrays(d.order_edges)
            z = cp.Variable((len(fwd_nodes), D), nonneg=True)
            rows += [z <= 1, z >= x[d.unit[fwd_nodes]]]       # z contains the part...
            if len(a_):
                rows += [z[col[b_]] <= z[col[a_]],            # ...is closed under predecessors...
                         z[col[b_]] <= x[d.unit[b_]] - x[d.unit[a_]] + 1]  # ...and stops where the part ends
            variables["z"] = z
        return cp.Problem(cp.Minimize(T), rows), variables

    # chain: stages of fixed types, l CPU slots around each accelerator, at most l of them used
    is_acc = np.array(([False] * l + [True]) * k + [False] * l)
    S = len(is_acc)
    g = cp.Variable((U, S), boolean=not relax)
    member = g - cp.hstack([np.zeros((U, 1)), g[:, :-1]]) if S > 1 else g
    acc, cpu = np.flatnonzero(is_acc), np.flatnonzero(~is_acc)
    rows = [g[:, S - 1] == 1, member >= 0]                    # cumulative: g never decreases
    rows += [g >= 0, g <= 1] if relax else []
    a_, b_ = _edge_arrays(fwd)
    if len(a_):
        rows += [g[b_] <= g[a_]]                              # nothing runs before what it reads
    rows += [member[~d.acc_ok][:, acc] == 0] if (~d.acc_ok).any() and len(acc) else []
    rows += [member[~d.cpu_ok][:, cpu] == 0] if (~d.cpu_ok).any() and len(cpu) else []
    y = cp.Variable((len(producers), S), nonneg=True)
    if k:
        if len(r):
            rows += [y[r][:, acc] >= member[up][:, acc] - member[w][:, acc],
                     y[r][:, acc] >= member[w][:, acc] - member[up][:, acc]]
        rows += [d.p_acc @ member[:, acc] + c @ y[:, acc] <= T]
        if math.isfinite(cluster.memory):
            rows += [d.memory @ member[:, acc] <= cluster.memory]
    if l:
        used = cp.Variable(len(cpu), nonneg=True)             # CPU slot holds anything
        ones = np.ones((int(d.cpu_ok.sum()), 1))
        rows += [d.p_cpu @ member[:, cpu] <= T, used <= 1, cp.sum(used) <= l,
                 member[d.cpu_ok][:, cpu] <= ones @ cp.reshape(used, (1, len(cpu)), order="C")]
    return cp.Problem(cp.Minimize(T), rows), {"g": g, "y": y, "T": T, "stage_is_acc": is_acc}


def latency_problem(graph: Graph, cluster: Cluster, q: int = 1, big_m: float | None = None, relax: bool = False):
    """The latency IP with at most ``q`` calls per accelerator as a ``cvxpy.Problem``.

    ``big_m`` defaults to `devplace_lite.mip.latency.universal_big_m`; returns
    ``(problem, variables)`` with ``x[v, s]`` (node ``v`` in slot ``s = d q + j``), ``x_cpu[v]``
    and the times ``L``, ``start``, ``finish``. ``relax=True``: the linear relaxation.
    """
    import cvxpy as cp

    from ..latency_bounds import earliest_finish
    from .latency import universal_big_m

    d = UnitData(graph, cluster)
    n, k, U = graph.n, cluster.k, d.U
    S = k * q
    M = universal_big_m(graph, cluster, q) if big_m is None else float(big_m)
    u_, w_ = graph.src, graph.dst
    p_cpu = np.nan_to_num(graph.p_cpu)
    W = cp.Variable((U, k), boolean=not relax, nonneg=relax)  # unit on accelerator d
    Wc = cp.Variable(U, boolean=not relax, nonneg=relax)      # unit on the CPU
    x = cp.Variable((n, S), boolean=not relax, nonneg=relax)  # node in slot (d, j)
    r = cp.Variable((n, S), nonneg=True)                      # u's output enters slot s
    o = cp.Variable((n, S), nonneg=True)                      # u's output leaves slot s
    z = cp.Variable((n, S), nonneg=True)
    L = cp.Variable(n, nonneg=True)
    start, finish = cp.Variable(S, nonneg=True), cp.Variable(S, nonneg=True)
    T = cp.Variable(nonneg=True)
    xc = Wc[d.unit]
    per_device = cp.hstack([cp.sum(x[:, dev * q:(dev + 1) * q], axis=1, keepdims=True) for dev in range(k)]) \
        if k else None
    rows = [cp.sum(W, axis=1) + Wc == 1, W <= d.allowed[:, :k].astype(float), Wc <= d.cpu_ok.astype(float)]
    if k:
        rows += [per_device == W[d.unit]]                     # a node's slots are its unit's device
        if math.isfinite(cluster.memory):
            rows += [d.memory @ W <= cluster.memory]
    if len(u_) and S:
        rows += [r[u_] >= x[w_] - x[u_], o[u_] >= x[u_] - x[w_],
                 z[w_] <= z[u_], z[w_] <= x[w_] - x[u_] + 1]   # transfers; slots convex
    if S:
        rows += [z >= x, z <= 1,
                 finish == start + graph.p_acc @ x + graph.comm @ (r + o),
                 L[:, None] >= finish[None, :] - M * (1 - x)]      # outputs wait for the call
        rows += [start[s] >= L - M * (1 - r[:, s]) for s in range(S)]  # a call waits for its inputs
        rows += [start[s] >= finish[s - 1] for s in range(S) if s % q]  # calls of a device in turn
    rows += [L >= cp.multiply(p_cpu, xc)]
    if len(u_):
        rows += [L[w_] >= L[u_] + cp.multiply(p_cpu[w_], xc[w_])]
    rows += [T >= L, T <= M, L <= M, start <= M, finish <= M,
             L >= earliest_finish(graph, cluster)]                  # critical path into each node
    variables = {"W": W, "x_cpu": Wc, "x": x, "L": L, "start": start, "finish": finish, "T": T}
    return cp.Problem(cp.Minimize(T), rows), variables
