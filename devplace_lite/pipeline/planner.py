"""`plan`: from any PyTorch model to a certified pipeline plan that torchrun can run.

Problem
-------
Given a model, its example batch, ``k`` devices, a schedule and a micro-batch count, choose
where pipeline stages begin so that the slowest stage is as fast as possible, say how far from
optimal that is, and check that every stage fits in memory under the schedule.

How
---
1. Capture and measure the model as segments between candidate split points
   (`devplace_lite.pipeline.capture`): one micro-batch, one thread, CPU time.
2. The segments' graph, with program-order edges added (segment ``i`` before ``i + 1``, model
   inputs on the first stage): its chains of ideals are exactly the splits that split points
   can express, so the exact ideal DP (chosen whenever the ideals fit in `DP_IDEALS`, else a
   local search) finds the best split-point plan under the cost model. The *proven bound*
   comes from the library's best bound (`devplace_lite.throughput.bounds.best.best_bound`) on the graph
   without those edges, which bounds every chain of ideals of the segments, hence also the
   plan; the gap is ``(objective - bound) / objective``.
3. The schedule: torch's action order for it (any of torch 2.13's seven,
   `devplace_lite.schedules.simulate`) is replayed with the segments' measured ``F``, ``B``,
   ``I`` and ``W`` times (torch's own input- and weight-gradient passes; its first stage runs
   no ``I``, its ``W`` is the whole backward) and the transfers of each cut; the split with the least replayed
   step is the plan's (`devplace_lite.schedules.search`: proven by enumeration in bound order, or
   a local search with its bound and gap), its stages on ranks as torch's class places them.
   The DP's least bottleneck and its bound stay in the plan as ``result`` and ``bound``.
4. Memory of each rank under the schedule, from the same replay: its stages' parameters (a tied
   weight counts on every stage holding a copy), their gradients and optimizer state when
   training, the activations autograd keeps per micro-batch for the micro-batches in flight
   (all ``m`` with GPipe, ``min(m, p - s)`` with 1F1B), and on the last stage every
   micro-batch's output and target, which the schedule keeps for the step. With a memory cap
   the split search rules out every split over it; none left is refused in one line that says
   the way out.
   Activation recomputation (``recompute="auto"``, the default, with a memory cap): a split
   over the cap may still fit when some stages recompute their activations in their backward
   (torch.utils.checkpoint around each of the stage's segments in the run): such a stage keeps
   only its segments' inputs per micro-batch in flight, recomputes one segment at a time and
   pays one more forward per backward. The search chooses
   the flags per stage with the split, exactly (`devplace_lite.schedules.search`: a dominance,
   recompute only on ranks that need it, among their minimal fitting sets); a plan that fits
   only so says it in its notes and in ``recompute`` (per stage) and ``stage_memory[s]``.
5. Tied weights: a parameter read by segments on different stages is *replicated* by
   `torch.distributed.pipelining`; the plan lists it, and the run sums its gradients over the
   stages holding it (an all-reduce in a group of those ranks), which keeps training exact.

`PipelinePlan.write` writes ``plan.json`` (split points, stages, forecast, memory, gap), the
segments' ``graph.json`` and ``run_pipeline.py``, a script for ``torchrun``.

This module is the package's one caller of the partitioning and bounding registries
(`devplace_lite.methods`), so that their interface lives in one place here.

Complexity: the capture and measurement (see there), the DP over ``O(n)`` ideals of the
``n``-segment chain with ``k`` stages, and the bound's time limit.

Example
-------
>>> import torch
>>> net = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(6)])
>>> p = plan(net, (torch.randn(8, 32),), k=2, microbatches=2, repeats=2)
>>> p.num_stages, len(p.split_spec), p.result.status
(2, 1, 'optimal')
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Sequence

from .. import solve
from ..cost import as_assignment, chain_order
from ..devices import Cluster
from ..errors import GraphError, UsageError
from ..graph import Graph
from ..schedules.search import search
from ..schedules.simulate import SCHEDULES as _SCHEDULES
from ..schedules.simulate import action_order, stages_per_rank
from .costs import OPTIMIZERS, in_flight, segment_costs
from .pipeline_plan import PipelinePlan, scored

#: torch 2.13's schedules by their `--schedule` names (`devplace_lite.schedules.simulate.SCHEDULES`).
SCHEDULES = tuple(_SCHEDULES)
#: Micro-batches per step when none are asked (fewer when they do not divide the batch: `default_microbatches`).
MICROBATCHES = 4
#: The exact DP is chosen when the chain graph has at most this many ideals.
DP_IDEALS = 200_000
#: Below this many ideals the DP runs without a time limit: it takes milliseconds, and a limit
#: would count the one-off compilation of its kernel on a busy machine.
DP_UNTIMED = 10_000
#: Seconds each step (partition, schedule search, certificate) gets when the call has no time limit.
STEP_SECONDS = 10.0
#: With a time limit: the share of what is left that the measurement's repeats may use (the
#: capture before them cannot be cut), and the partitioning method's share of what is left then;
#: the certificate keeps `devplace_lite.solve.BOUND_SHARE` of what the search may use.
PROFILE_SHARE = 0.5
PARTITION_SHARE = 1 / 3


# -- the library's front door (`devplace_lite.solve`): the one place this package calls it ----------
def partition(graph: Graph, cluster: Cluster, method: str, *, time_limit: float | None = None, seed: int = 0):
    """``methods.PARTITION[method]`` on ``graph`` through `solve`, uncertified: the plan is
    certified on the segment graph by `certify` (a `devplace_lite.result.Result`)."""
    return solve.partition(graph, cluster, method, time_limit=time_limit, seed=seed, certify=False)


def certify(graph: Graph, cluster: Cluster, *, time_limit: float, upper: float | None = None):
    """The best proven lower bound on a chain-of-ideals split of ``graph`` within ``time_limit``
    seconds: the certificate of the ``chain`` family (`devplace_lite.solve.certificate_within`);
    stopped before it proved anything, the node bound (every placement runs its slowest node)."""
    from ..throughput.bounds.combinatorial import node_bound

    b, stopped = solve.certificate_within(graph, cluster, "chain", time_limit, upper=upper)
    if b is None:
        b = node_bound(graph, cluster)
    if stopped:
        b.extra["stopped"] = stopped
    return b


def choose_method(graph: Graph) -> tuple[str, str, int | None]:
    """``(method, why, ideals)``: the exact DP when the ideals fit, else local search."""
    from ..throughput.ideals import count_ideals

    ideals = count_ideals(graph, DP_IDEALS)
    if ideals is not None:
        return "dp", f"exact DP: {ideals} ideals (limit {DP_IDEALS})", ideals
    return "local-search", f"local search: more than {DP_IDEALS} ideals, too many for the DP", None


def chain_graph(graph: Graph) -> Graph:
    """``graph`` with program-order edges: each segment before the next, inputs before the first."""
    fwd = [v.id for v in graph.nodes if not v.backward and not v.id.startswith("input:")]
    inputs = [v.id for v in graph.nodes if v.id.startswith("input:")]
    extra = list(zip(fwd, fwd[1:])) + [(x, fwd[0]) for x in inputs if fwd]
    return Graph(graph.nodes, list(graph.edges) + extra, name=f"{graph.name}-chain", defaults=dict(graph.defaults),
                 meta=dict(graph.meta))


def _capped(graph: Graph, schedule: str, microbatches: int, k: int, optimizer: str) -> Graph:
    """Node memory as an additive upper bound of the schedule's peak (for the DP's cap)."""
    seg = graph.meta["segments"]
    n_fly = in_flight(schedule, microbatches, k, 0, graph.is_training)
    per = {}
    for i, name in enumerate(seg["names"]):
        g = seg["grad_bytes"][i] if graph.is_training else 0
        per[f"{i}:{name}"] = seg["param_bytes"][i] + g * (1 + OPTIMIZERS[optimizer]) + n_fly * seg["activation_bytes"][i]
    nodes = [dataclasses.replace(v, memory=float(per.get(v.id, 0.0))) for v in graph.nodes]
    return graph.with_nodes(nodes)


def _check_time_limit(time_limit: float | None) -> None:
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise UsageError(f"time limit must be a positive number of seconds, got {time_limit}")


def _refusal(proven: bool, message: str) -> GraphError:
    """No plan: a GraphError that says whether it is proven (``proven``: every split was
    replayed) or only that no split tried fits (`plan_auto` then cannot prove its choice)."""
    err = GraphError(message)
    err.proven = proven
    return err


def plan_graph(graph: Graph, *, k: int, microbatches: int = 4, schedule: str = "1f1b", batch: int | None = None,
               memory: float | None = None, optimizer: str = "none", method: str = "auto",
               time_limit: float | None = None, seed: int = 0, per_rank: int | None = None,
               recompute: str = "auto", started: float | None = None, least_ranks: int = 1) -> PipelinePlan:
    """Plan from a measured segment graph (`devplace_lite.pipeline.segments.segment_graph`).

    Two searches: the partitioning method's least bottleneck (``result``, certified by
    ``bound``: the cost model's slowest stage per micro-batch), then the split whose replayed
    step under ``schedule`` is least (``search``, `devplace_lite.schedules.search`, proven by
    exhaustion where the splits can be enumerated, else with its bound and gap), which is the
    plan's split. ``per_rank``: stages per rank for the schedules that take several.
    ``recompute``: ``"auto"`` lets a split over ``memory`` recompute activations on the stages
    that need it (chosen with the split, exactly), ``"never"`` does not. ``least_ranks``: the
    fewest ranks a one-stage-per-rank schedule may use (2: a split the run's check exercises).

    ``time_limit``: wall seconds for the whole call from ``started`` (a `time.monotonic` value;
    default now), kept as `devplace_lite.solve.Budget` keeps them: the partitioning method gets
    `PARTITION_SHARE` of what is left (the DP on few ideals runs untimed: milliseconds), the split
    search what is left then less the certificate's `devplace_lite.solve.BOUND_SHARE`, the
    certificate the rest. A step it cuts short keeps its incumbent and bound and is named in
    ``stopped`` (the plan's status is then ``time_limit``). None: each step gets
    `STEP_SECONDS`.
    """
    from ..schedules.search import RECOMPUTE, _counts

    if recompute not in RECOMPUTE:
        raise UsageError(f"unknown recompute choice {recompute!r}; known: {', '.join(RECOMPUTE)}")
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    v = stages_per_rank(schedule, per_rank)
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if memory is not None and not (math.isfinite(memory) and memory > 0):
        raise UsageError(f"memory must be a positive finite number of bytes, got {memory}")
    _check_time_limit(time_limit)
    budget = solve.Budget(time_limit, time.monotonic() if started is None else started)
    t0 = time.perf_counter()
    stages = k * v
    chain = chain_graph(graph)
    dp_chain = _capped(chain, schedule, microbatches, stages, optimizer) if memory is not None else chain
    cluster = Cluster(accelerators=stages, cpus=0, memory=math.inf if memory is None else float(memory))
    why, ideals = f"asked for: {method}", None
    if method == "auto":
        method, why, ideals = choose_method(dp_chain)
    small = method == "dp" and ideals is not None and ideals <= DP_UNTIMED
    left = budget.left()
    res = partition(dp_chain, cluster, method, seed=seed,
                    time_limit=None if small else STEP_SECONDS if left is None else PARTITION_SHARE * left)
    stopped = ["partition"] if res.status == "time_limit" else []
    names = graph.meta["segments"]["names"]
    start = None
    if res.assignment is not None and res.status != "infeasible":
        a = as_assignment(dp_chain, cluster, res.assignment)
        pos = {d: s for s, d in enumerate(chain_order(dp_chain, cluster, a))}
        start = [pos[int(a[dp_chain.index[f"{i}:{nm}"]])] for i, nm in enumerate(names)]
    elif memory is None:
        raise GraphError(f"method {method} found no split")
    t1 = time.perf_counter()
    costs = segment_costs(graph, optimizer, microbatches)
    left = budget.left()
    found = search(costs, schedule, k, microbatches, per_rank=v, training=graph.is_training, memory=memory,
                   start=start, recompute=recompute, least_ranks=least_ranks,
                   time_limit=STEP_SECONDS if left is None else max(left * (1 - solve.BOUND_SHARE), solve.MIN_SLICE))
    if found.status == "time_limit":
        stopped.append("schedule search")
    if found.stage_of is None:
        proof = "every split replayed" if found.status == "infeasible" else "no split tried fits"
        rc = graph.is_training and recompute == "auto"
        raise _refusal(found.status == "infeasible",
                       f"no split of {graph.meta.get('model', graph.name)} into {stages if v > 1 else f'at most {k}'} "
                       f"stages fits {memory:.0f} bytes per device under {schedule}, "
                       f"{'without or with activation recomputation' if rc else 'without activation recomputation'} "
                       f"({proof}: parameters, gradients, optimizer state and in-flight activations); way out: more "
                       "stages (-k), fewer or smaller micro-batches, or a schedule with fewer micro-batches in "
                       f"flight (1f1b){'' if rc or not graph.is_training else ', or --recompute auto'}")
    t2 = time.perf_counter()
    left = budget.left()
    bound = certify(graph, Cluster(accelerators=stages, cpus=0), time_limit=STEP_SECONDS if left is None else left,
                    upper=res.objective if start is not None else None)
    plan = PipelinePlan(graph=graph, chain=chain, cluster=cluster, result=res, certificate=bound, stage_of=found.stage_of,
                        schedule=schedule, microbatches=microbatches, batch=batch or microbatches * graph.meta["batch"],
                        optimizer=optimizer, memory=memory, method=method, method_reason=why,
                        capture_how=graph.meta.get("capture", "torch.export"), notes=list(graph.meta.get("notes", [])),
                        seed=seed, seconds={"partition": t1 - t0, "schedule_search": t2 - t1,
                                            "bound": time.perf_counter() - t2},
                        per_rank=v, search=found, k=k,
                        recompute=found.recompute if any(found.recompute or ()) else None, recompute_mode=recompute,
                        time_limit=time_limit, stopped=stopped)
    most = max(p for p, _ in _counts(schedule, k, v, len(names), microbatches, least_ranks))
    if v == 1 and plan.ranks < most:  # the search chose fewer ranks: say so, and why, where the user looks
        price = costs.action_ms
        plan.notes.append(
            f"{plan.ranks} of the {k} ranks: the least forecast step found is on {plan.ranks} stage(s)"
            + (f", with each message between ranks priced at {price:.3f} ms" if price else "")
            + f"; least_ranks={k} (devplace plan --all-ranks) plans {k} stages")
    if plan.recompute and recompute == "all":
        plan.notes.append("every stage recomputes its activations, as asked: their backwards run their forward again "
                          "(torch.utils.checkpoint around each segment in the run), and they keep only their "
                          "segments' inputs per micro-batch in flight")
    elif plan.recompute:
        plan.notes.append(f"fits {memory:.0f} bytes per device only with activation recomputation on stage(s) "
                          f"{[s for s, x in enumerate(plan.recompute) if x]}: their backwards run their forward again "
                          "(torch.utils.checkpoint around each segment in the run), and they keep only their "
                          "segments' inputs per micro-batch in flight")
    if start is None:  # the bottleneck method found nothing under the conservative memory form: score the split
        plan.result = scored(plan, found.stage_of, method)
    return plan


def plan(model: Any, example_inputs: Sequence[Any], *, k: int, microbatches: int | str | None = None,
         schedule: str = "1f1b",
         training: bool = True, memory: float | None = None, optimizer: str = "none", method: str = "auto",
         granularity: str = "block", time_limit: float | None = None, seed: int = 0, repeats: int = 5,
         warmup: int = 1, model_spec: str | None = None, device: str = "cpu", per_rank: int | None = None,
         spec: str | None = None, recompute: str = "auto", started: float | None = None,
         action_ms: float = 0.0, least_ranks: int = 1) -> PipelinePlan:
    """Profile ``model`` on one micro-batch of ``example_inputs`` (the whole batch, cut into
    ``microbatches`` along dim 0) and plan its pipeline over at most ``k`` stages.

    Parameters
    ----------
    model : nn.Module
        Any module; captured with torch.export (torch's pipelining, else devplace's splitter
        on the exported graph), else torch.fx (see `capture`).
    example_inputs : sequence of tensors
        One step's batch; its leading size must divide by ``microbatches``.
    k : int
        Ranks, one pipeline stage (or ``per_rank``) each (data and tensor degrees with them:
        `devplace_lite.pipeline.mesh_plan.plan`).
    microbatches : int, ``"auto"`` or None
        Micro-batches per step; None: `default_microbatches` of the batch (the notes say so when
        that is not `MICROBATCHES`); ``"auto"`` with ``schedule="auto"``: every count that
        divides the batch is a choice.
    schedule : str
        A key of `SCHEDULES` (torch 2.13's seven schedules), or ``"auto"``: the least forecast
        step over every schedule (and micro-batch count), `plan_auto`, whose records of each
        choice the plan keeps in ``tried``.
    per_rank : int, optional
        Stages per rank for the schedules that take several (default: the schedule's, 2).
    training : bool
        Plan forward and backward (default) or inference only.
    memory : float, optional
        Bytes per device; a plan whose stage exceeds it under the schedule is refused.
    recompute : ``"auto"`` or ``"never"``
        ``"auto"``: where a split exceeds ``memory``, stages may recompute their activations in
        their backward (chosen with the split; the plan's ``recompute`` says which).
    optimizer : ``"none"``, ``"sgd"``, ``"adam"`` or ``"mixed-adam"``
        Optimizer state counted in memory (per parameter byte: 0, 1, 2, 6: `OPTIMIZERS`).
    method : str
        ``"auto"`` (the exact DP when the ideals fit) or a name of `devplace_lite.methods.PARTITION`.
    device : ``"cpu"`` or ``"cuda"``
        Where the segments are timed: one CPU thread (CPU time), or the GPU (CUDA events).
    spec : ``"V100"``, ``"A100"`` or ``"H100"``, optional
        Time the segments by that accelerator's roofline instead (FLOPs and bytes of every
        kernel, `devplace_lite.pipeline.measure.measure_segments`), transfers over its host link:
        a deterministic plan for GPUs made anywhere.
    time_limit : float, optional
        Wall seconds for the whole call from ``started`` (a `time.monotonic` value, default
        now): the capture, then the measurement's repeats within `PROFILE_SHARE` of what is left
        (each segment timed once at least; the notes say when they were cut), then `plan_graph`'s
        steps in what is left. None: no limit (each step gets `STEP_SECONDS`).
    action_ms : float
        What a pass pays on the wall clock beyond its own CPU time per message it exchanges
        with another rank (torch's schedule runtime, a late receive's wait, the ranks'
        interference), priced on every forward and backward: `calibration.message_price` measures it on
        this machine for the backend that will run the plan (0: not priced).
    least_ranks : int
        The fewest ranks a one-stage-per-rank schedule may use (default 1; 2 keeps the model
        split, as a checked run needs: one stage would check nothing split).

    Returns
    -------
    PipelinePlan

    Raises
    ------
    UsageError
        Bad numbers (k, micro-batches that do not divide the batch, repeats).
    GraphError
        A model that neither torch.export nor torch.fx captures, or no plan within ``memory``.
    """
    import torch

    inputs = tuple(example_inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() for t in inputs):
        raise UsageError("example inputs must be tensors with a batch dimension")
    batch = int(inputs[0].shape[0])
    if microbatches == "auto" and schedule != "auto":
        raise UsageError("microbatches='auto' (--microbatches auto) needs schedule='auto' (--schedule auto)")
    default = microbatches is None
    if default:
        microbatches = default_microbatches(batch)
    if schedule == "auto":
        if per_rank is not None:
            raise UsageError("stages per rank name one schedule's layout; with schedule 'auto' leave them out")
        p, tried = plan_auto(model, inputs, k=k, microbatches=None if microbatches == "auto" else microbatches,
                             training=training, memory=memory, optimizer=optimizer, method=method,
                             granularity=granularity, time_limit=time_limit, seed=seed, repeats=repeats,
                             warmup=warmup, model_spec=model_spec, device=device, spec=spec, recompute=recompute,
                             started=started, action_ms=action_ms, least_ranks=least_ranks)
        p.tried = tried
        return _noted_default(p, default)
    for name, value, low in (("k", k, 1), ("microbatches", microbatches, 1), ("repeats", repeats, 1),
                             ("warmup", warmup, 0)):
        if int(value) != value or value < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {value}")
    _check_time_limit(time_limit)
    started = time.monotonic() if started is None else started
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if stages_per_rank(schedule, per_rank) > 1:  # torch's own refusal, before the model is profiled
        action_order(schedule, k, microbatches, per_rank)
    if batch % microbatches:
        raise UsageError(indivisible(batch, microbatches))
    graph, cap, seconds = segment_profile(model, inputs, microbatches, training, granularity, repeats, warmup,
                                          model_spec, device, spec, budget=solve.Budget(time_limit, started),
                                          action_ms=action_ms)
    p = plan_graph(graph, k=k, microbatches=microbatches, schedule=schedule, batch=batch, memory=memory,
                   optimizer=optimizer, method=method, time_limit=time_limit, seed=seed, per_rank=per_rank,
                   recompute=recompute, started=started, least_ranks=least_ranks)
    p.model_spec, p.capture = model_spec, cap
    p.seconds = {**seconds, **p.seconds, "total": time.monotonic() - started}
    return _noted_default(p, default)


def _noted_default(p: PipelinePlan, default: bool) -> PipelinePlan:
    """``p``, its notes first saying so when its micro-batch count is the default's fewer."""
    if default and p.microbatches != MICROBATCHES:
        p.notes.insert(0, f"{p.microbatches} micro-batch(es), the most up to {MICROBATCHES} that divide the batch of "
                          f"{p.batch} (set microbatches, --microbatches, or the batch)")
    return p


def indivisible(batch: int, microbatches: int) -> str:
    """The one line that refuses a batch ``microbatches`` does not divide, with both ways out."""
    return (f"a batch of {batch} does not split into {microbatches} equal micro-batches: give --microbatches "
            f"a divisor of {batch}, or --batch a multiple of {microbatches}")


def default_microbatches(batch: int, most: int | None = None) -> int:
    """The largest micro-batch count up to ``most`` (default `MICROBATCHES`) that divides
    ``batch`` (1 always does): a plan's micro-batches when none are asked.

    >>> default_microbatches(8), default_microbatches(2), default_microbatches(6), default_microbatches(7)
    (4, 2, 3, 1)
    """
    most = MICROBATCHES if most is None else most
    return next(m for m in range(min(most, batch), 0, -1) if batch % m == 0)


def segment_profile(model: Any, inputs: tuple, microbatches: int, training: bool = True, granularity: str = "block",
                    repeats: int = 5, warmup: int = 1, model_spec: str | None = None, device: str = "cpu",
                    spec: str | None = None, budget: solve.Budget | None = None,
                    share: float = PROFILE_SHARE, action_ms: float = 0.0) -> tuple[Graph, Any, dict[str, float]]:
    """Capture and measure ``model`` on one micro-batch of ``inputs`` (the batch cut into
    ``microbatches``): ``(segment graph, Capture, seconds per step)``, what `plan` plans from and
    `plan_graph` takes, for planning one profile several ways (schedules, micro-batches).
    ``budget`` (`devplace_lite.solve.Budget`) with a limit: the measurement's repeats stop at
    ``share`` of what the capture left (each segment timed once at least), said in the graph's
    notes. ``action_ms``: what a pass pays per message it exchanges (see `plan`), kept with the segments."""
    from .capture import capture as capture_model
    from .measure import measure_segments
    from .repeat import capture_repeated
    from .segments import segment_graph

    if not (action_ms >= 0 and math.isfinite(action_ms)):
        raise UsageError(f"action_ms must be a finite number >= 0, got {action_ms}")
    batch = int(inputs[0].shape[0])
    micro = tuple(t[: batch // microbatches] for t in inputs)
    t0 = time.perf_counter()
    # on a roofline the repeated layers of a model on the meta device are captured once (`repeat`)
    cap = capture_model(model, micro, granularity) if spec is None else capture_repeated(model, micro, granularity)
    t1 = time.perf_counter()
    left = None if budget is None else budget.left()
    deadline = None if left is None else time.monotonic() + (0.0 if budget.spent() else share * left)
    times = measure_segments(cap, training=training, repeats=repeats, warmup=warmup, device=device, spec=spec,
                             deadline=deadline)
    graph = segment_graph(cap, times, name=model_spec or type(model).__name__)
    if action_ms:
        graph.meta["segments"]["action_ms"] = float(action_ms)
        graph.meta.setdefault("notes", []).append(
            f"a message priced at {action_ms:.3f} ms on each forward and backward pass that sends or receives "
            "it (measured here: what a message costs its pass on the wall clock beyond the pass's CPU time)")
    if times.cut_short:
        graph.meta.setdefault("notes", []).append(
            f"the time limit cut the measurement short: {times.cut_short} of {len(times.forward_ms)} segment(s) "
            f"timed fewer than {repeats} times (once at least; the least time is kept)")
    return graph, cap, {"capture": t1 - t0, "measure": time.perf_counter() - t1}


#: ``--microbatches auto`` tries the divisors of the batch up to this many micro-batches.
AUTO_MICROBATCHES = 16
#: ``--schedule auto`` tries first what a plain ``devplace plan`` plans (1F1B with the most
#: micro-batches up to `FIRST_MICROBATCHES` that divide the batch, `commands.plan.MICROBATCHES`),
#: so that under a short time limit the incumbent is at least that plan.
FIRST_SCHEDULE = "1f1b"
FIRST_MICROBATCHES = 4


def plan_auto(model: Any, example_inputs: Sequence[Any], *, k: int, microbatches: int | None = None,
              training: bool = True, memory: float | None = None, optimizer: str = "none", method: str = "auto",
              granularity: str = "block", time_limit: float | None = None, seed: int = 0, repeats: int = 5,
              warmup: int = 1, model_spec: str | None = None, device: str = "cpu",
              spec: str | None = None, recompute: str = "auto",
              started: float | None = None, action_ms: float = 0.0,
              least_ranks: int = 1) -> tuple[PipelinePlan, list[dict]]:
    """``--schedule auto``: every schedule of `SCHEDULES` (at its default stages per rank) and
    every micro-batch count (``microbatches``, or each divisor of the batch up to
    `AUTO_MICROBATCHES`, each measured at its own micro-batch size), planned, each with its
    per-stage activation recomputation where ``memory`` needs it (``recompute="auto"``,
    `plan_graph`); the plan with the least forecast step within ``memory`` is kept: the least
    over schedules, micro-batch counts, splits and recomputation flags (equal steps: the earlier
    count, then the earlier schedule of `SCHEDULES`).

    ``time_limit``: wall seconds for the whole call from ``started`` (a `time.monotonic` value,
    default now), shared by the choices. The plain command's choice goes first (`FIRST_SCHEDULE`
    at `FIRST_MICROBATCHES` or fewer), then the others; each is planned with an equal share of
    what is left among the choices still waiting, and a new micro-batch count is profiled only
    while what is left covers the last profile (a capture cannot be cut). When the time runs out
    the best plan so far is the answer (choices are planned past it until one gives a plan), the
    choices not tried are listed, and the choice is not proven: ``auto["status"]`` and the plan's
    status are ``time_limit``. None: every choice, each step with `STEP_SECONDS`.
    ``least_ranks``: as in `plan`.

    Returns
    -------
    (PipelinePlan, list of dict)
        The plan, whose ``auto`` says how far the choice is proven (``status``; ``bound_ms``, a
        proven lower bound on the least forecast step over every choice when every choice has
        one; ``bound_tried_ms``, the same over the choices tried; ``not_tried``), and one record
        per choice in `SCHEDULES` order within each count: its forecast step, its search's status
        and bound and its recomputing stages, why it was refused, or that it was not tried.

    Raises
    ------
    GraphError
        No schedule and micro-batch count gives a plan (within ``memory``).
    """
    _check_time_limit(time_limit)
    started = time.monotonic() if started is None else started
    budget = solve.Budget(time_limit, started)
    inputs = tuple(example_inputs)
    batch = int(inputs[0].shape[0])
    counts = [microbatches] if microbatches else [d for d in range(1, min(batch, AUTO_MICROBATCHES) + 1)
                                                  if batch % d == 0]
    order = {(m, name): i for i, (m, name) in enumerate((m, name) for m in counts for name in SCHEDULES)}
    first = max((m for m in counts if m <= FIRST_MICROBATCHES), default=counts[0])
    counts.sort(key=lambda m: m != first)
    names = sorted(SCHEDULES, key=lambda name: name != FIRST_SCHEDULE)
    best: PipelinePlan | None = None
    tried: list[dict] = []
    not_tried: list[tuple[int, str]] = []
    why: dict[int, str] = {}  # micro-batch count -> why its choices (some or all) were not tried
    lower: list[float | None] = []  # per choice tried: a proven bound on its step (inf: proven to give no plan)
    profile_s = 0.0
    for g, m in enumerate(counts):
        if best is not None and budget.limit is not None and (budget.spent() or budget.left() < profile_s):
            not_tried += [(m, name) for name in names]
            why[m] = ("the time limit ran out first" if budget.spent() else f"{budget.left():.3g} s of the time "
                      f"limit left, less than the last profile took ({profile_s:.3g} s)")
            continue
        t = time.monotonic()
        graph, cap, seconds = segment_profile(model, inputs, m, training, granularity, repeats, warmup, model_spec,
                                              device, spec, budget=budget, share=PROFILE_SHARE / (len(counts) - g),
                                              action_ms=action_ms)
        profile_s = time.monotonic() - t
        for j, name in enumerate(names):
            if best is not None and budget.spent():
                not_tried.append((m, name))
                why[m] = "the time limit ran out first"
                continue
            left = budget.left()
            waiting = len(names) - j + (len(counts) - g - 1) * len(names)
            try:
                p = plan_graph(graph, k=k, microbatches=m, schedule=name, batch=batch, memory=memory,
                               optimizer=optimizer, method=method, time_limit=None if left is None else left / waiting,
                               seed=seed, recompute=recompute, least_ranks=least_ranks)
            except (UsageError, GraphError) as e:  # a UsageError: torch's class cannot take this choice
                tried.append({"schedule": name, "microbatches": m, "refused": str(e)})
                lower.append(math.inf if getattr(e, "proven", isinstance(e, UsageError)) else None)
                continue
            step = p.step_ms()
            tried.append({"schedule": name, "microbatches": m, "step_ms": step,
                          "rank_peak_bytes": max(p.simulation().rank_peak_bytes), "status": p.search.status,
                          "bound_ms": p.search.bound_ms,
                          "recompute": [s for s, x in enumerate(p.recompute_flags) if x]})
            lower.append(p.search.bound_ms)
            if best is None or (step, order[(m, name)]) < (best.step_ms(), order[(best.microbatches, best.schedule)]):
                best, p.model_spec, p.capture, p.seconds = p, model_spec, cap, {**seconds, **p.seconds}
    if best is None:
        raise GraphError(f"--schedule auto: no schedule and micro-batch count gives a plan for k={k}"
                         + (f" within {memory:.0f} bytes per device" if memory is not None else "")
                         + f" ({tried[0]['refused'] if tried else 'nothing tried'})")
    best.time_limit = time_limit  # the whole call's, not the choice's share
    best.auto = _auto_choice(best, tried, lower, not_tried, time_limit)
    if best.auto["status"] == "time_limit":
        best.stopped.append("schedule auto")
    best.notes.append(f"schedule auto: {best.schedule} with {best.microbatches} micro-batches has the least forecast "
                      f"step of {len(tried)} schedule and micro-batch choices ({sum('refused' in t for t in tried)} "
                      "refused), each with its split and per-stage activation recomputation "
                      + ("(none needed)" if not best.recompute else
                         f"(stages {[s for s, x in enumerate(best.recompute) if x]} recompute)"))
    if not_tried:
        missed = {m: [name for name in SCHEDULES if (m, name) in not_tried] for m in sorted({m for m, _ in not_tried})}
        best.notes.append(f"schedule auto: the time limit of {time_limit:g} s ran out after {len(tried)} of "
                          f"{len(tried) + len(not_tried)} choices; not tried: "
                          + "; ".join(f"{m} micro-batch(es): " + ("every schedule" if len(nm) == len(SCHEDULES)
                                                                 else ", ".join(nm)) for m, nm in missed.items())
                          + ": the plan is the best of those tried, not proven the best of all")
    tried += [{"schedule": name, "microbatches": m, "not_tried": why[m]} for m, name in not_tried]
    tried.sort(key=lambda t: order[(t["microbatches"], t["schedule"])])
    best.seconds["total"] = time.monotonic() - started
    return best, tried


def _auto_choice(best: PipelinePlan, tried: list[dict], lower: list[float | None], not_tried: list[tuple[int, str]],
                 time_limit: float | None) -> dict[str, Any]:
    """How far `plan_auto`'s choice is proven: ``optimal`` when every choice was tried and the
    least of their proven bounds (a refusal proven by replaying every split bounds at infinity)
    meets the kept step; ``time_limit`` when choices were not tried or a search was cut short;
    ``feasible`` otherwise."""
    step = best.step_ms()
    known = [b for b in lower if b is not None]
    bound = min(known) if len(known) == len(lower) and not not_tried else None
    cut = any(t.get("status") == "time_limit" for t in tried)
    status = ("time_limit" if not_tried or cut else
              "optimal" if bound is not None and step <= bound * (1 + 1e-12) else "feasible")
    bound = None if bound is None else min(bound, step)
    return {"status": status, "step_ms": step, "bound_ms": bound,
            "bound_tried_ms": min(min(known, default=step), step),
            "gap": None if bound is None else (0.0 if step <= 0 else max(0.0, (step - bound) / step)),
            "choices": len(tried) + len(not_tried), "tried": len(tried),
            "refused": sum("refused" in t for t in tried),
            "not_tried": [{"schedule": name, "microbatches": m} for m, name in not_tried], "time_limit": time_limit}
