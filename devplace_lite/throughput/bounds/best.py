"""`best_bound`: the strongest lower bound the library can prove within a time budget.

The order is cheapest first, and each step starts from what the previous ones proved:

1. the combinatorial bound (closed form, any split);
2. a quick upper bound, a short order search (`devplace_lite.throughput.brkga`, a tenth of the budget):
   it tells when the bound is already tight and where to aim the reach bound's probes;
3. the pinned-stage bound on the units with the largest neighbourhood bounds (often tight
   where one heavy unit decides the optimum);
4. the exact ideal DP (`devplace_lite.throughput.dp`) when the graph has at most `DP_IDEALS` ideals, with
   `DP_SHARE` of what is left: its optimum is the chain optimum, the best bound there is. A DP
   stopped by its share proves nothing, but its incumbent (the linear split) bounds the optimum
   above, and the steps below keep the rest of the budget;
5. the window relaxation for the middle stage (a tenth of what is left);
6. the reach bound (a search on ``T``), unless the gap is already closed;
7. the exact ordered-stage MIP when the instance is small (``U (k + l) <= 2000`` binaries),
   with whatever time is left; its incumbent can also lower the upper bound.

Graphs past the entry's reach (`devplace_lite.methods.BOUND` ``best``) get steps 1 and 4 only (the DP with the whole budget).
Steps 3-7 bound the chain-of-ideals optimum only; with ``kind="any"`` (a placement that need not
be a pipeline, e.g. from a non-contiguous IP) only step 1 applies.

Example
-------
>>> from devplace_lite.generators import skip_chain
>>> from devplace_lite.devices import Cluster
>>> b = best_bound(skip_chain(30, seed=0), Cluster(accelerators=4), time_limit=60)
>>> b.status, b.extra["tight"]
('optimal', True)
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from ..brkga import brkga
from ...devices import Cluster
from ...errors import LimitError, UsageError
from ...graph import Graph
from ...methods import BOUND
from ...result import Bound
from .combinatorial import combinatorial_bound, neighbourhood
from .single_stage import pinned_bound, reach_bound
from .stages import stage_mip, window_relaxation
from .units import UnitModel

#: Share of the budget kept back for what the last solver runs past its own limit (HiGHS stops
#: at its next check, `devplace_lite.mip.solve.CANCEL_GRACE`, or a large one in a child is killed
#: `KILL_GRACE` past it), so the whole call stays within it.
RESERVE = 0.01
#: Largest exact MIP (binaries) that `best_bound` attempts.
EXACT_LIMIT = 2000
#: At most this many units get a pinned-stage MIP.
PINNED = 16
#: The ideal DP is tried on graphs with at most this many ideals.
DP_IDEALS = 50_000
#: The DP's share of what steps 1-3 leave: where it cannot finish (Inception's 34,000 ideals
#: take 15-20 s of CPU at any k), the relaxations after it still get the rest.
DP_SHARE = 0.3
#: Steps 2, 3 and 5-7 (order search, MIPs over ``2U`` binaries, an ``O(U^2)`` ancestor table)
#: are tried on graphs within the registry entry's reach (`devplace_lite.methods.BOUND` ``best``);
#: larger ones get the combinatorial bound and the DP.


def _quick_upper(graph: Graph, cluster: Cluster, time_limit: float) -> float:
    """The max-load of a short order search (`devplace_lite.throughput.brkga`), ``inf`` if none fits."""
    try:
        r = brkga(graph, cluster, time_limit=time_limit, patience=20)
    except LimitError:  # too large to slice: no upper bound from here
        return math.inf
    return math.inf if r.objective is None else r.objective


def _exact_dp(graph: Graph, cluster: Cluster, time_limit: float):
    """The ideal DP's `Result` (optimal, infeasible, or stopped with its linear incumbent), or
    None when the graph has too many ideals or too many units to slice."""
    from ..dp import dp
    from ..ideals import count_ideals

    if count_ideals(graph, DP_IDEALS) is None:
        return None
    try:
        return dp(graph, cluster, time_limit=max(time_limit, 0.01), limit=DP_IDEALS)
    except LimitError:  # its first upper bound slices the whole order: too many units for that
        return None


def best_bound(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, kind: str = "chain",
               upper: float | None = None, use_dp: bool = True,
               on_progress: Callable[[Bound], None] | None = None) -> Bound:
    """The best proven lower bound on the optimal max-load within ``time_limit`` seconds
    (default 10).

    ``kind="chain"`` bounds the chain-of-ideals optimum (the pipeline splits the DP searches);
    ``kind="any"`` bounds the optimum over all placements (use it for a method whose answer
    need not be a chain). ``upper``: the objective of a known placement of that kind, if any.
    ``use_dp=False`` leaves out the ideal DP (to measure what the relaxations alone prove).
    Status ``optimal`` when the bound is proven tight (it meets a split found here or
    ``upper``, so it is the optimum), ``time_limit`` otherwise (more time could raise it).
    ``extra``: each component's bound and time, the upper bound seen, and ``tight``.
    ``on_progress`` is called with the bound proven so far after every step that raised it, so
    that a caller which may stop the call midway (the CLI, at its time limit) keeps it.
    """
    t0 = time.perf_counter()
    budget = 10.0 if time_limit is None else float(time_limit)
    if kind not in ("chain", "any"):
        raise UsageError(f"unknown split kind {kind!r} for a bound (expected chain or any)")
    comb = combinatorial_bound(graph, cluster)
    parts = {"combinatorial": {"bound": comb.bound, "seconds": round(comb.seconds, 4), "status": comb.status}}
    if on_progress is not None and comb.status != "infeasible":
        on_progress(Bound(comb.bound, "best", time.perf_counter() - t0, "time_limit", kind=comb.kind,
                          extra={"components": dict(parts)}))
    if comb.status == "infeasible" or kind == "any":
        tight = upper is not None and comb.bound >= upper * (1 - 1e-9)
        return Bound(comb.bound, "best", time.perf_counter() - t0, comb.status if not tight else "optimal",
                     kind="any", extra={"components": parts, "tight": tight, **comb.extra})
    model = UnitModel(graph, cluster, chain=True)
    lo, ub = comb.bound, math.inf if upper is None else float(upper)

    def left() -> float:
        return (1 - RESERVE) * budget - (time.perf_counter() - t0)

    def closed() -> bool:
        return math.isfinite(ub) and lo >= ub * (1 - 1e-6)

    def raise_lo(value: float) -> None:
        nonlocal lo
        if value > lo and on_progress is not None:
            on_progress(Bound(value, "best", time.perf_counter() - t0, "time_limit", kind="chain",
                              extra={"components": dict(parts)}))
        lo = max(lo, value)

    def record(b: Bound) -> None:
        parts[b.method] = {"bound": b.bound, "seconds": round(b.seconds, 4), "status": b.status}
        raise_lo(b.bound)

    def ip(step: Callable):
        """An integer-programming step's answer, or None when the graph's times are too far
        apart for the solvers (`LinearModel.check_range`): the other steps' bounds stand."""
        try:
            return step()
        except LimitError as e:
            parts.setdefault("skipped", str(e))
            return None

    def exact_dp(seconds: float) -> bool:
        """Step 4 within ``seconds``; True when the DP proved that no chain split exists."""
        nonlocal ub
        exact = _exact_dp(graph, cluster, seconds)
        if exact is None:
            return False
        solved = exact.status in ("optimal", "infeasible")
        parts["dp"] = {"bound": (math.inf if exact.objective is None else exact.objective) if solved else None,
                       "seconds": round(exact.seconds, 4), "status": exact.status}
        if exact.objective is not None:  # stopped or not, its split bounds the optimum above
            ub = min(ub, exact.objective)
        if solved and exact.objective is not None:
            raise_lo(exact.objective)
        return exact.status == "infeasible"

    reach = BOUND["best"].reach
    if model.U > reach.limit:  # steps 2, 3 and 5-7 do not scale there: the DP has it all
        if use_dp and not closed() and exact_dp(left()):
            return Bound(math.inf, "best", time.perf_counter() - t0, "infeasible", kind="chain",
                         extra={"components": parts, "tight": True})
        return Bound(lo, "best", time.perf_counter() - t0, "optimal" if closed() else "time_limit", kind="chain",
                     extra={"components": parts, "upper": ub if math.isfinite(ub) else None, "tight": closed(),
                            "skipped": f"more than {reach.limit:,} units: {reach.past}"})
    if not closed():
        ub = min(ub, _quick_upper(graph, cluster, 0.1 * left()))
    if not closed() and left() > 0:
        # a stage holding v costs at least nb(v): units far below the bound rarely matter
        nb = neighbourhood(model)
        candidates = [int(v) for v in np.argsort(-nb, kind="stable") if np.isfinite(nb[v]) and nb[v] >= 0.5 * lo]
        ip(lambda: record(pinned_bound(model, candidates[:PINNED], time_limit=0.15 * left(), lower=lo)))
    if use_dp and not closed() and left() > 0 and exact_dp(DP_SHARE * left()):
        return Bound(math.inf, "best", time.perf_counter() - t0, "infeasible", kind="chain",
                     extra={"components": parts, "tight": True})
    if not closed() and left() > 0 and cluster.k:
        # one window (the middle stage, modelled exactly): cheap, and a floor for the reach search
        w = ip(lambda: window_relaxation(graph, cluster, (cluster.k + 1) // 2, time_limit=0.1 * left(), lower=lo,
                                         model=model))
        if w is not None:
            w.method = "stage-relax"
            record(w)
    if not closed() and left() > 0:
        ip(lambda: record(reach_bound(model, lower=lo, upper=ub if math.isfinite(ub) else None,
                                      time_limit=0.8 * left() if model.U * (cluster.k + cluster.l) <= EXACT_LIMIT
                                      else left())))
    if not closed() and left() > 0.05 and model.U * (cluster.k + cluster.l) <= EXACT_LIMIT:
        r = ip(lambda: stage_mip(graph, cluster, time_limit=0.95 * left(), lower=lo))
        if r is not None and r.bound is not None:
            record(Bound(r.bound, "exact-mip", r.seconds, r.status if r.status != "infeasible" else "infeasible",
                         kind="chain"))
        if r is not None and r.objective is not None:
            ub = min(ub, r.objective)
    tight = closed()
    status = "optimal" if tight else "time_limit"
    return Bound(min(lo, ub) if math.isfinite(ub) else lo, "best", time.perf_counter() - t0, status, kind="chain",
                 extra={"components": parts, "upper": ub if math.isfinite(ub) else None, "tight": tight})
