"""Upper bounds at scale: search over topological orders, each sliced optimally.

Every chain split is the slicing of some topological order into consecutive blocks (list the
stages one after another), so the best slicing of the best order is the chain optimum
(Archer et al., 2024). `brkga` searches over orders with a biased random-key genetic algorithm
(Gonçalves and Resende, 2011). A chromosome is one key in ``[0, 1)`` per unit; the decoder runs
Kahn's algorithm taking the ready unit of smallest key, then slices that order optimally with
the library's slicer (`devplace_lite.throughput.slicing`). Each generation keeps the elite, adds random
mutants, and fills the rest with children that take each key from the elite parent with
probability ``rho``; each new best split is polished by single-unit moves between neighbouring
stages. Seeded, and stopped by a time budget or a generation count.

It works on the units of `devplace_lite.units` (colour classes, stand-ins for backward-only
classes, forward cycles fused, free leaves folded) and returns placements the evaluator scores
as chain splits.

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

import math
import time

import numpy as np

from ..cost import evaluate
from ..devices import Cluster
from ..graph import Graph
from ..result import Result, no_feasible_status
from .slicing import Slicer, _unit_order, slice_order

__all__ = ["brkga", "polish", "keys_of", "Slicer", "slice_order"]


def polish(slicer: Slicer, dev_of_unit: np.ndarray, deadline: float | None = None) -> tuple[float, np.ndarray]:
    """Hill-climb a chain split on accelerators by moving single units to the next or the
    previous stage (legal when the unit's successors, resp. predecessors, stay on the
    right side, and within the memory cap), first improvement on (max load, sum of
    squared loads). Splits that use CPU cores are returned unchanged."""
    units, k = slicer.units, slicer.cluster.k
    stage = dev_of_unit.copy()
    if slicer.cluster.l or k < 2:
        return _value(slicer, stage), stage
    hp, hu, _ = units.hyperedges
    H = len(hp) - 1
    cnt = np.zeros((H, k), dtype=np.int64)
    np.add.at(cnt, (np.repeat(np.arange(H), np.diff(hp)), stage[hu]), 1)
    size = slicer.h_size

    def stage_load(s: int) -> float:
        crossing = (cnt[:, s] > 0) & (cnt[:, s] < size)
        return float(slicer.pa[stage == s].sum() + slicer.h_cost[crossing].sum())

    loads = np.array([stage_load(s) for s in range(k)])
    mem = np.bincount(stage, weights=slicer.mem, minlength=k)
    succ, pred = units.succ, units.pred
    incident = [slicer.inc_h[slicer.inc_ptr[u]:slicer.inc_ptr[u + 1]] for u in range(units.size)]

    def delta(u: int, s: int, t: int) -> tuple[float, float]:
        """New loads of stages s and t if unit u moves from s to t."""
        ls, lt = loads[s] - slicer.pa[u], loads[t] + slicer.pa[u]
        for h in incident[u]:
            cs, ct, z = cnt[h, s], cnt[h, t], size[h]
            ls += slicer.h_cost[h] * (int(0 < cs - 1 < z) - int(0 < cs < z))
            lt += slicer.h_cost[h] * (int(0 < ct + 1 < z) - int(0 < ct < z))
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
                    if not 0 <= t < k or mem[t] + slicer.mem[u] > slicer.cap:
                        continue
                    if t > s and any(stage[w] <= s for w in succ[u]):
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
                        mem[s] -= slicer.mem[u]
                        mem[t] += slicer.mem[u]
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break
    return _value(slicer, stage), stage

def _value(slicer: Slicer, dev_of_unit: np.ndarray) -> float:
    return float(evaluate(slicer.graph, slicer.cluster, slicer.assignment(dev_of_unit)).max_load)


def keys_of(slicer: Slicer, dev_of_unit: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Keys that decode to an order listing the stages one after another (ties by ``order``),
    so that slicing it gives back at least this split."""
    U = slicer.units.size
    rank = np.empty(U)
    rank[order] = np.arange(U)
    return (dev_of_unit + rank / (U + 1)) / (dev_of_unit.max() + 1)


def _seed_orders(slicer: Slicer, graph: Graph) -> list[np.ndarray]:
    """Orders worth trying first: the graph's own order, and depth-first and breadth-first
    orders (they keep branches together or apart)."""
    U = slicer.units.size
    succ = slicer.units.succ
    base = _unit_order(slicer, graph, graph.topological_order())
    rank = np.empty(U)
    rank[base] = np.arange(U)
    level = np.zeros(U)
    for u in base.tolist():
        for w in succ[u]:
            level[w] = max(level[w], level[u] + 1)
    orders = [base, slicer.order_from_keys(level * U + rank)]
    # depth-first: finish a branch before starting the next
    visited = np.zeros(U, dtype=bool)
    dfs: list[int] = []
    indeg = np.bincount(slicer.units.arcs[:, 1], minlength=U)
    stack = [u for u in base[::-1].tolist() if indeg[u] == 0]
    while stack:
        u = stack.pop()
        if visited[u]:
            continue
        visited[u] = True
        dfs.append(u)
        for w in sorted(succ[u], key=lambda x: -rank[x]):
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
    between neighbouring stages (`polish`) and written back as a chromosome. Stops
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
    U = slicer.units.size
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

    def improve() -> None:
        """Improve the best split by single-unit moves and put it back as a chromosome."""
        nonlocal best_val, best_dev
        val, dev = polish(slicer, best_dev, t0 + budget)
        if val < best_val:
            best_val, best_dev = val, dev
            worst = int(np.argmax(fit))
            pop[worst], fit[worst] = keys_of(slicer, dev, best_order), val

    for i in range(population):
        fit[i] = evaluate_row(pop[i], math.inf)
        if i == 0:
            first_val = fit[0]
            t0 = time.perf_counter()  # the budget starts after the first decode (which may compile)
        if time.perf_counter() - t0 > budget:
            break
    if best_dev is not None:
        improve()
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
        new = np.concatenate([np.array(children).reshape(len(children), U), rng.random((n_mut, U))])
        new_fit = np.full(len(new), math.inf)
        for i in range(len(new)):
            new_fit[i] = evaluate_row(new[i], cutoff)
            if time.perf_counter() - t0 > budget:
                break
        pop = np.concatenate([pop[:n_elite], new])
        fit = np.concatenate([fit[:n_elite], new_fit])
        if best_val < before:
            improve()
        stall = stall + 1 if best_val >= before else 0
    seconds = time.perf_counter() - start
    extra = {"generations": gen, "decoded": decoded, "first_order": None if first_val is None or
             not math.isfinite(first_val) else float(first_val)}
    if best_dev is None:
        return Result("brkga", graph, cluster, None, None, no_feasible_status(graph, cluster), seconds, extra=extra)
    assignment = slicer.assignment(best_dev)
    objective = evaluate(graph, cluster, assignment).max_load
    return Result("brkga", graph, cluster, assignment, objective, "feasible", seconds, extra=extra)
