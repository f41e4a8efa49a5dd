"""Ideals (down-sets) of the forward unit graph: the search space of the throughput DP.

Problem: a pipeline split is a *chain of ideals* ``∅ = I_0 ⊆ I_1 ⊆ ... ⊆ I_r = V``; stage
``s`` runs ``I_s \\ I_{s-1}``. An *ideal* is a set of units closed under predecessors. This
module builds the poset the DP works on and lists its ideals.

The poset is the unit graph of `devplace_lite.units` (the one unit model): colour classes,
stand-ins for backward-only classes, forward cycles fused, zero-time leaves folded; the DP's
exactness rests on those reductions, and that module states why each keeps the optimum.

Units are numbered in a topological order, so an ideal is a bit set over ``0..U-1``.

Complexity: enumeration is ``O(N * w)`` dictionary operations on ``U``-bit integers for ``N``
ideals and width ``w``; ``N`` can be exponential in ``w`` (at most ``(U/w + 1)^w``), hence the
``limit``. Sizes are checked before any work: every prefix of the unit numbering is an ideal,
so ``N >= U + 1``, and the stored bit sets take at least ``U^2 / 16`` bytes (`MASK_BYTES`).
`width` is Dilworth's theorem computed as a minimum flow on the unit graph itself (a chain may
pass through a unit more than once): ``O(U + A)`` memory, no transitive closure.

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

from dataclasses import dataclass

import numpy as np

from ..errors import LimitError
from ..graph import Graph
from ..methods import PARTITION
from ..units import UnitGraph, unit_graph

#: Bytes of ideal bit sets `enumerate_ideals` may hold; past it the graph is refused up front.
MASK_BYTES = 2**30


@dataclass(frozen=True)
class Ideals:
    """All ideals of a `UnitGraph`, in order of size (so every proper sub-ideal comes first).

    ``masks[i]`` is ideal ``i`` as a bit set over units (ideal 0 is empty, the last is all).
    ``mx_ptr``, ``mx_unit``, ``mx_child`` list, for ideal ``i``, its maximal units ``x``
    (ascending) and the index of ``i`` minus ``x``: a CSR table with one row per ideal.
    """

    units: UnitGraph
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


def _too_many(units: UnitGraph, limit: int) -> LimitError:
    return LimitError(f"graph {units.graph.name}: more than {limit:,} ideals ({units.size} units, "
                      f"width {width(units)}); {PARTITION['dp'].reach.advice()}")


def _check_size(poset: UnitGraph, limit: int) -> None:
    """Refuse, before any work, a unit graph whose ideals are certainly too many (the ``U + 1``
    prefixes of the numbering are ideals) or whose bit sets cannot fit `MASK_BYTES`."""
    U = poset.size
    if U + 1 > limit:
        raise _too_many(poset, limit)
    if U * U / 16 > MASK_BYTES:
        raise LimitError(f"graph {poset.graph.name}: {U:,} units; its ideals would take more than "
                         f"{U * U / 16 / 2**30:.0f} GiB (at most {MASK_BYTES / 2**30:.0f}); "
                         f"{PARTITION['dp'].reach.advice()}")


def _limit(limit: int | None) -> int:
    """``limit``, or by default the DP's reach (`devplace_lite.methods.PARTITION` ``dp``)."""
    return PARTITION["dp"].reach.limit if limit is None else limit


def enumerate_ideals(poset: UnitGraph, limit: int | None = None) -> Ideals:
    """Every ideal of the unit graph ``poset``, grown from the empty set one unit at a time, layer by layer.

    Raises `LimitError` up front when the ``U + 1`` prefix ideals pass ``limit`` or their bit
    sets pass `MASK_BYTES`, and as soon as more than ``limit`` ideals are found (memory grows
    about ``(U/8 + 150)`` bytes per ideal, so the limit also caps memory).
    """
    limit = _limit(limit)
    _check_size(poset, limit)
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


def _count(poset: UnitGraph, limit: int) -> int | None:
    """Count ideals keeping only one layer (ideals of one size) in memory."""
    if poset.size + 1 > limit:  # the prefixes of the numbering alone are too many
        return None
    if poset.size * poset.size / 16 > MASK_BYTES:  # no room for predecessor masks: test bit by bit
        pred = poset.pred

        def ready(y: int, mask: int) -> bool:
            return all(mask >> p & 1 for p in pred[y])
    else:
        pmask = poset.pred_mask

        def ready(y: int, mask: int) -> bool:
            return pmask[y] & ~mask == 0
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
                    if ready(y, k_mask):
                        new |= 1 << y
                nxt[k_mask] = new
                total += 1
                if total > limit:
                    return None
        layer = nxt
    return total


def _poset(graph: Graph | UnitGraph) -> UnitGraph:
    return graph if isinstance(graph, UnitGraph) else unit_graph(graph, fold=True)


def count_ideals(graph: Graph | UnitGraph, limit: int | None = None) -> int | None:
    """Number of ideals of the unit graph (of a graph: with zero-time leaves folded), or
    ``None`` when over ``limit``. This is the number of states of the exact DP
    (`devplace_lite.throughput.dp`).
    """
    return _count(_poset(graph), _limit(limit))


def width(graph: Graph | UnitGraph) -> int:
    """Size of the largest antichain of the unit graph.

    Dilworth's theorem: it equals the fewest chains covering the poset, that is the fewest paths
    of the unit graph covering every unit when a path may pass a unit twice: a minimum flow in
    which every unit carries at least one path. Starting from one path per unit, the flow that
    can be taken back is a maximum flow from sink to source in the residual network (unit ``u``
    split into ``u_in -> u_out``; Dinic's algorithm, scipy), and the width is ``U`` minus it.
    """
    from scipy.sparse import csr_matrix  # here: the DP itself never needs scipy
    from scipy.sparse.csgraph import maximum_flow

    poset = _poset(graph)
    U = poset.size
    if U == 0:
        return 0
    a = poset.arcs
    v_in, v_out = np.arange(U), U + np.arange(U)
    s, t = 2 * U, 2 * U + 1
    # residual arcs of the one-path-per-unit flow: t -> u_out and u_in -> s can each give back
    # that path (1); a path may run on through any arc and through any unit again (U: unbounded)
    rows = np.concatenate([np.full(U, t), v_in, a[:, 0] + U, v_in])
    cols = np.concatenate([v_out, np.full(U, s), a[:, 1], v_out])
    cap = np.concatenate([np.ones(2 * U), np.full(len(a) + U, U)]).astype(np.int32)
    residual = csr_matrix((cap, (rows, cols)), shape=(2 * U + 2, 2 * U + 2))
    return U - int(maximum_flow(residual, t, s, method="dinic").flow_value)
