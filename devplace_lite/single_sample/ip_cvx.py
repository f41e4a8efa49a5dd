"""The latency integer program written in cvxpy, to read next to the mathematics.

`latency_problem` builds the rows `devplace_lite.single_sample.ip` hands to the solvers, one
vectorised line per family of constraints (the version chapter 4 prints); the tests check that
its optimum equals the library's. Why the library solves its own copy: see
`devplace_lite.throughput.ip_cvx`.
"""

from __future__ import annotations

import math

import numpy as np

from ..devices import Cluster
from ..graph import Graph
from ..units import unit_graph
from ..throughput.ip_cvx import _edge_arrays


def latency_problem(graph: Graph, cluster: Cluster, q: int = 1, big_m: float | None = None, relax: bool = False):
    """The latency IP with at most ``q`` calls per accelerator as a ``cvxpy.Problem``.

    ``big_m`` defaults to `devplace_lite.single_sample.ip.universal_big_m`; returns
    ``(problem, variables)`` with ``x[v, s]`` (node ``v`` in slot ``s = d q + j``), ``x_cpu[v]``
    and the times ``L``, ``start``, ``finish``. ``relax=True``: the linear relaxation.
    """
    import cvxpy as cp

    from ..single_sample.bounds import earliest_finish
    from ..single_sample.ip import universal_big_m

    d = unit_graph(graph, chain=False).on(cluster)
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
            rows += [d.mem @ W <= cluster.memory]
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
