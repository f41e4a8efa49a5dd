"""From a placement over a profiled graph to the stages of the model, with the model's forecast.

Problem: a partitioning method returns a placement of the *graph* made by
`devplace_lite.pipeline.profile` (node ids are the model's fx node names, a backward node is
``<id>.grad``). A pipeline needs the *model* cut into stages, in order, and a forecast to
check the run against. `build_plan` orders the devices by the chain of ideals
(`devplace_lite.cost.chain_order`: every forward edge goes to the same or a later stage), maps
every forward node to its stage, traces the model with the profiler's own tracer (so the names
match) and splits it (`split_module`). `plan_model` does the whole route: profile, partition
with a registered method, plan.

The forecast of stage ``s`` is the cost model's load of its device, cut in a forward part (the
forward nodes and the transfers of their outputs) and a backward part (gradients), so that the
GPipe step estimate can be formed the same way from predicted and from measured times.

Complexity: one trace and one run of the model on the example micro-batch, plus the
partitioning method's own cost (and the profiler's, with `plan_model`).

Example
-------
>>> import torch
>>> from devplace_lite.devices import Cluster
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> p = plan_model(net, (torch.randn(4, 8),), method="time", k=2, spec="A100")
>>> p.num_stages, len(p.predicted_ms)
(2, 2)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ..cost import Placement, as_assignment, chain_order, device_loads, split_kind
from ..devices import Cluster
from ..graph import Graph, GraphError
from ..schedules.timeline import gpipe_formula
from .planner import partition
from .split import Split, split_module


def stage_map(graph: Graph, cluster: Cluster, placement: Placement) -> tuple[dict[str, int], list[int]]:
    """Stage index of every forward node, and the device (cluster index) of each stage.

    Stages are the used devices in chain order. A placement that is not a chain of ideals
    cannot run as a pipeline: `GraphError`.
    """
    a = as_assignment(graph, cluster, placement)
    order = chain_order(graph, cluster, a)
    if order is None:
        raise GraphError(f"placement is not a chain of stages (split kind: {split_kind(graph, cluster, a)}); "
                         "a pipeline needs every forward edge to go to the same or a later stage")
    pos = {d: i for i, d in enumerate(order)}
    return {v.id: pos[int(a[i])] for i, v in enumerate(graph.nodes) if not v.backward}, order


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run a block with ``n`` torch CPU threads (unchanged when ``None``)."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class Plan:
    """A model cut into pipeline stages, and what the cost model expects of each stage.

    ``devices[s]`` is the cluster device of stage ``s``; the ``predicted_*`` lists are in stage
    order, times in ms per micro-batch (the profile's batch), memory in bytes.
    """

    split: Split
    graph: Graph
    cluster: Cluster
    assignment: np.ndarray
    devices: list[int]
    method: str | None = None

    @property
    def num_stages(self) -> int:
        return self.split.num_stages

    @property
    def stages(self) -> list[nn.Module]:
        return list(self.split.stages)

    @property
    def device_names(self) -> list[str]:
        return [self.cluster.names[d] for d in self.devices]

    def _loads(self, keep: np.ndarray) -> np.ndarray:
        g = self.graph.subgraph(np.flatnonzero(keep))
        compute, comm = device_loads(g, self.cluster, self.assignment[keep])
        return (compute + comm)[self.devices]

    @property
    def predicted_forward_ms(self) -> list[float]:
        return self._loads(~self.graph.backward).tolist()

    @property
    def predicted_backward_ms(self) -> list[float]:
        if not self.graph.is_training:
            return [0.0] * self.num_stages
        return self._loads(self.graph.backward).tolist()

    @property
    def predicted_ms(self) -> list[float]:
        """The cost model's load of each stage (compute + communication)."""
        compute, comm = device_loads(self.graph, self.cluster, self.assignment)
        return (compute + comm)[self.devices].tolist()

    @property
    def predicted_comm_ms(self) -> list[float]:
        return device_loads(self.graph, self.cluster, self.assignment)[1][self.devices].tolist()

    @property
    def predicted_memory(self) -> list[float]:
        mem = np.bincount(self.assignment, weights=self.graph.memory, minlength=self.cluster.size)
        return mem[self.devices].tolist()

    @property
    def predicted_bottleneck_ms(self) -> float:
        return max(self.predicted_ms)

    def predicted_step_ms(self, microbatches: int, schedule: str = "gpipe") -> float:
        """The GPipe estimate of a step from the predicted stage times (see `PipelineRun.formula_ms`)."""
        f, b = self.predicted_forward_ms, self.predicted_backward_ms
        if not self.graph.is_training:
            return gpipe_formula(f, microbatches)
        if schedule == "1f1b":
            return gpipe_formula([x + y for x, y in zip(f, b)], microbatches)
        return gpipe_formula(f, microbatches) + gpipe_formula(b, microbatches)

    def check_memory(self, memory: float | None = None) -> None:
        """`GraphError` when a stage's predicted memory exceeds ``memory`` (default: the cluster's cap)."""
        cap = self.cluster.memory if memory is None else float(memory)
        for s, m in enumerate(self.predicted_memory):
            if m > cap:
                raise GraphError(f"stage {s} ({self.device_names[s]}) needs {m:.0f} bytes, over the memory "
                                 f"cap of {cap:.0f} bytes per device")

    def to_json(self) -> dict[str, Any]:
        counts = np.bincount([self.split.stage_of[n] for n in self.split.stage_of], minlength=self.num_stages)
        return {"method": self.method, "graph": self.graph.name, "stages": self.num_stages,
                "devices": self.device_names, "fx_nodes_per_stage": counts.tolist(),
                "carried_bytes": self.split.carried_bytes, "param_bytes": self.split.param_bytes(),
                "predicted_ms": self.predicted_ms, "predicted_forward_ms": self.predicted_forward_ms,
                "predicted_backward_ms": self.predicted_backward_ms, "predicted_comm_ms": self.predicted_comm_ms,
                "predicted_memory": self.predicted_memory, "predicted_bottleneck_ms": self.predicted_bottleneck_ms}


def build_plan(model: nn.Module, example_inputs: Sequence[Any], graph: Graph, cluster: Cluster,
               placement: Placement, *, granularity: str | None = None, leaf_modules: Sequence[type] = (),
               method: str | None = None) -> Plan:
    """Cut ``model`` into the stages a placement of its profiled ``graph`` describes.

    ``granularity`` defaults to the one recorded by the profiler in ``graph.meta``; the model
    is traced with the profiler's tracer at that granularity so that node ids and fx node
    names agree. A graph node the trace does not have is an error (the graph was profiled from
    another model or granularity).
    """
    from .profile import trace

    gran = granularity or graph.meta.get("granularity", "layer")
    stage_of, devices = stage_map(graph, cluster, placement)
    gm = trace(model, gran, leaf_modules)
    names = {n.name for n in gm.graph.nodes}
    missing = [nid for nid in stage_of if nid not in names]
    if missing:
        raise GraphError(f"graph node {missing[0]} is not a node of the model traced at {gran} granularity "
                         f"({len(missing)} such node(s)): was the graph profiled from this model?")
    split = split_module(gm, stage_of, tuple(example_inputs), num_stages=len(devices))
    return Plan(split=split, graph=graph, cluster=cluster, assignment=as_assignment(graph, cluster, placement),
                devices=devices, method=method)


def plan_model(model: nn.Module, example_inputs: Sequence[Any], *, method: str = "time", k: int = 2,
               spec: str = "cpu-measured", training: bool = False, granularity: str = "layer",
               memory: float | None = None, graph: Graph | None = None, threads: int | None = None,
               time_limit: float | None = None, seed: int = 0, repeats: int = 10, warmup: int = 2,
               leaf_modules: Sequence[type] = ()) -> Plan:
    """Profile ``model`` on one micro-batch, split it with ``method`` over ``k`` devices, plan.

    Parameters
    ----------
    example_inputs : sequence of tensors
        One micro-batch: the profile's times are per micro-batch.
    method : str
        A name registered in `devplace_lite.methods.PARTITION` (``dp``, ``time``, ``uniform``...).
    spec : str
        The profiler's spec; ``cpu-measured`` times the "accelerator" with ``threads`` torch
        threads, which should be what one pipeline process gets (cores // k).
    memory : float, optional
        Bytes per device (default: the graph's default, else no cap). A split over it is an error.
    graph : Graph, optional
        Reuse a profile instead of measuring again (so that several methods see the same times).

    Raises
    ------
    GraphError
        Unknown method, a split the method cannot make feasible (memory), or a split that is not a chain.
    """
    if graph is None:
        from .profile import profile

        with torch_threads(threads):
            graph = profile(model, tuple(example_inputs), granularity=granularity, spec=spec, training=training,
                            repeats=repeats, warmup=warmup, progress=False, leaf_modules=leaf_modules,
                            threads=threads)
    cluster = Cluster.for_graph(graph, accelerators=k, cpus=0, memory=memory)
    res = partition(graph, cluster, method, time_limit=time_limit, seed=seed)
    if res.assignment is None or res.status == "infeasible":
        why = res.extra.get("violations") or ["no feasible split"]
        raise GraphError(f"method {method} with k={k}: {why[0]}")
    plan = build_plan(model, example_inputs, graph, cluster, res.assignment, granularity=granularity,
                      leaf_modules=leaf_modules, method=method)
    plan.check_memory()
    return plan


def check_forecast(plan: Plan, measured: Any, microbatches: int | None = None,
                   schedule: str | None = None) -> dict[str, Any]:
    """Predicted against measured stage times: per stage, the bottleneck, and (given a
    `PipelineRun`) the step time the cost model forecasts with the GPipe formula.

    ``measured`` is a `PipelineRun` or a `StageTimes`. On CPU the comparison uses CPU time
    (``clock: "cpu"``), which waiting for a busy core does not inflate; on GPUs wall time.
    """
    pred = plan.predicted_ms
    cpu = getattr(measured, "stage_cpu_ms", None)
    meas = list(cpu if cpu is not None else measured.stage_ms)
    out: dict[str, Any] = {
        "clock": "cpu" if cpu is not None else "wall",
        "predicted_ms": pred, "measured_ms": meas, "measured_wall_ms": list(measured.stage_ms),
        "ratio": [m / p if p > 0 else None for m, p in zip(meas, pred)],
        "predicted_bottleneck_stage": int(np.argmax(pred)), "measured_bottleneck_stage": int(np.argmax(meas)),
        "predicted_bottleneck_ms": max(pred), "measured_bottleneck_ms": max(meas),
    }
    m = microbatches or getattr(measured, "microbatches", None)
    sched = schedule or getattr(measured, "schedule", "gpipe")
    if m:
        out["predicted_step_ms"] = plan.predicted_step_ms(m, sched)
    if hasattr(measured, "step_ms"):
        out["measured_step_ms"] = measured.step_ms
    return out


def stages_for(model: nn.Module, stage_of: Mapping[str, int], example_inputs: Sequence[Any],
               granularity: str = "layer", leaf_modules: Sequence[type] = ()) -> Split:
    """Split ``model`` by hand: ``stage_of`` maps fx node names (as the profiler names them at
    ``granularity``) to stage indices."""
    from .profile import trace

    return split_module(trace(model, granularity, leaf_modules), stage_of, tuple(example_inputs))
