"""Closed-form lower bounds on the optimal largest load, valid for *any* split.

Let ``T*`` be the optimal max-load over all feasible placements (any split kind; a chain split
is one of them, so every bound here also bounds the chain optimum). Three facts:

* **Classic** (Archer et al., 2024, without CPU cores): ``T* >= max(sum p_acc / k, max p_acc)``.
  The devices share the work, and the device of the largest node pays at least its work.
  With CPU cores it is *not* valid (a core takes work without counting in ``sum p_acc / k``),
  so `classic_bound` refuses clusters with cores.
* **Neighbourhood.** Put unit ``U`` on an accelerator with unit set ``S``. For every hyperedge
  ``h`` through ``U``, either all of ``h`` is in ``S`` (the device pays the work of ``h``'s other
  units) or ``h`` crosses ``S`` (it pays ``c(h)``). Sharing each neighbour's work among the
  ``deg_U(X)`` hyperedges that contain both ``U`` and ``X`` avoids counting it twice:
  ``load >= nb(U) = p_acc(U) + sum_h min(c(h), sum_{X in h, X != U} p_acc(X) / deg_U(X))``
  (``c(h)`` alone when some ``X`` may not run on an accelerator). On a CPU core the unit
  costs ``p_cpu(U)``. So ``T* >= max_U min(nb(U), p_cpu(U))`` over the devices ``U`` may use.
* **Knapsack.** For a guess ``T``, a unit with ``nb(U) > T`` cannot sit on an accelerator and
  one with ``p_cpu(U) > T`` cannot sit on a core. The accelerators hold at most ``k T`` of
  accelerator work and the cores at most ``l T`` of CPU work; whether some *fractional* split
  of the units fits is a fractional knapsack (move units to the cores in order of saved
  accelerator time per CPU time). If not even a fraction fits, ``T < T*``. Feasibility only
  grows with ``T``, so bisection finds the least feasible ``T``: a bound that is the classic
  one without cores and stays valid with them.

Complexity ``O(n + sum_h |h|^2)`` for the neighbourhood terms and ``O(U log U)`` per
bisection step (60 steps).

Example
-------
>>> from devplace_lite.generators import skip_chain
>>> from devplace_lite.devices import Cluster
>>> g = skip_chain(20, seed=0)
>>> b = combinatorial_bound(g, Cluster(accelerators=4))
>>> b.bound >= classic_bound(g, Cluster(accelerators=4)).bound
True
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from ...devices import Cluster
from ...errors import UsageError
from ...graph import Graph
from ...result import Bound
from .units import UnitModel


def classic_bound(graph: Graph, cluster: Cluster, *, time_limit: float | None = None) -> Bound:
    """``max(sum p_acc / k, max p_acc)``: the textbook bound; clusters without CPU cores only."""
    t0 = time.perf_counter()
    if cluster.l:
        raise UsageError("the classic bound sum(p_acc)/k is not valid when CPU cores can take work; "
                         "use the combinatorial bound")
    if not graph.supported.all():
        return Bound(math.inf, "classic", time.perf_counter() - t0, "infeasible")
    value = max(float(graph.p_acc.sum()) / cluster.k, float(graph.p_acc.max(initial=0.0)))
    return Bound(value, "classic", time.perf_counter() - t0, "trivial")


def node_bound(graph: Graph, cluster: Cluster) -> Bound:
    """The slowest node at its fastest allowed device (an accelerator where it is supported and
    fits the memory cap, a CPU core where it has a CPU time): every placement runs it somewhere.
    ``O(n)`` with no model built, the answer of last resort when a stronger bound runs out of
    time before its model is even ready."""
    from ...cost import allowed_kinds  # the one definition of where a node may run

    t0 = time.perf_counter()
    acc, cpu = allowed_kinds(graph, cluster)
    fastest = np.minimum(np.where(acc, graph.p_acc, np.inf), np.where(cpu, graph.p_cpu, np.inf))
    if not np.isfinite(fastest).all():
        return Bound(math.inf, "node", time.perf_counter() - t0, "infeasible")
    return Bound(float(fastest.max(initial=0.0)), "node", time.perf_counter() - t0, "trivial")


def neighbourhood(model: UnitModel) -> np.ndarray:
    """``nb(U)`` for every unit (``inf`` for units no accelerator may hold).

    Vectorised over the triples ``(h, U, X)``, ``U != X`` both in hyperedge ``h``; the sums run
    in the order of the formula, so the values do not depend on how the triples are stored.
    """
    U, H = model.U, model.H
    nb = model.pa.astype(float).copy()
    if H:
        size = np.diff(model.h_ptr) + 1  # root and the other units
        ptr = np.concatenate([[0], np.cumsum(size)])
        unit = np.empty(int(ptr[-1]), dtype=np.int64)  # every hyperedge's units, root first
        unit[ptr[:-1]] = model.h_root
        rest = np.ones(len(unit), dtype=bool)
        rest[ptr[:-1]] = False
        unit[rest] = model.h_units
        edge = np.repeat(np.arange(H), size)
        # triple t pairs incidence inc[t] (h, U) with the unit at position x[t] of h
        inc = np.repeat(np.arange(len(unit)), size[edge])
        x = ptr[edge[inc]] + (np.arange(len(inc)) - np.repeat(np.cumsum(size[edge]) - size[edge], size[edge]))
        keep = unit[inc] != unit[x]
        inc, x = inc[keep], unit[x[keep]]
        _, pair, deg = np.unique(unit[inc] * U + x, return_inverse=True, return_counts=True)
        share = np.bincount(inc, weights=model.pa[x] / deg[pair.reshape(-1)], minlength=len(unit))
        blocked = np.bincount(inc, weights=~model.acc_ok[x], minlength=len(unit)) > 0
        cost = model.h_cost[edge]
        term = np.where(blocked, cost, np.minimum(cost, share))
        by_unit = np.lexsort((edge, unit))  # per unit, its hyperedges in ascending order
        np.add.at(nb, unit[by_unit], term[by_unit])
    return np.where(model.acc_ok, nb, np.inf)


def _fits(T: float, k: int, l_: int, nb: np.ndarray, pa: np.ndarray, pc: np.ndarray) -> bool:
    """Whether a fractional split of the units fits under ``T`` (see the module docstring)."""
    can_acc = nb <= T
    can_cpu = np.isfinite(pc) & (pc <= T)
    if not np.all(can_acc | can_cpu):
        return False
    forced_cpu = can_cpu & ~can_acc
    flexible = can_acc & can_cpu
    room = l_ * T - float(pc[forced_cpu].sum())
    if room < 0:
        return False
    acc_work = float(pa[can_acc & ~can_cpu].sum())
    fp, fc = pa[flexible], pc[flexible]
    free = fc <= 0
    keep_p, keep_c = fp[~free], fc[~free]
    order = np.argsort(-keep_p / keep_c, kind="stable")
    keep_p, keep_c = keep_p[order], keep_c[order]
    cum = np.cumsum(keep_c)
    whole = int(np.searchsorted(cum, room, side="right"))  # units moved to the cores entirely
    acc_work += float(keep_p[whole:].sum())
    if whole < len(keep_p):  # part of the next unit fits in what room is left
        left = room - (float(cum[whole - 1]) if whole else 0.0)
        acc_work -= keep_p[whole] * left / keep_c[whole]
    return acc_work <= k * T * (1 + 1e-12)


def combinatorial_bound(graph: Graph, cluster: Cluster, *, time_limit: float | None = None,
                        on_progress: Callable[[Bound], None] | None = None) -> Bound:
    """The strongest closed-form bound of this module: ``max`` of the neighbourhood bound and
    the knapsack bound, valid for any split, with or without CPU cores and memory caps (a
    memory cap only forbids units bigger than it on accelerators). One step, polynomial:
    ``time_limit`` and ``on_progress`` (the registry's signature) have nothing to act on."""
    t0 = time.perf_counter()
    if graph.n == 0:  # nothing to place: every device idles, and 0 is the optimum
        return Bound(0.0, "combinatorial", time.perf_counter() - t0, "optimal", kind="any")
    model = UnitModel(graph, cluster, chain=False)
    nb = neighbourhood(model)
    pc = np.where(model.cpu_ok, model.pc, np.nan)
    pc_inf = np.where(np.isnan(pc), np.inf, pc)
    extra = {"largest_unit": float(np.fmin(np.where(model.acc_ok, model.pa, np.inf), pc_inf).max()),
             "neighbourhood": float(np.fmin(nb, pc_inf).max())}
    unit_best = np.fmin(nb, pc_inf)
    if not np.all(np.isfinite(unit_best)):
        bad = int(np.flatnonzero(~np.isfinite(unit_best))[0])
        node = graph.nodes[int(np.flatnonzero(model.unit == bad)[0])].id
        return Bound(math.inf, "combinatorial", time.perf_counter() - t0, "infeasible",
                     extra={"reason": f"node {node} fits on no device of the cluster"})
    lo = float(unit_best.max())
    hi = lo + float(model.pa.sum()) + float(np.nansum(pc)) + 1.0
    if cluster.l == 0:  # every unit on an accelerator: the bisection has a closed form
        value = max(lo, float(model.pa.sum()) / cluster.k)
    elif _fits(lo, cluster.k, cluster.l, nb, model.pa, pc):
        value = lo
    else:
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if _fits(mid, cluster.k, cluster.l, nb, model.pa, pc):
                hi = mid
            else:
                lo = mid
        value = lo
    extra["knapsack"] = value
    if cluster.l == 0:
        extra["total_work_over_k"] = float(model.pa.sum()) / max(cluster.k, 1)
    return Bound(value, "combinatorial", time.perf_counter() - t0, "trivial", kind="any", extra=extra)
