"""The instance every bound works on: the per-cluster unit view (`devplace_lite.units.UnitCosts`)
numbered sinks first, in the arrays the bounds' MIPs are built from.

The units are those of the library's one unit model, with the free leaves the cluster makes
free folded in (`devplace_lite.units.cluster_units`): a unit that costs nothing here
(``p_acc = 0``, ``p_cpu = 0`` when the cluster has CPU cores, no memory when memory is capped,
runnable on an accelerator) and touches exactly one other unit joins it, which changes no
optimum. Every cost and every "may run there" comes from that view; this module only renumbers. ``chain=True`` keeps the order a chain split
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

from dataclasses import dataclass, field

import numpy as np

from ...devices import Cluster
from ...graph import Graph
from ...units import UnitCosts, UnitGraph, cluster_units


@dataclass
class UnitModel:
    """`UnitCosts` of ``graph`` on ``cluster``, numbered sinks first (see the module docstring).

    Attributes: ``costs`` (the view), ``units`` (its unit graph), ``unit`` (unit of each node), ``U``; per unit ``pa``
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
    costs: UnitCosts = field(init=False, repr=False)
    units: UnitGraph = field(init=False, repr=False)

    def __post_init__(self) -> None:
        costs = self.costs = cluster_units(self.graph, self.cluster, self.chain)
        u = self.units = costs.units
        # The MIPs take the units sinks first (unit x here is unit U-1-x of the unit graph):
        # HiGHS's branch and bound is sensitive to the column order, and this is the order the
        # bounds were measured with (benchmarks/bounds; chapter 05's two-stage GPT model is
        # proven in a tenth of a second this way and not within two seconds the other way).
        U = self.U = u.size
        flip = U - 1 - np.arange(U)
        self.unit = flip[u.unit]
        self.pa, self.mem = u.pa[::-1].copy(), u.mem[::-1].copy()
        self.pc = np.where(u.bad_cpu, np.nan, u.pc)[::-1].copy()
        self.acc_ok = costs.acc_ok[::-1].copy()
        self.cpu_ok = costs.cpu_ok[::-1].copy()
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
