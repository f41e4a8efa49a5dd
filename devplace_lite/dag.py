"""Graph basics every module shares: a topological order with a tie-break key, strongly
connected components, and the transitive closure.

They work on plain successor lists over vertices ``0..n-1`` (nodes of a `Graph`, units, blocks,
devices), so the data model, the unit model, the evaluator and the algorithms all call the same
code.

* `topological_order`: Kahn's algorithm taking, among the ready vertices, the one of least
  ``key`` (ties by vertex number); ``O((n + m) log n)``. Vertices on a cycle are left out, so
  a result shorter than ``n`` means the graph has a cycle.
* `strong_components`: component label of each vertex, components numbered by their least
  vertex; ``O(n + m)`` (scipy).
* `transitive_closure`: ``R[u, w]`` = a path of length at least one from ``u`` to ``w``;
  ``O(n m / 64)`` time (numpy rows), ``O(n^2)`` memory, acyclic graphs only.

Example
-------
>>> succ = [[1, 2], [3], [3], []]
>>> topological_order(succ).tolist(), topological_order(succ, key=[0, 5, 1, 0]).tolist()
([0, 1, 2, 3], [0, 2, 1, 3])
>>> strong_components(3, [(0, 1), (1, 0), (1, 2)]).tolist()
[0, 0, 1]
>>> transitive_closure(succ)[0].tolist()
[False, True, True, True]
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence

import numpy as np

#: Vertices plus arcs up to which `strong_components` first tries a pure-Python acyclicity test.
_SMALL = 100_000


def topological_order(succ: Sequence[Sequence[int]], key: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """Vertices in an order every arc follows, the ready vertex of least ``(key, number)`` first.

    Parameters
    ----------
    succ : successor list of each vertex (repeated arcs are fine).
    key : tie-break value per vertex; ``None`` takes the vertex number.

    Returns
    -------
    numpy int64 array; shorter than ``len(succ)`` exactly when the graph has a cycle (the
    vertices on or after a cycle are missing).
    """
    n = len(succ)
    indeg = np.zeros(n, dtype=np.int64)
    for out in succ:
        for w in out:
            indeg[w] += 1
    keys = list(range(n)) if key is None else [float(x) for x in key]
    heap = [(keys[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (keys[w], w))
    return np.array(order, dtype=np.int64)


def strong_components(n: int, arcs: Iterable[tuple[int, int]] | np.ndarray) -> np.ndarray:
    """Strongly connected component of each of the ``n`` vertices, numbered ``0, 1, ...`` in
    order of each component's least vertex."""
    a = np.asarray(list(arcs) if not isinstance(arcs, np.ndarray) else arcs, dtype=np.int64).reshape(-1, 2)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n + len(a) <= _SMALL:  # scipy.sparse.csgraph takes ~0.3 s to import: skip it for a small DAG
        succ: list[list[int]] = [[] for _ in range(n)]
        for u, w in a.tolist():
            succ[u].append(w)
        if len(topological_order(succ)) == n:  # acyclic: every vertex is its own component
            return np.arange(n, dtype=np.int64)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    adj = csr_matrix((np.ones(len(a)), (a[:, 0], a[:, 1])), shape=(n, n))
    _, comp = connected_components(adj, directed=True, connection="strong")
    _, first = np.unique(comp, return_index=True)
    return np.argsort(np.argsort(first))[comp].astype(np.int64)


def transitive_closure(succ: Sequence[Sequence[int]], order: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """``R[u, w]``: a path of length >= 1 leads from ``u`` to ``w`` (a DAG; ``order`` is a
    topological order of it, computed when not given)."""
    n = len(succ)
    if order is None:
        order = topological_order(succ)
    R = np.zeros((n, n), dtype=bool)
    for u in np.asarray(order)[::-1].tolist():
        for w in succ[u]:
            R[u, w] = True
            R[u] |= R[w]
    return R
