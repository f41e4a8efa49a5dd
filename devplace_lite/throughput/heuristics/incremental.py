"""Device loads kept up to date while blocks move: the engine under every move-based heuristic.

Moving one block from device ``s`` to device ``t`` changes the load of ``s`` and ``t`` only:
compute moves with the block, and the communication of a producer ``u`` on device ``d`` is
``c(u)`` when ``u`` is on ``d`` and some consumer is not, or ``u`` is elsewhere and some
consumer is on ``d``. Keeping ``count[u, d]`` (consumers of ``u`` on ``d``) makes both tests
O(1), so a move is scored from the block's own nodes and their producers alone:
``O(|nodes| + |in-edges|)`` instead of ``O(n + m)`` for a full re-evaluation.

The same engine serves partial splits: a "device" index may stand for a group of devices
still to be split (recursive bisection), since the load formula only asks which nodes share
a label.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.cost import device_loads
>>> from devplace_lite.throughput.heuristics.blocks import block_structure
>>> g, c = generate("layered", 30, seed=2), Cluster(accelerators=3)
>>> b = block_structure(g)
>>> st = LoadState(g, c, b, b.position * 3 // b.count)
>>> x = int(b.order[9]); st.move(x, 2)
>>> bool(np.allclose(st.loads, sum(device_loads(g, c, st.assignment))))
True
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...devices import Cluster
from ...graph import Graph
from .blocks import Blocks


class LoadState:
    """Per-device compute, communication and memory of a block assignment, updated per move.

    ``block_device[b]`` is the device (or group label) of block ``b``. `delta` scores a move
    without making it; `move` makes it. Loads drift by float rounding over many moves, so
    callers re-score their final answer with `devplace_lite.cost.evaluate`.
    """

    def __init__(self, graph: Graph, cluster: Cluster, blocks: Blocks, block_device: np.ndarray) -> None:
        self.graph, self.cluster, self.blocks = graph, cluster, blocks
        D = cluster.size
        self.is_acc = np.arange(D) < cluster.k
        self.block_device = np.asarray(block_device, dtype=np.int64).copy()
        self.a = self.block_device[blocks.of_node]
        n = graph.n
        self.deg = np.bincount(graph.src, minlength=n).astype(np.int64)
        self.count = np.zeros((n, D), dtype=np.int64)
        np.add.at(self.count, (graph.src, self.a[graph.dst]), 1)
        # per-block work on an accelerator and on a CPU core (inf where not allowed)
        costs = blocks.units.on(cluster)
        work = np.stack([costs.cpu_time, costs.acc_time], axis=1)  # column = is_acc
        # a block where it may not run counts apart, so that moving it out restores finite loads
        self.forbidden = np.isinf(work)
        self.work = np.where(self.forbidden, 0.0, work)
        self.mem = costs.mem
        col = self.is_acc[self.block_device].astype(int)
        rows = np.arange(blocks.count)
        self.compute = np.bincount(self.block_device, weights=self.work[rows, col], minlength=D)[:D].astype(float)
        self.bad = np.bincount(self.block_device, weights=self.forbidden[rows, col], minlength=D)[:D].astype(np.int64)
        self.memory = np.bincount(self.block_device, weights=self.mem, minlength=D)[:D].astype(float)
        self.comm = np.array([self._comm_of(np.arange(n), d, self.a, self.count[:, d]) for d in range(D)])
        self._cache = lru_cache(maxsize=None)(self._block_data)

    # -- the two O(1) tests of the module docstring, vectorised over producers ----------------
    def _comm_of(self, u: np.ndarray, d: int, a_u: np.ndarray, cnt: np.ndarray) -> float:
        if not self.is_acc[d]:
            return 0.0
        here = a_u == d
        pays = np.where(here, self.deg[u] - cnt > 0, cnt > 0)
        return float(self.graph.comm[u] @ pays)

    def _block_data(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Nodes of block ``b``; affected producers; edges from each into the block; membership."""
        g = self.graph
        nodes = self.blocks.nodes[b]
        inb = np.zeros(g.n, dtype=bool)
        inb[nodes] = True
        into = inb[g.dst]
        prods, mult = np.unique(g.src[into], return_counts=True)
        affected = np.union1d(nodes, prods)
        m = np.zeros(len(affected), dtype=np.int64)
        m[np.searchsorted(affected, prods)] = mult
        return nodes, affected, m, inb[affected]

    # -- queries and moves --------------------------------------------------------------------
    @property
    def loads(self) -> np.ndarray:
        return np.where(self.bad > 0, np.inf, self.compute + self.comm)

    def allowed(self, b: int, d: int) -> bool:
        """May block ``b`` run on device ``d`` (every node supported there)?"""
        return not self.forbidden[b, int(self.is_acc[d])]

    @property
    def assignment(self) -> np.ndarray:
        return self.a.copy()

    def block_work(self, b: int, d: int) -> float:
        return float(self.work[b, int(self.is_acc[d])])

    def delta(self, b: int, t: int) -> tuple[float, float]:
        """New loads ``(load[s], load[t])`` if block ``b`` moved from its device ``s`` to ``t``."""
        s = int(self.block_device[b])
        if s == t:
            ld = float(self.loads[s])
            return ld, ld
        _, aff, mult, inb = self._cache(b)
        a_u = self.a[aff]
        cs, ct = self.count[aff, s], self.count[aff, t]
        a_new = np.where(inb, t, a_u)
        cs2, ct2 = cs - mult, ct + mult
        comm_s = self.comm[s] - self._comm_of(aff, s, a_u, cs) + self._comm_of(aff, s, a_new, cs2)
        comm_t = self.comm[t] - self._comm_of(aff, t, a_u, ct) + self._comm_of(aff, t, a_new, ct2)
        new_s = self.compute[s] - self.block_work(b, s) + comm_s
        new_t = self.compute[t] + self.block_work(b, t) + comm_t
        if self.bad[s] - self.forbidden[b, int(self.is_acc[s])] > 0:
            new_s = np.inf
        if self.bad[t] + self.forbidden[b, int(self.is_acc[t])] > 0:
            new_t = np.inf
        return float(new_s), float(new_t)

    def move(self, b: int, t: int) -> None:
        """Move block ``b`` to device (or group) ``t``, updating loads, counts and memory."""
        s = int(self.block_device[b])
        if s == t:
            return
        nodes, aff, mult, _ = self._cache(b)
        for d in (s, t):
            self.comm[d] -= self._comm_of(aff, d, self.a[aff], self.count[aff, d])
        self.count[aff, s] -= mult
        self.count[aff, t] += mult
        self.a[nodes] = t
        for d in (s, t):
            self.comm[d] += self._comm_of(aff, d, self.a[aff], self.count[aff, d])
        self.compute[s] -= self.block_work(b, s)
        self.compute[t] += self.block_work(b, t)
        self.bad[s] -= self.forbidden[b, int(self.is_acc[s])]
        self.bad[t] += self.forbidden[b, int(self.is_acc[t])]
        self.memory[s] -= self.mem[b]
        self.memory[t] += self.mem[b]
        self.block_device[b] = t
