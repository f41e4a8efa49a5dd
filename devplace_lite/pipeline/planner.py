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
   (torch.utils.checkpoint around the stage's module in the run): such a stage keeps only its
   input per micro-batch in flight and pays one more forward per backward. The search chooses
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import solve
from ..cost import as_assignment, chain_order, device_loads
from ..devices import Cluster
from ..errors import GraphError, UsageError
from ..graph import Graph
from ..schedules.search import SegmentCosts, SplitSearch, evaluate, search, stage_times
from ..schedules.simulate import SCHEDULES as _SCHEDULES
from ..schedules.simulate import action_order, stage_to_rank, stages_per_rank

#: torch 2.13's schedules by their `--schedule` names (`devplace_lite.schedules.simulate.SCHEDULES`).
SCHEDULES = tuple(_SCHEDULES)
#: Micro-batches per step when none are asked (fewer when they do not divide the batch: `default_microbatches`).
MICROBATCHES = 4
#: Optimizer state per parameter byte: SGD with momentum keeps one buffer, Adam two; mixed-precision
#: Adam on 16-bit parameters keeps an fp32 master copy and two fp32 moments, 12 bytes per 2
#: (Rajbhandari et al., ZeRO, 2020: 16 bytes per parameter with the weight and its gradient).
OPTIMIZERS = {"none": 0, "sgd": 1, "adam": 2, "mixed-adam": 6}
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


def in_flight(schedule: str, microbatches: int, stages: int, stage: int, training: bool) -> int:
    """Micro-batches whose activations stage ``stage`` holds at once under GPipe or 1F1B (the
    other schedules: `devplace_lite.schedules.simulate`'s replay; GPipe's ``m`` bounds them all)."""
    if not training:
        return 1
    return min(microbatches, stages - stage) if schedule == "1f1b" else microbatches


def segment_costs(graph: Graph, optimizer: str = "none", microbatches: int = 1) -> SegmentCosts:
    """The segments' times, bytes and cut transfer times, as `devplace_lite.schedules.search` takes them.

    ``I`` and ``W`` are torch's measured input- and weight-gradient passes; a graph measured
    before ``W`` was kept takes ``W`` as the rest of the backward, and one measured before ``I``
    was kept splits the backward in halves and says so in ``graph.meta["notes"]``.
    A cut after segment ``i`` moves every value made at or before ``i`` (model inputs included)
    that a later segment reads, at the profile's link speed; the gradients of the floating-point
    ones come back the same way.
    """
    seg = graph.meta["segments"]
    names = seg["names"]
    n = len(names)
    training = bool(graph.is_training)
    grads = [g if training else 0 for g in seg["grad_bytes"]]
    static = [p + g * (1 + OPTIMIZERS[optimizer]) for p, g in zip(seg["param_bytes"], grads)]
    bi = seg.get("backward_input_ms")
    if training and not bi:
        bi = [b / 2 for b in seg["backward_ms"]]
        graph.meta.setdefault("notes", []).append("no inputs-only backward measured: I and W taken as half the "
                                                  "backward each")
    pos = {f"{i}:{nm}": i for i, nm in enumerate(names)}
    last: dict[str, int] = {}
    for u, v in graph.edges:
        if u.endswith(".grad") or v.endswith(".grad") or v not in pos:
            continue
        last[u] = max(last.get(u, -1), pos[v])
    comm = {v.id: float(v.comm) for v in graph.nodes}
    sent = {v.id: float(v.out_bytes) for v in graph.nodes}
    cut = [0.0] * max(n - 1, 0)
    back = [0.0] * max(n - 1, 0)
    cut_bytes = [0.0] * max(n - 1, 0)  # what a stage beginning after the cut receives: its input
    for u, far in last.items():
        for c in range(max(pos.get(u, 0), 0), far):  # a model input sits on the first stage
            cut[c] += comm[u]
            cut_bytes[c] += sent[u]
            if u in pos:
                back[c] += comm[u]
    first_in = sum(sent[v.id] for v in graph.nodes if v.id.startswith("input:"))
    return SegmentCosts(forward_ms=list(seg["forward_ms"]), backward_ms=list(seg["backward_ms"]) if training else
                        [0.0] * n, input_ms=list(bi) if training else None,
                        weight_ms=list(seg["backward_weight_ms"]) if training and seg.get("backward_weight_ms") else None,
                        static_bytes=static,
                        activation_bytes=list(seg["activation_bytes"]), cut_ms=cut, cut_back_ms=back,
                        step_bytes=_loss_bytes(seg, microbatches) if training else 0.0, cut_bytes=cut_bytes,
                        first_input_bytes=first_in, action_ms=float(seg.get("action_ms") or 0.0),
                        shared_saves=[(float(b), list(segs)) for b, segs in seg.get("shared_saves") or []])


def _loss_bytes(seg: dict, microbatches: int) -> float:
    """What the last stage holds for the whole step in training: torch's schedule keeps every
    micro-batch's output (to merge them) and its target chunk (a view of the batch's), and the
    loss saves both, so they count as saved activations from the first micro-batch to the end."""
    out = seg.get("output_bytes") or []
    return 2.0 * microbatches * float(out[-1]) if out else 0.0


# -- the plan ----------------------------------------------------------------------------------
#: The files `PipelinePlan.write` writes into its folder.
PLAN_FILES = {"plan": "plan.json", "graph": "graph.json", "script": "run_pipeline.py"}


@dataclass
class PipelinePlan:
    """A model's pipeline plan: segments, the chosen split, its certificate and its memory.

    ``stage_of[i]`` is the stage of segment ``i``; times are ms per micro-batch (thread CPU
    time of one thread, CUDA events, or a GPU's roofline: ``graph.meta["clock"]``), memory in
    bytes.
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
    #: Stages each rank holds (several for the interleaved and V schedules).
    per_rank: int = 1
    #: The schedule-aware split search that chose ``stage_of`` (`devplace_lite.schedules.search`).
    search: SplitSearch | None = None
    #: Ranks asked for (``-k``); a one-stage-per-rank schedule may use fewer.
    k: int = 0
    #: Per stage: recompute its activations in its backward (None: no stage does).
    recompute: list[bool] | None = None
    #: What the search was allowed: ``"auto"`` (recompute where the memory cap needs it) or ``"never"``.
    recompute_mode: str = "auto"
    #: Wall seconds of the whole call that made the plan (None: no limit).
    time_limit: float | None = None
    #: The steps the time limit cut short (``partition``, ``schedule search``, ``schedule auto``).
    stopped: list[str] = field(default_factory=list)
    #: ``--schedule auto``: how far the choice among schedules and micro-batch counts is proven
    #: (`plan_auto`); None for one schedule.
    auto: dict[str, Any] | None = None
    #: ``--schedule auto``: one record per schedule and micro-batch count (`plan_auto`'s list).
    tried: list[dict[str, Any]] | None = None
    #: Data-parallel replicas of this pipeline and tensor shards of each stage (`mesh_plan`:
    #: ``microbatches`` and ``batch`` are then one replica's); a pipeline alone is degree one.
    dp: int = 1
    tp: int = 1
    #: ``devices`` planned for (`mesh_plan.plan_mesh`) and its record: every mesh shape tried, the
    #: step with the data-parallel all-reduce, the bound and the status over shapes.
    devices: int | None = None
    mesh: dict[str, Any] | None = None

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
    def ranks(self) -> int:
        """Pipeline ranks (torchrun processes): stages / stages per rank."""
        return self.num_stages // self.per_rank

    @property
    def stage_ranks(self) -> list[int]:
        """Rank of each stage, as torch's schedule class places them."""
        return stage_to_rank(self.schedule, self.ranks, self.per_rank)

    @property
    def stage_segments(self) -> list[list[int]]:
        return [[i for i, s in enumerate(self.stage_of) if s == st] for st in range(self.num_stages)]

    @property
    def cuts(self) -> list[int]:
        """The first segment of stages 1, 2, ... (`devplace_lite.schedules.search`'s cuts)."""
        return [segs[0] for segs in self.stage_segments[1:]]

    @property
    def split_points(self) -> list[str]:
        """Module FQNs where stages 1, 2, ... begin."""
        return [self.names[c] for c in self.cuts]

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
                   "after each backward, so every copy sees the whole gradient" if self.training else
                   f"replicated on stages {stages}: each copy reads the same values (inference: no gradient, "
                   "nothing to sum)")
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
        """Measured-profile compute per stage and micro-batch (forward + backward, and the forward
        once more on a stage that recomputes its activations)."""
        return [f * (2 if rc else 1) + b for f, b, rc in zip(self.forward_ms, self.backward_ms, self.recompute_flags)]

    def _stage_times(self, kind: str) -> list[float]:
        if not self.training:
            return [0.0] * self.num_stages
        return stage_times(self.costs, self.cuts)[kind]

    @property
    def input_ms(self) -> list[float]:
        """torch's input-gradient pass per stage (``I``; none on the first stage)."""
        return self._stage_times("I")

    @property
    def weight_ms(self) -> list[float]:
        """torch's weight-gradient pass per stage (``W``; the whole backward on the first stage)."""
        return self._stage_times("W")

    @property
    def load_ms(self) -> list[float]:
        """The cost model's load of each stage: compute plus transfers (over the profile's link)."""
        compute, comm = device_loads(self.chain, self.cluster, stage_assignment(self, self.stage_of))
        return [float(compute[s] + comm[s]) for s in range(self.num_stages)]

    @property
    def costs(self) -> SegmentCosts:
        if getattr(self, "_costs", None) is None:
            self._costs = segment_costs(self.graph, self.optimizer, self.microbatches)
        return self._costs

    def simulation(self):
        """The replay of the schedule on this split (`devplace_lite.schedules.simulate.Simulation`)."""
        return evaluate(self.costs, self.cuts, self.schedule, self.ranks, self.microbatches, self.per_rank, self.training,
                        recompute=self.recompute_flags)

    @property
    def recompute_flags(self) -> list[bool]:
        """Per stage: whether it recomputes its activations in its backward (training only)."""
        flags = list(self.recompute or [False] * self.num_stages)
        if len(flags) != self.num_stages:
            raise UsageError(f"recomputation flags for {len(flags)} stage(s), the plan has {self.num_stages}")
        return [bool(x) and self.training for x in flags]

    def step_ms(self) -> float:
        """The forecast step time: the replay of torch's action order for the schedule."""
        return self.simulation().step_ms

    def stage_memory(self) -> list[dict[str, float]]:
        """Peak bytes of each stage under the schedule, by part (see the module docstring); the
        micro-batches in flight are the replay's. A recomputing stage keeps its input per
        micro-batch in flight and one micro-batch's whole activations during a backward."""
        from ..schedules.search import stage_bytes

        seg = self.graph.meta["segments"]
        params, grads = self._sum(seg["param_bytes"]), self._sum(seg["grad_bytes"])
        held = stage_bytes(self.costs, self.cuts)
        acts, inputs = held["activation_bytes"], held["input_bytes"]
        flying = self.simulation().stage_in_flight
        rec = self.recompute_flags
        out = []
        for s in range(self.num_stages):
            g = grads[s] if self.training else 0.0
            opt = OPTIMIZERS[self.optimizer] * g
            n = flying[s]
            held = n * acts[s] if not rec[s] else (n - 1) * inputs[s] + max(inputs[s], acts[s])
            out.append({"parameters": params[s], "gradients": g, "optimizer": opt, "microbatches_in_flight": n,
                        "activations_per_microbatch": acts[s], "input_per_microbatch": inputs[s],
                        "recompute": rec[s], "peak": params[s] + g + opt + held})
        return out

    @property
    def status(self) -> str:
        """``time_limit`` when the time limit cut a step short (the plan is the incumbent, not
        proven), else the partitioning method's status (certified by ``bound``); a mesh plan's
        is its status over mesh shapes (`mesh_plan.plan_mesh`)."""
        if self.mesh is not None:
            return self.mesh["status"]
        return "time_limit" if self.stopped else self.result.status

    @property
    def gap(self) -> float | None:
        obj, lb = self.result.objective, self.bound.bound
        if obj is None or not math.isfinite(lb):
            return None
        return 0.0 if obj <= 0 else max(0.0, (obj - lb) / obj)

    def forecast(self) -> dict[str, Any]:
        """Per stage and per rank, what the replay of the schedule forecasts (ms, bytes)."""
        sim = self.simulation()
        return {"forward_ms": self.forward_ms, "backward_ms": self.backward_ms, "input_ms": self.input_ms,
                "weight_ms": self.weight_ms,
                "compute_ms": self.compute_ms, "load_ms": self.load_ms, "step_ms": sim.step_ms,
                "rank_busy_ms": sim.rank_busy_ms, "rank_idle_ms": sim.rank_idle_ms,
                "rank_peak_bytes": sim.rank_peak_bytes, "clock": self.graph.meta.get("clock", "thread CPU time"),
                "action_ms": self.costs.action_ms if self.num_stages > 1 else 0.0,
                "how": f"replay of {_SCHEDULES[self.schedule].torch_class}'s action order "
                       "(devplace_lite.schedules.simulate)",
                "events": [[r, a.kind, a.stage, a.microbatch, round(t0, 6), round(t1, 6)]
                           for r, a, t0, t1 in sim.events]}

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model_spec or self.graph.meta.get("model"), "capture": self.capture_how, "notes": self.notes,
            "segments": len(self.names), "segment_names": self.names, "granularity": self.graph.meta["granularity"],
            "training": self.training, "batch": self.batch, "microbatches": self.microbatches,
            "microbatch": self.batch // self.microbatches, "schedule": self.schedule, "optimizer": self.optimizer,
            "k": self.k or self.cluster.accelerators, "stages": self.num_stages, "split_spec": self.split_spec,
            "split_points": self.split_points, "stage_segments": self.stage_segments, "method": self.method,
            "method_reason": self.method_reason, "status": self.status, "method_status": self.result.status,
            "objective_ms": self.result.objective,
            "bound_ms": self.bound.bound, "bound_method": self.bound.method, "bound_status": self.bound.status,
            "gap": self.gap, "forecast": self.forecast(),
            "torch_schedule": _SCHEDULES[self.schedule].torch_class, "ranks": self.ranks,
            "stages_per_rank": self.per_rank, "stage_to_rank": self.stage_ranks,
            "schedule_search": None if self.search is None else self.search.to_json(),
            "time_limit": self.time_limit, "stopped": self.stopped, "auto_choice": self.auto,
            "recompute": self.recompute_flags, "memory_cap": self.memory, "stage_memory": self.stage_memory(),
            "tied": self.tied,
            "seed": self.seed, "seconds": self.seconds, "torch": self.graph.meta.get("torch"),
            **({} if self.tried is None else {"schedule_auto": self.tried}),
            "dp": self.dp, "tp": self.tp, "devices": self.devices or self.ranks, "mesh": self.mesh,
        }

    def write(self, folder: str | Path) -> dict[str, Path]:
        """Write ``plan.json``, ``graph.json`` and ``run_pipeline.py`` into ``folder``."""
        from ..io import save_graph, write_json_atomic
        from .script import write_script

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
    """Plan from a measured segment graph (`devplace_lite.pipeline.capture.segment_graph`).

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
    plan = PipelinePlan(graph=graph, chain=chain, cluster=cluster, result=res, bound=bound, stage_of=found.stage_of,
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
    if plan.recompute:
        plan.notes.append(f"fits {memory:.0f} bytes per device only with activation recomputation on stage(s) "
                          f"{[s for s, x in enumerate(plan.recompute) if x]}: their backwards run their forward again "
                          "(torch.utils.checkpoint in the run), and they keep only their input per micro-batch in "
                          "flight")
    if start is None:  # the bottleneck method found nothing under the conservative memory form: score the split
        plan.result = _scored(plan, found.stage_of, method)
    return plan


def plan(model: Any, example_inputs: Sequence[Any], *, k: int | None = None, microbatches: int | str | None = None,
         schedule: str = "1f1b",
         training: bool = True, memory: float | None = None, optimizer: str = "none", method: str = "auto",
         granularity: str = "block", time_limit: float | None = None, seed: int = 0, repeats: int = 5,
         warmup: int = 1, model_spec: str | None = None, device: str = "cpu", per_rank: int | None = None,
         spec: str | None = None, recompute: str = "auto", started: float | None = None,
         action_ms: float = 0.0, least_ranks: int = 1, devices: int | None = None,
         degrees: dict[str, int] | None = None) -> PipelinePlan:
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
        Ranks, one pipeline stage (or ``per_rank``) each; or give ``devices``.
    devices : int
        Devices to plan data, tensor and pipeline parallelism over together instead of ``k``
        pipeline ranks (`devplace_lite.pipeline.mesh_plan.plan_devices`: the plan's ``dp``, ``tp``
        and ``mesh``; ``microbatches`` then counts the whole step's, shared by the replicas).
    degrees : dict, optional
        With ``devices``: degrees fixed by the user, e.g. ``{"tp": 2}`` (keys ``dp``, ``pp``, ``tp``).
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
        kernel, `devplace_lite.pipeline.capture.measure_segments`), transfers over its host link:
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

    if degrees and devices is None:
        raise UsageError("degrees fix a mesh's dp, pp or tp: give devices too")
    if (k is None) == (devices is None):
        raise UsageError("give k (pipeline ranks) or devices (data, tensor and pipeline degrees planned together), "
                         "one of them")
    if devices is not None:
        from .mesh_plan import plan_devices

        if microbatches == "auto" or per_rank is not None or method != "auto" or least_ranks != 1:
            raise UsageError("devices plans the mesh's degrees: leave out microbatches='auto', per_rank, method "
                             "and least_ranks (they shape a pipeline of k ranks)")
        return plan_devices(model, example_inputs, devices=devices, microbatches=microbatches, schedule=schedule,
                            training=training, memory=memory, optimizer=optimizer, granularity=granularity,
                            time_limit=time_limit, seed=seed, repeats=repeats, warmup=warmup, model_spec=model_spec,
                            device=device, spec=spec, recompute=recompute, started=started, action_ms=action_ms,
                            **_degrees(degrees))
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


def _degrees(degrees: dict[str, int] | None) -> dict[str, int]:
    """Fixed mesh degrees, checked: keys among ``dp``, ``pp``, ``tp``, positive integers."""
    out = dict(degrees or {})
    for key, v in out.items():
        if key not in ("dp", "pp", "tp"):
            raise UsageError(f"unknown degree {key!r}; known: dp, pp, tp")
        if v is not None and (int(v) != v or v < 1):
            raise UsageError(f"{key} must be a positive integer, got {v!r}")
    return out


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
    from .capture import measure_segments, segment_graph

    if not (action_ms >= 0 and math.isfinite(action_ms)):
        raise UsageError(f"action_ms must be a finite number >= 0, got {action_ms}")
    batch = int(inputs[0].shape[0])
    micro = tuple(t[: batch // microbatches] for t in inputs)
    t0 = time.perf_counter()
    cap = capture_model(model, micro, granularity)
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


def with_stages(p: PipelinePlan, stage_of: Sequence[int], method: str) -> PipelinePlan:
    """``p`` with another split (segment -> stage, in order), scored by the same cost model: to
    run the splits practitioners use (`even_split`, a compute-only balance) beside the plan's."""
    q = dataclasses.replace(p, stage_of=list(stage_of), method=method, method_reason=f"given split ({method})",
                            search=None, recompute=None, stopped=[], auto=None)
    q.result = _scored(q, stage_of, method)
    return q


def _scored(p: PipelinePlan, stage_of: Sequence[int], method: str):
    """A `Result` for a given split, scored by the cost model (status ``feasible``)."""
    from ..cost import evaluate
    from ..result import Result

    a = stage_assignment(p, stage_of)
    return Result(method, p.chain, p.cluster, a, float(evaluate(p.chain, p.cluster, a).max_load), "feasible", 0.0)


def method_split(p: PipelinePlan, method: str, graph: Graph | None = None, *, time_limit: float | None = None,
                 seed: int = 0) -> list[int]:
    """Stage of each segment in the least-bottleneck split of ``method`` (a name of
    `devplace_lite.methods.PARTITION`: ``dp``, ``time``, ``parameters``, ``uniform``...) over the
    plan's stages, on the plan's chain graph or on ``graph`` (the same nodes, other costs).

    Raises
    ------
    GraphError
        The method finds no split.
    """
    g = p.chain if graph is None else graph
    res = partition(g, p.cluster, method, time_limit=time_limit, seed=seed)
    if res.assignment is None or res.status == "infeasible":
        raise GraphError(f"method {method} found no split of {len(p.names)} segments into {p.num_stages} stages")
    a = as_assignment(g, p.cluster, res.assignment)
    pos = {d: s for s, d in enumerate(chain_order(g, p.cluster, a))}
    return [pos[int(a[g.index[f"{i}:{nm}"]])] for i, nm in enumerate(p.names)]


def with_method(p: PipelinePlan, method: str, *, time_limit: float | None = None, seed: int = 0) -> PipelinePlan:
    """``p`` with the split ``method`` picks (`method_split`), scored by the same cost model and
    replayed under the same schedule: the splits of the DP, of torchgpipe's balance by time
    (``time``) and of DeepSpeed's ``parameters`` and ``uniform`` side by side."""
    return with_stages(p, method_split(p, method, time_limit=time_limit, seed=seed), method)


def compute_only(p: PipelinePlan) -> list[int]:
    """The split an equal-compute partitioner picks (PiPPy's proposed ``auto_partition`` balances
    compute alone): the exact DP on the profile with every transfer set to zero."""
    return method_split(p, "dp", p.chain.with_nodes([dataclasses.replace(v, comm=0.0) for v in p.chain.nodes]))


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
