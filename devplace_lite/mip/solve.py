"""The one integer-program layer: a linear model, two open solvers, one status convention.

Every integer program of the library (the throughput and latency IPs (`devplace_lite.throughput.ip`, `devplace_lite.single_sample.ip`), the
ordered-stage MIPs and relaxations of `devplace_lite.throughput.bounds`) writes its rows into a
`LinearModel` (columns with bounds, costs and integrality; rows ``lo <= a x <= hi``; minimise
``c x``) and solves it here, with SCIP (through PySCIPOpt, the default) or HiGHS (through
highspy). Why not solve the cvxpy versions of the same models (`devplace_lite.throughput.ip_cvx`): on a
time limit cvxpy reports neither the incumbent nor the proven bound, and its warm start does not
reach SCIP or HiGHS.

The contract (`Solution`):

* ``status``: ``optimal`` (proven, within the asked gap when that is 0), ``gap`` (stopped at a
  positive asked gap), ``time_limit`` (stopped by any limit before a proof: time, memory,
  nodes, an interrupt; ``stop`` names which) or ``infeasible``;
* ``bound``: a proven lower bound on the minimum, or ``None`` when the solver proved none
  (never ``-inf``, never a value past the incumbent's by more than the solver's tolerances);
* ``values`` / ``objective``: the best column vector found and its cost, or ``None``;
* a time limit always returns the incumbent and the bound; a warm start (a full feasible column
  vector) is handed to the solver before it starts; one thread and a fixed seed by default, so
  a run without a time limit repeats exactly.

HiGHS does not check its time limit in every phase (root probing ran a minute past it), so a
large time-limited HiGHS solve runs in a child process that is killed at the deadline
(`devplace_lite.mip.highs_child`).

Models that are re-solved with changed bounds (the bounds' stage sets) keep a HiGHS instance:
`LinearModel.highs` builds it and `run_highs` solves it under the same contract.

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

from ..errors import LimitError, UsageError
from ..progress import Progress, enabled

SOLVERS = ("scip", "highs")
INF = math.inf
#: Models with a larger coefficient, cost or finite bound are rescaled first (`LinearModel.scaled`);
#: the library's own models stay below it (times in ms, memory as a share of the cap).
SCALE_ABOVE = 1e6
#: Rounds of geometric scaling in `LinearModel.scaled`.
SCALE_PASSES = 30
#: The magnitude from which HiGHS refuses a matrix value (its ``large_matrix_value``); SCIP takes
#: 1e20 as infinity. A model still holding one after scaling is refused (`LinearModel.check_range`).
LARGEST = 1e15
#: HiGHS drops matrix values below this (its ``small_matrix_value``).
SMALLEST = 1e-9


class LinearModel:
    """Columns and rows of a mixed-integer linear program ``min c x, lo <= A x <= hi``.

    Columns are created in blocks (`add_vars` returns their indices in the block's shape, so a
    formulation can write ``X[u, d]``); rows are added one at a time as ``(column, coefficient)``
    terms (`add_row`) or many of equal width at once as index and value arrays (`add_rows`).
    """

    def __init__(self) -> None:
        self._lb: list[np.ndarray] = []
        self._ub: list[np.ndarray] = []
        self._int: list[np.ndarray] = []
        self._cost: list[np.ndarray] = []
        self._r: list[np.ndarray] = []
        self._c: list[np.ndarray] = []
        self._v: list[np.ndarray] = []
        self._lo: list[np.ndarray] = []
        self._hi: list[np.ndarray] = []
        self.n_vars = 0
        self.n_rows = 0
        self.obj = _ObjView(self)

    # -- columns ---------------------------------------------------------------------------
    def add_vars(self, shape: int | tuple[int, ...], lb: float | np.ndarray = 0.0, ub: float | np.ndarray = INF,
                 integer: bool = False, cost: float | np.ndarray = 0.0) -> np.ndarray:
        """A block of columns; returns their indices as an int array of ``shape``."""
        size = int(np.prod(shape))
        idx = np.arange(self.n_vars, self.n_vars + size, dtype=np.int64).reshape(shape)
        for store, value in ((self._lb, lb), (self._ub, ub), (self._cost, cost)):
            store.append(np.broadcast_to(np.asarray(value, dtype=float).reshape(-1) if np.ndim(value) else
                                         np.asarray(value, dtype=float), (size,)).copy())
        self._int.append(np.full(size, bool(integer)))
        self.n_vars += size
        return idx

    def _columns(self, store: list[np.ndarray]) -> np.ndarray:
        if len(store) != 1:
            store[:] = [np.concatenate(store) if store else np.zeros(0)]
        return store[0]

    @property
    def lb(self) -> np.ndarray:
        return self._columns(self._lb)

    @property
    def ub(self) -> np.ndarray:
        return self._columns(self._ub)

    @property
    def integer(self) -> np.ndarray:
        return self._columns(self._int).astype(bool)

    @property
    def cost(self) -> np.ndarray:
        return self._columns(self._cost)

    def fix(self, idx, value: float) -> None:
        """Fix columns to a value (both bounds)."""
        cols = np.asarray(idx, dtype=np.int64).ravel()
        self.lb[cols] = value
        self.ub[cols] = value

    # -- rows ------------------------------------------------------------------------------
    def add_row(self, terms: Iterable[tuple[int, float]], lo: float = -INF, hi: float = INF) -> None:
        """The row ``lo <= sum coef * x[col] <= hi`` (repeated columns add up)."""
        pairs = [(int(c), float(v)) for c, v in terms if v != 0.0]
        cols = np.array([c for c, _ in pairs], dtype=np.int64)
        vals = np.array([v for _, v in pairs], dtype=float)
        self._append(np.full(len(cols), self.n_rows, dtype=np.int64), cols, vals, [float(lo)], [float(hi)])

    def add_rows(self, cols, vals, lo=-INF, hi=INF) -> None:
        """Rows ``lo <= sum_j vals[r, j] x[cols[r, j]] <= hi``, one per row of ``cols`` (R, w);
        ``vals``, ``lo`` and ``hi`` broadcast."""
        cols = np.atleast_2d(np.asarray(cols, dtype=np.int64))
        R, w = cols.shape
        if R == 0:
            return
        vals = np.broadcast_to(np.asarray(vals, dtype=float), (R, w))
        rows = np.repeat(np.arange(self.n_rows, self.n_rows + R, dtype=np.int64), w)
        self._append(rows, cols.ravel(), vals.ravel(), np.broadcast_to(np.asarray(lo, float), (R,)),
                     np.broadcast_to(np.asarray(hi, float), (R,)))

    def _append(self, rows, cols, vals, lo, hi) -> None:
        self._r.append(rows)
        self._c.append(cols)
        self._v.append(vals)
        self._lo.append(np.array(lo, dtype=float))
        self._hi.append(np.array(hi, dtype=float))
        self.n_rows += len(self._lo[-1])

    @property
    def row_lo(self) -> np.ndarray:
        return self._columns(self._lo)

    @property
    def row_hi(self) -> np.ndarray:
        return self._columns(self._hi)

    def matrix(self) -> sp.csr_matrix:
        """The row matrix ``A`` (duplicates summed)."""
        rows, cols, vals = (np.concatenate(x) if x else np.zeros(0) for x in (self._r, self._c, self._v))
        A = sp.csr_matrix((vals, (rows.astype(np.int64), cols.astype(np.int64))), shape=(self.n_rows, self.n_vars))
        A.sum_duplicates()
        A.eliminate_zeros()
        return A

    def violation(self, values: np.ndarray) -> float:
        """Largest violation of a bound, a row or integrality by a column vector, each relative
        to its magnitude when that is above 1 (as solvers measure feasibility): a row summing
        terms of 1e13 is off by about 1e-3 from rounding alone."""
        x = np.asarray(values, dtype=float)
        scale = np.maximum(1.0, np.abs(x))
        worst = float(np.max(np.concatenate([[0.0], (self.lb - x) / scale, (x - self.ub) / scale])))
        ints = self.integer
        if ints.any():
            worst = max(worst, float(np.max(np.abs(x[ints] - np.round(x[ints])))))
        if self.n_rows:
            A = self.matrix()
            ax = A @ x
            scale = np.maximum(1.0, abs(A) @ np.abs(x))
            worst = max(worst, float(np.max(np.concatenate([(self.row_lo - ax) / scale, (ax - self.row_hi) / scale]))))
        return worst

    def magnitude(self) -> float:
        """The largest absolute coefficient, cost or finite bound of the model (0 when empty)."""
        parts = [self.matrix().data, self.cost, self.lb, self.ub, self.row_lo, self.row_hi]
        return max((float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0)) for x in parts), default=0.0)

    def check_range(self, scaled: bool = False) -> None:
        """Refuse a model holding a number the solvers cannot take as finite (`LARGEST`): HiGHS
        errors on such a matrix value, SCIP reads 1e20 as infinity, and both misreported
        (infeasible, an error in the LP solver) well before that. A NaN refuses too. A model that
        was ``scaled`` is refused too when a coefficient fell below `SMALLEST`, which HiGHS drops
        (a stage relaxation then proved a bound above the optimum)."""
        big = self.magnitude()
        A = self.matrix()
        small = float(np.min(np.abs(A.data), initial=np.inf))
        if not big < LARGEST or (scaled and small < SMALLEST):
            raise LimitError(f"the integer program's coefficients span {small:.3g} to {big:.3g}"
                             f"{' after scaling' if scaled else ''}, past "
                             f"what HiGHS and SCIP solve reliably ({SMALLEST:.0e} to {LARGEST:.0e}): the graph's "
                             f"times or memory are too far apart for an integer-programming method")

    def scaled(self) -> tuple[LinearModel, np.ndarray, float]:
        """The model with rows, continuous columns and the objective scaled by powers of two,
        when its `magnitude` passes `SCALE_ABOVE`: ``(model, column scales, objective scale)``,
        a column value being its scale times the scaled model's value, the objective its scale
        times the scaled one. Else ``(self, ones, 1.0)``.

        Why: times of 1e9 (nanoseconds, say) put rows ``sum p x <= T`` far beyond the solvers'
        absolute tolerances; HiGHS then called a split of twice the optimum optimal and a
        feasible chain model infeasible. Each row is divided by its largest coefficient on an
        integer column (the times), each continuous column (a load, a start time) multiplied
        so that its largest coefficient is about 1, rows of continuous columns only are then
        scaled alike, and the objective so that its largest cost is about 1."""
        ones = np.ones(self.n_vars)
        if not self.magnitude() > SCALE_ABOVE:
            return self, ones, 1.0
        A = self.matrix().tocsr()
        ints = self.integer
        r, c = np.ones(self.n_rows), np.ones(self.n_vars)
        for _ in range(SCALE_PASSES):  # geometric scaling: each row, then each continuous column
            S = abs(sp.diags(r) @ A @ sp.diags(c)).tocsr()
            dr = _inverse_pow2(np.sqrt(S.max(axis=1).toarray().ravel() * _nonzero_min(S)))
            S = abs(sp.diags(r * dr) @ A @ sp.diags(c)).tocsc()
            dc = np.where(ints, 1.0, _inverse_pow2(np.sqrt(S.max(axis=0).toarray().ravel() * _nonzero_min(S.T))))
            r, c = r * dr, c * dc
            if np.all(dr == 1.0) and np.all(dc == 1.0):
                break
        r = r * _inverse_pow2(abs(sp.diags(r) @ A @ sp.diags(c)).max(axis=1).toarray().ravel())  # row tops at 1
        A = (sp.diags(r) @ A @ sp.diags(c)).tocoo()
        cost = self.cost * c
        o = float(_inverse_pow2(np.max(np.abs(cost), initial=0.0)))
        out = LinearModel()
        out.add_vars(self.n_vars, lb=self.lb / c, ub=self.ub / c, cost=cost * o)
        out._int = [ints.copy()]
        out._append(A.row.astype(np.int64), A.col.astype(np.int64), A.data, self.row_lo * r, self.row_hi * r)
        return out, c, 1.0 / o

    def highs(self, gap: float = 0.0, threads: int = 1, seed: int = 0, verbose: bool = False):
        """A `highspy.Highs` instance holding the model, for `run_highs` (and re-solves)."""
        import highspy

        self.check_range()
        h = highspy.Highs()
        h.setOptionValue("output_flag", bool(verbose))
        h.setOptionValue("threads", max(1, int(threads)))
        h.setOptionValue("random_seed", int(seed) % 2**31)
        h.setOptionValue("mip_rel_gap", float(gap))
        h.setOptionValue("mip_abs_gap", 1e-9 if gap == 0 else 1e-6)
        A = self.matrix()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.n_vars, self.n_rows
        lp.col_cost_ = self.cost
        lp.col_lower_ = self.lb
        lp.col_upper_ = self.ub
        lp.row_lower_ = self.row_lo
        lp.row_upper_ = self.row_hi
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = A.indices.astype(np.int32)
        lp.a_matrix_.value_ = A.data.astype(float)
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = self.n_vars, self.n_rows
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in self.integer]
        h.passModel(lp)
        return h


class _ObjView:
    """``model.obj[cols] = coefs``: objective coefficients by column index."""

    def __init__(self, model: LinearModel) -> None:
        self._model = model

    def __setitem__(self, cols, coefs) -> None:
        self._model.cost[np.asarray(cols, dtype=np.int64)] = coefs

    def array(self) -> np.ndarray:
        return self._model.cost.copy()


@dataclass
class Solution:
    """What a solver returned (the module docstring states the contract)."""

    status: str
    values: np.ndarray | None
    objective: float | None
    bound: float | None
    seconds: float
    solver: str
    nodes: int
    start_accepted: bool | None = None
    stop: str | None = None


def check_solver(solver: str) -> str:
    name = str(solver).lower()
    if name not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    return name


def solve(model: LinearModel, solver: str = "scip", time_limit: float | None = None, gap: float = 0.0,
          seed: int = 0, threads: int = 1, start: Sequence[float] | None = None, verbose: bool = False) -> Solution:
    """Minimise the model with SCIP or HiGHS.

    ``time_limit`` in seconds (``None``: none); ``gap``: stop when ``(primal - dual) / primal``
    is at most this; ``start``: a feasible column vector to start from (a warm start);
    ``verbose``: let the solver print its log. A HiGHS solve with a time limit, of a model with
    `ISOLATE_NNZ` nonzeros or more, runs in a child process that is killed `KILL_GRACE` s past
    the limit (HiGHS ignores its limit in some phases; `devplace_lite.mip.highs_child`).
    """
    name = check_solver(solver)
    if time_limit is not None and not time_limit > 0:
        raise UsageError(f"time limit must be positive, got {time_limit}")
    if gap < 0:
        raise UsageError(f"gap must be non-negative, got {gap}")
    scaled, col_scale, obj_scale = model.scaled()
    scaled.check_range(scaled is not model)
    start_vec = None if start is None else np.asarray(start, float) / col_scale
    out = _solve(scaled, name, time_limit, gap, seed, threads, start_vec, verbose)
    if scaled is not model:  # back to the model's own units
        out.values = None if out.values is None else out.values * col_scale
        out.objective = None if out.objective is None else out.objective * obj_scale
        out.bound = None if out.bound is None else out.bound * obj_scale
    return out


def _solve(model: LinearModel, name: str, time_limit: float | None, gap: float, seed: int, threads: int,
           start_vec: np.ndarray | None, verbose: bool) -> Solution:
    if name == "highs":
        t0 = time.perf_counter()
        if time_limit is not None and len(model.cost) and model.matrix().nnz >= ISOLATE_NNZ:
            return _run_highs_child(model, time_limit, gap, seed, threads, start_vec, verbose)
        h = model.highs(gap, threads, seed, verbose)
        accepted = None
        if start_vec is not None:
            import highspy

            sol = highspy.HighsSolution()
            sol.col_value = start_vec.tolist()
            sol.value_valid = True
            accepted = h.setSolution(sol) == highspy.HighsStatus.kOk
        out = run_highs(h, time_limit, gap)
        out.seconds, out.start_accepted = time.perf_counter() - t0, accepted
        return out
    return _solve_scip(model, time_limit, float(gap), int(seed), int(threads), start_vec, verbose)


#: Seconds past its time limit after which a HiGHS solve is cancelled (at its next callback).
CANCEL_GRACE = 0.2


def run_highs(h, time_limit: float | None = None, gap: float = 0.0) -> Solution:
    """Solve the model a `highspy.Highs` holds (`LinearModel.highs`) within the time limit."""
    t0 = time.perf_counter()
    limit = None if time_limit is None else max(float(time_limit), 0.01)
    h.setOptionValue("time_limit", INF if limit is None else limit)
    with Progress(_bar_total(time_limit), "highs", "s") as bar:
        _run_interruptibly(h, bar, None if limit is None else t0 + limit + CANCEL_GRACE)
    info = h.getInfo()
    values = objective = None
    if info.primal_solution_status == 2:  # a feasible point is known
        values = np.array(h.getSolution().col_value)
        objective = float(info.objective_function_value)
    return _highs_solution(h.getModelStatus().name, gap, values, objective,
                           float(info.mip_dual_bound), int(max(info.mip_node_count, 0)), t0)


def _highs_solution(status_name: str, gap: float, values, objective, dual: float, nodes: int,
                    t0: float) -> Solution:
    """The contract's `Solution` from what HiGHS ended with (``HighsModelStatus`` by name)."""
    stops = {"kTimeLimit": "time", "kMemoryLimit": "memory", "kInterrupt": "interrupt",
             "kIterationLimit": "iterations", "kSolutionLimit": "solutions"}
    stop = None
    if status_name == "kInfeasible":
        status, values, objective = "infeasible", None, None
    elif status_name == "kOptimal":
        status = "optimal" if gap == 0 else "gap"
    elif status_name in stops:
        status, stop = "time_limit", stops[status_name]
    else:
        raise RuntimeError(f"HiGHS stopped with status {status_name}")
    bound = None if status == "infeasible" else _finite(dual)
    if status == "optimal" and bound is None and objective is not None:  # a pure LP: no MIP bound
        bound = objective
    return Solution(status, values, objective, bound, time.perf_counter() - t0, "highs", nodes, None, stop)


#: Time-limited HiGHS solves of models with at least this many nonzeros run in a child process
#: (`devplace_lite.mip.highs_child`) that is killed at the deadline; starting it costs 0.3-0.8 s
#: (load 1-7), which smaller models, whose root finishes long before, need not pay.
ISOLATE_NNZ = 20_000

#: Seconds past the time limit at which the child is killed (HiGHS usually stops by itself).
KILL_GRACE = 0.5


def _run_highs_child(model: LinearModel, time_limit: float, gap: float, seed: int, threads: int,
                     start: np.ndarray | None, verbose: bool, command: Sequence[str] | None = None) -> Solution:
    """`solve` with HiGHS in a child process, killed ``KILL_GRACE`` s past ``time_limit`` if it has
    not stopped by then (see `devplace_lite.mip.highs_child` for why and for the messages); what
    it last reported is the answer. ``command`` replaces the child's command line (tests)."""
    import os
    import pickle
    import subprocess
    import sys
    import tempfile
    import threading

    from .highs_child import receive

    t0 = time.perf_counter()
    deadline = t0 + time_limit + KILL_GRACE
    cmd = list(command) if command is not None else [sys.executable, "-m", "devplace_lite.mip.highs_child"]
    log = None if verbose else tempfile.TemporaryFile()  # the child's stderr: shown if verbose, else kept
    # run from the folder holding this package, so that `-m` finds this copy of it first
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=here)
    heard: dict[str, tuple] = {}

    def listen() -> None:  # the last message of each kind
        while (msg := receive(child.stdout)) is not None:
            heard[msg[0]] = msg

    def ask() -> None:  # in a thread: a child that does not read must not block the deadline
        request = {"model": model, "gap": gap, "threads": threads, "seed": seed, "verbose": verbose,
                   "start": None if start is None else start.tolist(),
                   "time_limit": max(time_limit - (time.perf_counter() - t0), 0.01)}
        try:
            pickle.dump(request, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            child.stdin.close()
        except (BrokenPipeError, ValueError):  # the child is gone (or killed meanwhile)
            pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    threading.Thread(target=ask, daemon=True).start()
    try:
        with Progress(_bar_total(time_limit), "highs", "s") as bar:
            while "done" not in heard and listener.is_alive() and time.perf_counter() < deadline:
                listener.join(0.1)
                bar.update(int(time.perf_counter() - t0))
                if "bound" in heard:
                    bar.note(_bounds_text(*heard["bound"][1:]))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        listener.join(1.0)
        child.stdout.close()
        last = b""
        if log is not None:
            log.seek(0)
            last = (log.read().strip().splitlines() or [b""])[-1]
            log.close()
    if "done" not in heard and time.perf_counter() < deadline:
        raise RuntimeError(f"the HiGHS child process ended with exit code {child.returncode} and no answer"
                           + (f": {last.decode(errors='replace')}" if last else ""))
    out = _child_answer(model, heard, gap, t0)
    out.start_accepted = heard["start"][1] if "start" in heard else None
    return out


def _child_answer(model: LinearModel, heard: dict[str, tuple], gap: float, t0: float) -> Solution:
    """The `Solution` from the child's last messages: its own end, or (killed at the deadline)
    its last incumbent, if it is a point of the model, and its last proven bound."""
    if "done" in heard:
        _, name, objective, values, dual, nodes = heard["done"]
        return _highs_solution(name, gap, None if values is None else np.array(values),
                               None if values is None else objective, dual, nodes, t0)
    values = objective = None
    if "incumbent" in heard:
        objective, values = heard["incumbent"][1], np.array(heard["incumbent"][2])
        if len(values) != model.n_vars or model.violation(values) > 1e-6:
            values = objective = None
    bound = _finite(heard["bound"][2]) if "bound" in heard else None
    if bound is not None and objective is not None:
        bound = min(bound, objective)
    return Solution("time_limit", values, objective, bound, time.perf_counter() - t0, "highs", 0, None, "time")


def _bar_total(time_limit: float | None) -> int | None:
    return None if time_limit is None else max(1, math.ceil(time_limit))


def _bounds_text(primal: float, dual: float) -> str:
    """``incumbent 9.228, bound 7.84, gap 15.1 %`` for a progress bar (what is known so far)."""
    parts = []
    if math.isfinite(primal) and abs(primal) < 1e19:
        parts.append(f"incumbent {primal:.4g}")
    if math.isfinite(dual) and abs(dual) < 1e19:
        parts.append(f"bound {dual:.4g}")
        if len(parts) == 2 and primal > 0:
            parts.append(f"gap {100 * max(0.0, primal - dual) / primal:.1f} %")
    return ", ".join(parts)


def _run_interruptibly(h, bar: Progress, deadline: float | None = None) -> None:
    """``h.run()`` in HiGHS's own thread, so that Ctrl-C (or SIGTERM) reaches Python at once: the
    solve is cancelled, waited for, and the interrupt raised (HiGHS alone ignores it to the end).
    Past ``deadline`` (a `time.perf_counter` value) the solve is cancelled too: HiGHS checks its
    own time limit too seldom in some phases (on a loaded machine a 20 s MIP ran 40 s).
    Meanwhile ``bar`` shows the seconds spent and, when bars are on, the incumbent and bound."""
    h.HandleUserInterrupt = True  # lets cancelSolve stop the solver at its next callback
    seen: dict[str, float] = {}

    def watch(event) -> None:  # in HiGHS's thread: only store, the bar is drawn from this one
        seen["primal"], seen["dual"] = event.data_out.mip_primal_bound, event.data_out.mip_dual_bound

    if enabled():
        h.cbMipInterrupt.subscribe(watch)
    t0 = time.perf_counter()
    h.startSolve()
    cancelled = False
    try:
        while not h.wait(0.1)[0]:
            bar.update(int(time.perf_counter() - t0))
            if seen:
                bar.note(_bounds_text(seen["primal"], seen["dual"]))
            if deadline is not None and not cancelled and time.perf_counter() > deadline:
                h.cancelSolve()
                cancelled = True
    except BaseException:
        h.cancelSolve()
        while not h.wait(0.1)[0]:
            pass
        raise
    finally:
        if enabled():
            h.cbMipInterrupt.unsubscribe(watch)


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
    lb, ub, ints, cost = model.lb, model.ub, model.integer, model.cost
    cols = []
    for j in range(model.n_vars):
        vt = "C"
        if ints[j]:
            vt = "B" if lb[j] >= 0 and ub[j] <= 1 else "I"
        cols.append(m.addVar(name=f"x{j}", vtype=vt, lb=None if lb[j] == -INF else float(lb[j]),
                             ub=None if ub[j] == INF else float(ub[j]), obj=float(cost[j])))
    A = model.matrix()
    lo_all, hi_all = model.row_lo, model.row_hi
    for r in range(model.n_rows):
        lo, hi = float(lo_all[r]), float(hi_all[r])
        a, b = A.indptr[r], A.indptr[r + 1]
        expr = ps.quicksum(v * cols[c] for c, v in zip(A.indices[a:b].tolist(), A.data[a:b].tolist()))
        m.addCons(ps.scip.ExprCons(expr, lhs=None if lo == -INF else lo, rhs=None if hi == INF else hi))
    bar = Progress(_bar_total(time_limit), "scip", "s")
    if enabled():
        m.includeEventhdlr(_scip_ticker(bar), "devplace-progress", "the progress bar's incumbent and bound")
    accepted = None
    if start is not None:
        sol = m.createSol()
        for c, v in zip(cols, start.tolist()):
            m.setSolVal(sol, c, v)
        accepted = bool(m.addSol(sol, free=True))
    with bar:
        m.optimize()
    st = m.getStatus()
    if st == "userinterrupt":  # SCIP caught Ctrl-C itself: Python never saw it
        raise KeyboardInterrupt
    values = objective = None
    if m.getNSols() > 0 and st != "infeasible":
        best = m.getBestSol()
        values = np.array([m.getSolVal(best, c) for c in cols])
        objective = float(m.getSolObjVal(best))
    stops = {"timelimit": "time", "memlimit": "memory", "nodelimit": "nodes",
             "stallnodelimit": "nodes", "totalnodelimit": "nodes", "sollimit": "solutions",
             "bestsollimit": "solutions"}
    stop = None
    if st == "infeasible":
        status = "infeasible"
    elif st == "optimal":
        status = "optimal"
    elif st == "gaplimit":
        status = "gap"
    elif st in stops:
        status, stop = "time_limit", stops[st]
    else:
        raise RuntimeError(f"SCIP stopped with status {st}")
    bound = None if status == "infeasible" else _finite(float(m.getDualbound()))
    return Solution(status, values, objective, bound, time.perf_counter() - t0, "scip", int(m.getNNodes()),
                    accepted, stop)


def _scip_ticker(bar: Progress):
    """An event handler that moves ``bar`` after each presolve round, LP and node SCIP solves and each better solution
    (a class made here: pyscipopt is imported only when SCIP is used)."""
    import pyscipopt as ps

    class Ticker(ps.Eventhdlr):
        events = (ps.SCIP_EVENTTYPE.PRESOLVEROUND | ps.SCIP_EVENTTYPE.LPSOLVED | ps.SCIP_EVENTTYPE.NODESOLVED
                  | ps.SCIP_EVENTTYPE.BESTSOLFOUND)

        def eventinit(self) -> None:
            self.model.catchEvent(self.events, self)

        def eventexit(self) -> None:
            self.model.dropEvent(self.events, self)

        def eventexec(self, event) -> None:
            m = self.model
            bar.update(int(m.getSolvingTime()))
            bar.note(_bounds_text(m.getPrimalbound(), m.getDualbound()))

    return Ticker()


def _nonzero_min(S: sp.spmatrix) -> np.ndarray:
    """The smallest stored entry of each row of a non-negative sparse matrix (inf for an empty row)."""
    S = sp.csr_matrix(S)
    out = np.full(S.shape[0], np.inf)
    counts = np.diff(S.indptr)
    if S.nnz:
        out[counts > 0] = np.minimum.reduceat(S.data, S.indptr[:-1][counts > 0])
    return out


def _inverse_pow2(top: np.ndarray) -> np.ndarray:
    """The powers of two nearest ``1 / top`` (exact to scale by); 1 where ``top`` is 0 (an empty
    row or column) or not finite."""
    top = np.asarray(top, dtype=float)
    ok = np.isfinite(top) & (top > 0)
    return np.where(ok, np.exp2(-np.round(np.log2(np.where(ok, top, 1.0)))), 1.0)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) and abs(x) < 1e19 else None
