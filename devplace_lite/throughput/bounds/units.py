"""The instance every bound works on: the unit graph (`devplace_lite.units`) seen on a cluster.

The units are those of the library's one unit model, with the free leaves the cluster makes
free folded in: a unit that costs nothing here (``p_acc = 0``, ``p_cpu = 0`` when the cluster has
CPU cores, no memory when memory is capped, runnable on an accelerator) and touches exactly one
other unit joins it, which changes no optimum. ``chain=True`` keeps the order a chain split
must respect (forward cycles fused, stand-ins for backward-only classes ordered by their
mirrored backward edges); ``chain=False`` gives the unordered units of splits of any shape.

Communication is the unit graph's producer hypergraph, written with a *root* (its first unit)
and the other units: an accelerator holding the unit set ``S`` pays ``c(h)`` when ``h`` meets
both ``S`` and its complement.

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
from dataclasses import dataclass, field

import numpy as np

from ...devices import Cluster
from ...graph import Graph
from ...units import UnitGraph, free_nodes, unit_graph


@dataclass
class UnitModel:
    """`UnitGraph` of ``graph`` on ``cluster`` (see the module docstring).

    Attributes: ``units`` (the unit graph), ``unit`` (unit of each node), ``U``; per unit ``pa``
    (accelerator time), ``pc`` (CPU time, ``nan`` when a node of it has none), ``mem``,
    ``acc_ok`` (may sit on an accelerator: supported and within the memory cap), ``cpu_ok`` (the
    cluster has cores and every node has a CPU time); ``prec`` (P, 2) arcs between units (units
    are numbered sinks first, so every arc goes from a higher number to a lower one);
    hyperedges ``h_root`` (H,), ``h_cost`` (H,), and their other units in CSR form ``h_ptr``
    (H+1,), ``h_units``.
    """

    graph: Graph
    cluster: Cluster
    chain: bool = True
    units: UnitGraph = field(init=False, repr=False)

    def __post_init__(self) -> None:
        g, c = self.graph, self.cluster
        free = free_nodes(g, memory=math.isfinite(c.memory), cpu=c.l > 0)
        u = self.units = unit_graph(g, fold=free, chain=self.chain)
        # The MIPs take the units sinks first (unit x here is unit U-1-x of the unit graph):
        # HiGHS's branch and bound is sensitive to the column order, and this is the order the
        # bounds were measured with (benchmarks/bounds; chapter 05's two-stage GPT model is
        # proven in a tenth of a second this way and not within two seconds the other way).
        U = self.U = u.size
        flip = U - 1 - np.arange(U)
        self.unit = flip[u.unit]
        self.pa, self.mem = u.pa[::-1].copy(), u.mem[::-1].copy()
        self.pc = np.where(u.bad_cpu, np.nan, u.pc)[::-1].copy()
        self.acc_ok = (~u.bad_acc & (u.mem <= c.memory) & (c.k > 0))[::-1].copy()
        self.cpu_ok = (~u.bad_cpu & (c.l > 0))[::-1].copy()
        self.prec = flip[u.arcs] if len(u.arcs) else u.arcs
        ptr, members, self.h_cost = u.hyperedges
        members = flip[members]
        self.h_root = members[ptr[:-1]] if len(self.h_cost) else np.zeros(0, dtype=np.int64)
        keep = np.ones(len(members), dtype=bool)
        keep[ptr[:-1]] = False
        self.h_units = members[keep]
        self.h_ptr = ptr - np.arange(len(ptr))

    @property
    def H(self) -> int:
        return len(self.h_root)

    def members(self, h: int) -> np.ndarray:
        """The units of hyperedge ``h`` other than its root."""
        return self.h_units[self.h_ptr[h]:self.h_ptr[h + 1]]

    def acc_load(self, inside: np.ndarray) -> float:
        """Load of an accelerator holding the unit set given as a boolean mask."""
        return self.units.acc_load(np.asarray(inside)[::-1])

    def topological_order(self) -> np.ndarray:
        """The units in an order every arc of ``prec`` follows."""
        return np.arange(self.U - 1, -1, -1)
