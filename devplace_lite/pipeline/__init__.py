"""Run a partitioned model for real: PyTorch's pipeline engine, one process per stage.

The route from a placement to measured figures, one module per step:

* `capture` — any model (torch.export, else torch.fx with automatic leaf modules) cut into
  segments at the modules where a stage may begin, each measured in CPU time;
* `planner` — ``devplace plan``: the exact split among split points, its proven bound, the
  split with the least replayed step under any of torch's schedules
  (`devplace_lite.schedules.simulate`, `devplace_lite.schedules.search`), memory per rank under the
  schedule, ``plan.json`` and a torchrun script; calibration per stage and action kind;
* `torchrun` — run a plan under ``torchrun`` (one process per rank, one or several nodes);
* `split` — cut the model's torch.fx graph into stage modules (skip activations carried
  through the stages in between);
* `plan` — from a placement of the profiled graph (`devplace_lite.pipeline.profile`) to the stages, in
  chain order, with the cost model's forecast per stage;
* `run` — run the stages with ``torch.distributed.pipelining`` (``PipelineStage``,
  ``ScheduleGPipe`` / ``Schedule1F1B``), one process per stage, gloo on CPU or NCCL on GPUs,
  and measure step time, busy time per stage, bubble and memory;
* `measure` — time each stage alone in one process (how one GPU forecasts a k-GPU pipeline);
* `compare` — split one model with several methods and measure every split;
* `resources` — how many stages this machine can host (no torch needed on CPU).

Names are loaded on first use, so ``from devplace_lite.pipeline import check_resources`` does
not import torch; everything else here does. ``import devplace_lite`` never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Split": "split", "split_module": "split", "trace": "split", "ContiguousGrad": "split",
    "Plan": "plan", "build_plan": "plan", "check_forecast": "plan", "plan_model": "plan", "stage_map": "plan",
    "stages_for": "plan", "torch_threads": "plan",
    "SCHEDULES": "run", "ActivationMeter": "run", "PipelineRun": "run", "run_pipeline": "run", "run_pipelines": "run",
    "StageTimes": "measure", "measure_stages": "measure",
    "MethodComparison": "compare", "compare_methods": "compare",
    "available_devices": "resources", "check_resources": "resources", "device_name": "resources",
    "Capture": "capture", "capture": "capture", "measure_segments": "capture", "segment_graph": "capture",
    "PipelinePlan": "planner", "plan_graph": "planner", "calibrate": "planner", "launch": "torchrun",
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
