"""Lower bounds on the optimal largest device load: how far from optimal can a split be?

Which optimum: ``T_chain`` (the best chain-of-ideals split, what the DP and a pipeline need)
or ``T_any`` (the best placement of any kind); ``T_any <= T_chain``. A bound of ``kind="any"``
bounds both; one of ``kind="chain"`` bounds ``T_chain`` only. From weakest to strongest:

* `classic_bound` (``any``, no CPU cores): ``max(sum p / k, max p)``;
* `combinatorial_bound` (``any``): neighbourhood and knapsack bounds, valid with CPU cores
  and memory caps;
* `window_relaxation` / `stage_relax` (``chain``): the "model one stage exactly" MIP relaxation,
  ``2U`` binaries whatever ``k``, maximised over the stage index;
* `pinned_bound` (``chain``): the least load of a stage holding a given unit;
* `reach_bound` (``chain``): how much work ``s`` stages of load ``<= T`` can cover;
* `stage_mip` / `exact_mip` (``chain``): the exact ordered-stage MIP, with HiGHS's dual bound
  when it stops at its time limit;
* `best_bound`: the above within a time budget.

The functions registered in `devplace_lite.methods.BOUND` (`combinatorial_bound`, `stage_relax`,
`pinned`, `reach`, `exact_mip`, `best_bound`) take ``(graph, cluster, *, time_limit=None,
on_progress=None)`` and return a `Bound`; ``on_progress`` is called with each bound a finished
step proved (the combinatorial bound every MIP bound starts from, and more for those whose entry
says ``progress``), so that a caller that stops one midway keeps it.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from ...devices import Cluster
from ...graph import Graph
from ...errors import LimitError
from ...methods import BOUND
from .best import _quick_upper, best_bound
from ...result import Bound
from .combinatorial import classic_bound, combinatorial_bound, neighbourhood
from .single_stage import pinned_bound, reach_bound
from .stages import stage_mip, window_relaxation
from .units import UnitModel

Report = Callable[[Bound], None] | None

__all__ = ["Bound", "UnitModel", "best_bound", "classic_bound", "combinatorial_bound", "exact_mip",
           "neighbourhood", "pinned", "pinned_bound", "reach", "reach_bound", "stage_mip", "stage_relax",
           "window_relaxation"]


def _fits_mips(graph: Graph, name: str) -> None:
    """Refuse up front a graph too large for the MIP bounds (models of ``2U`` binaries and more,
    built before any time limit can act; the reach bound keeps a ``U x U`` ancestor table)."""
    reach = BOUND[name].reach
    if graph.n > reach.limit:
        raise LimitError(f"graph {graph.name}: {graph.n:,} nodes, more than the {reach.limit:,} the MIP bound "
                         f"{name} is built for; {reach.advice()}")


def _start(graph: Graph, cluster: Cluster, name: str, on_progress: Report) -> Bound:
    """The combinatorial bound every MIP bound starts from (refusing a graph too large for the
    MIPs first), reported as the first finished step."""
    _fits_mips(graph, name)
    comb = combinatorial_bound(graph, cluster)
    if on_progress is not None and comb.status != "infeasible":
        on_progress(Bound(comb.bound, name, comb.seconds, "time_limit", kind="any", extra={"step": "combinatorial"}))
    return comb


def stage_relax(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, width: int = 1,
                on_progress: Report = None) -> Bound:
    """Registry entry ``stage-relax``: the window relaxation maximised over the stage index ``b``
    (chain splits), within ``time_limit`` seconds (default 60) shared over the ``b`` values,
    middle stages first; each MIP starts from the best bound so far. Status ``optimal`` when
    every ``b`` was solved to optimality."""
    t0 = time.perf_counter()
    budget = 60.0 if time_limit is None else float(time_limit)
    comb = _start(graph, cluster, "stage-relax", on_progress)
    if comb.status == "infeasible" or cluster.k == 0:
        return Bound(comb.bound, "stage-relax", time.perf_counter() - t0, comb.status, kind="any")
    model = UnitModel(graph, cluster, chain=True)
    m = min(width, cluster.k)
    count = cluster.k - m + 1
    mid = (count + 1) // 2
    order = sorted(range(1, count + 1), key=lambda b: (abs(b - mid), b))
    best, status, per_b = comb.bound, "optimal", {}
    for i, b in enumerate(order):
        left = budget - (time.perf_counter() - t0)
        if left <= 0.01:
            status = "time_limit"
            break
        w = window_relaxation(graph, cluster, b, m, time_limit=left / (len(order) - i), lower=best, model=model)
        per_b[b] = w.bound
        if w.status == "infeasible":
            return Bound(math.inf, "stage-relax", time.perf_counter() - t0, "infeasible", kind="chain",
                         extra={"b": b})
        if w.status != "optimal":
            status = "time_limit"
        if w.bound > best and on_progress is not None:
            on_progress(Bound(w.bound, "stage-relax", time.perf_counter() - t0, "time_limit", kind="chain"))
        best = max(best, w.bound)
    return Bound(best, "stage-relax", time.perf_counter() - t0, status, kind="chain",
                 extra={"width": m, "per_stage": {str(b): v for b, v in sorted(per_b.items())},
                        "combinatorial": comb.bound})


def exact_mip(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, on_progress: Report = None) -> Bound:
    """Registry entry ``exact-mip``: the dual bound of the exact ordered-stage MIP (chain splits)
    after ``time_limit`` seconds (default 60), seeded with the combinatorial bound; ``extra``
    carries the incumbent's objective."""
    comb = _start(graph, cluster, "exact-mip", on_progress)
    if comb.status == "infeasible":
        return Bound(comb.bound, "exact-mip", comb.seconds, "infeasible", kind="any")
    r = stage_mip(graph, cluster, time_limit=60.0 if time_limit is None else time_limit, lower=comb.bound)
    status = {"optimal": "optimal", "infeasible": "infeasible"}.get(r.status, "time_limit")
    return Bound(r.bound, "exact-mip", r.seconds + comb.seconds, status, kind="chain",
                 extra={"objective": r.objective, **r.extra})


def pinned(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, on_progress: Report = None) -> Bound:
    """Registry entry ``pinned``: the pinned-stage bound over all units, largest neighbourhood
    bound first, within ``time_limit`` seconds (default 60)."""
    t0 = time.perf_counter()
    comb = _start(graph, cluster, "pinned", on_progress)
    if comb.status == "infeasible":
        return Bound(comb.bound, "pinned", comb.seconds, "infeasible", kind="any")
    model = UnitModel(graph, cluster, chain=True)
    nb = neighbourhood(model)
    order = sorted(range(model.U), key=lambda v: -nb[v] if math.isfinite(nb[v]) else math.inf)
    b = pinned_bound(model, order, time_limit=60.0 if time_limit is None else time_limit, lower=comb.bound)
    b.seconds = time.perf_counter() - t0
    return b


def reach(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, on_progress: Report = None) -> Bound:
    """Registry entry ``reach``: the reach bound, probing between the combinatorial bound and a
    short order search's split (a tenth of the budget), within ``time_limit`` seconds
    (default 60)."""
    t0 = time.perf_counter()
    comb = _start(graph, cluster, "reach", on_progress)
    if comb.status == "infeasible":
        return Bound(comb.bound, "reach", comb.seconds, "infeasible", kind="any")
    model = UnitModel(graph, cluster, chain=True)
    budget = 60.0 if time_limit is None else time_limit
    ub = _quick_upper(graph, cluster, 0.1 * budget)
    left = budget - (time.perf_counter() - t0)
    b = reach_bound(model, lower=comb.bound, upper=ub if math.isfinite(ub) else None, time_limit=max(left, 0.01))
    b.seconds = time.perf_counter() - t0
    return b
