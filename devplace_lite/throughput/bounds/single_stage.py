"""Bounds from one stage at a time: the pinned-stage bound and the reach bound.

Both work with *stage-shaped* sets: ``S = D \\ A`` for ideals ``A ⊆ D`` of the forward unit
graph (`UnitModel`, ``chain=True``); every part of a chain split is one. The load of ``S`` on an
accelerator is modelled exactly (work plus each crossing hyperedge), so a MIP with ``2U``
binaries, whatever ``k``, answers questions about a single stage.

**Pinned stage.** Unit ``v`` sits in some part of every chain split. If that part is an
accelerator, its load is at least ``min { acc(S) : S stage-shaped, v in S, mem(S) <= M }``;
if it is a CPU core, at least ``p_cpu(v)``. The smaller of the two, maximised over ``v``, is a
lower bound on the chain optimum. It catches what work-sharing arguments miss: a node whose
every stage must also pay for large transfers (a weight read at both ends of a network).

**Reach bound.** Fix a guess ``T``. How much work can the first ``s`` stages of a chain split
hold if no stage exceeds ``T``? Let ``M_0 = 0`` and

    M_s = max { p(D) : A ⊆ D ideals, p(A) <= M_{s-1}, acc(D \\ A) <= T, mem(D \\ A) <= M }.

By induction every chain split with max-load ``<= T`` has ``p(D_s) <= M_s`` for its prefix
``D_s`` of ``s`` stages (the pair ``(D_{s-1}, D_s)`` is feasible for the ``s``-th problem). So if
``M_k < p(V)`` no chain split reaches ``T``, and ``T`` is a lower bound. ``M_k`` only grows with
``T``, so bisection on ``T`` finds the largest refuted guess. With CPU cores the steps form a
grid: ``M[a][c] = max(R_acc(M[a-1][c]), R_cpu(M[a][c-1]))`` where a CPU step moves a set of
CPU-runnable units of CPU time ``<= T``. Unlike the window relaxation it charges *every* stage
its communication; what it forgets is the shape of the prefix (only its work is kept).
A MIP stopped by its time limit contributes its dual bound, an over-estimate of ``M_s``, so
the refutations stay valid.

Both bounds hold for chain splits only.

Complexity: one MIP (``2U`` binaries, ``O(U + sum |h|)`` rows) per candidate unit for the pinned
bound; up to ``(k + 1)(l + 1)`` MIPs per guess ``T`` for the reach bound.

Example
-------
>>> from devplace_lite.generators import cells
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.throughput.exhaustive import exhaustive
>>> g, c = cells(11, seed=0), Cluster(accelerators=2)
>>> model = UnitModel(g, c)
>>> b = reach_bound(model, lower=0.5 * float(model.pa.sum()) / 2)
>>> b.bound <= exhaustive(g, c).objective * (1 + 1e-6)
True
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...dag import transitive_closure
from ...result import Bound
from ...mip.solve import LinearModel, run_highs
from .stages import SAFETY, _cross_rows, _lower, _safe
from .units import UnitModel


#: Relative gap at which a reach step stops: its dual bound is still a valid over-estimate.
REL_GAP = 1e-3


def ancestor_work(model: UnitModel) -> np.ndarray:
    """``p_acc`` of each unit plus all its ancestors (the least ideal holding it)."""
    succ: list[list[int]] = [[] for _ in range(model.U)]
    for a, b in model.prec.tolist():
        succ[a].append(b)
    closure = transitive_closure(succ, model.topological_order()).T
    closure[np.diag_indices(model.U)] = True
    return closure.astype(float) @ model.pa


class StageSet:
    """A MIP over stage-shaped sets ``S = D \\ A`` of one kind (``"acc"`` or ``"cpu"``).

    ``objective="reach"``: maximise ``p_acc(D)`` subject to ``p_acc(A) <= w`` and
    ``load(S) <= T`` (set by `reach`). ``objective="load"``: minimise ``load(S)`` with a pinned
    unit (`pinned`). The HiGHS model is built once and re-solved with new bounds.
    """

    def __init__(self, model: UnitModel, kind: str = "acc", objective: str = "reach") -> None:
        self.model, self.kind, self.objective = model, kind, objective
        U = model.U
        P = LinearModel()
        ok = model.acc_ok if kind == "acc" else model.cpu_ok
        weight = model.pa.astype(float) if kind == "acc" else np.nan_to_num(model.pc)
        reach = objective == "reach"
        # reach: minimise -p(D); load: minimise weight(D) - weight(A) + comm
        self.A = P.add_vars(U, integer=True, cost=0.0 if reach else -weight, ub=1.0)
        self.D = P.add_vars(U, integer=True, cost=-model.pa if reach else weight, ub=1.0)
        P.add_rows(np.stack([self.A, self.D], axis=1), [1.0, -1.0], hi=0.0)
        if len(model.prec):
            s, t = model.prec[:, 0], model.prec[:, 1]
            P.add_rows(np.stack([self.A[t], self.A[s]], axis=1), [1.0, -1.0], hi=0.0)
            P.add_rows(np.stack([self.D[t], self.D[s]], axis=1), [1.0, -1.0], hi=0.0)
        bad = np.flatnonzero(~ok)  # never in S
        if len(bad):
            P.add_rows(np.stack([self.D[bad], self.A[bad]], axis=1), [1.0, -1.0], lo=0.0, hi=0.0)
        cols, vals = [self.D, self.A], [weight, -weight]
        if kind == "acc" and model.H:
            y = P.add_vars(model.H, cost=0.0 if reach else model.h_cost, ub=1.0)
            _cross_rows(P, model, y, lambda X: [(self.D[X], 1.0), (self.A[X], -1.0)])
            cols.append(y)
            vals.append(model.h_cost)
        self.load_row = P.n_rows
        P.add_rows(np.concatenate(cols), np.concatenate(vals), hi=math.inf)
        self.mem_row = None
        if kind == "acc" and math.isfinite(model.cluster.memory):
            self.mem_row = P.n_rows
            P.add_rows(np.concatenate([self.D, self.A]), np.concatenate([model.mem, -model.mem]), hi=model.cluster.memory)
        self.work_row = P.n_rows
        P.add_rows(self.A, model.pa, hi=math.inf)
        self.gap = REL_GAP if reach else 1e-6
        self.h = P.highs(gap=self.gap)
        self.h.setOptionValue("mip_heuristic_effort", 0.0)  # only the dual bound is wanted
        self._cols = np.concatenate([self.A, self.D]).astype(np.int32)
        self._anc = ancestor_work(model) if reach else None

    def _window(self, w: float, T: float) -> None:
        """Fix out units whose ancestors alone outweigh what ``A`` (``<= w``) or ``D``
        (``<= w + T``: a stage of load ``<= T`` holds at most ``T`` of work) may hold."""
        # a CPU stage's work is not bounded by its load: leave D free there
        reach_d = self._anc <= w + T if self.kind == "acc" else np.ones(len(self._anc), dtype=bool)
        ub = np.concatenate([self._anc <= w, reach_d]).astype(float)
        self.h.changeColsBounds(len(self._cols), self._cols, np.zeros(len(self._cols)), ub)

    def reach(self, w: float, T: float, time_limit: float | None = None) -> tuple[float, str]:
        """An upper bound on ``max p(D)`` with ``p(A) <= w`` and ``load(D \\ A) <= T``."""
        self.h.changeRowBounds(self.load_row, -math.inf, T)
        self.h.changeRowBounds(self.work_row, -math.inf, w)
        self._window(w, T)
        ans = self._run(time_limit)
        if ans.status == "infeasible":  # cannot happen (S empty is feasible); be safe anyway
            return w, "optimal"
        value = -_lower(ans)
        return value + SAFETY * abs(value) + 1e-12, ans.status

    def _run(self, time_limit: float | None):
        ans = run_highs(self.h, time_limit, self.gap)
        if ans.status == "gap":  # solved to the gap asked for
            ans.status = "optimal"
        return ans

    def pinned(self, v: int, time_limit: float | None = None) -> tuple[float, str]:
        """A lower bound on ``min load(S)`` over stage-shaped ``S`` holding unit ``v``."""
        self.h.changeColBounds(int(self.D[v]), 1.0, 1.0)
        self.h.changeColBounds(int(self.A[v]), 0.0, 0.0)
        ans = self._run(time_limit)
        self.h.changeColBounds(int(self.D[v]), 0.0, 1.0)
        self.h.changeColBounds(int(self.A[v]), 0.0, 1.0)
        if ans.status == "infeasible":
            return math.inf, "optimal"
        return _safe(_lower(ans)), ans.status


def pinned_bound(model: UnitModel, candidates, *, time_limit: float | None = None,
                 lower: float = 0.0) -> Bound:
    """``max over v in candidates of min(pinned acc load of v, p_cpu(v))`` (see the module
    docstring); candidates are tried in the given order until the time runs out."""
    t0 = time.perf_counter()
    acc = StageSet(model, "acc", "load") if model.cluster.k else None
    best, status, tried = lower, "optimal", 0
    for v in candidates:
        left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
        if left is not None and left <= 0.01:
            status = "time_limit"
            break
        cpu = float(model.pc[v]) if model.cpu_ok[v] else math.inf
        if cpu <= best:
            tried += 1
            continue
        if acc is not None and model.acc_ok[v]:
            value, st = acc.pinned(int(v), left)
            if st != "optimal":
                status = "time_limit"
        else:
            value = math.inf
        best = max(best, min(value, cpu))
        tried += 1
    return Bound(best, "pinned", time.perf_counter() - t0, status, kind="chain", extra={"tried": tried})


def _refutes(acc: StageSet | None, cpu: StageSet | None, k: int, l_: int, W: float, T: float,
             deadline: float | None) -> tuple[bool, bool]:
    """(``T`` is refuted, every MIP was solved to optimality) for the reach recursion.

    Without cores a stage of load ``<= T`` holds at most ``T`` of work, so the recursion also
    stops as soon as ``M + (stages left) T < p(V)``.
    """
    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    exact = True
    M = np.full((k + 1, l_ + 1), -math.inf)
    M[0, 0] = 0.0
    for a in range(k + 1):
        for c in range(l_ + 1):
            if a == 0 and c == 0:
                continue
            remaining = left()
            if remaining is not None and remaining <= 0.01:
                return False, False
            best = -math.inf
            if a > 0:
                if l_ == 0 and M[a - 1, c] + (k - a + 1) * T < W:
                    return True, exact  # even full stages from here on cannot cover the rest
                value, st = acc.reach(M[a - 1, c], T, remaining)
                exact &= st == "optimal"
                best = max(best, value)
            if c > 0:
                value, st = cpu.reach(M[a, c - 1], T, remaining)
                exact &= st == "optimal"
                best = max(best, value)
            M[a, c] = best
            if best >= W:
                return False, exact
    return bool(M[k, l_] < W), exact


def reach_bound(model: UnitModel, *, lower: float, upper: float | None = None,
                time_limit: float | None = None, tol: float = 1e-3) -> Bound:
    """The reach bound by a search between ``lower`` (a proven bound) and ``upper`` (a known
    feasible max-load, or found by doubling): the largest refuted ``T``. Status ``optimal``
    when the search closed to relative ``tol`` with every MIP solved, else ``time_limit``."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    cl = model.cluster
    acc = StageSet(model, "acc") if cl.k else None
    cpu = StageSet(model, "cpu") if cl.l else None
    W = float(model.pa.sum())
    lo, exact, tests = float(lower), True, 0
    hi = upper
    step = 0.01
    while hi is None:  # grow until a guess survives
        T = lo * (1 + step) if lo > 0 else 1e-9
        refuted, ok = _refutes(acc, cpu, cl.k, cl.l, W, T, deadline)
        tests += 1
        exact &= ok
        if refuted:
            lo, step = T, step * 2
        else:
            hi = T
        if deadline is not None and time.perf_counter() > deadline:
            break
    # the bound is usually much closer to a good split than to the combinatorial bound: probe
    # three quarters of the way up (a refuted probe raises the bound at once)
    while hi is not None and hi - lo > tol * hi:
        if deadline is not None and time.perf_counter() > deadline:
            exact = False
            break
        T = lo + 0.75 * (hi - lo)
        refuted, ok = _refutes(acc, cpu, cl.k, cl.l, W, T, deadline)
        tests += 1
        exact &= ok
        if refuted:
            lo = T
        elif ok:
            hi = T
        else:
            exact = False
            break
    status = "optimal" if exact and hi is not None and hi - lo <= tol * hi else "time_limit"
    return Bound(lo, "reach", time.perf_counter() - t0, status, kind="chain", extra={"tests": tests})
