"""One front door to every registered method: a whole-call time budget, the method, the
certificate behind its answer and the status that certificate supports.

The problem. A method of `devplace_lite.methods` answers with a placement, its objective and
what the method itself proved. A caller wants more, and the same whoever it is (the library's
`partition`, `latency` and `bound`, the ``devplace`` command line, the pipeline planner, the
chapters): the answer within a wall-time budget that covers everything the call does, a proven
lower bound behind every answer (a heuristic's included) and a status the bound supports.

* `partition` / `latency`: run the method with what the budget leaves less the certificate's
  share (at most `BOUND_SHARE` of it, `LATENCY_BOUND_SHARE` for latency, at most ``bound_time``),
  then raise the answer's bound with
  the bound family its registry entry names (``Method.certificate``) for what is left, at most
  ``bound_time`` seconds;
* `bound`: run a bound method of `methods.BOUND` within the budget, keeping what its finished
  steps proved when the budget runs out midway;
* `plan` / `parallelize`: a model's plan (`devplace_lite.pipeline.mesh_plan.plan`) or one in
  Piper's format (a method of `methods.PARALLELIZE`) within the whole call's budget, the
  incumbent and its bound when it runs out; both answer with a `devplace_lite.result.PlanAnswer`
  (a Piper-format plan no search proved is certified by `multidim.plan.work_bound`);
* `settle`: a certified gap of zero (within `GAP_TOL`) is ``optimal``, for every method;
  `verdict` says the same of an answer that is not a `Result` (a plan).

Exactness: ``optimal`` is said only when a proven lower bound meets the objective. The bound is
on the optimum of the splits the method searches (``Method.split``): the chain optimum for
pipeline methods, the optimum over every placement otherwise (which also bounds the contiguous
optimum; a chain bound would not: a contiguous split can beat every chain); for latency, the
latency bounds of `devplace_lite.single_sample.bounds` (valid for the answer's ``q`` calls per
accelerator).

Cost: the method's own, plus at most ``bound_time`` seconds of certificate; with a time limit the
whole call ends within it (a step that outlasts it on a huge graph is stopped from outside, in the
main thread, by an interval timer).

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> g = layered(12, seed=3)
>>> r = partition(g, Cluster(accelerators=3), "greedy")
>>> r.bound is not None and r.bound <= r.objective, r.extra["bound_kind"]
(True, 'chain')
>>> partition(g, Cluster(accelerators=3), "greedy", certify=False).bound is None
True
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from . import methods
from .devices import Cluster
from .errors import UsageError
from .graph import Graph
from .result import Result

#: Default seconds of the certifying bound.
BOUND_TIME = 5.0
#: The share of what is left of the time limit kept for the certifying bound, at most.
BOUND_SHARE = 0.2
#: Default seconds of a latency answer's certificate, and its share of the time limit: the
#: segment bound that closes the authors' inputs takes up to 4 CPU seconds (Inception-v3), more
#: wall time on a busy machine, and the latency searches gain little in their last seconds.
LATENCY_BOUND_TIME = 15.0
LATENCY_BOUND_SHARE = 0.25
#: Seconds kept for a closed-form certificate (`methods.Family.closed_form`): it takes milliseconds,
#: and the method gets the rest of what `BOUND_TIME` would have kept.
CLOSED_FORM_TIME = 0.5
#: The share of the time limit (at most `EXIT_MAX` seconds) kept for the answer and the caller's exit.
EXIT_SHARE = 0.1
#: Seconds at most of that share: a command's interpreter takes about a second to shut down after
#: a solver ran, two or three on a busy machine (measured for ``devplace partition``, issue 42).
EXIT_MAX = 2.5
#: Seconds a method gets at least, however little of the time limit is left.
MIN_SLICE = 0.01
#: Seconds past its own limit after which a certifying bound is stopped from outside.
OVERTIME_GRACE = 0.5
#: Seconds of a bound's limit that its method does not get, so that it stops by itself (a HiGHS
#: child is killed `devplace_lite.mip.solve.KILL_GRACE` past its limit) before the call stops it.
STOP_GRACE = 1.0
#: Relative gap under which a certified answer is ``optimal`` (the order of a float sum's error).
GAP_TOL = 1e-9


@dataclass
class Budget:
    """The wall time of one whole call: ``limit`` seconds from ``started`` (`time.monotonic`)."""

    limit: float | None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float | None:
        """Seconds left (None: no limit), less `EXIT_SHARE` of the limit (at most `EXIT_MAX`) kept
        for the answer; never below `MIN_SLICE`."""
        if self.limit is None:
            return None
        keep = min(EXIT_SHARE * self.limit, EXIT_MAX)
        return max(self.limit - keep - (time.monotonic() - self.started), MIN_SLICE)

    def spent(self) -> bool:
        """Whether nothing but the answer's share is left: a step started now would overrun."""
        return self.limit is not None and self.left() <= MIN_SLICE


class Overtime(BaseException):
    """A step ran past its seconds (a BaseException: library code does not swallow it)."""


@contextlib.contextmanager
def overtime_after(seconds: float | None) -> Iterator[None]:
    """Raise `Overtime` in the block once ``seconds`` of wall time pass (None: never). Acts in
    the main thread where the platform has interval timers; elsewhere the block runs to its end."""
    if seconds is None or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def overtime(signum, frame):
        raise Overtime()

    old = signal.signal(signal.SIGALRM, overtime)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- throughput and latency -------------------------------------------------------------------
def partition(graph: Graph, cluster: Cluster, method: str, *, time_limit: float | None = None,
              bound_time: float = BOUND_TIME, certify: bool = True, seed: int = 0,
              started: float | None = None) -> Result:
    """A method of `methods.PARTITION` (minimise the largest device load), certified.

    Parameters
    ----------
    graph, cluster : the instance.
    method : a name of `methods.PARTITION`.
    time_limit : wall seconds for the whole call (method and certificate), counted from
        ``started`` (a `time.monotonic` value; default: now); None: no limit.
    bound_time : seconds at most for the certifying bound (0: none).
    certify : False gives the method's raw answer (no certificate, status as the method said).
    seed : for randomised methods.

    Returns
    -------
    Result, with ``bound`` raised to the certificate and ``status`` settled (`settle`);
    ``extra["bound_kind"]`` names the bound family, ``extra["bound_method"]`` the bound that won.

    Raises
    ------
    UsageError for an unknown method; the method's own errors (GraphError, LimitError, ...).
    """
    return _run(methods.PARTITION, "method", graph, cluster, method, time_limit, bound_time, certify, seed, started,
                BOUND_SHARE)


def latency(graph: Graph, cluster: Cluster, method: str, *, time_limit: float | None = None,
            bound_time: float = LATENCY_BOUND_TIME, certify: bool = True, seed: int = 0,
            started: float | None = None) -> Result:
    """A method of `methods.LATENCY` (one sample's finish time, inference), certified by the
    latency bounds (`LATENCY_BOUND_TIME` seconds and `LATENCY_BOUND_SHARE` of the time limit at
    most); parameters, returns and errors as for `partition`."""
    return _run(methods.LATENCY, "latency method", graph, cluster, method, time_limit, bound_time, certify, seed,
                started, LATENCY_BOUND_SHARE)


def _run(registry: dict[str, methods.Method], what: str, graph: Graph, cluster: Cluster, method: str,
         time_limit: float | None, bound_time: float, certify: bool, seed: int, started: float | None,
         share: float) -> Result:
    entry = methods.entry(registry, method, what)
    budget = Budget(time_limit, time.monotonic() if started is None else started)
    bound_time = bound_time if certify else 0.0
    left = budget.left()
    reserve = min(bound_time, share * left) if left is not None else 0.0
    family = entry.certificate
    if family is not None and methods.BOUND_FAMILIES[family].closed_form:
        reserve = min(reserve, CLOSED_FORM_TIME)
    res = entry.load()(graph, cluster, time_limit=None if left is None else max(left - reserve, MIN_SLICE), seed=seed)
    left = budget.left()
    seconds = bound_time if left is None else min(bound_time, left - MIN_SLICE)
    if certify and _needs_bound(res, seconds):
        _raise_bound(res, entry, seconds)
    return settle(res)


def settle(res: Result) -> Result:
    """``res`` with status ``optimal`` when its proven bound meets its objective within
    `GAP_TOL` (relative): a proof of optimality whichever method found the answer."""
    if res.status in ("feasible", "time_limit") and res.assignment is not None and res.gap is not None \
            and res.gap <= GAP_TOL:
        res.status = "optimal"
    return res


def verdict(objective: float, bound: float | None, cut_short: bool = False) -> tuple[str, float | None]:
    """The status and gap of an answer ``objective`` with proven lower bound ``bound``, for
    answers that are not a `Result` (a model's plan over mesh shapes): ``optimal`` when the
    bound meets the objective within `GAP_TOL`, ``time_limit`` when the limit cut the search
    short, else ``feasible``; the gap is ``(objective - bound) / objective`` (None without a bound).

    >>> verdict(10.0, 10.0), verdict(10.0, 8.0), verdict(10.0, None, cut_short=True)
    (('optimal', 0.0), ('feasible', 0.2), ('time_limit', None))
    """
    if bound is None or not math.isfinite(bound):
        return ("time_limit" if cut_short else "feasible"), None
    gap = 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)
    if gap <= GAP_TOL:
        return "optimal", gap
    return ("time_limit" if cut_short else "feasible"), gap


def _needs_bound(res: Result, seconds: float) -> bool:
    """Skipped when the method proved optimality itself (no solver runs twice), found no
    feasible placement (an infeasible split's load bounds nothing) or no time is left."""
    return res.status in ("feasible", "time_limit") and res.assignment is not None and seconds > 0


def _raise_bound(res: Result, entry: methods.Method, seconds: float) -> None:
    """Run the entry's certificate for at most ``seconds`` and raise ``res.bound`` to it;
    stopped midway, keep the last bound it reported."""
    res.extra["bound_kind"] = entry.certificate
    b, stopped = certificate_within(res.graph, res.cluster, entry.certificate, seconds, upper=res.objective,
                                    extra=res.extra)
    if stopped:
        res.extra["bound_skipped"] = stopped
    if b is not None and math.isfinite(b.bound) and (res.bound is None or b.bound > res.bound):
        res.bound = b.bound
        res.extra["bound_method"] = b.method


def certificate(graph: Graph, cluster: Cluster, family: str, *, time_limit: float, upper: float | None = None,
                on_progress: Callable | None = None, extra: dict | None = None):
    """The bound of ``family`` (`methods.BOUND_FAMILIES`: ``chain``, ``any``, ``latency``) on the
    instance within ``time_limit`` seconds: what certifies an answer of that family. ``upper``:
    the objective of a known answer (the bound's status is ``optimal`` when it meets it);
    ``extra``: the answer's facts the family reads (``q`` for latency)."""
    fam = methods.BOUND_FAMILIES[family]
    return fam.method.load()(graph, cluster, time_limit=time_limit, upper=upper, on_progress=on_progress,
                             **fam.kwargs(extra or {}))


def certificate_within(graph: Graph, cluster: Cluster, family: str, seconds: float, *, upper: float | None = None,
                       extra: dict | None = None):
    """`certificate` within ``seconds``, stopped from outside `OVERTIME_GRACE` past them
    (building a bound's model can outlast its limit on huge graphs): ``(bound, stopped)``, the
    bound it returned or the last one it reported before it was stopped (None if none), and
    None or the line that says it was stopped."""
    proven: list = []
    try:
        with overtime_after(seconds + OVERTIME_GRACE):
            return certificate(graph, cluster, family, time_limit=seconds, upper=upper, on_progress=proven.append,
                               extra=extra), None
    except Overtime:
        return (proven[-1] if proven else None), f"the certifying bound was stopped after {seconds:.3g} s"


# -- bounds -------------------------------------------------------------------------------------
def bound(graph: Graph, cluster: Cluster, method: str = "best", *, time_limit: float | None = None,
          started: float | None = None):
    """A method of `methods.BOUND`: a proven lower bound on the optimal largest device load.

    Parameters
    ----------
    graph, cluster : the instance.
    method : a name of `methods.BOUND`.
    time_limit : wall seconds for the whole call from ``started`` (default: now); the method gets
        it less `STOP_GRACE` (at most half of it), and a method still running at the limit is
        stopped: the answer is then the last bound its finished steps proved, or the node bound.
        None: the method's own default.

    Returns
    -------
    `devplace_lite.result.Bound`

    Raises
    ------
    UsageError for an unknown method; LimitError when the graph is too large for it.
    """
    entry = methods.entry(methods.BOUND, method, "bound method")
    left = Budget(time_limit, time.monotonic() if started is None else started).left()
    proven: list = []
    try:
        limit = None if left is None else max(left - min(STOP_GRACE, 0.5 * left), MIN_SLICE)
        with overtime_after(left):
            return entry.load()(graph, cluster, time_limit=limit, on_progress=proven.append)
    except Overtime:  # its models outlasted the limit on a huge graph: what it proved, else the
        from .throughput.bounds.combinatorial import node_bound  # bound every placement obeys

        b = proven[-1] if proven else node_bound(graph, cluster)
        b.status = "time_limit" if b.status == "trivial" else b.status
        b.extra["stopped"] = (f"{method} was stopped at the time limit: "
                              + ("the bound is what its finished steps proved" if proven else "it proved no bound"))
        return b


# -- plans: a model's (`devplace_lite.pipeline`) and Piper's format (`devplace_lite.multidim`) ---------
def _check_limit(time_limit: float | None) -> None:
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and math.isfinite(time_limit)
                                       and time_limit > 0):
        raise UsageError(f"time limit must be a positive number of seconds, got {time_limit}")


def parallelize(model, devices: int | None = None, memory: float | None = None, microbatches: int | None = None,
                bandwidth: float | None = None, method: str = "exact", *, time_limit: float | None = None,
                progress: Callable | None = None, spec: str | None = None, started: float | None = None):
    """A method of `methods.PARALLELIZE` (data, tensor and pipeline degrees under Piper's model),
    within a whole-call budget, certified and settled: what ``devplace parallelize`` answers.

    Parameters
    ----------
    model : `devplace_lite.multidim.Model`, or the path of Piper's JSON input or of a placement
        graph (`devplace_lite.multidim.load_model`).
    devices, memory, microbatches, bandwidth : cluster values replacing the model's (``k``,
        bytes per device, micro-batches per batch ``N``, bytes per second).
    method : a name of `methods.PARALLELIZE`.
    time_limit : wall seconds for the whole call (reading the file included) from ``started``
        (`time.monotonic`; default now); an anytime method gets what is left, and when it runs
        out the answer is the incumbent (the best baseline plan), its bound and status
        ``time_limit``. None: no limit.
    progress : called with the fraction done.
    spec : for a placement graph: the GPUs it is planned for.

    Returns
    -------
    `devplace_lite.multidim.plan.Result` (a `devplace_lite.result.PlanAnswer`): a plan with an
    objective carries a proven ``bound`` (the method's, else the closed-form
    `multidim.plan.work_bound`) and its status by `verdict`; ``infeasible`` is the method's.

    Raises
    ------
    UsageError, GraphError, LimitError
        An unknown method, a bad model, file or cluster value, or too many ideals.

    Examples
    --------
    >>> from devplace_lite.multidim.generate import random_model
    >>> r = parallelize(random_model(1, layers=4), devices=4)
    >>> r.status, r.bound == r.objective
    ('optimal', True)
    """
    from .multidim import Model, load_model
    from .multidim.plan import work_bound

    budget = Budget(time_limit, time.monotonic() if started is None else started)
    entry = methods.entry(methods.PARALLELIZE, method)
    _check_limit(time_limit)
    if not isinstance(model, Model):
        model = load_model(model, spec=spec, devices=devices)
    elif spec is not None:
        raise UsageError("spec converts a placement graph; a Model carries its own cluster")
    model = model.with_cluster(devices, memory, bandwidth, microbatches)
    if entry.limit == "anytime":
        r = entry.load()(model, time_limit=budget.left(), progress=progress)
    else:  # a polynomial baseline does not watch the clock
        r = entry.load()(model)
    if r.objective is not None:
        proven = work_bound(model)
        r.bound = proven if r.bound is None else max(r.bound, proven)
        r.status, _ = verdict(r.objective, r.bound, cut_short=r.status == "time_limit")
    r.seconds = time.monotonic() - budget.started
    return r


def plan(model, example_inputs, *, time_limit: float | None = None, started: float | None = None, **options):
    """A model's plan (`devplace_lite.pipeline.mesh_plan.plan`: ``k`` pipeline ranks, or
    ``devices`` with data, tensor and pipeline degrees chosen together) within a whole-call
    budget: what ``devplace plan`` answers.

    Parameters
    ----------
    model, example_inputs : an ``nn.Module`` and one step's whole batch.
    time_limit : wall seconds for the whole call (capture, measurement, every search, the
        certificate) from ``started`` (`time.monotonic`; default now): each step gets its share
        of what is left, and a step it cuts short keeps its incumbent and bound, the status then
        ``time_limit``. None: no limit.
    **options : the planner's (``k`` or ``devices``, ``microbatches``, ``schedule``, ``memory``, ...).

    Returns
    -------
    `devplace_lite.pipeline.pipeline_plan.PipelinePlan` (a `devplace_lite.result.PlanAnswer`):
    its ``objective``, ``bound`` and ``status`` (by `verdict` over the mesh shapes, or the
    certified split's) and ``time_limit``.

    Raises
    ------
    UsageError
        A bad option or time limit.
    GraphError
        A model torch.export does not capture, or no plan fits the memory.
    """
    # the model planner calls this module for its chain split: imported here, on call, so that
    # importing the front door loads neither the planner nor torch
    from .pipeline.mesh_plan import plan as plan_model

    _check_limit(time_limit)
    budget = Budget(time_limit, time.monotonic() if started is None else started)
    p = plan_model(model, example_inputs, time_limit=time_limit, started=budget.started, **options)
    p.time_limit = time_limit
    return p
