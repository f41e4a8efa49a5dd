"""Blocks: the pieces a heuristic moves, and the order constraints between them.

The blocks are the units of `devplace_lite.units.unit_graph` (the library's one unit model):
colocation classes, a stand-in's order for each backward-only class, and the classes of each
forward cycle fused, since a chain split can never separate them. `Blocks` is the view the
heuristics read: the block of each node, the block DAG, its topological order (the unit
numbering), and per-block sums. A split is a chain of ideals exactly when its stage index never
decreases along a block arc.

Complexity: ``O((n + m) log n)`` (the unit graph).

Example
-------
>>> from devplace_lite.generators import generate
>>> b = block_structure(generate("layered", 20, seed=1, training=True))
>>> b.count, int(b.sizes.sum())
(20, 40)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...graph import Graph
from ...units import UnitGraph, unit_graph


class Rows:
    """Row ``x`` of a compressed adjacency (``ptr``, ``idx``) as an int array, a view made on
    access: a million blocks held as a million small arrays would cost ~130 bytes each."""

    def __init__(self, ptr: np.ndarray, idx: np.ndarray) -> None:
        self.ptr, self.idx = ptr, idx

    @classmethod
    def of(cls, rows: np.ndarray, cols: np.ndarray, count: int) -> "Rows":
        """The rows of ``count`` nodes from (row, col) pairs, each row keeping the pairs' order."""
        by_row = np.argsort(rows, kind="stable")
        ptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=count))]).astype(np.int64)
        return cls(ptr, np.ascontiguousarray(cols[by_row], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ptr) - 1

    def __getitem__(self, x: int) -> np.ndarray:
        return self.idx[self.ptr[x]:self.ptr[x + 1]]


@dataclass(frozen=True, eq=False)
class Blocks:
    """The heuristics' view of a `UnitGraph`.

    ``of_node[v]`` is the block of node ``v``; ``order`` lists the blocks in a topological
    order of the block DAG; ``succ``/``pred`` are its adjacency (sorted int arrays);
    ``nodes[b]`` the node indices of block ``b``.
    """

    units: UnitGraph

    @property
    def of_node(self) -> np.ndarray:
        return self.units.unit

    @property
    def count(self) -> int:
        return self.units.size

    @property
    def nodes(self) -> list[np.ndarray]:
        return self.units.members

    @cached_property
    def order(self) -> np.ndarray:
        return np.arange(self.count, dtype=np.int64)  # units are numbered topologically

    @cached_property
    def position(self) -> np.ndarray:
        """Position of each block in ``order``."""
        return self.order

    @cached_property
    def succ(self) -> Rows:
        a = self.units.arcs.reshape(-1, 2)
        return Rows.of(a[:, 0], a[:, 1], self.count)

    @cached_property
    def pred(self) -> Rows:
        a = self.units.arcs.reshape(-1, 2)
        return Rows.of(a[:, 1], a[:, 0], self.count)

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.array([len(x) for x in self.nodes], dtype=np.int64)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-block sums of a per-node array (``nan`` entries make the sum ``inf``)."""
        return self.units.sums(np.where(np.isnan(values), np.inf, values))

    def chain_ok(self, stage: np.ndarray) -> bool:
        """True when the stage index of every block never decreases along a block arc."""
        a = self.units.arcs
        return bool(np.all(stage[a[:, 1]] >= stage[a[:, 0]])) if len(a) else True


def block_structure(graph: Graph) -> Blocks:
    """The blocks of ``graph`` (see the module docstring)."""
    return Blocks(unit_graph(graph))
