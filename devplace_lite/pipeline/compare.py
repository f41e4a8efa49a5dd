"""Measure several splits of one model against each other: the comparison practitioners ask for.

Problem: is the exact split (the DP of Tarnawski et al., 2020) faster *when run* than what
practitioners use — DeepSpeed's ``uniform`` and ``parameters`` partitions, torchgpipe's
balance by time? Profile the model once (every method sees the same times), split it with
each method, run every split as a real pipeline in one start of the processes, several rounds
interleaved so that a disturbance on a shared machine hits all methods alike, and report per
method the forecast and the measured bottleneck (the slowest stage's time per micro-batch:
the steady-state rate), step time and throughput, each the median over rounds.

Complexity: one profile, one partition per method, ``rounds x len(methods)`` pipeline runs.

Example
-------
See ``chapters/08_torch_pipeline.md`` and ``benchmarks/pipeline/run.py``::

    cmp = compare_methods(model, inputs, ["dp", "uniform"], k=2, microbatches=4)
    cmp.rows()  # one dict per method
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..graph import Graph
from .plan import Plan, plan_model, torch_threads
from .resources import available_devices
from .run import PipelineRun, run_pipelines


@dataclass
class MethodComparison:
    """Plans and measured runs of several methods on one profile (``runs[m]``: one per round)."""

    graph: Graph
    plans: dict[str, Plan]
    runs: dict[str, list[PipelineRun]]

    def measured_bottleneck_ms(self, method: str) -> float:
        return float(statistics.median(r.bottleneck_ms for r in self.runs[method]))

    def measured_step_ms(self, method: str) -> float:
        return float(statistics.median(r.step_ms for r in self.runs[method]))

    def measured_stage_ms(self, method: str) -> list[float]:
        return [float(statistics.median(col)) for col in zip(*(r.stage_ms for r in self.runs[method]))]

    def measured_stage_cpu_ms(self, method: str) -> list[float] | None:
        """Median CPU time per micro-batch of each stage (CPU runs; ``None`` on GPUs)."""
        per_run = [r.stage_cpu_ms for r in self.runs[method]]
        if any(x is None for x in per_run):
            return None
        return [float(statistics.median(col)) for col in zip(*per_run)]

    def rows(self) -> list[dict[str, Any]]:
        """One row per method: forecast and measured bottleneck (ms per micro-batch; wall clock,
        and CPU time on CPU runs), step time, throughput (samples/s at the measured step)."""
        out = []
        for m, plan in self.plans.items():
            runs = self.runs[m]
            out.append({
                "method": m, "stages": plan.num_stages,
                "predicted_bottleneck_ms": plan.predicted_bottleneck_ms,
                "predicted_stage_ms": plan.predicted_ms,
                "measured_bottleneck_ms": self.measured_bottleneck_ms(m),
                "measured_stage_ms": self.measured_stage_ms(m),
                "measured_bottleneck_cpu_ms": max(cpu) if (cpu := self.measured_stage_cpu_ms(m)) else None,
                "measured_stage_cpu_ms": cpu,
                "rounds_bottleneck_ms": [r.bottleneck_ms for r in runs],
                "rounds_bottleneck_cpu_ms": [max(r.stage_cpu_ms) if r.stage_cpu_ms else None for r in runs],
                "measured_step_ms": self.measured_step_ms(m),
                "throughput": float(statistics.median(r.throughput for r in runs)),
                "rounds": len(runs),
            })
        return out


def compare_methods(model: nn.Module, inputs: Sequence[Any], methods: Sequence[str], *, k: int = 2,
                    microbatches: int = 4, schedule: str = "gpipe", training: bool = False,
                    loss_fn: Callable[..., torch.Tensor] | None = None, target: torch.Tensor | None = None,
                    spec: str = "cpu-measured", granularity: str = "layer", graph: Graph | None = None,
                    steps: int = 3, warmup: int = 1, rounds: int = 1, repeats: int = 10,
                    time_limit: float | None = None, device: str = "cpu") -> MethodComparison:
    """Split ``model`` with each of ``methods`` over ``k`` devices and run every split.

    ``inputs`` is the whole batch; the profile is taken on one micro-batch with the torch
    threads one pipeline process gets (``cores // k`` on CPU). Training needs ``loss_fn`` and
    ``target`` (or ``training=True`` alone: MSE against a seeded random target).
    """
    inputs = tuple(inputs)
    mb = int(inputs[0].shape[0]) // microbatches
    micro = tuple(t[:mb] for t in inputs)
    threads = max(1, available_devices("cpu") // k) if device == "cpu" else None
    if graph is None:
        from .profile import profile

        with torch_threads(threads):
            graph = profile(model, micro, granularity=granularity, spec=spec, training=training,
                            repeats=repeats, progress=False, threads=threads)
    plans = {m: plan_model(model, micro, method=m, k=k, granularity=granularity, graph=graph,
                           time_limit=time_limit) for m in methods}
    if training and loss_fn is None:
        with torch.no_grad():
            shape = model(*inputs).shape
        target = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        loss_fn = torch.nn.functional.mse_loss
    base = dict(inputs=inputs, microbatches=microbatches, schedule=schedule, steps=steps, warmup=warmup,
                loss_fn=loss_fn if training else None, target=target if training else None, return_outputs=False)
    order = [m for _ in range(rounds) for m in methods]
    measured = run_pipelines([{**base, "stages": plans[m].stages} for m in order], device=device)
    runs: dict[str, list[PipelineRun]] = {m: [] for m in methods}
    for m, r in zip(order, measured):
        runs[m].append(r)
    return MethodComparison(graph=graph, plans=plans, runs=runs)
