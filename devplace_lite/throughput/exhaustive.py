"""Exhaustive search: the ground truth every exact method is tested against.

Problem: over every assignment of units (colocation classes, or single nodes) to devices,
minimise the largest device load, subject to memory caps, unsupported nodes, CPU-less nodes,
and a split kind: ``"chain"`` (chain of ideals), ``"contiguous"`` (each part convex) or
``"any"``. Both shapes are asked of the forward graph with stand-ins for backward-only classes
(`devplace_lite.units`, the authors' model); backward nodes follow their colocation class.

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

from ..cost import evaluate
from ..devices import Cluster
from .dp import DP_UNITS
from ..errors import LimitError, UsageError
from ..graph import Graph
from ..methods import PARTITION, scalable
from ..result import Result
from ..units import order_edges, order_vertices, unit_graph

DEFAULT_LIMIT = 5_000_000
_BATCH = 1 << 15


def _canonical(A: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows whose labels in [lo, hi) appear in first-use order lo, lo+1, ... (symmetry breaking)."""
    inside = (A >= lo) & (A < hi)
    lab = np.where(inside, A - lo, -1)
    seen_max = np.maximum.accumulate(np.concatenate([np.full((len(A), 1), -1), lab[:, :-1]], axis=1), axis=1)
    return ~np.any(inside & (lab > seen_max + 1), axis=1)


def _reachability(graph: Graph) -> np.ndarray:
    """R[u, x] = a path u -> ... -> x of length >= 1 along the order edges (the forward graph
    with stand-ins, `devplace_lite.units.order_edges`; it may have cycles)."""
    s, t = order_edges(graph)
    R = np.zeros((graph.n, graph.n), dtype=bool)
    R[s, t] = True
    while True:  # squaring doubles the path length covered
        nxt = R | ((R.astype(np.float32) @ R.astype(np.float32)) > 0)
        if np.array_equal(nxt, R):
            return R
        R = nxt


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
    keep = order_vertices(graph)
    D = cluster.size
    if kind == "chain":
        Q = np.zeros((len(A), D, D), dtype=np.float32)
        rows = np.arange(len(A))
        for s, t in zip(*(e.tolist() for e in order_edges(graph))):
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
    raise UsageError(f"unknown split kind {kind!r} (expected chain, contiguous or any)")


def exhaustive(graph: Graph, cluster: Cluster, kind: str = "chain", limit: int = DEFAULT_LIMIT,
               time_limit: float | None = None) -> Result:
    """The optimal placement of the given split kind by trying every assignment of units.

    Status ``optimal``, or ``infeasible`` when no placement of the kind fits; with
    ``time_limit`` seconds, the best placement tried so far with status ``time_limit`` (no
    bound) when the time runs out first. Raises `LimitError` when ``D ** U`` exceeds ``limit``
    (the search would not end in time) and `UsageError` for an unknown kind.
    """
    t0 = time.perf_counter()
    if kind not in ("chain", "contiguous", "any"):
        raise UsageError(f"unknown split kind {kind!r} (expected chain, contiguous or any)")
    classes = unit_graph(graph, chain=False)  # colocation classes only: no reduction to trust
    units, U, D, k = classes.unit, classes.size, cluster.size, cluster.k
    if D ** U > limit:
        exact = " or ".join(name for name, m in PARTITION.items()
                            if m.exact and m.split == "chain" and name != "exhaustive")
        other = exact if U <= DP_UNITS else f"a method that scales ({scalable()})"
        raise LimitError(f"exhaustive search needs {D}^{U} assignments, over the limit of {limit:,}; "
                         f"use {other} for graphs this size")
    allowed = np.ones((U, D), dtype=bool)  # which devices each unit may use
    allowed[classes.bad_acc, :k] = False
    allowed[classes.bad_cpu, k:] = False
    R = _reachability(graph) if kind == "contiguous" else None
    best_val, best_row, status = np.inf, None, "optimal"
    powers = D ** np.arange(U - 1, -1, -1, dtype=np.int64)
    for start in range(0, D ** U, _BATCH):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            status = "time_limit"
            break
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
        return Result("exhaustive", graph, cluster, None, None, "infeasible" if status == "optimal" else status,
                      seconds, extra={"kind": kind})
    value = evaluate(graph, cluster, best_row).max_load  # the evaluator's sums, to the last bit
    return Result("exhaustive", graph, cluster, best_row, value, status, seconds,
                  bound=value if status == "optimal" else None, extra={"kind": kind})
