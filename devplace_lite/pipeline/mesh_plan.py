"""Data, tensor and pipeline degrees of a model on ``N`` devices, planned together.

Problem: ``N`` devices of ``M`` bytes each train one model on a batch cut into ``m``
micro-batches. Lay them out as a ``dp x pp x tp`` mesh (torch's ``init_device_mesh``, as
torchtitan and Megatron-LM do): ``tp`` devices split each column-then-row group of a stage
(`devplace_lite.pipeline.tensor_parallel.find`), ``pp`` stages form a pipeline under one of
torch's schedules, and ``dp`` replicas of the pipeline each run ``m / dp`` of the micro-batches
and average their gradients. Choose the three degrees, the split, the schedule and the stages
that recompute their activations, so that the step is least and every device fits in ``M``.

Cost model (the pipeline planner's, `planner.plan_graph`, with two terms added):

* at tensor degree ``t`` a segment whose groups hold a share ``s`` of its FLOPs takes
  ``1 - s + s / t`` of its measured forward and backward, plus, per group, a ring all-reduce of
  the row outputs in the forward and of the column inputs' gradients in the backward
  (`tp_cost.allreduce_ms` over the tensor group's link, and the price of a message where the
  profile has one); the groups' parameters, gradients and optimizer state take ``1/t`` of their
  bytes; activations are counted whole (an upper bound: a group's inside splits too);
* the pipeline's step is the replay of the schedule's action order with those costs
  (`devplace_lite.schedules.simulate`) on ``m / dp`` micro-batches;
* then each stage's data-parallel group all-reduces the stage's gradients (a ring over the
  data group's link): the step is the replay plus the slowest stage's all-reduce.

Links: ranks are laid out ``(dp, pp, tp)``, ``tp`` innermost, so a tensor group spans ``tp``
consecutive devices and a data group ``dp pp tp``; a group within one node of the roofline's
spec crosses NVLink, else the network (`tp_cost.link_for`). A profile measured here has one
link, the host's.

Exactness: for each mesh shape and schedule, the split and its recomputation flags are the
schedule search's (`devplace_lite.schedules.search`: the least replayed step, proven by
enumeration, else its bound). The all-reduce term is the split's own, bounded below by its
value for the least a stage can hold (``max(G / pp, the largest segment's G)``). Before any
search each shape gets a bound that needs none (`schedules.search.quick_bound`: the busiest
rank's least work, plus that least all-reduce); shapes are searched in that bound's order and
one whose bound reaches the best step found is not searched (status ``bounded``: proven no
better). The plan is ``optimal`` when its step is at most every shape's bound, else
``feasible`` with its gap to the least bound (``time_limit`` when the time limit left shapes
unsearched, which keep their quick bound, or cut a shape's search short, which keeps its
incumbent and bound). With a limit each shape's search gets its share of what is left (the
first shape is searched whatever is left); without one, each runs to its end.

Complexity: at most one schedule search per mesh shape and schedule, ``O(d(N)^2)`` shapes for
``N`` with ``d(N)`` divisors, plus ``O(n)`` per shape for its bound; the capture and the
measurement once (on a roofline, segments of one signature priced once: `measure._signature`;
a meta-device model whose layers run one program captured from a cut of a few of them:
`repeat`, Llama-3-70B's profile in 16 s of CPU instead of 55: ``benchmarks/meta_cluster``).

Reference: Narayanan et al., "Efficient large-scale language model training on GPU clusters
using Megatron-LM", SC 2021 (the uniform dp x tp x pp mesh); Tarnawski et al., "Piper:
multidimensional planner for DNN parallelization", NeurIPS 2021 (degrees chosen per stage with
the split: `devplace_lite.multidim`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from .. import solve
from ..devices import SPECS
from ..errors import GraphError, UsageError
from ..graph import Graph
from ..schedules.simulate import SCHEDULES, stage_to_rank, stages_per_rank
from .costs import OPTIMIZERS, segment_costs
from .pipeline_plan import PipelinePlan
from .planner import plan_graph
from .tp_cost import allreduce_ms, link_for


@dataclass(frozen=True)
class Shape:
    """One mesh: data-parallel replicas, pipeline ranks, tensor shards; ``schedule`` and its
    stages per rank."""

    dp: int
    pp: int
    tp: int
    schedule: str
    per_rank: int = 1


def at_degree(graph: Graph, shares: dict[str, list[float]], t: int, link: float, message_ms: float = 0.0) -> Graph:
    """A copy of segment graph ``graph`` with every segment's times and bytes at tensor degree ``t``.

    Parameters
    ----------
    graph : Graph
        A measured segment graph (`segments.segment_graph`).
    shares : dict
        `tp_cost.segment_shares` of its segments.
    t : int
        The tensor-parallel degree (1: the graph itself).
    link : float
        Bytes/s of the tensor group's link.
    message_ms : float
        What one all-reduce costs beyond its bytes (the profile's price of a message).

    Returns
    -------
    Graph
        Forward, backward (its input- and weight-gradient parts) and parameter and gradient
        bytes per segment at degree ``t``; the notes say what was scaled.

    Examples
    --------
    >>> from devplace_lite.graph import Node
    >>> g = Graph([Node("0:a", p_acc=4.0, memory=8.0)], [], meta={"segments": {
    ...     "names": ["a"], "forward_ms": [4.0], "backward_ms": [8.0], "param_bytes": [8.0],
    ...     "grad_bytes": [8.0], "activation_bytes": [0.0]}})
    >>> s = {"share": [0.5], "param_bytes": [8.0], "groups": [0], "forward_bytes": [0.0], "backward_bytes": [0.0]}
    >>> h = at_degree(g, s, 2, 1e9)
    >>> h.meta["segments"]["forward_ms"], h.meta["segments"]["param_bytes"], h.nodes[0].p_acc
    ([3.0], [4.0], 3.0)
    """
    if t == 1:
        return graph
    seg = dict(graph.meta["segments"])
    keep = [1.0 - s + s / t for s in shares["share"]]
    cut = [g * (1.0 - 1.0 / t) for g in shares["param_bytes"]]

    def comm(key: str) -> list[float]:
        return [allreduce_ms(b, t, link) + k * message_ms for b, k in zip(shares[key], shares["groups"])]

    fwd_ar, bwd_ar = comm("forward_bytes"), comm("backward_bytes")
    seg["forward_ms"] = [f * k + a for f, k, a in zip(seg["forward_ms"], keep, fwd_ar)]
    seg["param_bytes"] = [p - c for p, c in zip(seg["param_bytes"], cut)]
    if graph.is_training:
        seg["backward_ms"] = [b * k + a for b, k, a in zip(seg["backward_ms"], keep, bwd_ar)]
        seg["grad_bytes"] = [g - c for g, c in zip(seg["grad_bytes"], cut)]
        if seg.get("backward_input_ms"):  # the column inputs' gradients are summed in the input pass
            seg["backward_input_ms"] = [b * k + a for b, k, a in zip(seg["backward_input_ms"], keep, bwd_ar)]
        if seg.get("backward_weight_ms"):
            seg["backward_weight_ms"] = [b * k for b, k in zip(seg["backward_weight_ms"], keep)]
    idx = {f"{i}:{nm}": i for i, nm in enumerate(seg["names"])}
    nodes = []
    for v in graph.nodes:
        i = idx.get(v.id[:-5] if v.backward else v.id)
        if i is None:
            nodes.append(v)
        elif v.backward:
            ms = seg["backward_ms"][i]
            nodes.append(replace(v, p_acc=round(ms, 6), p_cpu=round(ms, 6), memory=float(seg["grad_bytes"][i])))
        else:
            ms = seg["forward_ms"][i]
            nodes.append(replace(v, p_acc=round(ms, 6), p_cpu=round(ms, 6), memory=float(
                seg["param_bytes"][i] + seg["activation_bytes"][i])))
    meta = {**graph.meta, "segments": seg, "tensor_parallel": t,
            "notes": list(graph.meta.get("notes", [])) + [
                f"tensor degree {t}: each segment's time scaled by 1 - s + s/{t} (s: its column-then-row groups' "
                f"share of its FLOPs) plus its groups' all-reduces; their parameters split {t} ways; activations "
                "counted whole (an upper bound)"]}
    return Graph(nodes, list(graph.edges), name=f"{graph.name}-tp{t}", meta=meta)


def shapes(devices: int, degrees: Sequence[int], microbatches: int, segments: int,
           schedules: Sequence[str]) -> list[Shape]:
    """Every mesh of ``devices`` for the schedules: ``tp`` among ``degrees``, ``dp`` dividing the
    micro-batches, ``pp`` stages (times the schedule's stages per rank) at most ``segments``.

    >>> [(s.dp, s.pp, s.tp) for s in shapes(8, [1, 2], 4, 4, ["1f1b"])]
    [(4, 2, 1), (2, 4, 1), (4, 1, 2), (2, 2, 2), (1, 4, 2)]
    """
    out = []
    for schedule in schedules:
        v = stages_per_rank(schedule, None)
        for t in degrees:
            if devices % t:
                continue
            for pp in range(1, devices // t + 1):
                if (devices // t) % pp or pp * v > segments:
                    continue
                dp = devices // (t * pp)
                if microbatches % dp or microbatches // dp < 1:
                    continue
                out.append(Shape(dp, pp, t, schedule, v))
    return out


def dp_allreduce_ms(grad_bytes: float, dp: int, link: float, message_ms: float = 0.0) -> float:
    """A stage's gradients averaged over ``dp`` replicas: a ring all-reduce, one message.

    >>> dp_allreduce_ms(1e6, 2, 1e9, 0.5), dp_allreduce_ms(1e6, 1, 1e9, 0.5)
    (1.5, 0.0)
    """
    return 0.0 if dp == 1 else allreduce_ms(grad_bytes, dp, link) + message_ms


def _links(graph: Graph, spec: str | None) -> tuple[Any, Any]:
    """Functions of a group's span (devices) -> its link's bytes/s."""
    if spec is None:
        host = float(graph.meta.get("spec", {}).get("link") or 16e9)
        return (lambda n: host), (lambda n: host)
    acc = SPECS[spec]
    return (lambda n: link_for(acc, n)), (lambda n: link_for(acc, n))


def plan_mesh(graph: Graph, shares: dict[str, list[float]], *, devices: int, degrees: Sequence[int],
              microbatches: int, batch: int, schedules: Sequence[str] = ("1f1b",), memory: float | None = None,
              optimizer: str = "none", recompute: str = "auto", spec: str | None = None,
              time_limit: float | None = None, started: float | None = None, seed: int = 0,
              fixed: dict[str, int] | None = None) -> PipelinePlan:
    """The least forecast step over mesh shapes, splits, schedules and recomputation (see the module).

    Parameters
    ----------
    graph : Graph
        The model's measured segment graph at tensor degree 1 (one micro-batch).
    shares : dict
        `tp_cost.segment_shares` of its segments.
    devices : int
        ``N``: every shape uses all of them.
    degrees : sequence of int
        Tensor degrees the model's groups allow (`TensorParallelPlan.degrees`).
    microbatches, batch : int
        Micro-batches of the whole step (``dp`` divides them) and its samples.
    schedules : sequence of str
        Keys of `SCHEDULES` to choose among.
    memory : float, optional
        Bytes per device.
    optimizer, recompute, seed : as `plan_graph`.
    spec : str, optional
        The roofline's GPU (its links); None: a profile measured here.
    time_limit, started : wall seconds for the whole call from ``started`` (`time.monotonic`).
    fixed : dict, optional
        Degrees the user fixed (``{"tp": 2}``): only shapes with them are weighed.

    Returns
    -------
    PipelinePlan
        The chosen shape's pipeline plan (`plan_graph` on the graph at its tensor degree),
        with ``dp``, ``tp``, ``devices`` and ``mesh`` (every shape tried, the bound, the status).

    Raises
    ------
    UsageError
        No shape of ``devices`` fits the model (its one line says why).
    GraphError
        No shape fits ``memory``.
    """
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    budget = solve.Budget(time_limit, time.monotonic() if started is None else started)
    n = len(graph.meta["segments"]["names"])
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    todo = [s for s in shapes(devices, degrees, microbatches, n, schedules)
            if all(getattr(s, k) == v for k, v in fixed.items())]
    if not todo:
        raise UsageError(f"no dp x pp x tp mesh of {devices} device(s) fits: tensor degrees {list(degrees)} divide "
                         f"the model's groups, the data degree must divide the {microbatches} micro-batch(es) and "
                         f"the pipeline holds at most {n} segment(s)"
                         + "".join(f", {k} = {v}" for k, v in fixed.items())
                         + "; give --microbatches a multiple of the data degree, other fixed degrees, or another "
                         "--devices")
    from ..schedules.search import quick_bound, search

    tp_link, dp_link = _links(graph, spec)
    message = float(graph.meta["segments"].get("action_ms") or 0.0)
    graphs: dict[int, Graph] = {}
    for t in sorted({sh.tp for sh in todo}):
        graphs[t] = at_degree(graph, shares, t, tp_link(t), message)

    def least_allreduce(sh: Shape) -> float:  # the least a stage of the shape can hold (see the module)
        grads = graphs[sh.tp].meta["segments"]["grad_bytes"] if graph.is_training else [0.0] * n
        return dp_allreduce_ms(max(sum(grads) / sh.pp, max(grads)), sh.dp, dp_link(sh.dp * sh.pp * sh.tp), message)

    # each shape's bound without a search; searched in bound order, a shape whose bound reaches
    # the best step found is skipped: no split of it can do better (status "bounded")
    quick = {sh: quick_bound(segment_costs(graphs[sh.tp], optimizer, microbatches // sh.dp), sh.schedule, sh.pp,
                             microbatches // sh.dp, graph.is_training) + least_allreduce(sh) for sh in todo}
    todo.sort(key=lambda sh: quick[sh])
    rows: list[dict[str, Any]] = []
    incumbent = math.inf
    for i, sh in enumerate(todo):
        left = budget.left()
        if i and budget.spent():  # the first shape is always searched; the others keep their quick bound
            rows += [{**_shape(s), "status": "not tried", "bound_ms": quick[s]} for s in todo[i:]]
            break
        if quick[sh] >= incumbent:
            rows.append({**_shape(sh), "status": "bounded", "bound_ms": quick[sh]})
            continue
        g = graphs[sh.tp]
        costs = segment_costs(g, optimizer, microbatches // sh.dp)
        # its share of what the caller's budget leaves; without a limit it runs to its end (the
        # enumeration, or the local search's replay budget)
        share = math.inf if left is None else max(left / (len(todo) - i), solve.MIN_SLICE)
        try:
            found = search(costs, sh.schedule, sh.pp, microbatches // sh.dp, per_rank=sh.per_rank,
                           training=g.is_training, memory=memory, recompute=recompute, least_ranks=sh.pp,
                           time_limit=share)
        except UsageError as e:  # the schedule refuses this many micro-batches on these ranks
            rows.append({**_shape(sh), "status": "refused", "why": str(e)})
            continue
        row = {**_shape(sh), "status": found.status}  # the split search's
        if found.stage_of is not None:
            grads = g.meta["segments"]["grad_bytes"] if g.is_training else [0.0] * n
            ranks = stage_to_rank(sh.schedule, sh.pp, sh.per_rank)
            held = _sums(grads, [ranks[s] for s in found.stage_of])
            link = dp_link(sh.dp * sh.pp * sh.tp)
            ar = dp_allreduce_ms(max(held), sh.dp, link, message)
            row.update(replay_ms=found.step_ms, allreduce_ms=ar, step_ms=found.step_ms + ar,
                       bound_ms=max(found.bound_ms + least_allreduce(sh), quick[sh]),
                       samples_per_s=1e3 * batch / (found.step_ms + ar) if found.step_ms + ar > 0 else math.inf)
            incumbent = min(incumbent, row["step_ms"])
        elif found.status != "infeasible":
            row["bound_ms"] = max(found.bound_ms + least_allreduce(sh), quick[sh])
        rows.append(row)
    done = [r for r in rows if "step_ms" in r]
    if not done:
        if all(r["status"] == "infeasible" for r in rows):
            raise GraphError(f"no dp x pp x tp mesh of {devices} device(s) fits {memory:.0f} bytes per device "
                             f"(proven for each of {len(rows)} shape(s) and schedule(s)); way out: more devices, "
                             "fewer micro-batches in flight, or --recompute auto")
        if any(r["status"] == "not tried" for r in rows):
            raise GraphError(f"the time limit ended before any mesh of {devices} device(s) was planned")
        refused = [r for r in rows if r["status"] == "refused"]
        if refused and (memory is None or len(refused) == len(rows)):
            raise GraphError(f"no dp x pp x tp mesh of {devices} device(s) runs the schedule: {refused[0]['why']}")
        proven = sum(r["status"] == "infeasible" for r in rows)
        raise GraphError(f"no dp x pp x tp mesh of {devices} device(s) was found to fit {memory:.0f} bytes per device: "
                         f"{proven} of {len(rows)} shape(s) proven not to, the search of the others found no split "
                         "that fits (unproven); way out: more devices or fewer micro-batches in flight")
    best = min(done, key=lambda r: (r["step_ms"], r["tp"], r["pp"]))
    # a shape the limit left unsearched keeps its quick bound, one whose search it cut short its
    # incumbent and bound: the plan is then the incumbent, not proven
    bound = min(r["bound_ms"] for r in rows if "bound_ms" in r)
    cut = any(r["status"] in ("not tried", "time_limit") for r in rows)
    sh = Shape(best["dp"], best["pp"], best["tp"], best["schedule"], best["per_rank"])
    left = budget.left()
    p = plan_graph(graphs[sh.tp], k=sh.pp, microbatches=microbatches // sh.dp, schedule=sh.schedule, batch=batch // sh.dp,
                   memory=memory, optimizer=optimizer, per_rank=sh.per_rank, recompute=recompute, seed=seed,
                   least_ranks=sh.pp, time_limit=None if left is None else max(left, solve.MIN_SLICE))
    p.dp, p.tp, p.devices = sh.dp, sh.tp, devices
    # the chosen shape's split is searched again for its plan: a limit that cuts that short too
    # leaves the plan unproven
    status, gap = solve.verdict(best["step_ms"], bound, cut_short=cut or bool(p.stopped))
    p.mesh = {"status": status, "step_ms": best["step_ms"], "bound_ms": bound, "gap": gap,
              "allreduce_ms": best["allreduce_ms"], "samples_per_s": best["samples_per_s"], "batch": batch,
              "microbatches": microbatches, "spec": spec, "tried": rows}
    return p


def _shape(s: Shape) -> dict[str, Any]:
    return {"dp": s.dp, "pp": s.pp, "tp": s.tp, "schedule": s.schedule, "per_rank": s.per_rank}


def _sums(values: Sequence[float], group_of: Sequence[int]) -> list[float]:
    out = [0.0] * (max(group_of) + 1)
    for v, s in zip(values, group_of):
        out[s] += float(v)
    return out


def plan_devices(model: Any, example_inputs: Sequence[Any], *, devices: int, microbatches: int | None = None,
                 schedule: str = "1f1b", training: bool = True, memory: float | None = None, optimizer: str = "none",
                 granularity: str = "block", time_limit: float | None = None, seed: int = 0, repeats: int = 5,
                 warmup: int = 1, model_spec: str | None = None, device: str = "cpu", spec: str | None = None,
                 recompute: str = "auto", started: float | None = None, action_ms: float = 0.0,
                 dp: int | None = None, pp: int | None = None, tp: int | None = None) -> PipelinePlan:
    """Capture ``model``, measure its segments, find its tensor-parallel groups and plan it on
    ``devices`` devices (`plan_mesh`): what ``devplace plan MODEL --devices N`` answers.

    Parameters
    ----------
    model, example_inputs : nn.Module and one step's whole batch (as `planner.plan`).
    devices : int
        Devices of the mesh, ``dp x pp x tp``.
    microbatches : int, optional
        Micro-batches of the whole step, shared by the data-parallel replicas (default: one
        sample each, so that every data degree up to the batch can be weighed).
    schedule : str
        A key of `SCHEDULES`, or ``"auto"``: each of them.
    training, memory, optimizer, granularity, time_limit, seed, repeats, warmup, model_spec,
    device, spec, recompute, started, action_ms : as `planner.plan`.
    dp, pp, tp : int, optional
        Degrees fixed by the user (the others are chosen).

    Returns
    -------
    PipelinePlan
        With ``dp``, ``tp``, ``devices`` and ``mesh`` (see `plan_mesh`).

    Raises
    ------
    UsageError
        Bad numbers, or no mesh of ``devices`` fits the model.
    GraphError
        A model torch.export does not capture, or no mesh fits ``memory``.
    """
    import torch

    from .planner import indivisible

    inputs = tuple(example_inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() for t in inputs):
        raise UsageError("example inputs must be tensors with a batch dimension")
    if int(devices) != devices or devices < 1:
        raise UsageError(f"devices must be a positive integer, got {devices!r}")
    batch = int(inputs[0].shape[0])
    microbatches = batch if microbatches is None else microbatches
    if int(microbatches) != microbatches or microbatches < 1:
        raise UsageError(f"microbatches must be a positive integer, got {microbatches!r}")
    if batch % microbatches:
        raise UsageError(indivisible(batch, microbatches))
    if schedule != "auto" and schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}, auto")
    started = time.monotonic() if started is None else started
    graph, shares, tpp, cap, seconds = mesh_profile(
        model, inputs, microbatches=microbatches, training=training, granularity=granularity, repeats=repeats,
        warmup=warmup, model_spec=model_spec, device=device, spec=spec, action_ms=action_ms,
        budget=solve.Budget(time_limit, started))
    if tp is not None and tpp.why_not(tp):
        raise UsageError(f"--tp {tp}: {tpp.why_not(tp)}")
    degrees = [t for t in tpp.degrees() if devices % t == 0]
    p = plan_mesh(graph, shares, devices=devices, degrees=degrees, microbatches=microbatches, batch=batch,
                  schedules=list(SCHEDULES) if schedule == "auto" else [schedule], memory=memory,
                  optimizer=optimizer, recompute=recompute, spec=spec, time_limit=time_limit, started=started,
                  seed=seed, fixed={"dp": dp, "pp": pp, "tp": tp})
    p.model_spec, p.capture = model_spec, cap
    groups = len(tpp.groups)
    p.notes.append(f"tensor parallelism: {groups} column-then-row group(s) found on the exported graph, degrees "
                   f"{tpp.degrees()} split them all" + (f"; refused: {tpp.refused[0][1]}" if tpp.refused else ""))
    p.seconds = {**seconds, **p.seconds, "total": time.monotonic() - started}
    return p


def plan(model: Any, example_inputs: Sequence[Any], *, k: int | None = None, devices: int | None = None,
         degrees: dict[str, int] | None = None, **options: Any) -> PipelinePlan:
    """Plan ``model`` on ``k`` pipeline ranks (`planner.plan`) or on ``devices`` devices with
    data, tensor and pipeline degrees chosen together (`plan_devices`): the one planner of a
    model, behind ``devplace_lite.plan`` and ``devplace plan``.

    Parameters
    ----------
    model, example_inputs : nn.Module and one step's whole batch.
    k : int, optional
        Pipeline ranks (one stage each, or the schedule's stages per rank).
    devices : int, optional
        Devices of a ``dp x pp x tp`` mesh; give ``k`` or ``devices``.
    degrees : dict, optional
        With ``devices``: degrees fixed by the user, e.g. ``{"tp": 2}`` (keys ``dp``, ``pp``, ``tp``).
    **options
        The planner's options (`planner.plan`; with ``devices``, those `plan_devices` takes).

    Returns
    -------
    PipelinePlan

    Raises
    ------
    UsageError
        Neither or both of ``k`` and ``devices``, a degree that is not a positive integer, or
        an option of a ``k``-rank pipeline given with ``devices``.
    """
    from .planner import plan as plan_pipeline

    if degrees and devices is None:
        raise UsageError("degrees fix a mesh's dp, pp or tp: give devices too")
    if (k is None) == (devices is None):
        raise UsageError("give k (pipeline ranks) or devices (data, tensor and pipeline degrees planned together), "
                         "one of them")
    if devices is None:
        return plan_pipeline(model, example_inputs, k=k, **options)
    fixed = dict(degrees or {})
    for key, v in fixed.items():
        if key not in ("dp", "pp", "tp"):
            raise UsageError(f"unknown degree {key!r}; known: dp, pp, tp")
        if v is not None and (int(v) != v or v < 1):
            raise UsageError(f"{key} must be a positive integer, got {v!r}")
    pipeline_only = sorted(set(options) & {"per_rank", "method", "least_ranks"})
    if pipeline_only or options.get("microbatches") == "auto":
        raise UsageError(f"{(pipeline_only or ['microbatches=auto'])[0]} shapes a pipeline of k ranks; with devices "
                         "leave it out")
    return plan_devices(model, example_inputs, devices=devices, **fixed, **options)


def mesh_profile(model: Any, inputs: tuple, *, microbatches: int, training: bool = True, granularity: str = "block",
                 repeats: int = 5, warmup: int = 1, model_spec: str | None = None, device: str = "cpu",
                 spec: str | None = None, action_ms: float = 0.0, budget: solve.Budget | None = None):
    """What `plan_mesh` plans from, measured once for any number of meshes: the model's segment
    graph on one micro-batch (`planner.segment_profile`), its column-then-row groups
    (`tensor_parallel.find` on the exported graph) and each segment's share of them
    (`tp_cost.segment_shares`).

    Parameters
    ----------
    model, inputs : the model and one step's whole batch (tensors with a batch dimension).
    microbatches : int
        Micro-batches of the step (the profile runs one).
    training, granularity, repeats, warmup, model_spec, device, spec, action_ms : as `planner.plan`.
    budget : solve.Budget, optional
        The call's time limit (the measurement's repeats stop short of it).

    Returns
    -------
    tuple
        ``(graph, shares, TensorParallelPlan, Capture, seconds)``.

    Raises
    ------
    GraphError
        A model torch.export does not capture.
    """
    from .capture import exported_graph, without_cache
    from .planner import segment_profile
    from .repeat import expand_plan, expand_shares, truncated
    from .tensor_parallel import find
    from .tp_cost import segment_shares

    batch = int(inputs[0].shape[0])
    without_cache(model)
    graph, cap, seconds = segment_profile(model, inputs, microbatches, training, granularity, repeats, warmup,
                                          model_spec, device, spec, budget=budget, action_ms=action_ms)
    t0 = time.monotonic()
    # a batch of one hides the batch dimension among size-one dimensions (`tensor_parallel`)
    rows = min(batch, 2)
    example, scale = tuple(t[:rows] for t in inputs), batch / microbatches / rows
    cut, tpp = cap.repeated, None
    if cut is not None:  # the capture stood a cut model for the whole one: find the groups on it too
        with truncated(model, cut.stack):
            gm = exported_graph(model, example)
            small = find(gm)
            shares = expand_shares(segment_shares(model, gm, small, cut.names, scale=scale), cut.where)
        tpp = expand_plan(small, cut.stack)
    if tpp is None:
        gm = exported_graph(model, example)
        tpp = find(gm)
        shares = segment_shares(model, gm, tpp, graph.meta["segments"]["names"], scale=scale)
    seconds["tensor_parallel"] = time.monotonic() - t0
    return graph, shares, tpp, cap, seconds
