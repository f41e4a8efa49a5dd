"""The instance every bound works on: units, their costs, precedence arcs and hyperedges.

A *unit* is a set of nodes that share a device in every placement the bounds consider:

1. a colocation (colour) class, or a node without one (a hard rule of the model); a class of
   backward nodes only stays a unit of its own, bound by no precedence arc, rather than joining
   the unit `devplace_lite.units.host_units` names, because a bound must hold for the optimum
   over every placement, where such a class may go anywhere;
2. for chain splits only (``chain=True``), the units of one strongly connected component of
   the forward unit graph: a chain split orders its parts so that every forward edge goes
   forward, so a forward cycle of units cannot cross two parts;
3. a *free leaf* -- a unit that costs nothing (``p_acc = 0``, ``p_cpu = 0`` when the cluster has
   CPU cores, no memory when memory is capped, runnable on an accelerator) and touches exactly
   one other unit by any edge -- joins that unit. Moving it next to its only neighbour never
   raises a device load nor breaks a chain, so the optimum (of either kind) is unchanged.

Communication becomes hyperedges: producer ``u`` with successors ``succ(u)`` gives the unit set
``H(u) = {unit(u)} ∪ {unit(w) : w in succ(u)}``; an accelerator holding the unit set ``S`` pays
``c(u)`` exactly when ``H(u)`` meets both ``S`` and its complement (this is the model's "once
per producer per device", whether the device sends or receives). Producers with equal
``(unit, H)`` are merged by adding their costs.

Complexity ``O(n + m log m)``.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> m = UnitModel(generate("layered", 8, seed=0, training=True), Cluster(accelerators=2))
>>> m.U  # a forward node and its gradient share a unit
8
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from ..devices import Cluster
from ..graph import Graph


def _relabel(label: np.ndarray) -> np.ndarray:
    return np.unique(label, return_inverse=True)[1].astype(np.int64)


def _fuse_forward_cycles(graph: Graph, label: np.ndarray) -> np.ndarray:
    fwd = ~graph.backward
    ok = fwd[graph.src] & fwd[graph.dst]
    n_units = int(label.max()) + 1
    adj = csr_matrix((np.ones(int(ok.sum())), (label[graph.src[ok]], label[graph.dst[ok]])),
                     shape=(n_units, n_units))
    return _relabel(connected_components(adj, directed=True, connection="strong")[1][label])


def _merge_free_leaves(graph: Graph, cluster: Cluster, label: np.ndarray) -> np.ndarray:
    n_units = int(label.max()) + 1
    node_free = (graph.p_acc == 0) & graph.supported
    if cluster.l:
        node_free &= graph.p_cpu == 0
    if math.isfinite(cluster.memory):
        node_free &= graph.memory == 0
    free = np.ones(n_units, dtype=bool)
    np.logical_and.at(free, label, node_free)
    nbrs: list[set[int]] = [set() for _ in range(n_units)]
    for a, b in zip(label[graph.src].tolist(), label[graph.dst].tolist()):
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    parent = list(range(n_units))
    queue = [u for u in range(n_units) if free[u] and len(nbrs[u]) == 1]
    while queue:
        u = queue.pop()
        if parent[u] != u or not free[u] or len(nbrs[u]) != 1:
            continue
        (w,) = nbrs[u]
        parent[u] = w
        nbrs[w].discard(u)
        nbrs[u] = set()
        if free[w] and len(nbrs[w]) == 1:
            queue.append(w)
    root = np.arange(n_units)
    for u in range(n_units):  # follow merges to the surviving unit
        r = u
        while parent[r] != r:
            r = parent[r]
        root[u] = r
    return _relabel(root[label])


@dataclass
class UnitModel:
    """Unit-level data of ``graph`` on ``cluster`` (see the module docstring).

    Attributes: ``unit`` (unit of each node), ``U``; per unit ``pa`` (accelerator time), ``pc``
    (CPU time, ``nan`` when a node of it has none), ``mem``, ``acc_ok`` (may sit on an
    accelerator: supported and within the memory cap), ``cpu_ok`` (the cluster has cores and
    every node has a CPU time), ``forward`` (holds a forward node); ``prec`` (P, 2) forward arcs
    between units; hyperedges ``h_root`` (H,), ``h_cost`` (H,), and their other units in CSR form
    ``h_ptr`` (H+1,), ``h_units``.
    """

    graph: Graph
    cluster: Cluster
    chain: bool = True

    def __post_init__(self) -> None:
        g, c = self.graph, self.cluster
        label = _relabel(g.units)
        if self.chain:
            label = _fuse_forward_cycles(g, label)
        label = _merge_free_leaves(g, c, label)
        self.unit = label
        U = self.U = int(label.max()) + 1
        self.pa = np.bincount(label, weights=g.p_acc, minlength=U)
        self.pc = np.bincount(label, weights=g.p_cpu, minlength=U)  # nan propagates
        self.mem = np.bincount(label, weights=g.memory, minlength=U)
        unsupported = np.zeros(U, dtype=bool)
        np.logical_or.at(unsupported, label, ~g.supported)
        self.acc_ok = ~unsupported & (self.mem <= c.memory) & (c.k > 0)
        self.cpu_ok = np.isfinite(self.pc) & (c.l > 0)
        self.forward = np.zeros(U, dtype=bool)
        np.logical_or.at(self.forward, label, ~g.backward)
        fwd = ~g.backward
        ok = fwd[g.src] & fwd[g.dst]
        arcs = np.stack([label[g.src[ok]], label[g.dst[ok]]], axis=1)
        arcs = arcs[arcs[:, 0] != arcs[:, 1]]
        self.prec = np.unique(arcs, axis=0) if len(arcs) else np.zeros((0, 2), dtype=np.int64)
        merged: dict[tuple[int, tuple[int, ...]], float] = {}
        for u in range(g.n):
            if g.comm[u] <= 0:
                continue
            r = int(label[u])
            others = tuple(sorted({int(label[w]) for w in g.succ[u]} - {r}))
            if others:
                merged[(r, others)] = merged.get((r, others), 0.0) + float(g.comm[u])
        keys = sorted(merged)
        self.h_root = np.array([r for r, _ in keys], dtype=np.int64)
        self.h_cost = np.array([merged[key] for key in keys], dtype=float)
        self.h_ptr = np.zeros(len(keys) + 1, dtype=np.int64)
        self.h_ptr[1:] = np.cumsum([len(o) for _, o in keys])
        self.h_units = np.array([x for _, o in keys for x in o], dtype=np.int64)

    @property
    def H(self) -> int:
        return len(self.h_root)

    def members(self, h: int) -> np.ndarray:
        """The units of hyperedge ``h`` other than its root."""
        return self.h_units[self.h_ptr[h]:self.h_ptr[h + 1]]

    def acc_load(self, units: np.ndarray) -> float:
        """Load of an accelerator holding the unit set given as a boolean mask."""
        load = float(self.pa[units].sum())
        for h in range(self.H):
            inside = units[self.h_root[h]] + units[self.members(h)].sum()
            if 0 < inside < 1 + len(self.members(h)):
                load += self.h_cost[h]
        return load
