"""Loads of every interval of a block order, one row at a time, in ``O(m log m)`` per row.

Lay the blocks out in an order (a topological order when the intervals are to be pipeline
stages). The load of the interval ``[a, b)`` placed on one accelerator is its work plus the
communication of every producer ``u`` that crosses its boundary:

* ``u`` inside sends when some consumer lies outside: ``min S(u) < a`` or ``max S(u) >= b``;
* ``u`` outside receives when some consumer lies inside: the first consumer position at or
  after ``a``, ``next(u, a)``, is below ``b`` (and, for ``u`` after the interval, ``b <= P(u)``),

where ``P(u)`` is the position of ``u``'s block and ``S(u)`` the positions of its consumers'
blocks (consumers may sit before ``u``: backward edges of a training graph). For a fixed ``a``
each condition switches on or off at one ``b``, so a difference array and one cumulative sum
give the whole row; ``next(u, a)`` is one `numpy.searchsorted` over the sorted (producer,
position) pairs. Columns (``a`` varies, ``b`` fixed) are rows of the reversed order.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.cost import device_loads
>>> from devplace_lite.throughput.heuristics.blocks import block_structure
>>> g, c = generate("cells", 40, seed=0), Cluster(accelerators=3)
>>> b = block_structure(g)
>>> il = IntervalLoads(g, b, b.order)
>>> part = np.where(b.position < 5, 0, np.where(b.position < 17, 1, 2))[b.of_node]
>>> bool(np.isclose(il.row(5)[17], sum(device_loads(g, c, part))[1]))
True
"""

from __future__ import annotations

import numpy as np

from ...graph import Graph
from .blocks import Blocks


class IntervalLoads:
    """Accelerator loads of the intervals of ``order`` (a sequence of distinct block ids).

    Blocks left out of ``order`` count as outside every interval. ``work`` overrides the
    per-block work (default: accelerator time, ``inf`` where a node is unsupported);
    ``comm=False`` drops communication (intervals meant for CPU cores).
    """

    def __init__(self, graph: Graph, blocks: Blocks, order: np.ndarray, work: np.ndarray | None = None,
                 comm: bool = True) -> None:
        order = np.asarray(order, dtype=np.int64)
        G = len(order)
        self.G = G
        pos = np.full(blocks.count, G, dtype=np.int64)  # blocks left out sit past the end
        pos[order] = np.arange(G)
        if work is None:
            work = blocks.sums(np.where(graph.supported, graph.p_acc, np.nan))
        w = np.asarray(work, dtype=float)[order]
        self.prefix = np.concatenate([[0.0], np.cumsum(w)])
        self.pos = pos
        # (producer, consumer position) pairs, consumer blocks other than the producer's own
        bp = pos[blocks.of_node]
        ps, pt = bp[graph.src], bp[graph.dst]
        keep = (ps != pt) & (graph.comm[graph.src] > 0) & comm
        pairs = np.unique(np.stack([graph.src[keep], pt[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), np.int64)
        prod, first = np.unique(pairs[:, 0], return_index=True)
        j = np.searchsorted(prod, pairs[:, 0])
        self.P = bp[prod]
        self.c = graph.comm[prod]
        self.min_s = pairs[first, 1] if len(pairs) else np.zeros(0, np.int64)
        last = np.concatenate([first[1:], [len(pairs)]]) - 1 if len(pairs) else np.zeros(0, np.int64)
        self.max_s = pairs[last, 1] if len(pairs) else np.zeros(0, np.int64)
        self.stride = G + 2
        self.keys = j * self.stride + pairs[:, 1]
        self.jj = np.arange(len(prod)) * self.stride
        self.cons = pairs[:, 1]

    def _bump(self, diff: np.ndarray, at: np.ndarray, weights: np.ndarray, sign: float) -> None:
        diff += sign * np.bincount(at, weights=weights, minlength=len(diff))[: len(diff)]

    def row(self, a: int) -> np.ndarray:
        """``L[b]`` = load of the interval ``[a, b)`` for ``b = 0..G`` (``nan`` for ``b <= a``,
        except ``L[a] = 0``, the empty interval)."""
        G = self.G
        diff = np.zeros(G + 2)
        P, c = self.P, self.c
        after_a = P >= a
        inside_from = after_a & (P < G)  # blocks left out of the order never send
        # sends: from P+1 on; those whose consumers all lie at or after a stop once b passes
        # the last of them (never, if it lies before P: then u sends for no b)
        self._bump(diff, P[inside_from] + 1, c[inside_from], +1)
        m2 = inside_from & (self.min_s >= a)
        self._bump(diff, np.maximum(self.max_s[m2], P[m2]) + 1, c[m2], -1)
        # receives: from the first consumer at or after a, until b passes the producer
        idx = np.searchsorted(self.keys, self.jj + a)
        ok = idx < len(self.keys)
        ok[ok] = (self.keys[idx[ok]] // self.stride) == (self.jj[ok] // self.stride)
        nxt = np.where(ok, self.cons[np.minimum(idx, len(self.cons) - 1)] if len(self.cons) else 0, 0)
        r1 = ok & (P < a)
        self._bump(diff, np.minimum(nxt[r1] + 1, G + 1), c[r1], +1)
        r2 = ok & after_a & (nxt < P)
        self._bump(diff, np.minimum(nxt[r2] + 1, G + 1), c[r2], +1)
        self._bump(diff, np.minimum(P[r2] + 1, G + 1), c[r2], -1)
        out = np.cumsum(diff)[: G + 1] + self.prefix - self.prefix[min(a, G)]
        out[:a] = np.nan
        out[a] = 0.0
        return out


class BothWays:
    """Rows and columns of interval loads: ``row(a)[b]`` and ``column(b)[a]`` = load of ``[a, b)``."""

    def __init__(self, graph: Graph, blocks: Blocks, order: np.ndarray, work: np.ndarray | None = None,
                 comm: bool = True) -> None:
        self.fwd = IntervalLoads(graph, blocks, order, work, comm)
        self.rev = IntervalLoads(graph, blocks, np.asarray(order)[::-1], work, comm)
        self.G = self.fwd.G

    def row(self, a: int) -> np.ndarray:
        return self.fwd.row(a)

    def column(self, b: int) -> np.ndarray:
        r = self.rev.row(self.G - b)  # [a, b) forwards is [G-b, G-a) backwards
        return r[self.G - np.arange(self.G + 1)]
