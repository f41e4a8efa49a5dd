"""`PipelinePlan`: a model's plan, the one result of planning (`planner`, `mesh_plan`).

A plan holds the measured segments, the chosen split and its certificate, the schedule and
its replay, each stage's memory, and for a mesh plan its data and tensor degrees. It forecasts
(`PipelinePlan.forecast`: the replay of torch's action order), answers as JSON and writes its
files (``plan.json``, ``graph.json`` and the torchrun script, `script.write_script`). It runs
nothing and searches nothing: `planner` and `mesh_plan` make it.

Complexity: a replay of the schedule per forecast (``O(actions)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cost import device_loads
from ..devices import Cluster
from ..errors import UsageError
from ..graph import Graph
from ..result import PlanAnswer
from ..schedules.search import SegmentCosts, SplitSearch, evaluate, stage_times
from ..schedules.simulate import SCHEDULES as _SCHEDULES
from ..schedules.simulate import stage_to_rank
from .costs import OPTIMIZERS, segment_costs

#: The files `PipelinePlan.write` writes into its folder.
PLAN_FILES = {"plan": "plan.json", "graph": "graph.json", "script": "run_pipeline.py"}


@dataclass
class PipelinePlan(PlanAnswer):
    """A model's pipeline plan: segments, the chosen split, its certificate and its memory; a
    `PlanAnswer` (``objective``, ``bound``, ``status``, ``gap``: see `objective`).

    ``stage_of[i]`` is the stage of segment ``i``; times are ms per micro-batch (thread CPU
    time of one thread, CUDA events, or a GPU's roofline: ``graph.meta["clock"]``), memory in
    bytes.
    """

    graph: Graph
    chain: Graph
    cluster: Cluster
    result: Any
    #: The proven lower bound on the split's bottleneck (`devplace_lite.result.Bound`).
    certificate: Any
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

    unit = "ms"

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
        micro-batches in flight are the replay's. A recomputing stage keeps its segments' inputs
        per micro-batch in flight and, during a backward, one segment's activations beyond them
        (`devplace_lite.schedules.search.stage_bytes`)."""
        from ..schedules.search import stage_bytes

        seg = self.graph.meta["segments"]
        params, grads = self._sum(seg["param_bytes"]), self._sum(seg["grad_bytes"])
        held = stage_bytes(self.costs, self.cuts)
        acts, inputs, again = held["activation_bytes"], held["input_bytes"], held["recompute_bytes"]
        flying = self.simulation().stage_in_flight
        rec = self.recompute_flags
        out = []
        for s in range(self.num_stages):
            g = grads[s] if self.training else 0.0
            opt = OPTIMIZERS[self.optimizer] * g
            n = flying[s]
            held = n * acts[s] if not rec[s] else n * inputs[s] + again[s]
            out.append({"parameters": params[s], "gradients": g, "optimizer": opt, "microbatches_in_flight": n,
                        "activations_per_microbatch": acts[s], "input_per_microbatch": inputs[s],
                        "recompute": rec[s], "peak": params[s] + g + opt + held})
        return out

    @property
    def objective(self) -> float | None:
        """What ``status`` and ``bound`` are about: a mesh plan's forecast step with its
        data-parallel all-reduce (ms), else the split's least bottleneck (ms per micro-batch)."""
        return self.mesh["step_ms"] if self.mesh is not None else self.result.objective

    @property
    def bound(self) -> float | None:
        """A proven lower bound on the optimum of `objective` (None where the certificate proved none)."""
        if self.mesh is not None:
            return self.mesh["bound_ms"]
        return self.certificate.bound if math.isfinite(self.certificate.bound) else None

    @property
    def status(self) -> str:
        """``time_limit`` when the time limit cut a step short (the plan is the incumbent, not
        proven), else the partitioning method's status (certified by ``certificate``); a mesh
        plan's is its status over mesh shapes (`mesh_plan.plan_mesh`, by `devplace_lite.solve.verdict`)."""
        if self.mesh is not None:
            return self.mesh["status"]
        return "time_limit" if self.stopped else self.result.status

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
        """The plan's ``--json`` answer: `PlanAnswer.answer`'s keys (those of every plan), then the
        model's: segments, split, the split's own ``objective_ms`` and ``bound_ms``, forecast, memory."""
        return {
            **self.answer(),
            "model": self.model_spec or self.graph.meta.get("model"), "capture": self.capture_how, "notes": self.notes,
            "segments": len(self.names), "segment_names": self.names, "granularity": self.graph.meta["granularity"],
            "training": self.training, "batch": self.batch, "microbatches": self.microbatches,
            "microbatch": self.batch // self.microbatches, "schedule": self.schedule, "optimizer": self.optimizer,
            "k": self.k or self.cluster.accelerators, "stages": self.num_stages, "split_spec": self.split_spec,
            "split_points": self.split_points, "stage_segments": self.stage_segments, "method": self.method,
            "method_reason": self.method_reason, "method_status": self.result.status,
            "objective_ms": self.result.objective, "bound_ms": self.certificate.bound,
            "bound_method": self.certificate.method, "bound_status": self.certificate.status,
            "forecast": self.forecast(),
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


def stage_assignment(plan_: PipelinePlan, stage_of: Sequence[int]) -> np.ndarray:
    """Device index of every node of the plan's chain graph for a segment -> stage list."""
    names = plan_.names
    stage = {f"{i}:{nm}": s for i, (nm, s) in enumerate(zip(names, stage_of))}
    out = np.zeros(plan_.chain.n, dtype=np.int64)
    for j, v in enumerate(plan_.chain.nodes):
        base = v.id[:-5] if v.backward else v.id
        out[j] = stage.get(base, 0)
    return out


def scored(p: PipelinePlan, stage_of: Sequence[int], method: str):
    """A `Result` for a given split, scored by the cost model (status ``feasible``)."""
    from ..cost import evaluate
    from ..result import Result

    a = stage_assignment(p, stage_of)
    return Result(method, p.chain, p.cluster, a, float(evaluate(p.chain, p.cluster, a).max_load), "feasible", 0.0)
