"""Blocks: the pieces a heuristic moves, and the order constraints between them.

A heuristic may not split a colocation class (a forward op and its gradient share a device),
and a chain-of-ideals split must order the parts so that every forward edge goes forward.
Both facts are captured once here:

* a *unit* is a colocation class (or a lone node); a class of backward nodes without a forward
  partner follows, as one, the unit `devplace_lite.units.host_units` names;
* units joined in a cycle of forward edges (classes can create one: ``a1 -> b -> a2`` with
  ``a1, a2`` in one class) can never be separated by a chain split, so each strongly
  connected component of the unit graph becomes one *block*;
* the block graph (an arc where a forward edge joins two blocks) is a DAG, and a split is a
  chain of ideals exactly when its stage index never decreases along an arc.

Complexity: ``O(n + m log m)`` (one SCC pass with scipy and a heap-ordered Kahn sweep).

Example
-------
>>> from devplace_lite.generators import generate
>>> b = block_structure(generate("layered", 20, seed=1, training=True))
>>> b.count, int(b.sizes.sum())
(20, 40)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..cost import forward_mask
from ..devices import Cluster
from ..graph import Graph
from ..units import host_units


@dataclass
class Blocks:
    """Nodes grouped into blocks, with the block DAG and a topological order of it.

    ``of_node[v]`` is the block of node ``v``; ``order`` lists the blocks in a topological
    order of the block DAG that follows the graph's own order; ``succ``/``pred`` are the
    block DAG's adjacency (sorted unique arrays); ``nodes[b]`` the node indices of block ``b``.
    """

    of_node: np.ndarray
    order: np.ndarray
    succ: list[np.ndarray]
    pred: list[np.ndarray]
    nodes: list[np.ndarray]

    @property
    def count(self) -> int:
        return len(self.nodes)

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.array([len(x) for x in self.nodes], dtype=np.int64)

    @cached_property
    def position(self) -> np.ndarray:
        """Position of each block in ``order``."""
        pos = np.empty(self.count, dtype=np.int64)
        pos[self.order] = np.arange(self.count)
        return pos

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-block sums of a per-node array (``nan`` entries make the sum ``inf``)."""
        v = np.where(np.isnan(values), np.inf, values)
        return np.bincount(self.of_node, weights=v, minlength=self.count)

    def chain_ok(self, stage: np.ndarray) -> bool:
        """True when the stage index of every block never decreases along a block arc."""
        return all(bool(np.all(stage[s] >= stage[b])) for b, s in enumerate(self.succ) if len(s))


def block_structure(graph: Graph) -> Blocks:
    """Group the nodes of ``graph`` into blocks (see the module docstring)."""
    follow = host_units(graph)
    keep = forward_mask(graph)
    U = int(graph.units.max()) + 1 if graph.n else 0
    ok = keep[graph.src] & keep[graph.dst]
    us, ut = follow[graph.src[ok]], follow[graph.dst[ok]]
    cross = us != ut
    adj = coo_matrix((np.ones(int(cross.sum())), (us[cross], ut[cross])), shape=(U, U)).tocsr()
    _, comp = connected_components(adj, directed=True, connection="strong")
    used = np.unique(comp[follow])
    relabel = np.full(comp.max() + 1 if U else 0, -1, dtype=np.int64)
    relabel[used] = np.arange(len(used))
    of_node = relabel[comp[follow]]
    B = len(used)
    bs, bt = of_node[graph.src[ok]], of_node[graph.dst[ok]]
    arcs = np.unique(np.stack([bs, bt], axis=1)[bs != bt], axis=0) if len(bs) else np.zeros((0, 2), dtype=np.int64)
    succ = _csr_lists(arcs[:, 0], arcs[:, 1], B)
    pred = _csr_lists(arcs[:, 1], arcs[:, 0], B)
    # Kahn's sweep, breaking ties by the earliest node of each block in the graph's own order
    pos = np.empty(graph.n, dtype=np.int64)
    pos[graph.topological_order()] = np.arange(graph.n)
    first = np.full(B, graph.n, dtype=np.int64)
    np.minimum.at(first, of_node, pos)
    indeg = np.array([len(p) for p in pred], dtype=np.int64)
    heap = [(int(first[b]), b) for b in range(B) if indeg[b] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, b = heapq.heappop(heap)
        order.append(b)
        for s in succ[b].tolist():
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (int(first[s]), s))
    members = np.argsort(of_node, kind="stable")
    cuts = np.cumsum(np.bincount(of_node, minlength=B))[:-1]
    return Blocks(of_node=of_node, order=np.array(order, dtype=np.int64), succ=succ, pred=pred,
                  nodes=np.split(members, cuts))


def _csr_lists(src: np.ndarray, dst: np.ndarray, count: int) -> list[np.ndarray]:
    order = np.lexsort((dst, src))
    s, d = src[order], dst[order]
    cuts = np.searchsorted(s, np.arange(1, count))
    return np.split(d, cuts)


def pinned_device(graph: Graph, cluster: Cluster, blocks: Blocks) -> np.ndarray:
    """``-1`` for a block free to go anywhere, else the device it must use: ``cpu0`` when some
    node of it cannot run on an accelerator (a cluster without CPU cores keeps it on ``acc0``,
    where the evaluator reports the violation)."""
    out = np.full(blocks.count, -1, dtype=np.int64)
    if cluster.k == 0:  # every device is a CPU core: nothing to pin
        return out
    unsupported = np.bincount(blocks.of_node, weights=(~graph.supported).astype(float), minlength=blocks.count) > 0
    out[unsupported] = cluster.k if cluster.l else 0
    return out
