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
   comes from the library's best bound (`devplace_lite.bounds.best.best_bound`) on the graph
   without those edges, which bounds every chain of ideals of the segments, hence also the
   plan; the gap is ``(objective - bound) / objective``.
3. Memory of stage ``s`` of ``p`` under the schedule: its parameters (a tied weight counts on
   every stage holding a copy), their gradients and optimizer state when training, and the
   activations autograd keeps per micro-batch times the micro-batches in flight: all ``m`` with
   GPipe, ``min(m, p - s)`` with 1F1B, one in inference. With a memory cap the DP searches
   under a conservative additive form of it (every stage counted with the largest in-flight
   count); a plan over the cap after that is refused in one line that says the way out.
4. Tied weights: a parameter read by segments on different stages is *replicated* by
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import methods
from ..cost import as_assignment, chain_order, device_loads
from ..devices import Cluster
from ..errors import GraphError, UsageError
from ..graph import Graph
from ..schedule import gpipe_formula

SCHEDULES = ("gpipe", "1f1b")
#: Optimizer state per parameter byte: SGD with momentum keeps one buffer, Adam two.
OPTIMIZERS = {"none": 0, "sgd": 1, "adam": 2}
#: The exact DP is chosen when the chain graph has at most this many ideals.
DP_IDEALS = 200_000
#: Below this many ideals the DP runs without a time limit: it takes milliseconds, and a limit
#: would count the one-off compilation of its kernel on a busy machine.
DP_UNTIMED = 10_000


# -- the registries: the one place this package calls them ------------------------------------
def partition(graph: Graph, cluster: Cluster, method: str, *, time_limit: float | None = None, seed: int = 0):
    """``methods.PARTITION[method]`` on ``graph`` (a `devplace_lite.result.Result`)."""
    return methods.resolve(methods.PARTITION, method)(graph, cluster, time_limit=time_limit, seed=seed)


def certify(graph: Graph, cluster: Cluster, *, time_limit: float, upper: float | None = None):
    """The best proven lower bound on a chain-of-ideals split of ``graph``
    (`devplace_lite.bounds.best.best_bound`, ``methods.BOUND["best"]``)."""
    from ..bounds.best import best_bound

    return best_bound(graph, cluster, time_limit=time_limit, kind="chain", upper=upper)


def choose_method(graph: Graph) -> tuple[str, str, int | None]:
    """``(method, why, ideals)``: the exact DP when the ideals fit, else local search."""
    from ..ideals import count_ideals

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


def in_flight(schedule: str, microbatches: int, stages: int, stage: int, training: bool) -> int:
    """Micro-batches whose activations stage ``stage`` holds at once under ``schedule``."""
    if not training:
        return 1
    return microbatches if schedule == "gpipe" else min(microbatches, stages - stage)


# -- the plan ----------------------------------------------------------------------------------
#: The files `PipelinePlan.write` writes into its folder.
PLAN_FILES = {"plan": "plan.json", "graph": "graph.json", "script": "run_pipeline.py"}


@dataclass
class PipelinePlan:
    """A model's pipeline plan: segments, the chosen split, its certificate and its memory.

    ``stage_of[i]`` is the stage of segment ``i``; times are ms per micro-batch (thread CPU
    time of one thread), memory in bytes.
    """

    graph: Graph
    chain: Graph
    cluster: Cluster
    result: Any
    bound: Any
    stage_of: list[int]
    schedule: str
    microbatches: int
    batch: int
    optimizer: str
    memory: float | None
    method: str
    method_reason: str
    capture_how: str = "torch.export"
    notes: list[str] = field(default_factory=list)
    model_spec: str | None = None
    seed: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    capture: Any = None

    # -- structure
    @property
    def names(self) -> list[str]:
        return list(self.graph.meta["segments"]["names"])

    @property
    def training(self) -> bool:
        return bool(self.graph.is_training)

    @property
    def num_stages(self) -> int:
        return max(self.stage_of) + 1

    @property
    def stage_segments(self) -> list[list[int]]:
        return [[i for i, s in enumerate(self.stage_of) if s == st] for st in range(self.num_stages)]

    @property
    def split_points(self) -> list[str]:
        """Module FQNs where stages 1, 2, ... begin."""
        return [self.names[segs[0]] for segs in self.stage_segments[1:]]

    @property
    def split_spec(self) -> dict[str, str]:
        """``torch.distributed.pipelining`` split points: ``{fqn: "BEGINNING"}`` (the name of
        ``SplitPoint.BEGINNING``)."""
        return {fqn: "BEGINNING" for fqn in self.split_points}

    @property
    def tied(self) -> list[dict[str, Any]]:
        """Weights read on several segments: on one stage, or replicated with summed gradients."""
        out = []
        for fqn, segs in self.graph.meta.get("tied", {}).items():
            stages = sorted({self.stage_of[i] for i in segs})
            how = ("kept on one stage" if len(stages) == 1 else
                   f"replicated on stages {stages}: their gradients are summed (all-reduce over those ranks) "
                   "after each backward, so every copy sees the whole gradient")
            out.append({"parameter": fqn, "segments": segs, "stages": stages, "handling": how})
        return out

    # -- forecast
    def _sum(self, values: Sequence[float]) -> list[float]:
        return [float(sum(values[i] for i in segs)) for segs in self.stage_segments]

    @property
    def forward_ms(self) -> list[float]:
        return self._sum(self.graph.meta["segments"]["forward_ms"])

    @property
    def backward_ms(self) -> list[float]:
        return self._sum(self.graph.meta["segments"]["backward_ms"]) if self.training else [0.0] * self.num_stages

    @property
    def compute_ms(self) -> list[float]:
        """Measured-profile compute per stage and micro-batch (forward + backward)."""
        return [f + b for f, b in zip(self.forward_ms, self.backward_ms)]

    @property
    def load_ms(self) -> list[float]:
        """The cost model's load of each stage: compute plus transfers (over the profile's link)."""
        a = self.result.assignment
        compute, comm = device_loads(self.chain, self.cluster, a)
        order = chain_order(self.chain, self.cluster, a)
        return [float(compute[d] + comm[d]) for d in order]

    def step_ms(self) -> float:
        """The GPipe-formula step time from the stage loads (1F1B: forward and backward fused)."""
        m = self.microbatches
        if not self.training:
            return gpipe_formula(self.forward_ms, m)
        if self.schedule == "1f1b":
            return gpipe_formula(self.load_ms, m)
        return gpipe_formula(self.forward_ms, m) + gpipe_formula(self.backward_ms, m)

    def stage_memory(self) -> list[dict[str, float]]:
        """Peak bytes of each stage under the schedule, by part (see the module docstring)."""
        seg = self.graph.meta["segments"]
        params, grads = self._sum(seg["param_bytes"]), self._sum(seg["grad_bytes"])
        acts = self._sum(seg["activation_bytes"])
        p, out = self.num_stages, []
        for s in range(p):
            g = grads[s] if self.training else 0.0
            opt = OPTIMIZERS[self.optimizer] * g
            n = in_flight(self.schedule, self.microbatches, p, s, self.training)
            out.append({"parameters": params[s], "gradients": g, "optimizer": opt, "microbatches_in_flight": n,
                        "activations_per_microbatch": acts[s], "peak": params[s] + g + opt + n * acts[s]})
        return out

    @property
    def gap(self) -> float | None:
        obj, lb = self.result.objective, self.bound.bound
        if obj is None or not math.isfinite(lb):
            return None
        return 0.0 if obj <= 0 else max(0.0, (obj - lb) / obj)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model_spec or self.graph.meta.get("model"), "capture": self.capture_how, "notes": self.notes,
            "segments": len(self.names), "segment_names": self.names, "granularity": self.graph.meta["granularity"],
            "training": self.training, "batch": self.batch, "microbatches": self.microbatches,
            "microbatch": self.batch // self.microbatches, "schedule": self.schedule, "optimizer": self.optimizer,
            "k": self.cluster.accelerators, "stages": self.num_stages, "split_spec": self.split_spec,
            "split_points": self.split_points, "stage_segments": self.stage_segments, "method": self.method,
            "method_reason": self.method_reason, "status": self.result.status, "objective_ms": self.result.objective,
            "bound_ms": self.bound.bound, "bound_method": self.bound.method, "bound_status": self.bound.status,
            "gap": self.gap, "forecast": {"forward_ms": self.forward_ms, "backward_ms": self.backward_ms,
                                          "compute_ms": self.compute_ms, "load_ms": self.load_ms,
                                          "step_ms": self.step_ms(), "clock": "thread CPU time, one thread"},
            "memory_cap": self.memory, "stage_memory": self.stage_memory(), "tied": self.tied,
            "seed": self.seed, "seconds": self.seconds, "torch": self.graph.meta.get("torch"),
        }

    def write(self, folder: str | Path) -> dict[str, Path]:
        """Write ``plan.json``, ``graph.json`` and ``run_pipeline.py`` into ``folder``."""
        from ..io import save_graph, write_json_atomic
        from .torchrun import write_script

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = {key: out / name for key, name in PLAN_FILES.items()}
        save_graph(self.graph, paths["graph"])
        write_json_atomic(paths["plan"], self.to_json())
        write_script(paths["script"], self)
        return paths


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


def plan_graph(graph: Graph, *, k: int, microbatches: int = 4, schedule: str = "1f1b", batch: int | None = None,
               memory: float | None = None, optimizer: str = "none", method: str = "auto",
               time_limit: float = 10.0, seed: int = 0) -> PipelinePlan:
    """Plan from a measured segment graph (`devplace_lite.pipeline.capture.segment_graph`)."""
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if memory is not None and not (math.isfinite(memory) and memory > 0):
        raise UsageError(f"memory must be a positive finite number of bytes, got {memory}")
    t0 = time.perf_counter()
    chain = chain_graph(graph)
    if memory is not None:
        chain = _capped(chain, schedule, microbatches, k, optimizer)
    cluster = Cluster(accelerators=k, cpus=0, memory=math.inf if memory is None else float(memory))
    why, ideals = f"asked for: {method}", None
    if method == "auto":
        method, why, ideals = choose_method(chain)
    small = method == "dp" and ideals is not None and ideals <= DP_UNTIMED
    res = partition(chain, cluster, method, time_limit=None if small else time_limit, seed=seed)
    if res.assignment is None or res.status == "infeasible":
        raise GraphError(f"no split of {graph.meta.get('model', graph.name)} into at most {k} stages fits "
                         f"{memory:.0f} bytes per device under {schedule} (parameters, gradients, optimizer state "
                         "and in-flight activations); way out: more stages (-k), fewer or smaller micro-batches, "
                         "or 1f1b instead of gpipe" if memory is not None else f"method {method} found no split")
    t1 = time.perf_counter()
    free = Cluster(accelerators=k, cpus=0)
    bound = certify(graph, free, time_limit=max(time_limit, 0.1), upper=res.objective)
    a = as_assignment(chain, cluster, res.assignment)
    order = chain_order(chain, cluster, a)
    pos = {d: s for s, d in enumerate(order)}
    names = graph.meta["segments"]["names"]
    stage_of = [pos[int(a[chain.index[f"{i}:{nm}"]])] for i, nm in enumerate(names)]
    plan = PipelinePlan(graph=graph, chain=chain, cluster=cluster, result=res, bound=bound, stage_of=stage_of,
                        schedule=schedule, microbatches=microbatches, batch=batch or microbatches * graph.meta["batch"],
                        optimizer=optimizer, memory=memory, method=method, method_reason=why,
                        capture_how=graph.meta.get("capture", "torch.export"), notes=list(graph.meta.get("notes", [])),
                        seed=seed, seconds={"partition": t1 - t0, "bound": time.perf_counter() - t1})
    if memory is not None:
        for s, rec in enumerate(plan.stage_memory()):
            if rec["peak"] > memory:
                raise GraphError(f"stage {s} needs {rec['peak']:.0f} bytes under {schedule} (parameters "
                                 f"{rec['parameters']:.0f}, {rec['microbatches_in_flight']} micro-batch(es) of "
                                 f"activations {rec['activations_per_microbatch']:.0f}), over {memory:.0f} bytes per "
                                 "device; way out: more stages (-k) or more, smaller micro-batches")
    return plan


def plan(model: Any, example_inputs: Sequence[Any], *, k: int, microbatches: int = 4, schedule: str = "1f1b",
         training: bool = True, memory: float | None = None, optimizer: str = "none", method: str = "auto",
         granularity: str = "block", time_limit: float = 10.0, seed: int = 0, repeats: int = 5, warmup: int = 1,
         model_spec: str | None = None, device: str = "cpu") -> PipelinePlan:
    """Profile ``model`` on one micro-batch of ``example_inputs`` (the whole batch, cut into
    ``microbatches`` along dim 0) and plan its pipeline over at most ``k`` stages.

    Parameters
    ----------
    model : nn.Module
        Any module; captured with torch.export, else torch.fx (see `capture`).
    example_inputs : sequence of tensors
        One step's batch; its leading size must divide by ``microbatches``.
    k, microbatches, schedule
        Devices, micro-batches per step, ``"gpipe"`` or ``"1f1b"``.
    training : bool
        Plan forward and backward (default) or inference only.
    memory : float, optional
        Bytes per device; a plan whose stage exceeds it under the schedule is refused.
    optimizer : ``"none"``, ``"sgd"`` or ``"adam"``
        Optimizer state counted in memory (per parameter byte: 0, 1, 2).
    method : str
        ``"auto"`` (the exact DP when the ideals fit) or a name of `devplace_lite.methods.PARTITION`.
    device : ``"cpu"`` or ``"cuda"``
        Where the segments are timed: one CPU thread (CPU time), or the GPU (CUDA events).

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

    from .capture import capture as capture_model
    from .capture import measure_segments, segment_graph

    inputs = tuple(example_inputs)
    for name, value, low in (("k", k, 1), ("microbatches", microbatches, 1), ("repeats", repeats, 1),
                             ("warmup", warmup, 0)):
        if int(value) != value or value < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {value}")
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise UsageError(f"time limit must be a positive number of seconds, got {time_limit}")
    if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() for t in inputs):
        raise UsageError("example inputs must be tensors with a batch dimension")
    batch = int(inputs[0].shape[0])
    if batch % microbatches:
        raise UsageError(f"a batch of {batch} does not split into {microbatches} equal micro-batches: give a "
                         f"micro-batch count (--microbatches) that divides {batch}, or a batch (--batch) that is a "
                         f"multiple of {microbatches}")
    micro = tuple(t[: batch // microbatches] for t in inputs)
    t0 = time.perf_counter()
    cap = capture_model(model, micro, granularity)
    t1 = time.perf_counter()
    times = measure_segments(cap, training=training, repeats=repeats, warmup=warmup, device=device)
    graph = segment_graph(cap, times, name=model_spec or type(model).__name__)
    t2 = time.perf_counter()
    p = plan_graph(graph, k=k, microbatches=microbatches, schedule=schedule, batch=batch, memory=memory,
                   optimizer=optimizer, method=method, time_limit=time_limit, seed=seed)
    p.model_spec, p.capture = model_spec, cap
    p.seconds = {"capture": t1 - t0, "measure": t2 - t1, **p.seconds}
    return p


def with_stages(p: PipelinePlan, stage_of: Sequence[int], method: str) -> PipelinePlan:
    """``p`` with another split (segment -> stage, in order), scored by the same cost model: to
    run the splits practitioners use (`even_split`, a compute-only balance) beside the plan's."""
    from ..cost import evaluate
    from ..result import Result

    a = stage_assignment(p, stage_of)
    ev = evaluate(p.chain, p.cluster, a)
    res = Result(method, p.chain, p.cluster, a, float(ev.max_load), "feasible", 0.0)
    return dataclasses.replace(p, result=res, stage_of=list(stage_of), method=method,
                               method_reason=f"given split ({method})")


def compute_only(p: PipelinePlan) -> list[int]:
    """The split an equal-compute partitioner picks (PiPPy's proposed ``auto_partition`` balances
    compute alone): the exact DP on the profile with every transfer set to zero."""
    g = p.chain.with_nodes([dataclasses.replace(v, comm=0.0) for v in p.chain.nodes])
    res = partition(g, p.cluster, "dp")
    order = chain_order(g, p.cluster, res.assignment)
    pos = {d: s for s, d in enumerate(order)}
    return [pos[int(res.assignment[g.index[f"{i}:{nm}"]])] for i, nm in enumerate(p.names)]


def even_split(graph: Graph, k: int) -> list[int]:
    """Stage of each segment when ``k`` stages begin at evenly spaced split points (what torch
    users write by hand: every ``n / k``-th block)."""
    n = len(graph.meta["segments"]["names"])
    k = min(k, n)
    return [min(k - 1, i * k // n) for i in range(n)]


def stage_assignment(plan_: PipelinePlan, stage_of: Sequence[int]) -> np.ndarray:
    """Device index of every node of the plan's chain graph for a segment -> stage list."""
    names = plan_.names
    stage = {f"{i}:{nm}": s for i, (nm, s) in enumerate(zip(names, stage_of))}
    out = np.zeros(plan_.chain.n, dtype=np.int64)
    for j, v in enumerate(plan_.chain.nodes):
        base = v.id[:-5] if v.backward else v.id
        out[j] = stage.get(base, 0)
    return out


# -- calibration -------------------------------------------------------------------------------
def _fit(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Least-squares scale ``a`` of ``measured ~ a * predicted`` (1 when nothing is predicted)."""
    num = sum(p * m for p, m in zip(predicted, measured))
    den = sum(p * p for p in predicted)
    return num / den if den > 0 else 1.0


def scaled_graph(graph: Graph, forward: float, backward: float) -> Graph:
    """``graph`` with forward times times ``forward`` and backward times times ``backward``."""
    nodes = [dataclasses.replace(v, p_acc=v.p_acc * (backward if v.backward else forward),
                                 p_cpu=None if v.p_cpu is None else v.p_cpu * (backward if v.backward else forward))
             for v in graph.nodes]
    g = graph.with_nodes(nodes)
    seg = dict(g.meta["segments"])
    seg["forward_ms"] = [t * forward for t in seg["forward_ms"]]
    seg["backward_ms"] = [t * backward for t in seg["backward_ms"]]
    g.meta = {**g.meta, "segments": seg, "calibration": {"forward_scale": forward, "backward_scale": backward}}
    return g


def _errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    return [abs(p - m) / m if m > 0 else 0.0 for p, m in zip(predicted, measured)]


def calibrate(p: PipelinePlan, folder: str | Path, *, steps: int = 3, nodes: int = 1, timeout: float = 600.0,
              first: dict[str, Any] | None = None, device: str = "cpu") -> dict[str, Any]:
    """Run ``p`` under torchrun, fit one scale factor for forward and one for backward times to
    the measured stage CPU times, re-plan with the scaled profile, run that plan and report the
    per-stage error of the compute forecast before (first plan, first run) and after
    (calibrated plan, second run). The calibrated plan replaces ``p``'s files in ``folder``;
    the first run's plan stays in ``folder/uncalibrated``. ``first``: a torchrun run of ``p``
    already made (`launch`'s answer), to save the first run."""
    from .torchrun import launch

    if first is None:
        first = launch(p.write(Path(folder) / "uncalibrated")["plan"], nodes=nodes, steps=steps, timeout=timeout,
                       device=device)
    a_f = _fit(p.forward_ms, first["stage_forward_cpu_ms"])
    a_b = _fit(p.backward_ms, first["stage_backward_cpu_ms"]) if p.training else 1.0
    q = plan_graph(scaled_graph(p.graph, a_f, a_b), k=p.cluster.accelerators, microbatches=p.microbatches,
                   schedule=p.schedule, batch=p.batch, memory=p.memory, optimizer=p.optimizer, method=p.method,
                   time_limit=max(1.0, p.seconds.get("bound", 1.0) + 1.0), seed=p.seed)
    q.model_spec, q.capture = p.model_spec, p.capture
    second = launch(q.write(folder)["plan"], nodes=nodes, steps=steps, timeout=timeout, device=device)
    before = _errors(p.compute_ms, first["stage_cpu_ms"])
    after = _errors(q.compute_ms, second["stage_cpu_ms"])
    return {"forward_scale": a_f, "backward_scale": a_b, "clock": "thread CPU time per micro-batch",
            "split_points_before": p.split_points, "split_points_after": q.split_points,
            "predicted_before_ms": p.compute_ms, "measured_before_ms": first["stage_cpu_ms"],
            "predicted_after_ms": q.compute_ms, "measured_after_ms": second["stage_cpu_ms"],
            "error_before": before, "error_after": after,
            "max_error_before": max(before), "max_error_after": max(after)}
