"""Time each pipeline stage on its own, in one process: the one-GPU (or one-core) measurement.

Problem: a single GPU cannot host a multi-process pipeline (NCCL refuses two ranks on one
device, and gloo sends only CPU tensors), yet it can tell how long each stage of a split would
take on a GPU of that kind. Run the stages one after another in this process on one
micro-batch, synchronising the device around each stage, and keep the median over repeats of
each stage's forward time and (training) backward time. The largest is the bottleneck a
``k``-GPU pipeline of those GPUs would run at, communication aside; adding the cost model's
communication time of each stage gives the predicted ``k``-GPU throughput.

The same code times stages on a CPU core, which is how the CPU chapter checks it against the
multi-process run.

Complexity: ``(warmup + repeats)`` forward (and backward) passes of one micro-batch.

Example
-------
>>> import torch
>>> from devplace_lite.pipeline.split import split_module
>>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> x = torch.randn(2, 4)
>>> sp = split_module(net, {"_0": 0, "_1": 0, "_2": 1}, (x,))
>>> t = measure_stages(sp.stages, (x,), target=torch.randn(2, 2), loss_fn=torch.nn.functional.mse_loss)
>>> len(t.forward_ms), t.bottleneck_ms > 0
(2, True)
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..graph import GraphError
from .run import PerStage, cpu_clock


@dataclass
class StageTimes(PerStage):
    """Median forward and backward time (ms) of one micro-batch on each stage, in isolation;
    on CPU also the CPU time (`devplace_lite.pipeline.run.cpu_clock`), the least over the
    repeats (waiting for a core is not CPU time, and other interference only ever adds)."""

    forward_ms: list[float]
    backward_ms: list[float]
    microbatch: int
    device: str
    repeats: int
    forward_cpu_ms: list[float] | None = None
    backward_cpu_ms: list[float] | None = None

    def predicted_throughput(self, comm_ms: Sequence[float] | None = None) -> float:
        """Samples per second of a pipeline with one such device per stage, at steady state:
        one micro-batch per bottleneck time, each stage's ``comm_ms`` (not overlapped) added."""
        comm = list(comm_ms) if comm_ms is not None else [0.0] * len(self.stage_ms)
        worst = max(t + c for t, c in zip(self.stage_ms, comm))
        return 1000.0 * self.microbatch / worst

    def to_json(self) -> dict[str, Any]:
        return {"forward_ms": self.forward_ms, "backward_ms": self.backward_ms, "stage_ms": self.stage_ms,
                "bottleneck_ms": self.bottleneck_ms, "stage_cpu_ms": self.stage_cpu_ms,
                "microbatch": self.microbatch, "device": self.device, "repeats": self.repeats}


def _on(module: nn.Module, device: torch.device) -> bool:
    return all(t.device.type == device.type for t in list(module.parameters()) + list(module.buffers()))


def _to(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _leaf(x: Any, training: bool) -> Any:
    """A fresh input for the next stage, as `PipelineStage` receives it (a leaf that wants grad)."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.detach().requires_grad_(training and x.requires_grad)


def measure_stages(stages: Sequence[nn.Module], inputs: Sequence[Any], *, target: torch.Tensor | None = None,
                   loss_fn: Callable[..., torch.Tensor] | None = None, device: str = "cpu",
                   repeats: int = 5, warmup: int = 2, threads: int | None = None) -> StageTimes:
    """Time every stage on one micro-batch ``inputs``, one stage after another on ``device``.

    Training (``loss_fn`` given) times each stage's backward too, fed with the gradient the next
    stage computed for its inputs, exactly what the pipeline sends back. Modules keep their
    mode (``eval()`` for deterministic dropout and batch norm). ``threads`` sets torch's CPU
    threads for the measurement (a pipeline process on ``c`` cores with ``k`` stages gets
    ``c // k``). Raises `GraphError` when ``device`` is ``cuda`` and no GPU is present.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _measure(stages, inputs, target, loss_fn, device, repeats, warmup)
    finally:
        torch.set_num_threads(before)


def _measure(stages: Sequence[nn.Module], inputs: Sequence[Any], target: torch.Tensor | None,
             loss_fn: Callable[..., torch.Tensor] | None, device: str, repeats: int, warmup: int) -> StageTimes:
    if device == "cuda" and not torch.cuda.is_available():
        raise GraphError("device cuda asked for, but torch sees no GPU on this machine")

    dev = torch.device(device)
    cpu = cpu_clock()
    sync: Callable[[], None] = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    # stage modules share their layers with the model: copy before moving, so the model stays put
    mods = [m if _on(m, dev) else copy.deepcopy(m).to(dev) for m in stages]
    training = loss_fn is not None
    if training and target is None:
        raise GraphError("training needs a target for the loss")
    x0 = tuple(_to(a, dev) for a in inputs)
    y = _to(target, dev)
    fwd: list[list[float]] = [[] for _ in mods]
    bwd: list[list[float]] = [[] for _ in mods]
    fwd_cpu: list[list[float]] = [[] for _ in mods]
    bwd_cpu: list[list[float]] = [[] for _ in mods]
    for it in range(warmup + repeats):
        for m in mods:
            for prm in m.parameters():
                prm.grad = None
        ins: list[tuple] = []
        outs: list[tuple] = []
        cur: tuple = x0
        with torch.set_grad_enabled(training):
            for s, m in enumerate(mods):
                cur = tuple(_leaf(a, training) for a in cur) if s else cur
                sync()
                t0, c0 = time.perf_counter(), cpu()
                out = m(*cur)
                sync()
                if it >= warmup:
                    fwd[s].append(1000.0 * (time.perf_counter() - t0))
                    fwd_cpu[s].append(1000.0 * (cpu() - c0))
                ins.append(cur)
                outs.append(_as_tuple(out))
                cur = _as_tuple(out)
        if not training:
            continue
        for s in range(len(mods) - 1, -1, -1):
            sync()
            t0, c0 = time.perf_counter(), cpu()
            if s == len(mods) - 1:
                out = outs[s][0] if len(outs[s]) == 1 else outs[s]
                loss_fn(out, y).backward()
            else:
                pairs = [(o, i.grad) for o, i in zip(outs[s], ins[s + 1])
                         if isinstance(o, torch.Tensor) and o.requires_grad and i.grad is not None]
                if pairs:
                    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            sync()
            if it >= warmup:
                bwd[s].append(1000.0 * (time.perf_counter() - t0))
                bwd_cpu[s].append(1000.0 * (cpu() - c0))
    med = lambda xs: float(statistics.median(xs)) if xs else 0.0  # noqa: E731
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    on_cpu = dev.type == "cpu"
    return StageTimes(forward_ms=[med(x) for x in fwd], backward_ms=[med(x) for x in bwd],
                      microbatch=int(x0[0].shape[0]), device=name, repeats=repeats,
                      forward_cpu_ms=[min(x, default=0.0) for x in fwd_cpu] if on_cpu else None,
                      backward_cpu_ms=[min(x, default=0.0) for x in bwd_cpu] if on_cpu else None)
