"""The max-load integer program written in cvxpy, to read next to the mathematics.

`throughput_problem` builds, row block for row block, the model that `devplace_lite.throughput.ip`
hands to the solvers: one vectorised line per family of constraints (the version chapter 3
prints). Solve it with any mixed-integer solver cvxpy knows (``problem.solve(solver=cp.HIGHS)``
or ``cp.SCIP``); the tests check that its optimum equals the library's. The library solves its
own copy of the rows because cvxpy returns neither the incumbent nor the proven bound when a
time limit stops the solver, and does not pass a warm start on to SCIP or HiGHS.

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
from ..units import unit_graph
from .ip import canonical_kind, comm_pairs, order_pairs


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
    d = unit_graph(graph, chain=False).on(cluster)
    k, l, D, U = cluster.k, cluster.l, cluster.size, d.U
    producers, pairs = comm_pairs(d)
    r, w = _edge_arrays(pairs)              # producer row r feeds unit w
    up = d.unit[np.array(producers, dtype=np.int64)][r] if len(r) else r  # the producer's unit
    c = graph.comm[producers] if producers else np.zeros(0)
    fwd = [(d.unit[a], d.unit[b]) for a, b in order_pairs(graph) if d.unit[a] != d.unit[b]]
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
            rows += [d.pa @ x[:, :k] + c @ y <= T]         # accelerator loads
            if math.isfinite(cluster.memory):
                rows += [d.mem @ x[:, :k] <= cluster.memory]
        if l:
            rows += [d.pc @ x[:, k:] <= T]                 # CPU loads
        variables = {"x": x, "y": y, "T": T}
        if kind == "contiguous":
            fwd_nodes = np.flatnonzero(order_vertices(graph))  # forward nodes and stand-ins
            col = -np.ones(graph.n, dtype=np.int64)
            col[fwd_nodes] = np.arange(len(fwd_nodes))
            a_, b_ = _edge_arrays(order_pairs(graph))
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
    rows += [member[~d.acc_supported][:, acc] == 0] if (~d.acc_supported).any() and len(acc) else []
    rows += [member[~d.cpu_ok][:, cpu] == 0] if (~d.cpu_ok).any() and len(cpu) else []
    y = cp.Variable((len(producers), S), nonneg=True)
    if k:
        if len(r):
            rows += [y[r][:, acc] >= member[up][:, acc] - member[w][:, acc],
                     y[r][:, acc] >= member[w][:, acc] - member[up][:, acc]]
        rows += [d.pa @ member[:, acc] + c @ y[:, acc] <= T]
        if math.isfinite(cluster.memory):
            rows += [d.mem @ member[:, acc] <= cluster.memory]
    if l:
        used = cp.Variable(len(cpu), nonneg=True)             # CPU slot holds anything
        ones = np.ones((int(d.cpu_ok.sum()), 1))
        rows += [d.pc @ member[:, cpu] <= T, used <= 1, cp.sum(used) <= l,
                 member[d.cpu_ok][:, cpu] <= ones @ cp.reshape(used, (1, len(cpu)), order="C")]
    return cp.Problem(cp.Minimize(T), rows), {"g": g, "y": y, "T": T, "stage_is_acc": is_acc}
