"""Ordered-stage MIPs: the exact chain-of-ideals model, and the window relaxation.

A chain split orders its parts so that every forward edge goes forward (Archer et al., 2024,
call them stages; Tarnawski et al., 2020, chains of ideals). Both formulations here work on
the units of `UnitModel` (colour classes, forward cycles fused, free leaves merged) and on its
hyperedges: an accelerator holding the unit set ``S`` pays ``c(h)`` when ``h`` crosses ``S``.

**Exact ordered-stage MIP** (`stage_mip`). ``K = k + l`` stages, each an accelerator or a CPU
core (``t_s = 1`` for a core, ``sum_s t_s = l``). ``z[U, s] = 1`` when unit ``U`` sits in a stage
``<= s`` (an ideal for each ``s``: ``z[B, s] <= z[A, s]`` for a forward arc ``A -> B``, and
``z[U, s-1] <= z[U, s]``); ``x[U, s] = z[U, s] - z[U, s-1]``. A hyperedge ``h`` with root ``r``
crosses stage ``s`` when some unit ``X`` of it has ``x[X, s] != x[r, s]``:
``y[h, s] >= +-(x[X, s] - x[r, s]) - t_s``. Stage loads ``<= T``, memory ``<= M`` on
accelerator stages, minimise ``T``: ``(k + l) U`` binaries. Its optimum is the chain optimum;
with a time limit, HiGHS's dual bound is a lower bound on it.

**Window relaxation** (`window_relaxation`, the "model one stage exactly" bound for
``width=1``). Fix the accelerator stage ``b`` and a width ``m``. Let ``I_0 ⊆ I_1 ⊆ ... ⊆ I_m`` be
the accelerator units of the stages before ``b``, ``<= b``, ..., ``<= b + m - 1`` (ideals of the
graph where CPU units are left out), ``y[U] = 1`` for units on CPU cores. Then

* stages ``b .. b+m-1`` are modelled exactly: ``p_acc(I_{j+1} \\ I_j) + comm <= T``;
* the ``b - 1`` stages before, holding ``alpha = I_0``, have total load at least
  ``p_acc(alpha) + sum of c(h) over hyperedges crossing alpha`` (each such ``h`` has a unit in
  some stage of ``alpha`` whose stage does not hold all of ``h``; that stage pays ``c(h)``), and
  the total is at most ``(b - 1) T``;
* likewise the ``k - b - m + 1`` stages after, holding ``gamma``: total ``<= (k - b - m + 1) T``;
* the cores hold ``sum p_cpu(y) <= l T`` and each CPU unit ``p_cpu(U) <= T``;
* memory: ``<= M`` per exact stage, ``<= (b-1) M`` before, ``<= (k-b-m+1) M`` after.

Every chain split of max-load ``T*`` gives a feasible point with ``T = T*`` (take its
accelerator stages in order, padded with empty ones; CPU units leave the ideals, which only
drops constraints), so the minimum ``T`` for *each* ``b`` is a lower bound on the chain optimum,
and so is the maximum over ``b``. Binaries: ``(m + 1) U`` (plus ``U`` with cores), whatever ``k``.
With ``m = k`` and no cores it is the exact MIP again.

Neither bound holds for non-chain splits (both use ideals).

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> g, c = layered(10, seed=1), Cluster(accelerators=2)
>>> exact = stage_mip(g, c)
>>> relaxed = max(window_relaxation(g, c, b).bound for b in (1, 2))
>>> exact.status, relaxed <= exact.objective * (1 + 1e-6)
('optimal', True)

Reference: A. Archer, M. Fahrbach, K. Liu, P. Prabhu, "Practical Performance Guarantees for
Pipelined DNN Inference", ICML 2024 (the ordered-stage model and the idea of relaxing it).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...cost import evaluate
from ...devices import Cluster
from ...errors import UsageError
from ...graph import Graph
from ...result import Result
from ...result import Bound
from ...mip.solve import LinearModel, Solution, solve
from .units import UnitModel

#: HiGHS proves bounds up to its feasibility tolerances; report a hair below (relative).
SAFETY = 1e-7


def _safe(value: float) -> float:
    return value - SAFETY * abs(value) if math.isfinite(value) else value


def _lower(sol: Solution) -> float:
    """The solver's proven lower bound (``-inf`` when it proved none)."""
    return -math.inf if sol.bound is None else sol.bound


def _solve(P: LinearModel, time_limit: float | None) -> Solution:
    """HiGHS to a relative gap of 1e-6, which counts as solved."""
    sol = solve(P, "highs", time_limit=time_limit, gap=1e-6)
    if sol.status == "gap":
        sol.status = "optimal"
    return sol


def _cross_rows(P: LinearModel, model: UnitModel, yvar: np.ndarray, terms) -> None:
    """Rows ``y[h] >= +-(G[X] - G[root])`` for every hyperedge ``h`` and other unit ``X``, where
    the group indicator ``G[U] = const + sum coef * var`` is given by ``terms(U-array)``:
    a list of (variable index array, coefficient) pairs (constants cancel in the difference)."""
    if model.H == 0:
        return
    h_of = np.repeat(np.arange(model.H), np.diff(model.h_ptr))
    X, R = model.h_units, model.h_root[h_of]
    tx, tr = terms(X), terms(R)
    cols = np.stack([yvar[h_of]] + [v for v, _ in tx] + [v for v, _ in tr], axis=1)
    coefs = np.array([1.0] + [-c for _, c in tx] + [c for _, c in tr])
    P.add_rows(cols, coefs, lo=0.0)        # y >= G[X] - G[r]
    coefs2 = np.array([1.0] + [c for _, c in tx] + [-c for _, c in tr])
    P.add_rows(cols, coefs2, lo=0.0)       # y >= G[r] - G[X]


def stage_mip(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, lower: float = 0.0,
              seed: int = 0) -> Result:
    """The exact ordered-stage MIP (chain splits; accelerators and CPU cores; memory caps).

    Returns a `Result` whose ``objective`` is the incumbent's max-load (re-scored by the
    evaluator), ``bound`` HiGHS's proven dual bound, ``status`` ``optimal`` or ``time_limit``
    (or ``infeasible`` when no chain split exists). ``lower`` is a known lower bound that
    seeds the search (``T >= lower``).
    """
    t0 = time.perf_counter()
    model = UnitModel(graph, cluster, chain=True)
    k, l_, U = cluster.k, cluster.l, model.U
    K = k + l_
    P = LinearModel()
    T = P.add_vars(1, lb=lower, ub=math.inf, cost=1.0)[0]
    z = P.add_vars((U, max(K - 1, 0)), integer=True, ub=1.0)
    x = P.add_vars((U, K), ub=1.0)
    # x[U, s] = z[U, s] - z[U, s-1], with z[U, -1] = 0 and z[U, K-1] = 1
    for s in range(K):
        cols, vals, rhs = [x[:, s]], [1.0], 0.0
        if s < K - 1:
            cols.append(z[:, s])
            vals.append(-1.0)
        else:
            rhs = 1.0
        if s > 0:
            cols.append(z[:, s - 1])
            vals.append(1.0)
        P.add_rows(np.stack(cols, axis=1), vals, lo=rhs, hi=rhs)
    if K > 1 and len(model.prec):
        A, B = model.prec[:, 0], model.prec[:, 1]
        for s in range(K - 1):
            P.add_rows(np.stack([z[B, s], z[A, s]], axis=1), [1.0, -1.0], hi=0.0)
    if l_:
        t = P.add_vars(K, integer=True, ub=1.0)
        P.add_rows(t, 1.0, lo=l_, hi=l_)
        xa, xc = P.add_vars((U, K), ub=1.0), P.add_vars((U, K), ub=1.0)
        P.add_rows(np.stack([x.ravel(), xa.ravel(), xc.ravel()], axis=1), [1.0, -1.0, -1.0], lo=0.0, hi=0.0)
        tt = np.broadcast_to(t[None, :], (U, K)).ravel()
        P.add_rows(np.stack([xa.ravel(), tt], axis=1), [1.0, 1.0], hi=1.0)
        P.add_rows(np.stack([xc.ravel(), tt], axis=1), [1.0, -1.0], hi=0.0)
        P.fix(xc[~model.cpu_ok].ravel(), 0.0)
    else:
        xa = x
    P.fix(xa[~model.acc_ok].ravel(), 0.0)
    y = P.add_vars((model.H, K), ub=1.0)
    for s in range(K):
        _cross_rows_typed(P, model, y[:, s], x[:, s], t[s] if l_ else None)
        cols = np.concatenate([xa[:, s], y[:, s], [T]])
        vals = np.concatenate([model.pa, model.h_cost, [-1.0]])
        P.add_rows(cols, vals, hi=0.0)
        if l_:
            P.add_rows(np.concatenate([xc[:, s], [T]]), np.concatenate([np.nan_to_num(model.pc), [-1.0]]), hi=0.0)
        if math.isfinite(cluster.memory):
            P.add_rows(xa[:, s], model.mem, hi=cluster.memory)
    # the limit covers building the model too
    ans = _solve(P, None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01))
    seconds = time.perf_counter() - t0
    extra = {"nodes": ans.nodes, "stages": K, "units": U, "binaries": U * max(K - 1, 0) + (K if l_ else 0)}
    if ans.status == "infeasible":
        return Result("stage-mip", graph, cluster, None, None, "infeasible", seconds, bound=math.inf, extra=extra)
    assignment = objective = None
    if ans.values is not None:
        X = ans.values[x]
        stage = np.argmax(X, axis=1)
        if l_:
            is_cpu = ans.values[t] > 0.5
        else:
            is_cpu = np.zeros(K, dtype=bool)
        dev = np.empty(K, dtype=np.int64)
        dev[~is_cpu] = np.arange(int((~is_cpu).sum()))
        dev[is_cpu] = k + np.arange(int(is_cpu.sum()))
        assignment = dev[stage][model.unit]
        objective = evaluate(graph, cluster, assignment).max_load
    bound = max(_safe(_lower(ans)), lower)
    if objective is not None:
        bound = min(bound, objective)
    status = ans.status if assignment is not None else "time_limit"
    return Result("stage-mip", graph, cluster, assignment, objective, status, seconds, bound=bound, extra=extra)


def _cross_rows_typed(P: LinearModel, model: UnitModel, ycol: np.ndarray, xcol: np.ndarray, t_s) -> None:
    """``y[h] >= +-(x[X] - x[root]) - t_s`` for one stage (``t_s`` None: accelerators only)."""
    if model.H == 0:
        return
    h_of = np.repeat(np.arange(model.H), np.diff(model.h_ptr))
    cols = [ycol[h_of], xcol[model.h_units], xcol[model.h_root[h_of]]]
    if t_s is not None:
        cols.append(np.full(len(h_of), t_s))
    cols = np.stack(cols, axis=1)
    tail = [1.0] if t_s is not None else []
    P.add_rows(cols, [1.0, -1.0, 1.0] + tail, lo=0.0)
    P.add_rows(cols, [1.0, 1.0, -1.0] + tail, lo=0.0)


def window_relaxation(graph: Graph, cluster: Cluster, b: int, width: int = 1, *,
                      time_limit: float | None = None, lower: float = 0.0,
                      model: UnitModel | None = None) -> Bound:
    """The window relaxation for accelerator stages ``b .. b + width - 1`` (1-based).

    A lower bound on the chain optimum (see the module docstring for the proof); with a time
    limit, the solver's dual bound. ``lower`` (a known bound) seeds ``T >= lower``.
    """
    t0 = time.perf_counter()
    k, l_ = cluster.k, cluster.l
    if k == 0:
        raise UsageError("the window relaxation needs at least one accelerator")
    m = min(width, k)
    if not 1 <= b <= k - m + 1:
        raise UsageError(f"stage b={b} out of range 1..{k - m + 1} for k={k}, width={m}")
    model = model or UnitModel(graph, cluster, chain=True)
    U = model.U
    n_before, n_after = b - 1, k - b - m + 1
    P = LinearModel()
    T = P.add_vars(1, lb=lower, ub=math.inf, cost=1.0)[0]
    I = P.add_vars((U, m + 1), integer=True, ub=1.0)
    for j in range(m):
        P.add_rows(np.stack([I[:, j], I[:, j + 1]], axis=1), [1.0, -1.0], hi=0.0)
    if l_:
        y = P.add_vars(U, integer=True, ub=1.0)
        P.add_rows(np.stack([I[:, m], y], axis=1), [1.0, 1.0], hi=1.0)
        P.fix(y[~model.cpu_ok], 0.0)
        P.fix(y[~model.acc_ok], 1.0)
    else:
        y = None
    P.fix(I[~model.acc_ok].ravel(), 0.0)
    if len(model.prec):
        A, B = model.prec[:, 0], model.prec[:, 1]
        for j in range(m + 1):
            if l_:
                P.add_rows(np.stack([I[B, j], I[A, j], y[A]], axis=1), [1.0, -1.0, -1.0], hi=0.0)
            else:
                P.add_rows(np.stack([I[B, j], I[A, j]], axis=1), [1.0, -1.0], hi=0.0)
    if n_before == 0:
        P.fix(I[:, 0], 0.0)
    if n_after == 0:
        if l_:
            P.add_rows(np.stack([I[:, m], y], axis=1), [1.0, 1.0], lo=1.0, hi=1.0)
        else:
            P.fix(I[:, m], 1.0)
    mem_cap = cluster.memory if math.isfinite(cluster.memory) else None
    # exact stages
    for j in range(m):
        yb = P.add_vars(model.H, ub=1.0)
        _cross_rows(P, model, yb, lambda X, j=j: [(I[X, j + 1], 1.0), (I[X, j], -1.0)])
        P.add_rows(np.concatenate([I[:, j + 1], I[:, j], yb, [T]]),
              np.concatenate([model.pa, -model.pa, model.h_cost, [-1.0]]), hi=0.0)
        if mem_cap is not None:
            P.add_rows(np.concatenate([I[:, j + 1], I[:, j]]), np.concatenate([model.mem, -model.mem]), hi=mem_cap)
    # the stages before: alpha = I_0
    if n_before:
        ya = P.add_vars(model.H, ub=1.0)
        _cross_rows(P, model, ya, lambda X: [(I[X, 0], 1.0)])
        P.add_rows(np.concatenate([I[:, 0], ya, [T]]), np.concatenate([model.pa, model.h_cost, [-float(n_before)]]),
              hi=0.0)
        if mem_cap is not None:
            P.add_rows(I[:, 0], model.mem, hi=n_before * mem_cap)
    # the stages after: gamma = 1 - I_m - y
    if n_after:
        yg = P.add_vars(model.H, ub=1.0)
        g_terms = (lambda X: [(I[X, m], 1.0), (y[X], 1.0)]) if l_ else (lambda X: [(I[X, m], 1.0)])
        _cross_rows(P, model, yg, g_terms)  # the sign of G does not matter for |G[X] - G[r]|
        cols, vals = [I[:, m], yg, [T]], [-model.pa, model.h_cost, [-float(n_after)]]
        if l_:
            cols.insert(1, y)
            vals.insert(1, -model.pa)
        P.add_rows(np.concatenate(cols), np.concatenate(vals), hi=-float(model.pa.sum()))
        if mem_cap is not None:
            cols, vals = [I[:, m]], [-model.mem]
            if l_:
                cols.append(y)
                vals.append(-model.mem)
            P.add_rows(np.concatenate(cols), np.concatenate(vals), hi=n_after * mem_cap - float(model.mem.sum()))
    if l_:
        pc = np.nan_to_num(model.pc)
        P.add_rows(np.concatenate([y, [T]]), np.concatenate([pc, [-float(l_)]]), hi=0.0)
        big = np.flatnonzero(model.cpu_ok & (pc > lower))
        if len(big):
            P.add_rows(np.stack([y[big], np.full(len(big), T)], axis=1), np.stack([pc[big], -np.ones(len(big))], axis=1),
                   hi=0.0)
    ans = _solve(P, None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01))
    seconds = time.perf_counter() - t0
    extra = {"b": b, "width": m, "nodes": ans.nodes}
    if ans.status == "infeasible":
        return Bound(math.inf, "window", seconds, "infeasible", kind="chain", extra=extra)
    value = max(_safe(_lower(ans)), lower)
    if ans.objective is not None:
        value = min(value, ans.objective)
    return Bound(value, "window", seconds, ans.status, kind="chain", extra=extra)

