"""Exhaustive search: the ground truth every exact method is tested against.

Problem: over every assignment of units (colocation classes, or single nodes) to devices,
minimise the largest device load, subject to memory caps, unsupported nodes, CPU-less nodes,
and a split kind: ``"chain"`` (chain of ideals), ``"contiguous"`` (each part convex) or
``"any"``. Contiguity is asked of the forward nodes (DESIGN.md); backward nodes follow their
colocation class.

Complexity: ``O(D^U (n + m) D)`` for ``U`` units and ``D`` devices, cut by a factor of about
``k! l!`` by fixing the labels of identical devices in first-use order. Assignments are scored
in numpy batches, so ``D^U`` up to a few million is practical (``U <= 10`` with 4 devices).

Example
-------
>>> from devplace_lite.generators import skip_chain
>>> from devplace_lite.devices import Cluster
>>> r = exhaustive(skip_chain(6, seed=1), Cluster(accelerators=2))
>>> r.status, r.objective == r.check().max_load
('optimal', True)
"""

from __future__ import annotations

import time

import numpy as np

from .cost import forward_mask
from .devices import Cluster
from .graph import Graph, GraphError
from .result import Result

DEFAULT_LIMIT = 5_000_000
_BATCH = 1 << 15


def _canonical(A: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows whose labels in [lo, hi) appear in first-use order lo, lo+1, ... (symmetry breaking)."""
    inside = (A >= lo) & (A < hi)
    lab = np.where(inside, A - lo, -1)
    seen_max = np.maximum.accumulate(np.concatenate([np.full((len(A), 1), -1), lab[:, :-1]], axis=1), axis=1)
    return ~np.any(inside & (lab > seen_max + 1), axis=1)


def _reachability(graph: Graph, keep: np.ndarray) -> np.ndarray:
    """R[u, x] = there is a path u -> ... -> x of length >= 1 through kept nodes."""
    R = np.zeros((graph.n, graph.n), dtype=bool)
    for v in graph.topological_order()[::-1]:
        if not keep[v]:
            continue
        for w in graph.succ[v]:
            if keep[w]:
                R[v, w] = True
                R[v] |= R[w]
    return R


def batch_loads(graph: Graph, cluster: Cluster, A: np.ndarray) -> np.ndarray:
    """Loads (B, D) of a batch of node assignments A (B, n); same model as `cost.device_loads`."""
    k, D = cluster.k, cluster.size
    p = np.where(np.arange(D)[None, :] < k, graph.p_acc[:, None], graph.p_cpu[:, None])
    p = np.where(np.isnan(p), np.inf, p)
    loads = np.zeros((len(A), D))
    for d in range(D):
        hit = A == d
        loads[:, d] = np.where(hit, p[:, d][None, :], 0.0).sum(axis=1)
    for u in range(graph.n):
        succ = graph.succ[u]
        if not succ or graph.comm[u] == 0:
            continue
        S, au = A[:, succ], A[:, u]
        for d in range(k):
            sends = (au == d) & np.any(S != d, axis=1)
            gets = (au != d) & np.any(S == d, axis=1)
            loads[:, d] += (sends | gets) * graph.comm[u]
    return loads


def batch_kind_ok(graph: Graph, cluster: Cluster, A: np.ndarray, kind: str, R: np.ndarray | None) -> np.ndarray:
    """Which rows of A are splits of the asked kind (on the forward nodes)."""
    if kind == "any":
        return np.ones(len(A), dtype=bool)
    keep = forward_mask(graph)
    D = cluster.size
    if kind == "chain":
        Q = np.zeros((len(A), D, D), dtype=np.float32)
        rows = np.arange(len(A))
        for s, t in zip(graph.src.tolist(), graph.dst.tolist()):
            if keep[s] and keep[t]:
                Q[rows, A[:, s], A[:, t]] = 1.0
        Q[:, np.arange(D), np.arange(D)] = 0.0
        C = Q.copy()
        for _ in range(max(1, int(np.ceil(np.log2(D))) + 1)):
            C = np.minimum(1.0, C + C @ C)
        return ~np.any(C[:, np.arange(D), np.arange(D)] > 0, axis=1)
    if kind == "contiguous":
        ok = np.ones(len(A), dtype=bool)
        Rf = R.astype(np.float32)
        for d in range(D):
            M = ((A == d) & keep[None, :]).astype(np.float32)
            inside = M > 0
            after = (M @ Rf) > 0
            before = (M @ Rf.T) > 0
            ok &= ~np.any(after & before & ~inside & keep[None, :], axis=1)
        return ok
    raise GraphError(f"unknown split kind {kind!r} (expected chain, contiguous or any)")


def exhaustive(graph: Graph, cluster: Cluster, kind: str = "chain", limit: int = DEFAULT_LIMIT) -> Result:
    """The optimal placement of the given split kind by trying every assignment of units.

    Raises `GraphError` when ``D ** U`` exceeds ``limit`` (the search would not end in time).
    """
    t0 = time.perf_counter()
    units = graph.units
    U, D, k = int(units.max()) + 1, cluster.size, cluster.k
    if D ** U > limit:
        raise GraphError(f"exhaustive search needs {D}^{U} assignments, over the limit of {limit}")
    # which devices each unit may use
    allowed = np.ones((U, D), dtype=bool)
    unsup = np.zeros(U, dtype=bool)
    np.logical_or.at(unsup, units, ~graph.supported)
    nocpu = np.zeros(U, dtype=bool)
    np.logical_or.at(nocpu, units, np.isnan(graph.p_cpu))
    allowed[unsup, :k] = False
    allowed[nocpu, k:] = False
    R = _reachability(graph, forward_mask(graph)) if kind == "contiguous" else None
    best_val, best_row = np.inf, None
    powers = D ** np.arange(U - 1, -1, -1, dtype=np.int64)
    for start in range(0, D ** U, _BATCH):
        idx = np.arange(start, min(D ** U, start + _BATCH), dtype=np.int64)
        AU = (idx[:, None] // powers[None, :]) % D
        ok = _canonical(AU, 0, k) & _canonical(AU, k, D)
        ok &= np.all(allowed[np.arange(U)[None, :], AU], axis=1)
        AU = AU[ok]
        if not len(AU):
            continue
        A = AU[:, units]
        if np.isfinite(cluster.memory) and k:
            mem = np.stack([np.where(A == d, graph.memory[None, :], 0.0).sum(axis=1) for d in range(k)], axis=1)
            A = A[np.all(mem <= cluster.memory, axis=1)]
        if not len(A):
            continue
        A = A[batch_kind_ok(graph, cluster, A, kind, R)]
        if not len(A):
            continue
        worst = batch_loads(graph, cluster, A).max(axis=1)
        i = int(np.argmin(worst))
        if worst[i] < best_val:
            best_val, best_row = float(worst[i]), A[i].copy()
    seconds = time.perf_counter() - t0
    if best_row is None:
        return Result("exhaustive", graph, cluster, None, None, "infeasible", seconds, extra={"kind": kind})
    return Result("exhaustive", graph, cluster, best_row, best_val, "optimal", seconds, bound=best_val,
                  extra={"kind": kind})
