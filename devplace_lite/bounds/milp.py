"""A small builder for mixed-integer programs, solved by HiGHS with a time limit.

Rows are collected as coordinate triplets (vectorised: many rows of equal width at once),
then handed to HiGHS as one column-wise sparse matrix. `Milp.solve` always returns what the
solver proved: its status, the incumbent (if any), and the dual bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix


@dataclass
class MilpAnswer:
    """``status``: ``optimal``, ``time_limit``, ``infeasible``; ``dual_bound`` is a proven lower
    bound on the minimum (``inf`` when infeasible); ``objective``/``x`` the incumbent or None."""

    status: str
    dual_bound: float
    objective: float | None
    x: np.ndarray | None
    nodes: int


class Milp:
    """Minimise ``cost @ x`` subject to ``lo <= A x <= hi`` and bounds, some ``x`` integer."""

    def __init__(self) -> None:
        self._lb: list[np.ndarray] = []
        self._ub: list[np.ndarray] = []
        self._cost: list[np.ndarray] = []
        self._int: list[np.ndarray] = []
        self.n = 0
        self._r: list[np.ndarray] = []
        self._c: list[np.ndarray] = []
        self._v: list[np.ndarray] = []
        self._lo: list[np.ndarray] = []
        self._hi: list[np.ndarray] = []
        self.m = 0

    def var(self, shape, lb=0.0, ub=1.0, cost=0.0, integer: bool = False) -> np.ndarray:
        """New variables of the given shape; returns their indices in that shape."""
        size = int(np.prod(shape))
        idx = np.arange(self.n, self.n + size).reshape(shape)
        self._lb.append(np.broadcast_to(np.asarray(lb, float), (size,)).copy())
        self._ub.append(np.broadcast_to(np.asarray(ub, float), (size,)).copy())
        self._cost.append(np.broadcast_to(np.asarray(cost, float), (size,)).copy())
        self._int.append(np.full(size, integer))
        self.n += size
        return idx

    def fix(self, idx, value) -> None:
        """Fix variables to a value (by tightening both bounds)."""
        lb, ub = np.concatenate(self._lb), np.concatenate(self._ub)
        lb[np.asarray(idx).ravel()] = value
        ub[np.asarray(idx).ravel()] = value
        self._lb, self._ub = [lb], [ub]

    def rows(self, cols, vals, lo=-math.inf, hi=math.inf) -> None:
        """Rows ``lo <= sum_j vals[r, j] x[cols[r, j]] <= hi``, one per row of ``cols`` (R, w)."""
        cols = np.atleast_2d(np.asarray(cols, dtype=np.int64))
        R, w = cols.shape
        if R == 0:
            return
        vals = np.broadcast_to(np.asarray(vals, float), (R, w))
        self._r.append(np.repeat(np.arange(self.m, self.m + R), w))
        self._c.append(cols.ravel())
        self._v.append(vals.ravel())
        self._lo.append(np.broadcast_to(np.asarray(lo, float), (R,)).copy())
        self._hi.append(np.broadcast_to(np.asarray(hi, float), (R,)).copy())
        self.m += R

    def row(self, cols, vals, lo=-math.inf, hi=math.inf) -> None:
        """One row of any width."""
        cols = np.asarray(cols, dtype=np.int64).ravel()
        self.rows(cols[None, :], np.broadcast_to(np.asarray(vals, float), cols.shape)[None, :], lo, hi)

    def highs(self, threads: int = 1, rel_gap: float = 1e-6):
        """A `highspy.Highs` instance holding the model (rows keep the order they were added)."""
        import highspy

        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.n, self.m
        lp.col_cost_ = np.concatenate(self._cost)
        lp.col_lower_ = np.concatenate(self._lb)
        lp.col_upper_ = np.concatenate(self._ub)
        lp.row_lower_ = np.concatenate(self._lo) if self.m else np.zeros(0)
        lp.row_upper_ = np.concatenate(self._hi) if self.m else np.zeros(0)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        if self.m:
            A = coo_matrix((np.concatenate(self._v), (np.concatenate(self._r), np.concatenate(self._c))),
                           shape=(self.m, self.n)).tocsc()
            A.sum_duplicates()
            lp.a_matrix_.start_ = A.indptr
            lp.a_matrix_.index_ = A.indices
            lp.a_matrix_.value_ = A.data
        else:
            lp.a_matrix_.start_ = np.zeros(self.n + 1, dtype=np.int64)
        integer = np.concatenate(self._int)
        lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
                           for f in integer]
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", threads)
        h.setOptionValue("mip_rel_gap", rel_gap)
        h.setOptionValue("random_seed", 0)
        h.passModel(lp)
        return h

    def solve(self, time_limit: float | None = None, rel_gap: float = 1e-6, threads: int = 1) -> MilpAnswer:
        return run(self.highs(threads, rel_gap), time_limit)


def run(h, time_limit: float | None = None) -> MilpAnswer:
    """Solve the model held by ``h`` (a `highspy.Highs`) within the time limit."""
    import highspy

    h.setOptionValue("time_limit", math.inf if time_limit is None else max(float(time_limit), 0.01))
    h.run()
    st = h.getModelStatus()
    info = h.getInfo()
    S = highspy.HighsModelStatus
    if st == S.kInfeasible:
        return MilpAnswer("infeasible", math.inf, None, None, int(info.mip_node_count))
    has_x = info.primal_solution_status == 2  # a feasible point is known
    x = np.asarray(h.getSolution().col_value) if has_x else None
    obj = float(info.objective_function_value) if has_x else None
    if st == S.kOptimal:
        status = "optimal"
    elif st in (S.kTimeLimit, S.kInterrupt, S.kSolutionLimit, S.kIterationLimit):
        status = "time_limit"
    else:
        raise RuntimeError(f"HiGHS stopped with status {h.modelStatusToString(st)}")
    dual = float(info.mip_dual_bound)
    if not math.isfinite(dual):
        dual = -math.inf
    return MilpAnswer(status, dual, obj, x, int(info.mip_node_count))
