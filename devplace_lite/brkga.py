"""Upper bounds at scale: slice one topological order optimally, and search over orders.

Every chain split is the slicing of some topological order into consecutive blocks (list the
stages one after another), so the best slicing of the best order is the chain optimum
(Archer et al., 2024). Two pieces:

* `slice_order`: the optimal split of one order of units into at most ``k`` accelerator blocks
  and ``l`` CPU blocks, by dynamic programming over block ends: ``F[a][c][j]`` is the least
  max-load of the first ``j`` units on ``a`` accelerators and ``c`` cores. Block costs are built
  incrementally (a hyperedge counter per block start), and a block is dropped as soon as its
  work alone reaches the cutoff (the best value known), so the cost is
  ``O((k + 1)(l + 1) sum_i w_i)`` with ``w_i <= U`` the number of block ends kept for start ``i``:
  ``O(k U^2)`` at worst, far less with a good cutoff.
* `brkga`: a biased random-key genetic algorithm (Gonçalves and Resende, 2011) over orders.
  A chromosome is one key in ``[0, 1)`` per unit; the decoder runs Kahn's algorithm taking the
  ready unit of smallest key, then slices that order. Each generation keeps the elite, adds
  random mutants, and fills the rest with children that take each key from the elite parent
  with probability ``rho``. Seeded, and stopped by a time budget or a generation count.

Both work on the units of `devplace_lite.bounds.units.UnitModel` (colour classes and forward
cycles fused, free leaves merged), and return placements the evaluator scores as chain splits.

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> g = layered(30, seed=2)
>>> r = brkga(g, Cluster(accelerators=4), time_limit=1.0, seed=0)
>>> r.check().split, abs(r.objective - r.check().max_load) < 1e-9
('chain', True)
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np
from numba import njit

from .cost import evaluate
from .devices import Cluster
from .graph import Graph, GraphError
from .result import Result
from .bounds.units import UnitModel

_SKIP_ACC, _SKIP_CPU, _ACC, _CPU = 0, 1, 2, 3


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True)
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
    """Optimal slicing of unit orders for one graph and cluster (the data prepared once)."""

    def __init__(self, graph: Graph, cluster: Cluster, model: UnitModel | None = None) -> None:
        self.graph, self.cluster = graph, cluster
        self.model = m = model or UnitModel(graph, cluster, chain=True)
        self.pa = m.pa.astype(float)
        self.pc = np.where(m.cpu_ok, np.nan_to_num(m.pc), 0.0)
        self.acc_bad = (~m.acc_ok).astype(np.int64)
        self.cpu_bad = (~m.cpu_ok).astype(np.int64)
        self.mem = m.mem.astype(float)
        self.cap = float(cluster.memory) if math.isfinite(cluster.memory) else np.inf
        # incidence unit -> hyperedges, and hyperedge sizes (root included)
        pairs_u = np.concatenate([m.h_root, m.h_units])
        pairs_h = np.concatenate([np.arange(m.H), np.repeat(np.arange(m.H), np.diff(m.h_ptr))])
        o = np.argsort(pairs_u, kind="stable")
        self.inc_h = pairs_h[o].astype(np.int64)
        self.inc_ptr = np.zeros(m.U + 1, dtype=np.int64)
        np.add.at(self.inc_ptr, pairs_u + 1, 1)
        self.inc_ptr = np.cumsum(self.inc_ptr)
        self.h_size = (np.diff(m.h_ptr) + 1).astype(np.int64)
        self.h_cost = m.h_cost.astype(float)
        self._cnt = np.zeros(max(m.H, 1), dtype=np.int64)
        # forward arcs for topological orders
        self.succ: list[list[int]] = [[] for _ in range(m.U)]
        self.indeg0 = np.zeros(m.U, dtype=np.int64)
        for a, b in m.prec.tolist():
            self.succ[a].append(b)
            self.indeg0[b] += 1

    def order_from_keys(self, keys: np.ndarray) -> np.ndarray:
        """Kahn's algorithm over the unit DAG, taking the ready unit of smallest key."""
        indeg = self.indeg0.copy()
        heap = [(float(keys[u]), u) for u in np.flatnonzero(indeg == 0).tolist()]
        heapq.heapify(heap)
        out = np.empty(self.model.U, dtype=np.int64)
        n = 0
        while heap:
            _, u = heapq.heappop(heap)
            out[n] = u
            n += 1
            for w in self.succ[u]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(heap, (float(keys[w]), w))
        return out

    def slice(self, order: np.ndarray, cutoff: float = math.inf) -> tuple[float, np.ndarray | None]:
        """Best max-load of slicing the unit order, and each unit's device; ``(inf, None)`` when
        no slicing beats ``cutoff`` (or none is feasible)."""
        order = np.asarray(order, dtype=np.int64)
        U, k, l_ = len(order), self.cluster.k, self.cluster.l
        zero = np.zeros(1)
        pa_pre = np.concatenate([zero, np.cumsum(self.pa[order])])
        mem_pre = np.concatenate([zero, np.cumsum(self.mem[order])])
        acc_end = _block_ends(pa_pre, np.concatenate([[0], np.cumsum(self.acc_bad[order])]), mem_pre,
                              self.cap, cutoff) if k else np.arange(1, U + 1)
        offs = np.concatenate([[0], np.cumsum(acc_end - np.arange(U) - 1)]).astype(np.int64)
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
        dev_of_unit = np.empty(self.model.U, dtype=np.int64)
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
        return dev_of_unit[self.model.unit]

    def polish(self, dev_of_unit: np.ndarray, deadline: float | None = None) -> tuple[float, np.ndarray]:
        """Hill-climb a chain split on accelerators by moving single units to the next or the
        previous stage (legal when the unit's successors, resp. predecessors, stay on the
        right side, and within the memory cap), first improvement on (max load, sum of
        squared loads). Splits that use CPU cores are returned unchanged."""
        m, k = self.model, self.cluster.k
        stage = dev_of_unit.copy()
        if self.cluster.l or k < 2:
            return self._value(stage), stage
        h_of = np.repeat(np.arange(m.H), np.diff(m.h_ptr))
        cnt = np.zeros((m.H, k), dtype=np.int64)
        np.add.at(cnt, (np.arange(m.H), stage[m.h_root]), 1)
        np.add.at(cnt, (h_of, stage[m.h_units]), 1)
        size = self.h_size

        def stage_load(s: int) -> float:
            crossing = (cnt[:, s] > 0) & (cnt[:, s] < size)
            return float(self.pa[stage == s].sum() + self.h_cost[crossing].sum())

        loads = np.array([stage_load(s) for s in range(k)])
        mem = np.bincount(stage, weights=self.mem, minlength=k)
        pred: list[list[int]] = [[] for _ in range(m.U)]
        for a, b in m.prec.tolist():
            pred[b].append(a)
        incident = [self.inc_h[self.inc_ptr[u]:self.inc_ptr[u + 1]] for u in range(m.U)]

        def delta(u: int, s: int, t: int) -> tuple[float, float]:
            """New loads of stages s and t if unit u moves from s to t."""
            ls, lt = loads[s] - self.pa[u], loads[t] + self.pa[u]
            for h in incident[u]:
                cs, ct, z = cnt[h, s], cnt[h, t], size[h]
                ls += self.h_cost[h] * (int(0 < cs - 1 < z) - int(0 < cs < z))
                lt += self.h_cost[h] * (int(0 < ct + 1 < z) - int(0 < ct < z))
            return ls, lt

        improved = True
        while improved:
            if deadline is not None and time.perf_counter() > deadline:
                break
            improved = False
            top = float(loads.max())
            sumsq = float((loads ** 2).sum())
            for s in np.argsort(-loads, kind="stable").tolist():
                if loads[s] < top * (1 - 1e-12):
                    break
                members = np.flatnonzero(stage == s)
                for u in members.tolist():
                    for t in (s - 1, s + 1):
                        if not 0 <= t < k or mem[t] + self.mem[u] > self.cap:
                            continue
                        if t > s and any(stage[w] <= s for w in self.succ[u]):
                            continue
                        if t < s and any(stage[p] >= s for p in pred[u]):
                            continue
                        ls, lt = delta(u, s, t)
                        rest = np.delete(loads, [s, t]).max(initial=0.0)
                        new_top = max(rest, ls, lt)
                        new_sq = sumsq - loads[s] ** 2 - loads[t] ** 2 + ls ** 2 + lt ** 2
                        if new_top < top * (1 - 1e-12) or (new_top <= top and new_sq < sumsq * (1 - 1e-12)):
                            for h in incident[u]:
                                cnt[h, s] -= 1
                                cnt[h, t] += 1
                            stage[u] = t
                            loads[s], loads[t] = ls, lt
                            mem[s] -= self.mem[u]
                            mem[t] += self.mem[u]
                            improved = True
                            break
                    if improved:
                        break
                if improved:
                    break
        return self._value(stage), stage

    def _value(self, dev_of_unit: np.ndarray) -> float:
        return float(evaluate(self.graph, self.cluster, self.assignment(dev_of_unit)).max_load)

    def keys_of(self, dev_of_unit: np.ndarray, order: np.ndarray) -> np.ndarray:
        """Keys that decode to an order listing the stages one after another (ties by
        ``order``), so that slicing it gives back at least this split."""
        U = self.model.U
        rank = np.empty(U)
        rank[order] = np.arange(U)
        return (dev_of_unit + rank / (U + 1)) / (dev_of_unit.max() + 1)


def _unit_order(slicer: Slicer, graph: Graph, order) -> np.ndarray:
    """A topological unit order following a node order (first appearance of each unit)."""
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(graph.n)):
        raise GraphError(f"order must list each of the {graph.n} node indices once")
    rank = np.full(slicer.model.U, graph.n, dtype=float)
    pos = np.empty(graph.n, dtype=np.int64)
    pos[order] = np.arange(graph.n)
    np.minimum.at(rank, slicer.model.unit, pos)
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


def _seed_orders(slicer: Slicer, graph: Graph) -> list[np.ndarray]:
    """Orders worth trying first: the graph's own order, and depth-first and breadth-first
    orders (they keep branches together or apart)."""
    m = slicer.model
    U = m.U
    base = _unit_order(slicer, graph, graph.topological_order())
    rank = np.empty(U)
    rank[base] = np.arange(U)
    level = np.zeros(U)
    for u in base.tolist():
        for w in slicer.succ[u]:
            level[w] = max(level[w], level[u] + 1)
    orders = [base, slicer.order_from_keys(level * U + rank)]
    # depth-first: finish a branch before starting the next
    visited = np.zeros(U, dtype=bool)
    dfs: list[int] = []
    indeg = slicer.indeg0.copy()
    stack = [u for u in base[::-1].tolist() if indeg[u] == 0]
    while stack:
        u = stack.pop()
        if visited[u]:
            continue
        visited[u] = True
        dfs.append(u)
        for w in sorted(slicer.succ[u], key=lambda x: -rank[x]):
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    orders.append(np.array(dfs, dtype=np.int64))
    return orders


def brkga(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
          population: int = 40, elite: float = 0.2, mutants: float = 0.15, rho: float = 0.7,
          generations: int = 1000, patience: int = 100) -> Result:
    """Search over topological orders with a biased random-key genetic algorithm; each order is
    sliced optimally (`Slicer.slice`), and each new best split is polished by single-unit moves
    between neighbouring stages (`Slicer.polish`) and written back as a chromosome. Stops
    after ``time_limit`` seconds (default 10), ``generations`` generations, or ``patience``
    generations without improvement.

    Returns a chain split (status ``feasible``; ``infeasible`` when no order can be sliced
    within the memory caps), with ``extra``: generations run, orders decoded, the value of the
    first (graph's own) order.
    """
    start = t0 = time.perf_counter()
    budget = 10.0 if time_limit is None else float(time_limit)
    rng = np.random.default_rng(seed)
    slicer = Slicer(graph, cluster)
    U = slicer.model.U
    best_val, best_dev = math.inf, None
    first_val = None
    n_elite = max(1, int(round(elite * population)))
    n_mut = max(1, int(round(mutants * population)))
    pop = rng.random((population, U))
    for i, order in enumerate(_seed_orders(slicer, graph)[: population]):
        pop[i, order] = (np.arange(U) + 0.5) / U
    fit = np.full(population, math.inf)
    decoded = 0

    best_order = None

    def evaluate_row(keys: np.ndarray, cutoff: float) -> float:
        nonlocal best_val, best_dev, best_order, decoded
        order = slicer.order_from_keys(keys)
        val, dev = slicer.slice(order, cutoff)
        decoded += 1
        if val < best_val:
            best_val, best_dev, best_order = val, dev, order
        return val

    def polish() -> None:
        """Improve the best split by single-unit moves and put it back as a chromosome."""
        nonlocal best_val, best_dev, pop, fit
        val, dev = slicer.polish(best_dev, t0 + budget)
        if val < best_val:
            best_val, best_dev = val, dev
            worst = int(np.argmax(fit))
            pop[worst], fit[worst] = slicer.keys_of(dev, best_order), val

    for i in range(population):
        fit[i] = evaluate_row(pop[i], math.inf)
        if i == 0:
            first_val = fit[0]
            t0 = time.perf_counter()  # the budget starts after the first decode (which may compile)
        if time.perf_counter() - t0 > budget:
            break
    if best_dev is not None:
        polish()
    gen = stall = 0
    while gen < generations and stall < patience and time.perf_counter() - t0 < budget:
        gen += 1
        order = np.argsort(fit, kind="stable")
        pop, fit = pop[order], fit[order]
        cutoff = fit[n_elite - 1]  # a child only matters if it enters the elite
        before = best_val
        children = []
        for _ in range(population - n_elite - n_mut):
            a = pop[rng.integers(n_elite)]
            b = pop[n_elite + rng.integers(population - n_elite)]
            children.append(np.where(rng.random(U) < rho, a, b))
        new = np.concatenate([np.array(children).reshape(-1, U), rng.random((n_mut, U))])
        new_fit = np.full(len(new), math.inf)
        for i in range(len(new)):
            new_fit[i] = evaluate_row(new[i], cutoff)
            if time.perf_counter() - t0 > budget:
                break
        pop = np.concatenate([pop[:n_elite], new])
        fit = np.concatenate([fit[:n_elite], new_fit])
        if best_val < before:
            polish()
        stall = stall + 1 if best_val >= before else 0
    seconds = time.perf_counter() - start
    extra = {"generations": gen, "decoded": decoded, "first_order": None if first_val is None or
             not math.isfinite(first_val) else float(first_val)}
    if best_dev is None:
        return Result("brkga", graph, cluster, None, None, "infeasible", seconds, extra=extra)
    assignment = slicer.assignment(best_dev)
    objective = evaluate(graph, cluster, assignment).max_load
    return Result("brkga", graph, cluster, assignment, objective, "feasible", seconds, extra=extra)
