"""Ideals (down-sets) of the forward unit graph: the search space of the throughput DP.

Problem: a pipeline split is a *chain of ideals* ``∅ = I_0 ⊆ I_1 ⊆ ... ⊆ I_r = V``; stage
``s`` runs ``I_s \\ I_{s-1}``. An *ideal* is a set of units closed under predecessors. This
module builds the poset the DP works on and lists its ideals.

The poset (`unit_poset`) is the forward graph after three reductions that keep every chain
split and never make the optimum worse (Tarnawski et al., 2020):

1. *Colocation.* Forward nodes of one colour class form one unit; backward nodes join the unit
   of their class (a forward unit carries its backward work).
2. *Cycles.* Contracting classes can create directed cycles; the units of a strongly
   connected component must share a stage in any chain split, so each SCC is fused.
3. *Free leaves* (``merge_free=True``). A unit whose nodes take no time (zero accelerator and
   CPU times, allowed everywhere) and that touches exactly one other unit, by any edge forward
   or backward, joins that unit: moving it there never raises a device load and keeps the
   chain. It may raise that device's memory, so these nodes are marked ``folded``: the DP
   certifies that no memory check ever turned on them, and falls back to folding only
   memory-free units when one did (see `devplace_lite.dp`).

Backward nodes with no forward partner (no colour class, or a class of backward nodes only;
the authors' BERT training graphs have some) belong to no unit by (1). They join the unit that
`devplace_lite.units.host_units` names (the neighbour they exchange the most data with), the
rule every method that moves forward units uses. Results over these graphs are exact *for this
attachment*; the exhaustive solver, which places such nodes freely, can be lower.

Units are numbered in a topological order, so an ideal is a bit set over ``0..U-1``.

Complexity: enumeration is ``O(N * w)`` dictionary operations on ``U``-bit integers for ``N``
ideals and width ``w``; ``N`` can be exponential in ``w`` (at most ``(U/w + 1)^w``), hence the
``limit``. `width` is Dilworth's theorem: ``U`` minus a maximum matching in the comparability
bipartite graph, ``O(U^2)`` memory for the transitive closure.

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> g = Graph([Node(x, p_acc=1) for x in "abcd"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
>>> count_ideals(g), width(g)
(6, 2)

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from .graph import Graph, GraphError
from .units import fuse_forward_cycles, host_units

DEFAULT_LIMIT = 1_000_000


@dataclass(frozen=True)
class UnitPoset:
    """The reduced forward unit DAG of a graph.

    ``unit[v]`` is the unit of node ``v`` (backward nodes included); units ``0..U-1`` are in
    topological order of the forward edges between them; ``pred``/``succ`` are its arcs;
    ``folded[v]`` says node ``v`` came in by a free-leaf merge (reduction 3).
    """

    graph: Graph
    unit: np.ndarray
    pred: tuple[tuple[int, ...], ...]
    succ: tuple[tuple[int, ...], ...]
    folded: np.ndarray

    @property
    def size(self) -> int:
        return len(self.pred)

    @cached_property
    def members(self) -> list[np.ndarray]:
        """Node indices of each unit."""
        order = np.argsort(self.unit, kind="stable")
        cuts = np.searchsorted(self.unit[order], np.arange(self.size + 1))
        return [order[cuts[u]:cuts[u + 1]] for u in range(self.size)]

    @cached_property
    def pred_mask(self) -> list[int]:
        """Predecessor units of each unit as a bit set (Python int)."""
        return [sum(1 << p for p in ps) for ps in self.pred]


class _DSU:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, keep: int, gone: int) -> None:
        self.parent[self.find(gone)] = self.find(keep)


def _initial_units(graph: Graph) -> np.ndarray:
    """Units holding a forward node, numbered in order of their first forward node; the other
    (backward-only) classes take the label of the unit `host_units` attaches them to."""
    fwd = np.flatnonzero(~graph.backward)
    if not len(fwd):
        raise GraphError(f"graph {graph.name}: has no forward node, so no pipeline split exists")
    units = graph.units
    first = np.full(int(units.max()) + 1, graph.n, dtype=np.int64)
    np.minimum.at(first, units[fwd], fwd)
    rank = np.full(len(first), -1, dtype=np.int64)
    held = np.flatnonzero(first < graph.n)
    rank[held[np.argsort(first[held])]] = np.arange(len(held))
    return rank[host_units(graph)]


def _merge_free(graph: Graph, label: np.ndarray, memory: bool) -> tuple[np.ndarray, np.ndarray]:
    """Fold zero-time units with a single neighbouring unit into that neighbour, to a fixpoint;
    with ``memory=False`` only units that also hold no memory. Returns labels and folded nodes."""
    n_units = int(label.max()) + 1
    free = np.ones(n_units, dtype=bool)
    cost_free = (graph.p_acc == 0) & (graph.p_cpu == 0) & graph.supported
    if not memory:
        cost_free &= graph.memory == 0
    np.logical_and.at(free, label, cost_free)
    nbrs: list[set[int]] = [set() for _ in range(n_units)]
    for a, b in zip(label[graph.src].tolist(), label[graph.dst].tolist()):
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    dsu = _DSU(n_units)
    queue = [u for u in range(n_units) if free[u] and len(nbrs[u]) == 1]
    while queue:
        u = queue.pop()
        if not free[u] or len(nbrs[u]) != 1 or dsu.find(u) != u:
            continue
        (w,) = nbrs[u]
        dsu.union(w, u)
        nbrs[w].discard(u)
        nbrs[u] = set()
        free[w] = free[w] and free[u]
        free[u] = False
        if free[w] and len(nbrs[w]) == 1:
            queue.append(w)
    root = np.array([dsu.find(u) for u in range(n_units)], dtype=np.int64)
    return root[label], (root != np.arange(n_units))[label]


def unit_poset(graph: Graph, merge_free: bool | str = True) -> UnitPoset:
    """The reduced forward unit DAG of ``graph`` (see the module docstring for the rules).

    ``merge_free``: ``True`` folds zero-time leaves, ``"memoryless"`` only those that also
    hold no memory (always exact), ``False`` none.
    """
    label = fuse_forward_cycles(graph, _initial_units(graph))
    folded = np.zeros(graph.n, dtype=bool)
    if merge_free:
        label, folded = _merge_free(graph, label, memory=merge_free is True)
    # renumber units 0..U-1 in a topological order of the forward arcs between them
    _, label = np.unique(label, return_inverse=True)
    n_units = int(label.max()) + 1
    fwd = ~graph.backward
    ok = fwd[graph.src] & fwd[graph.dst]
    arcs = {(a, b) for a, b in zip(label[graph.src[ok]].tolist(), label[graph.dst[ok]].tolist()) if a != b}
    indeg = [0] * n_units
    out: list[list[int]] = [[] for _ in range(n_units)]
    for a, b in sorted(arcs):
        out[a].append(b)
        indeg[b] += 1
    # Kahn's algorithm, smallest first: deterministic, and follows node order where it can
    heap = [u for u in range(n_units) if indeg[u] == 0]
    heapq.heapify(heap)
    topo: list[int] = []
    while heap:
        u = heapq.heappop(heap)
        topo.append(u)
        for w in out[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    rank = np.empty(n_units, dtype=np.int64)
    rank[topo] = np.arange(n_units)
    unit = rank[label]
    pred: list[list[int]] = [[] for _ in range(n_units)]
    succ: list[list[int]] = [[] for _ in range(n_units)]
    for a, b in sorted((int(rank[a]), int(rank[b])) for a, b in arcs):
        succ[a].append(b)
        pred[b].append(a)
    return UnitPoset(graph, unit, tuple(map(tuple, pred)), tuple(map(tuple, succ)), folded)


@dataclass(frozen=True)
class Ideals:
    """All ideals of a `UnitPoset`, in order of size (so every proper sub-ideal comes first).

    ``masks[i]`` is ideal ``i`` as a bit set over units (ideal 0 is empty, the last is all).
    ``mx_ptr``, ``mx_unit``, ``mx_child`` list, for ideal ``i``, its maximal units ``x``
    (ascending) and the index of ``i`` minus ``x``: a CSR table with one row per ideal.
    """

    poset: UnitPoset
    masks: list[int]
    mx_ptr: np.ndarray
    mx_unit: np.ndarray
    mx_child: np.ndarray

    def __len__(self) -> int:
        return len(self.masks)

    def units_of(self, i: int) -> list[int]:
        m, out, u = self.masks[i], [], 0
        while m:
            if m & 1:
                out.append(u)
            m >>= 1
            u += 1
        return out


def _too_many(poset: UnitPoset, limit: int) -> GraphError:
    return GraphError(f"graph {poset.graph.name}: more than {limit:,} ideals ({poset.size} units, "
                      f"width {width(poset)}); raise the limit or use a method that needs no ideals")


def enumerate_ideals(poset: UnitPoset, limit: int = DEFAULT_LIMIT) -> Ideals:
    """Every ideal of ``poset``, grown from the empty set one unit at a time, layer by layer.

    Raises `GraphError` as soon as more than ``limit`` ideals are found (memory grows about
    ``(U/8 + 150)`` bytes per ideal, so the limit also caps memory).
    """
    pmask = poset.pred_mask
    succ = poset.succ
    masks = [0]
    addable = [sum(1 << u for u in range(poset.size) if not poset.pred[u])]
    rows_k: list[int] = []
    rows_x: list[int] = []
    rows_c: list[int] = []
    layer = [0]
    while layer:
        index: dict[int, int] = {}
        nxt: list[int] = []
        for i in layer:
            mask, av = masks[i], addable[i]
            while av:
                bit = av & -av
                av ^= bit
                x = bit.bit_length() - 1
                k_mask = mask | bit
                j = index.get(k_mask)
                if j is None:
                    j = len(masks)
                    if j >= limit:
                        raise _too_many(poset, limit)
                    index[k_mask] = j
                    masks.append(k_mask)
                    new = addable[i] & ~bit
                    for y in succ[x]:
                        if pmask[y] & ~k_mask == 0:
                            new |= 1 << y
                    addable.append(new)
                    nxt.append(j)
                rows_k.append(j)
                rows_x.append(x)
                rows_c.append(i)
        layer = nxt
    rk = np.asarray(rows_k, dtype=np.int64)
    rx = np.asarray(rows_x, dtype=np.int32)
    rc = np.asarray(rows_c, dtype=np.int32)
    order = np.lexsort((rx, rk))
    ptr = np.zeros(len(masks) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rk, minlength=len(masks)), out=ptr[1:])
    return Ideals(poset, masks, ptr, rx[order], rc[order])


def _count(poset: UnitPoset, limit: int) -> int | None:
    """Count ideals keeping only one layer (ideals of one size) in memory."""
    pmask = poset.pred_mask
    succ = poset.succ
    layer = {0: sum(1 << u for u in range(poset.size) if not poset.pred[u])}
    total = 1
    while layer:
        nxt: dict[int, int] = {}
        for mask, av in layer.items():
            rest = av
            while rest:
                bit = rest & -rest
                rest ^= bit
                k_mask = mask | bit
                if k_mask in nxt:
                    continue
                new = av & ~bit
                for y in succ[bit.bit_length() - 1]:
                    if pmask[y] & ~k_mask == 0:
                        new |= 1 << y
                nxt[k_mask] = new
                total += 1
                if total > limit:
                    return None
        layer = nxt
    return total


def count_ideals(graph: Graph | UnitPoset, limit: int = DEFAULT_LIMIT) -> int | None:
    """Number of ideals of the reduced forward unit graph, or ``None`` when over ``limit``.

    This is the number of states of the exact DP (`devplace_lite.dp`).
    """
    poset = graph if isinstance(graph, UnitPoset) else unit_poset(graph)
    return _count(poset, limit)


def transitive_closure(poset: UnitPoset) -> np.ndarray:
    """``R[u, w]`` = there is a path of length >= 1 from unit ``u`` to unit ``w``."""
    n_units = poset.size
    R = np.zeros((n_units, n_units), dtype=bool)
    for u in range(n_units - 1, -1, -1):  # units are numbered topologically
        for w in poset.succ[u]:
            R[u, w] = True
            R[u] |= R[w]
    return R


def width(graph: Graph | UnitPoset) -> int:
    """Size of the largest antichain of the reduced forward unit graph (Dilworth's theorem:
    units minus a maximum matching between "u before w" pairs)."""
    poset = graph if isinstance(graph, UnitPoset) else unit_poset(graph)
    if poset.size == 0:
        return 0
    # rows = later units: scipy's Hopcroft-Karp is far faster this way round on long DAGs
    R = csr_matrix(transitive_closure(poset).T)
    matched = maximum_bipartite_matching(R, perm_type="column")
    return poset.size - int((matched >= 0).sum())
