"""Solver plumbing shared by the integer programs: a small linear model and two open solvers.

The formulations in `devplace_lite.mip.throughput` and `devplace_lite.mip.latency` write their
rows into a `LinearModel` (columns with bounds and integrality, rows ``lo <= a x <= hi``,
minimise ``c x``), and `solve` hands it to SCIP (through PySCIPOpt, the default) or HiGHS
(through highspy). Why not solve the cvxpy versions of the same models (`devplace_lite.mip.cvx`)
directly: on a time limit cvxpy reports neither the incumbent nor the proven bound, and its
warm start does not reach SCIP or HiGHS. Building the rows ourselves gives the contract every
method of the library keeps:

* a time limit always returns the best solution found, the proven lower bound and the status
  ``time_limit``;
* a warm start (a full feasible column vector) is handed to the solver before it starts;
* one thread and a fixed seed, so a run without a time limit repeats exactly.

Example
-------
>>> m = LinearModel()
>>> x = m.add_vars(2, integer=True, ub=1)
>>> m.add_row([(x[0], 1.0), (x[1], 1.0)], lo=1)
>>> m.obj[x] = [2.0, 3.0]
>>> s = solve(m, "highs")
>>> s.status, s.objective, s.values[x].round().tolist()
('optimal', 2.0, [1.0, 0.0])
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from ..graph import GraphError

SOLVERS = ("scip", "highs")
INF = math.inf


class LinearModel:
    """Columns and rows of a mixed-integer linear program ``min c x, lo <= A x <= hi``.

    Columns are created in blocks (`add_vars` returns their indices in the block's shape, so a
    formulation can write ``X[u, d]``); rows are lists of ``(column, coefficient)`` terms.
    """

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[bool] = []
        self._obj: list[float] = []
        self._rows: list[int] = []
        self._cols: list[int] = []
        self._vals: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.obj = _ObjView(self._obj)

    @property
    def n_vars(self) -> int:
        return len(self.lb)

    @property
    def n_rows(self) -> int:
        return len(self.row_lo)

    def add_vars(self, shape: int | tuple[int, ...], lb: float | np.ndarray = 0.0, ub: float | np.ndarray = INF,
                 integer: bool = False) -> np.ndarray:
        """A block of columns; returns their indices as an int array of ``shape``."""
        size = int(np.prod(shape))
        start = self.n_vars
        self.lb.extend(np.broadcast_to(np.asarray(lb, dtype=float), (size,)).tolist()
                       if np.ndim(lb) == 0 else np.asarray(lb, dtype=float).reshape(-1).tolist())
        self.ub.extend(np.broadcast_to(np.asarray(ub, dtype=float), (size,)).tolist()
                       if np.ndim(ub) == 0 else np.asarray(ub, dtype=float).reshape(-1).tolist())
        self.integer.extend([integer] * size)
        self._obj.extend([0.0] * size)
        return np.arange(start, start + size, dtype=np.int64).reshape(shape)

    def add_row(self, terms: Iterable[tuple[int, float]], lo: float = -INF, hi: float = INF) -> None:
        """The row ``lo <= sum coef * x[col] <= hi`` (repeated columns add up)."""
        r = self.n_rows
        for col, coef in terms:
            if coef != 0.0:
                self._rows.append(r)
                self._cols.append(int(col))
                self._vals.append(float(coef))
        self.row_lo.append(float(lo))
        self.row_hi.append(float(hi))

    def matrix(self) -> sp.csr_matrix:
        """The row matrix ``A`` (duplicates summed)."""
        A = sp.csr_matrix((self._vals, (self._rows, self._cols)), shape=(self.n_rows, self.n_vars))
        A.sum_duplicates()
        A.eliminate_zeros()
        return A

    def violation(self, values: np.ndarray) -> float:
        """Largest violation of a bound, a row or integrality by a column vector."""
        x = np.asarray(values, dtype=float)
        lb, ub = np.array(self.lb), np.array(self.ub)
        worst = float(np.max(np.concatenate([[0.0], lb - x, x - ub])))
        ints = np.array(self.integer, dtype=bool)
        if ints.any():
            worst = max(worst, float(np.max(np.abs(x[ints] - np.round(x[ints])))))
        if self.n_rows:
            ax = self.matrix() @ x
            worst = max(worst, float(np.max(np.concatenate([np.array(self.row_lo) - ax, ax - np.array(self.row_hi)]))))
        return worst


class _ObjView:
    """``model.obj[cols] = coefs``: objective coefficients by column index."""

    def __init__(self, data: list[float]) -> None:
        self._data = data

    def __setitem__(self, cols, coefs) -> None:
        cols = np.atleast_1d(np.asarray(cols, dtype=np.int64))
        coefs = np.broadcast_to(np.asarray(coefs, dtype=float), cols.shape)
        for c, v in zip(cols.tolist(), coefs.tolist()):
            self._data[c] = v

    def array(self) -> np.ndarray:
        return np.array(self._data, dtype=float)


@dataclass
class Solution:
    """What a solver returned.

    ``status``: ``optimal`` (proven within the asked gap, 0 = exact), ``gap`` (stopped at a
    positive asked gap), ``time_limit`` or ``infeasible``. ``values`` is the best column vector
    found (``None`` if none), ``objective`` its value, ``bound`` the proven lower bound.
    """

    status: str
    values: np.ndarray | None
    objective: float | None
    bound: float | None
    seconds: float
    solver: str
    nodes: int
    start_accepted: bool | None = None


def check_solver(solver: str) -> str:
    name = str(solver).lower()
    if name not in SOLVERS:
        raise GraphError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    return name


def solve(model: LinearModel, solver: str = "scip", time_limit: float | None = None, gap: float = 0.0,
          seed: int = 0, threads: int = 1, start: Sequence[float] | None = None, verbose: bool = False) -> Solution:
    """Minimise the model with SCIP or HiGHS.

    ``time_limit`` in seconds (``None``: none); ``gap``: stop when ``(primal - dual) / primal``
    is at most this; ``start``: a feasible column vector to start from (a warm start);
    ``verbose``: let the solver print its log.
    """
    name = check_solver(solver)
    if time_limit is not None and not time_limit > 0:
        raise GraphError(f"time limit must be positive, got {time_limit}")
    if gap < 0:
        raise GraphError(f"gap must be non-negative, got {gap}")
    run = _solve_scip if name == "scip" else _solve_highs
    return run(model, time_limit, float(gap), int(seed), int(threads),
               None if start is None else np.asarray(start, float), verbose)


def _solve_scip(model: LinearModel, time_limit, gap, seed, threads, start, verbose) -> Solution:
    import pyscipopt as ps

    t0 = time.perf_counter()
    m = ps.Model()
    m.hideOutput(not verbose)
    m.setParam("randomization/randomseedshift", seed % 2**31)
    m.setParam("lp/threads", max(1, threads))
    m.setParam("limits/gap", gap)
    # probing in presolve can spend a minute on these models (thousands of set-partitioning
    # rows) and rarely fixes anything: leave it to the tree
    m.setParam("propagating/probing/maxprerounds", 0)
    # symmetry detection ignores the time limit: on the authors' BERT training graph it ran for
    # minutes. A shallow search still finds the symmetry of k identical devices (depth ~ k) and
    # gives up quickly on graphs that are symmetric in many other ways
    m.setParam("propagating/symmetry/nautymaxlevel", 50)
    if time_limit is not None:
        m.setParam("limits/time", float(time_limit))
    obj = model.obj.array()
    cols = []
    for j in range(model.n_vars):
        vt = "C"
        if model.integer[j]:
            vt = "B" if model.lb[j] >= 0 and model.ub[j] <= 1 else "I"
        lb = None if model.lb[j] == -INF else model.lb[j]
        ub = None if model.ub[j] == INF else model.ub[j]
        cols.append(m.addVar(name=f"x{j}", vtype=vt, lb=lb, ub=ub, obj=float(obj[j])))
    A = model.matrix()
    for r in range(model.n_rows):
        lo, hi = model.row_lo[r], model.row_hi[r]
        a, b = A.indptr[r], A.indptr[r + 1]
        expr = ps.quicksum(v * cols[c] for c, v in zip(A.indices[a:b].tolist(), A.data[a:b].tolist()))
        m.addCons(ps.scip.ExprCons(expr, lhs=None if lo == -INF else lo, rhs=None if hi == INF else hi))
    accepted = None
    if start is not None:
        sol = m.createSol()
        for c, v in zip(cols, start.tolist()):
            m.setSolVal(sol, c, v)
        accepted = bool(m.addSol(sol, free=True))
    m.optimize()
    status = m.getStatus()
    if status == "userinterrupt":  # SCIP caught Ctrl-C itself: Python never saw it
        raise KeyboardInterrupt
    values = objective = None
    if m.getNSols() > 0:
        best = m.getBestSol()
        values = np.array([m.getSolVal(best, c) for c in cols])
        objective = float(m.getSolObjVal(best))
    if status == "infeasible":
        kind, bound = "infeasible", None
    elif status == "optimal":
        kind, bound = "optimal", float(m.getDualbound())
    elif status == "gaplimit":
        kind, bound = "gap", float(m.getDualbound())
    elif status in ("timelimit", "nodelimit", "memlimit", "stallnodelimit"):
        kind, bound = "time_limit", float(m.getDualbound())
    else:
        raise RuntimeError(f"SCIP stopped with status {status}")
    return Solution(kind, values, objective, _finite(bound), time.perf_counter() - t0, "scip",
                    int(m.getNNodes()), accepted)


def _solve_highs(model: LinearModel, time_limit, gap, seed, threads, start, verbose) -> Solution:
    import highspy

    t0 = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(verbose))
    h.setOptionValue("threads", max(1, threads))
    h.setOptionValue("random_seed", seed % 2**31)
    h.setOptionValue("mip_rel_gap", gap)
    h.setOptionValue("mip_abs_gap", 1e-9 if gap == 0 else 1e-6)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    A = model.matrix()
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_vars
    lp.num_row_ = model.n_rows
    lp.col_cost_ = model.obj.array()
    lp.col_lower_ = np.array(model.lb)
    lp.col_upper_ = np.array(model.ub)
    lp.row_lower_ = np.array(model.row_lo)
    lp.row_upper_ = np.array(model.row_hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(float)
    lp.a_matrix_.num_col_ = model.n_vars
    lp.a_matrix_.num_row_ = model.n_rows
    lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                       for i in model.integer]
    h.passModel(lp)
    accepted = None
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = start.tolist()
        sol.value_valid = True
        accepted = h.setSolution(sol) == highspy.HighsStatus.kOk
    h.run()
    st = h.getModelStatus()
    info = h.getInfo()
    values = objective = None
    if info.primal_solution_status == 2:  # kSolutionStatusFeasible
        values = np.array(h.getSolution().col_value)
        objective = float(info.objective_function_value)
    S = highspy.HighsModelStatus
    if st == S.kInfeasible:
        kind, bound = "infeasible", None
    elif st == S.kOptimal:
        kind, bound = ("optimal" if gap == 0 else "gap"), float(info.mip_dual_bound)
    elif st in (S.kTimeLimit, S.kInterrupt, S.kIterationLimit, S.kSolutionLimit, S.kMemoryLimit):
        kind, bound = "time_limit", float(info.mip_dual_bound)
    else:
        raise RuntimeError(f"HiGHS stopped with status {h.modelStatusToString(st)}")
    return Solution(kind, values, objective, _finite(bound), time.perf_counter() - t0, "highs",
                    int(info.mip_node_count), accepted)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and abs(x) < 1e19 else None
