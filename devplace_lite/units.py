"""Where backward nodes without a forward partner go: the one attachment rule of the library.

A split moves colocation classes (`Graph.units`) as one, and a class that holds a forward node
goes where the split puts that node. A *backward-only* class (backward nodes only, or one
classless backward node; the authors' BERT operator training graphs have some) is placed by no
forward node, so the methods that move forward units (the baselines, the block heuristics,
the DP over ideals) attach it to one with `host_units`:

* each backward-only class joins the unit of the neighbour it exchanges the most data with,
  by any edge of any of its nodes (an edge's weight is its producer's ``comm``; ties to the
  lowest neighbour index), the class as one group;
* classes are resolved in rounds, in order of their lowest node index, each seeing the
  attachments made before it, so chains of such classes follow their first anchored neighbour;
* a class with no anchored neighbour left joins the unit of the first forward node in
  topological order.

Methods that search over every placement (`devplace_lite.exhaustive`, the MIPs, the bounds of
`devplace_lite.bounds`) keep such classes free instead: the attachment may cost a little.

Complexity: ``O(r (n + m))`` for ``r`` rounds (at most the number of backward-only classes).

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> g = Graph([Node("a", comm=0.1), Node("b", comm=5.0), Node("x", backward=True)],
...           [("a", "b"), ("a", "x"), ("b", "x")])
>>> host_units(g).tolist()  # x is attached to b, which sends it 5.0
[0, 1, 1]
"""

from __future__ import annotations

import heapq

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from .graph import Graph


def host_units(graph: Graph) -> np.ndarray:
    """For each node, the unit (an index of ``graph.units``) whose device it shares.

    A node of a class holding a forward node gets its own unit; a node of a backward-only class
    the unit the rule of the module docstring names. A graph without forward nodes keeps
    ``graph.units``.
    """
    units = graph.units
    fwd = ~graph.backward
    if not fwd.any():
        return units.copy()
    anchored = np.zeros(int(units.max()) + 1, dtype=bool)
    anchored[units[fwd]] = True
    host = np.where(anchored[units], units, -1)
    groups: dict[int, list[int]] = {}
    for b in np.flatnonzero(host < 0).tolist():
        groups.setdefault(int(units[b]), []).append(b)
    left = sorted(groups.values())
    while left:
        waiting = []
        for group in left:
            best = None  # ((weight, -neighbour index), neighbour)
            for b in group:
                for p in graph.pred[b]:
                    if host[p] >= 0:
                        cand = ((graph.comm[p], -p), p)
                        best = cand if best is None else max(best, cand)
                for q in graph.succ[b]:
                    if host[q] >= 0:
                        cand = ((graph.comm[b], -q), q)
                        best = cand if best is None else max(best, cand)
            if best is None:
                waiting.append(group)
            else:
                host[group] = host[best[1]]
        if len(waiting) == len(left):  # no anchored neighbour anywhere: join the first forward unit
            order = graph.topological_order()
            first = int(units[order[fwd[order]][0]])
            for group in waiting:
                host[group] = first
            waiting = []
        left = waiting
    return host


def fuse_forward_cycles(graph: Graph, label: np.ndarray) -> np.ndarray:
    """Merge the units (``label`` per node) of each strongly connected component of the forward
    unit graph: a class whose forward nodes sit before and after another unit (``a1 -> b -> a2``
    with ``a1, a2`` in one class) can share no pipeline order with it, so no chain split
    separates them. Components are numbered in order of their smallest label."""
    fwd = ~graph.backward
    ok = fwd[graph.src] & fwd[graph.dst]
    s, t = label[graph.src[ok]], label[graph.dst[ok]]
    n_units = int(label.max()) + 1 if len(label) else 0
    adj = csr_matrix((np.ones(len(s)), (s, t)), shape=(n_units, n_units))
    _, comp = connected_components(adj, directed=True, connection="strong")
    _, first = np.unique(comp, return_index=True)
    comp = np.argsort(np.argsort(first))[comp]
    return comp[label]


def pipeline_units(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The units a chain split moves, in an order every forward edge follows.

    Returns ``(order, follow)``: ``follow[v]`` is the unit node ``v`` goes with (`host_units`,
    then `fuse_forward_cycles`), and ``order`` lists the units holding a forward node in a
    topological order of the forward arcs between units, ties broken by each unit's first
    forward node in the graph's topological order. Cutting ``order`` into consecutive blocks
    therefore always gives a chain split.

    Complexity: ``O((n + m) log n)``.
    """
    follow = fuse_forward_cycles(graph, host_units(graph))
    fwd = ~graph.backward
    if not fwd.any():
        return np.zeros(0, dtype=np.int64), follow
    U = int(follow.max()) + 1
    pos = np.empty(graph.n, dtype=np.int64)
    pos[graph.topological_order()] = np.arange(graph.n)
    first = np.full(U, graph.n, dtype=np.int64)
    np.minimum.at(first, follow[fwd], pos[fwd])
    ok = fwd[graph.src] & fwd[graph.dst]
    s, t = follow[graph.src[ok]], follow[graph.dst[ok]]
    arcs = np.unique(np.stack([s, t], axis=1)[s != t], axis=0) if len(s) else np.zeros((0, 2), dtype=np.int64)
    succ: list[list[int]] = [[] for _ in range(U)]
    indeg = np.zeros(U, dtype=np.int64)
    for a, b in arcs.tolist():
        succ[a].append(b)
        indeg[b] += 1
    heap = [(int(first[x]), x) for x in range(U) if first[x] < graph.n and indeg[x] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, x = heapq.heappop(heap)
        order.append(x)
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(heap, (int(first[y]), y))
    return np.array(order, dtype=np.int64), follow
