"""The optimal slicing of one order of units: the slicer every method shares.

Problem: given a topological order of the units (`devplace_lite.units`), cut it into at most
``k`` accelerator blocks and ``l`` CPU blocks, in order, minimising the largest block load
(`devplace_lite.cost`). Every prefix of a topological order is an ideal, so any slicing is a
chain split; every chain split is the slicing of some order (list its stages one after the
other), so the best slicing of the best order is the chain optimum (Archer et al., 2024).

Solution: dynamic programming over block ends, ``F[a][c][j]`` = the least max-load of the first
``j`` units on ``a`` accelerators and ``c`` cores. Block costs are built incrementally (a
hyperedge counter per block start), and a block is dropped as soon as its work alone reaches
the cutoff (the best value known), so the cost is ``O((k + 1)(l + 1) sum_i w_i)`` with
``w_i <= U`` the number of block ends kept for start ``i``: ``O((k + l) U^2)`` at worst, far less
with a good cutoff. Exact for the order it is given. The kept blocks are counted before their
costs are stored: past `MAX_BLOCKS` (a few hundred MB) the slicer raises `LimitError`, so a
graph of a few hundred thousand units is refused in one line, never allocated.

Users: the linearised DP (`devplace_lite.throughput.dp.linear`, and the DP's first upper bound), the order
search (`devplace_lite.throughput.brkga`), the bounds' quick upper bound.

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> g = layered(12, seed=3)
>>> value, a = slice_order(g, Cluster(accelerators=3), g.topological_order())
>>> from devplace_lite.cost import evaluate
>>> ev = evaluate(g, Cluster(accelerators=3), a)
>>> ev.split, abs(ev.max_load - value) < 1e-9
('chain', True)
"""

from __future__ import annotations

import math

import numpy as np

from ..compiled import kernel
from ..dag import topological_order
from ..devices import Cluster
from ..errors import GraphError, LimitError, UsageError
from ..graph import Graph
from ..methods import scalable
from ..units import UnitGraph, cluster_units

_SKIP_ACC, _SKIP_CPU, _ACC, _CPU = 0, 1, 2, 3
#: Most accelerator blocks (8 bytes each) one slicing stores.
MAX_BLOCKS = 60_000_000


@kernel("i8(f8[::1], f8, i8, i8[::1])")
def _greedy_cut(w: np.ndarray, limit: float, blocks: int, out: np.ndarray) -> int:  # pragma: no cover
    """Cut ``w`` greedily into blocks of sum at most ``limit`` (an item above it alone), writing
    each item's block into ``out``; 1 if at most ``blocks`` blocks do, else 0 (`baselines.
    min_max_blocks` bisects on it: compiled, so a million items cost milliseconds per test)."""
    b = 0
    acc = 0.0
    for i in range(w.shape[0]):
        x = w[i]
        if acc + x > limit and acc > 0:
            b += 1
            acc = 0.0
            if b >= blocks:
                return 0
        out[i] = b
        acc = acc + x
    return 1


@kernel("i8[::1](f8[::1], i8[::1], f8[::1], f8, f8)")
def _block_ends(prefix: np.ndarray, ok_prefix: np.ndarray, mem_prefix: np.ndarray, cap: float,
                cutoff: float) -> np.ndarray:
    """For each start ``i``, one past the last end ``j`` whose block is allowed and whose work
    stays below the cutoff (prefix sums over the order)."""
    U = len(prefix) - 1
    end = np.empty(U, dtype=np.int64)
    j = 0
    for i in range(U):
        if j < i + 1:
            j = i + 1
        # blocks only grow with j: advance while the block [i, j) is allowed and cheap enough
        while j <= U and ok_prefix[j] - ok_prefix[i] == 0 and mem_prefix[j] - mem_prefix[i] <= cap \
                and prefix[j] - prefix[i] < cutoff:
            j += 1
        end[i] = j  # ends i+1 .. j-1 are kept
    return end


@kernel("void(i8[::1], f8[::1], i8[::1], i8[::1], i8[::1], f8[::1], i8[::1], i8[::1], f8[::1], i8[::1])")
def _acc_costs(order, pa, inc_ptr, inc_h, h_size, h_cost, end, offs, out, cnt):
    """Load of every kept accelerator block ``[i, j)``: work plus each crossing hyperedge."""
    for i in range(len(order)):
        load = 0.0
        stop = end[i]
        for j in range(i + 1, stop):
            u = order[j - 1]
            load += pa[u]
            for e in range(inc_ptr[u], inc_ptr[u + 1]):
                h = inc_h[e]
                before = cnt[h]
                cnt[h] = before + 1
                was = 0 < before < h_size[h]
                now = cnt[h] < h_size[h]
                if was and not now:
                    load -= h_cost[h]
                elif now and not was:
                    load += h_cost[h]
            out[offs[i] + (j - i - 1)] = load
        for j in range(i + 1, stop):  # reset the counters this start touched
            u = order[j - 1]
            for e in range(inc_ptr[u], inc_ptr[u + 1]):
                cnt[inc_h[e]] = 0


@kernel("Tuple((f8[:, :, ::1], i1[:, :, ::1], i8[:, :, ::1]))(i8, i8, i8, i8[::1], i8[::1], f8[::1], f8[::1], "
        "i8[::1], f8)")
def _dp(U, k, l, acc_end, acc_offs, acc_cost, cpu_prefix, cpu_end, cutoff):
    """``F[a, c, j]``, with the move that reached each state (kind, start)."""
    F = np.full((k + 1, l + 1, U + 1), np.inf)
    kind = np.full((k + 1, l + 1, U + 1), -1, dtype=np.int8)
    start = np.zeros((k + 1, l + 1, U + 1), dtype=np.int64)
    F[0, 0, 0] = 0.0
    for a in range(k + 1):
        for c in range(l + 1):
            if a > 0:
                for j in range(U + 1):
                    if F[a - 1, c, j] < F[a, c, j]:
                        F[a, c, j] = F[a - 1, c, j]
                        kind[a, c, j] = 0
                for i in range(U):
                    base = F[a - 1, c, i]
                    if base >= cutoff:
                        continue
                    for j in range(i + 1, acc_end[i]):
                        v = acc_cost[acc_offs[i] + (j - i - 1)]
                        if v < base:
                            v = base
                        if v < F[a, c, j] and v < cutoff:
                            F[a, c, j] = v
                            kind[a, c, j] = 2
                            start[a, c, j] = i
            if c > 0:
                for j in range(U + 1):
                    if F[a, c - 1, j] < F[a, c, j]:
                        F[a, c, j] = F[a, c - 1, j]
                        kind[a, c, j] = 1
                for i in range(U):
                    base = F[a, c - 1, i]
                    if base >= cutoff:
                        continue
                    for j in range(i + 1, cpu_end[i]):
                        v = cpu_prefix[j] - cpu_prefix[i]
                        if v < base:
                            v = base
                        if v < F[a, c, j] and v < cutoff:
                            F[a, c, j] = v
                            kind[a, c, j] = 3
                            start[a, c, j] = i
    return F, kind, start


class Slicer:
    """Optimal slicing of unit orders for one graph and cluster (the data prepared once).

    ``units``: the unit graph to slice (default: `devplace_lite.units.cluster_units`, with the
    units this cluster makes free folded in, which changes no optimum).
    """

    def __init__(self, graph: Graph, cluster: Cluster, units: UnitGraph | None = None) -> None:
        self.graph, self.cluster = graph, cluster
        costs = self.costs = cluster_units(graph, cluster) if units is None else units.on(cluster)
        self.units = u = costs.units
        self.cap = float(cluster.memory) if math.isfinite(cluster.memory) else np.inf
        # the kernel's array types of the view's costs
        self.pa, self.mem = costs.pa.astype(np.float64), costs.mem.astype(np.float64)
        self.acc_bad = (~costs.acc_ok).astype(np.int64)
        self.cpu_bad = (~costs.cpu_ok).astype(np.int64)
        self.pc = np.where(costs.cpu_ok, costs.pc, 0.0)
        hp, _, h_cost = u.hyperedges
        self.h_cost = np.ascontiguousarray(h_cost, dtype=np.float64)
        self.h_size = np.diff(hp).astype(np.int64)
        self.inc_ptr, self.inc_h = (np.ascontiguousarray(a, dtype=np.int64) for a in u.incidence[:2])
        self._cnt = np.zeros(max(len(self.h_cost), 1), dtype=np.int64)

    def order_from_keys(self, keys: np.ndarray) -> np.ndarray:
        """The topological order of the units taking the ready unit of least key."""
        return topological_order(self.units.succ, keys)

    def slice(self, order: np.ndarray, cutoff: float = math.inf) -> tuple[float, np.ndarray | None]:
        """Best max-load of slicing the unit order, and each unit's device; ``(inf, None)`` when
        no slicing beats ``cutoff`` (or none is feasible)."""
        order = np.ascontiguousarray(order, dtype=np.int64)
        U, k, l_ = len(order), self.cluster.k, self.cluster.l
        zero = np.zeros(1)
        pa_pre = np.concatenate([zero, np.cumsum(self.pa[order])])
        mem_pre = np.concatenate([zero, np.cumsum(self.mem[order])])
        acc_end = _block_ends(pa_pre, np.concatenate([[0], np.cumsum(self.acc_bad[order])]), mem_pre,
                              self.cap, cutoff) if k else np.arange(1, U + 1)
        offs = np.concatenate([[0], np.cumsum(acc_end - np.arange(U) - 1)]).astype(np.int64)
        if offs[-1] > MAX_BLOCKS:
            raise LimitError(f"graph {self.graph.name}: slicing an order of {U:,} units keeps {int(offs[-1]):,} "
                             f"blocks, more than {MAX_BLOCKS:,}; use a method that scales ({scalable()})")
        cost = np.empty(int(offs[-1]))
        if k:
            _acc_costs(order, self.pa, self.inc_ptr, self.inc_h, self.h_size, self.h_cost, acc_end, offs,
                       cost, self._cnt)
        cpu_pre = np.concatenate([zero, np.cumsum(self.pc[order])])
        cpu_end = _block_ends(cpu_pre, np.concatenate([[0], np.cumsum(self.cpu_bad[order])]), np.zeros(U + 1),
                              np.inf, cutoff) if l_ else np.arange(1, U + 1)
        F, kind, start = _dp(U, k, l_, acc_end, offs, cost, cpu_pre, cpu_end, cutoff)
        best = float(F[k, l_, U])
        if not best < cutoff:
            return math.inf, None
        dev_of_unit = np.empty(self.units.size, dtype=np.int64)
        blocks = []  # (kind, i, j) from the last block back
        a, c, j = k, l_, U
        while j > 0:
            kd = int(kind[a, c, j])
            if kd == _SKIP_ACC:
                a -= 1
            elif kd == _SKIP_CPU:
                c -= 1
            else:
                i = int(start[a, c, j])
                blocks.append((kd, i, j))
                if kd == _ACC:
                    a -= 1
                else:
                    c -= 1
                j = i
        n_acc = n_cpu = 0
        for kd, i, j in reversed(blocks):
            if kd == _ACC:
                dev_of_unit[order[i:j]] = n_acc
                n_acc += 1
            else:
                dev_of_unit[order[i:j]] = k + n_cpu
                n_cpu += 1
        return best, dev_of_unit

    def assignment(self, dev_of_unit: np.ndarray) -> np.ndarray:
        """Device of each node from the device of each unit."""
        return dev_of_unit[self.units.unit]


def _unit_order(slicer: Slicer, graph: Graph, order) -> np.ndarray:
    """A topological unit order following a node order (first appearance of each unit)."""
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(graph.n)):
        raise UsageError(f"order must list each of the {graph.n} node indices once")
    rank = np.full(slicer.units.size, graph.n, dtype=float)
    pos = np.empty(graph.n, dtype=np.int64)
    pos[order] = np.arange(graph.n)
    np.minimum.at(rank, slicer.units.unit, pos)
    return slicer.order_from_keys(rank)


def slice_order(graph: Graph, cluster: Cluster, order) -> tuple[float, np.ndarray]:
    """The optimal chain split that cuts the given node order into consecutive blocks.

    ``order`` is a list of node indices, normally a topological order; units (colour classes)
    are placed at their first node, and where the order breaks a dependency the units are
    re-ordered minimally (Kahn's algorithm by first appearance). Returns ``(objective,
    assignment)``; raises `GraphError` when no split of the order is feasible.
    """
    slicer = Slicer(graph, cluster)
    value, dev = slicer.slice(_unit_order(slicer, graph, order))
    if dev is None:
        raise GraphError(f"graph {graph.name}: no feasible split of this order on the cluster "
                         f"(memory caps or ops no device may run)")
    return value, slicer.assignment(dev)


