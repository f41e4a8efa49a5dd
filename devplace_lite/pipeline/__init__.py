"""From a PyTorch model to a pipeline run: one road, one module per step.

``capture -> measure -> segments -> planner -> torchrun``:

* `split_points` — where a stage may begin: the modules called once, at block or layer
  granularity;
* `capture` — the model (torch.export, else torch.fx with automatic leaf modules, through the
  package's one fx tracer, `tracer.Tracer`) cut into segments at those split points;
* `torch_split` — torch's own pipeline split (``pipeline(..., split_policy=...)``) rewritten so
  that torch's schedules run it at any split points;
* `split` — devplace's splitter (the capture's other routes): stage modules, skip activations
  carried through the stages in between;
* `measure` — each segment's time in CPU time (CUDA events on a GPU, or a GPU's roofline), its
  memory and the bytes it passes; `segments` — the measured segments as a placement graph;
* `planner` — a pipeline of ``k`` ranks: the exact split among split points with its proven
  bound, the split with the least replayed step under any of torch's schedules
  (`devplace_lite.schedules`) and memory per rank, from the segments' costs (`costs`), with
  nothing run; `pipeline_plan.PipelinePlan` is the one plan class it and `mesh_plan` answer
  with (its torchrun script written by `script`); `baseline_splits` scores the splits
  practitioners use (`baseline_splits.with_method`, `baseline_splits.even_split`) alike;
* `calibration` — running a plan to measure it: the price of a message on this machine, which a
  plan for a run prices (`calibration.message_price`), and calibration (`calibration.calibrate`);
* `torchrun` — the one launcher: a plan's script under ``torchrun``, one process per rank, on
  one machine or several; `rank` — what each rank runs (its stages, the schedule, measured);
  `activations` — the memory autograd keeps, and recomputation; `check` — outputs and
  gradients against the unsplit model; `run_figures` — the ranks' figures gathered, the step
  replayed from them;
* `titan` — torchtitan's default split of a decoder LM, and a plan as torchtitan's job config
  (``devplace plan --emit torchtitan``);
* `mesh_plan` — the one planner of a model (`mesh_plan.plan`): ``k`` pipeline ranks (`planner`),
  or ``N`` devices as a dp x pp x tp mesh whose degrees, split, schedule and recomputation are
  chosen together (``devplace plan --devices N``), with a bound and a status over the shapes;
* `tensor_parallel`, `tp_cost`, `mesh_run` — tensor parallelism: Megatron's column-then-row
  groups found on the exported graph, each degree's cost (per segment for the planner, on a
  GPU's roofline per group), and a dp x pp x tp run on torch's DeviceMesh,
  ``parallelize_module``, DDP and pipelining;
* `resources` — how many ranks this machine can host (no torch needed on CPU);
* `profile` — beside the road: the FLOP/bytes cost model that makes the layer- and
  operator-level graphs the partitioning chapters study (``devplace profile``, ``data/graphs``),
  and prices the capture's segments on a roofline (``devplace plan --spec A100``);
* `tracer` — the one torch.fx tracer the fallback route and the profiler share.

Names are loaded on first use, so ``from devplace_lite.pipeline import check_resources`` does
not import torch; everything else here does. ``import devplace_lite`` never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Capture": "capture", "Tracer": "tracer", "capture": "capture", "measure_segments": "measure",
    "segment_graph": "segments", "Split": "split", "split_module": "split",
    "PipelinePlan": "pipeline_plan", "plan": "mesh_plan", "plan_mesh": "mesh_plan", "plan_graph": "planner", "calibrate": "calibration",
    "with_method": "baseline_splits", "with_stages": "baseline_splits", "even_split": "baseline_splits", "segment_profile": "planner",
    "launch": "torchrun", "ActivationMeter": "activations", "message_price": "calibration",
    "torchtitan_split": "titan", "job_config": "titan",
    "TensorParallelPlan": "tensor_parallel", "degree_costs": "tp_cost",
    "available_devices": "resources", "check_resources": "resources", "device_name": "resources",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
