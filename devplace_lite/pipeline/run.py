"""Run pipeline stages with PyTorch's own engine, one process per stage, and time them.

Problem: execute the stage modules of a `Split` as a real pipeline and measure it: the step
time, each stage's busy time, the bubble (idle share), peak memory per stage, and, for checks,
the outputs, the loss and the parameter gradients.

How: `torch.multiprocessing` starts one process per stage (``spawn``). Each joins a process
group (gloo on CPU, the default; NCCL with one GPU per stage), wraps its module in
`torch.distributed.pipelining.PipelineStage` and runs `ScheduleGPipe` or `Schedule1F1B` for
``warmup + steps`` steps. Nothing of the schedule is ours; the stage class is subclassed only
to stamp the start and end of every forward and backward chunk (with a device synchronise on
GPUs, so a stamp is the end of the work, not of its launch). All processes of one machine
read the same monotonic clock, so their stamps share one time line. On CPU each chunk also
records its CPU time (`cpu_clock`), the measure of a stage's work that a busy machine
disturbs least. Several runs can share one start of the processes (`run_pipelines`).

Training runs a ``loss_fn`` on each micro-batch (``mean`` reduction) and the schedule divides
gradients by the number of micro-batches: the gradients then equal those of the whole batch.
Parameters are never updated (each step zeroes the gradients first), so every step computes
the same function and the last step's outputs and gradients can be compared with the unsplit
model. Memory: the high-water mark of the activations autograd keeps (`ActivationMeter`, any
device) and, on CUDA, the allocator's ``max_memory_allocated``; on CPU, which keeps no
allocator statistics, peak memory is accounted as parameters (and their gradients when
training) plus the activation high-water mark.

Complexity: one process start per stage (importing torch dominates: seconds), then the steps.

Example
-------
See ``chapters/08_torch_pipeline.md``; in short::

    sp = split_module(model, stage_of, (x[:2],))
    run = run_pipeline(sp.stages, (x,), target=y, loss_fn=torch.nn.functional.mse_loss,
                       schedule="1f1b", microbatches=4)
    run.step_ms, run.bubble, run.stage_ms

Reference: ``torch.distributed.pipelining`` (PyTorch >= 2.4); GPipe (Huang et al., 2019); 1F1B
(Narayanan et al., "PipeDream", 2019).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ..graph import GraphError
from ..schedules.timeline import bubble_fraction, gpipe_formula
from .resources import available_devices, check_resources, device_name, free_port

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def cpu_clock() -> Callable[[], float]:
    """The CPU-time clock that counts a stage's arithmetic: with one torch thread all of it runs
    on the calling thread, so that thread's CPU time (which leaves out the communication
    backend's threads, busy sending the previous micro-batch meanwhile); with several, the
    whole process's."""
    return time.thread_time if torch.get_num_threads() == 1 else time.process_time


class _TimedStage(PipelineStage):
    """A `PipelineStage` that records ``(kind, microbatch, start, end, cpu seconds)`` of each
    chunk it computes: wall-clock stamps for the time line, and the CPU time spent (`cpu_clock`),
    which a busy shared machine does not inflate (time spent waiting for a core is not counted)."""

    def __init__(self, *args: Any, sync: Callable[[], None], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._sync = sync
        self._cpu = cpu_clock()
        self.stamps: list[tuple[str, int, float, float, float]] = []

    def _timed(self, kind: str, chunk: int, fn: Callable[[], Any]) -> Any:
        t0, c0 = time.perf_counter(), self._cpu()
        out = fn()
        self._sync()
        self.stamps.append((kind, chunk, t0, time.perf_counter(), self._cpu() - c0))
        return out

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any):
        return self._timed("F", fwd_chunk_id, lambda: super(_TimedStage, self).forward_one_chunk(
            fwd_chunk_id, *args, **kwargs))

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any):
        if not self.has_backward:
            return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
        return self._timed("B", bwd_chunk_id, lambda: super(_TimedStage, self).backward_one_chunk(
            bwd_chunk_id, *args, **kwargs))


class ActivationMeter:
    """Bytes of tensors autograd keeps for the backward pass, and their high-water mark.

    Used as ``torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack)``: a tensor
    counts from the first time it is saved until it is freed (a finaliser), once however many
    operations save it; parameters (``skip``, by ``id``) are not activations. This is the memory
    a schedule decides: GPipe keeps every micro-batch's activations until the backward phase,
    1F1B at most about ``p`` of them.
    """

    def __init__(self, skip: set[int] | None = None):
        self.skip = skip or set()
        self.live = self.peak = 0
        self._seen: set[int] = set()

    def reset(self) -> None:
        self.peak = self.live

    def _free(self, key: int, size: int) -> None:
        self._seen.discard(key)
        self.live -= size

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        if key not in self._seen and key not in self.skip:
            size = t.numel() * t.element_size()
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._free, key, size)
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t


TensorShape = tuple[tuple[int, ...], torch.dtype, bool]


def _stage_shapes(stages: Sequence[nn.Module], micro: tuple, training: bool
                  ) -> list[tuple[list[TensorShape], list[TensorShape]]]:
    """Shape, dtype and requires-grad of every stage's inputs and outputs for one micro-batch,
    from one pass here. Handing them to `PipelineStage` (its static mode) spares the stages a
    shape-inference pass on uninitialised tensors, which fails on integer inputs (token ids
    carried to a later stage index out of range)."""
    def shape(t: Any) -> TensorShape:
        if not isinstance(t, torch.Tensor):
            raise GraphError(f"stage values must be tensors, got {type(t).__name__}")
        return tuple(t.shape), t.dtype, bool(t.requires_grad)

    out: list[tuple[list[TensorShape], list[TensorShape]]] = []
    cur: tuple = micro
    with torch.set_grad_enabled(training):
        for s, mod in enumerate(stages):
            if s:
                cur = tuple(t.detach().requires_grad_(t.requires_grad) for t in cur)
            res = mod(*cur)
            res_t = tuple(res) if isinstance(res, (tuple, list)) else (res,)
            out.append(([shape(t) for t in cur], [shape(t) for t in res_t]))
            cur = res_t
    return out


def _example(meta: TensorShape, device: torch.device) -> torch.Tensor:
    size, dtype, grad = meta
    return torch.empty(size, dtype=dtype, device=device).requires_grad_(grad)


def _run_task(rank: int, world: int, folder: Path, t: int, task: dict, device: torch.device,
              sync: Callable[[], None]) -> dict:
    """One pipeline run inside a stage's process: build the stage and schedule, time the steps."""
    cuda = device.type == "cuda"
    module = torch.load(folder / f"task{t}_stage{rank}.pt", weights_only=False).to(device)
    data = torch.load(folder / f"task{t}_inputs.pt", weights_only=False)
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in data["inputs"])
    target = data["target"].to(device) if data["target"] is not None else None
    training = task["loss_fn"] is not None  # the module keeps its mode: eval() makes dropout and BN deterministic
    ins, outs = data["shapes"][rank]
    stage = _TimedStage(module, rank, world, device, sync=sync,
                        input_args=tuple(_example(m, device) for m in ins),
                        output_args=tuple(_example(m, device) for m in outs))
    sched = SCHEDULES[task["schedule"]](stage, task["microbatches"], loss_fn=task["loss_fn"])
    first, last = rank == 0, rank == world - 1
    steps, losses_out, out = [], [], None
    meter = ActivationMeter({id(p) for p in module.parameters()})
    for it in range(task["warmup"] + task["steps"]):
        if it == task["warmup"]:  # warm-up steps allocate buffers once: measure memory after them
            meter.reset()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
        for p in module.parameters():
            p.grad = None
        losses: list = []
        dist.barrier()
        t0 = time.perf_counter()
        call_args = args if first else ()
        if training:
            with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
                out = sched.step(*call_args, target=target if last else None, losses=losses if last else None)
        else:
            with torch.no_grad():
                out = sched.step(*call_args)
        sync()
        t1 = time.perf_counter()
        if it >= task["warmup"]:
            steps.append((t0, t1))
        if last and training:
            losses_out = [float(x.detach()) for x in losses]
    start = steps[0][0] if steps else math.inf
    rec = {
        "steps": steps,
        "stamps": [e for e in stage.stamps if e[2] >= start],
        "peak": int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        "activations": int(meter.peak),
        "loss": sum(losses_out) / len(losses_out) if losses_out else None,
    }
    if last and task["return_outputs"] and out is not None:
        rec["output"] = torch.utils._pytree.tree_map(
            lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, out)
    if training and task["return_grads"]:
        rec["grads"] = {n: p.grad.detach().cpu() for n, p in module.named_parameters() if p.grad is not None}
    return rec


def _worker(rank: int, job: dict) -> None:
    """One stage's process: join the group, then run every task in turn (a barrier between)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(job["port"])
    world, folder = job["world"], Path(job["folder"])
    if job["device"] == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        sync: Callable[[], None] = torch.cuda.synchronize
    else:
        device = torch.device("cpu")
        torch.set_num_threads(job["threads"])
        sync = lambda: None  # noqa: E731 - CPU work is synchronous
    dist.init_process_group(job["backend"], rank=rank, world_size=world,
                            timeout=timedelta(seconds=job["timeout"]))
    try:
        for t, task in enumerate(job["tasks"]):
            rec = _run_task(rank, world, folder, t, task, device, sync)
            torch.save(rec, folder / f".task{t}_rank{rank}.tmp")
            os.replace(folder / f".task{t}_rank{rank}.tmp", folder / f"task{t}_rank{rank}.pt")
            dist.barrier()
    finally:
        dist.destroy_process_group()



class PerStage:
    """Per-stage sums shared by measured pipelines and stages timed alone: a class with
    ``forward_ms``, ``backward_ms`` and optional ``forward_cpu_ms`` / ``backward_cpu_ms``."""

    forward_ms: list[float]
    backward_ms: list[float]
    forward_cpu_ms: list[float] | None
    backward_cpu_ms: list[float] | None

    @property
    def stage_ms(self) -> list[float]:
        """Time of one micro-batch (forward + backward when training) on each stage."""
        return [f + b for f, b in zip(self.forward_ms, self.backward_ms)]

    @property
    def bottleneck_ms(self) -> float:
        return max(self.stage_ms)

    @property
    def stage_cpu_ms(self) -> list[float] | None:
        """CPU time of one micro-batch (forward + backward) on each stage; ``None`` on GPUs."""
        if self.forward_cpu_ms is None or self.backward_cpu_ms is None:
            return None
        return [f + b for f, b in zip(self.forward_cpu_ms, self.backward_cpu_ms)]


@dataclass
class PipelineRun(PerStage):
    """What one pipeline run measured. Times in milliseconds, memory in bytes.

    ``steps_ms``: wall time of each measured step (first stage's start to the last stage's end).
    ``busy_ms[i][s]``: time stage ``s`` spent computing in step ``i``.
    ``events``: ``(stage, kind, microbatch, start_ms, duration_ms)`` of the last measured step,
    ``kind`` ``F`` or ``B``, times from that step's start (a Gantt chart of what really ran).
    ``forward_ms`` / ``backward_ms``: median time of one micro-batch's forward / backward on
    each stage, over all measured steps.
    ``forward_cpu_ms`` / ``backward_cpu_ms`` (CPU runs): the CPU time (`cpu_clock`) of one
    micro-batch on the stage, the least over micro-batches and steps: time spent waiting for a core is
    not CPU time, and what else disturbs a shared machine (caches, a sibling hyper-thread) only
    ever adds, so the least is the closest to the stage's own work.
    ``activation_bytes``: high-water mark of saved activations per stage (training);
    ``peak_memory``: the CUDA allocator's peak, or on CPU parameters (+ gradients) + activations.
    """

    schedule: str
    microbatches: int
    batch: int
    training: bool
    device: str
    backend: str
    steps_ms: list[float]
    busy_ms: list[list[float]]
    events: list[tuple[int, str, int, float, float]]
    forward_ms: list[float]
    backward_ms: list[float]
    peak_memory: list[int]
    activation_bytes: list[int]
    param_bytes: list[int]
    forward_cpu_ms: list[float] | None = None
    backward_cpu_ms: list[float] | None = None
    loss: float | None = None
    output: Any = None
    grads: dict[str, torch.Tensor] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return len(self.forward_ms)

    @property
    def step_ms(self) -> float:
        """Median measured step time."""
        return float(statistics.median(self.steps_ms))

    @property
    def throughput(self) -> float:
        """Samples per second at the measured step time."""
        return 1000.0 * self.batch / self.step_ms


    @property
    def steady_throughput(self) -> float:
        """Samples per second the pipeline tends to with many micro-batches: one micro-batch
        per bottleneck stage time."""
        return 1000.0 * self.batch / self.microbatches / self.bottleneck_ms

    @property
    def stage_busy_ms(self) -> list[float]:
        """Median busy time of each stage per step."""
        return [float(statistics.median(col)) for col in zip(*self.busy_ms)]

    @property
    def bubble(self) -> float:
        """Measured idle share of the step: ``1 - sum(busy) / (p * step)``, median over steps."""
        fr = [1.0 - sum(b) / (len(b) * t) for b, t in zip(self.busy_ms, self.steps_ms)]
        return float(statistics.median(fr))

    @property
    def formula_ms(self) -> float:
        """The GPipe estimate from the measured stage times: ``sum(t) + (m - 1) max(t)`` for the
        forward phase, plus the same for the backward phase with GPipe (fused ``F + B`` with 1F1B)."""
        m = self.microbatches
        if not self.training:
            return gpipe_formula(self.forward_ms, m)
        if self.schedule == "1f1b":
            return gpipe_formula(self.stage_ms, m)
        return gpipe_formula(self.forward_ms, m) + gpipe_formula(self.backward_ms, m)

    @property
    def formula_bubble(self) -> float:
        """``(p - 1) / (m + p - 1)``: the bubble with equal stages and free communication."""
        return bubble_fraction(self.num_stages, self.microbatches)

    def tasks(self, colors: Sequence[str] | None = None) -> list[tuple[str, float, float, str, str]]:
        """The last step's events as ``(lane, start, duration, label, color)`` for `plot.gantt`."""
        colors = colors or ("#4477AA", "#EE6677")
        return [(f"stage {s}", t, d, f"{k}{j}", colors[0] if k == "F" else colors[1])
                for s, k, j, t, d in self.events]

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule, "microbatches": self.microbatches, "batch": self.batch,
            "training": self.training, "stages": self.num_stages, "device": self.device,
            "backend": self.backend, "step_ms": self.step_ms, "steps_ms": self.steps_ms,
            "throughput": self.throughput, "steady_throughput": self.steady_throughput,
            "stage_ms": self.stage_ms, "forward_ms": self.forward_ms, "backward_ms": self.backward_ms,
            "stage_busy_ms": self.stage_busy_ms, "bottleneck_ms": self.bottleneck_ms,
            "stage_cpu_ms": self.stage_cpu_ms,
            "bottleneck_stage": int(max(range(self.num_stages), key=lambda s: self.stage_ms[s])),
            "bubble": self.bubble, "formula_ms": self.formula_ms, "formula_bubble": self.formula_bubble,
            "peak_memory": self.peak_memory, "activation_bytes": self.activation_bytes,
            "param_bytes": self.param_bytes, "loss": self.loss,
            **self.extra,
        }


def run_pipeline(stages: Sequence[nn.Module], inputs: Sequence[Any], *, target: torch.Tensor | None = None,
                 loss_fn: Callable[..., torch.Tensor] | None = None, schedule: str = "gpipe",
                 microbatches: int = 4, steps: int = 3, warmup: int = 1, device: str = "cpu",
                 memory: float | None = None, return_outputs: bool = True, return_grads: bool = False,
                 timeout: float = 300.0) -> PipelineRun:
    """Run ``stages`` as a pipeline, one process per stage, and measure it.

    Parameters
    ----------
    stages : sequence of nn.Module
        Stage ``s`` takes stage ``s - 1``'s outputs (a tuple) as positional inputs (see
        `split_module`). They must pickle, and the classes of the modules they hold must be
        importable by a fresh process (torch's layers are; a class defined in a notebook cell
        is not).
    inputs : sequence
        The whole batch's positional inputs of stage 0; cut into ``microbatches`` along dim 0.
    target, loss_fn : optional
        Training when ``loss_fn`` is given (picklable, ``mean`` reduction); inference otherwise.
    schedule : ``"gpipe"`` or ``"1f1b"``
    steps, warmup : int
        Measured steps, after ``warmup`` unmeasured ones.
    device : ``"cpu"`` (gloo, the default) or ``"cuda"`` (NCCL, one GPU per stage).
    memory : float, optional
        Bytes per device: a stage whose parameters exceed it is refused before anything starts.
    return_grads : bool
        Bring back every parameter's gradient after the last step (names as in the model).

    Raises
    ------
    GraphError
        Unknown schedule, too few micro-batches for 1F1B, a batch that does not divide, more
        stages than devices, a stage over ``memory``.
    """
    return run_pipelines([dict(stages=stages, inputs=inputs, target=target, loss_fn=loss_fn, schedule=schedule,
                               microbatches=microbatches, steps=steps, warmup=warmup, memory=memory,
                               return_outputs=return_outputs, return_grads=return_grads)],
                         device=device, timeout=timeout)[0]


_TASK_DEFAULTS = dict(target=None, loss_fn=None, schedule="gpipe", microbatches=4, steps=3, warmup=1, memory=None,
                      return_outputs=True, return_grads=False)


def _prepare(task: dict, device: str) -> dict:
    """Check one run's arguments; fill in defaults, the batch and the parameter bytes."""
    unknown = set(task) - set(_TASK_DEFAULTS) - {"stages", "inputs"}
    if unknown:
        raise GraphError(f"unknown pipeline run option(s): {', '.join(sorted(unknown))}")
    t = {**_TASK_DEFAULTS, **task}
    stages, inputs = list(t["stages"]), tuple(t["inputs"])
    if t["schedule"] not in SCHEDULES:
        raise GraphError(f"unknown schedule {t['schedule']!r}; known: {', '.join(SCHEDULES)}")
    p, m = len(stages), int(t["microbatches"])
    if p < 1:
        raise GraphError("need at least one stage")
    if m < 1:
        raise GraphError(f"microbatches must be at least 1, got {m}")
    if t["schedule"] == "1f1b" and t["loss_fn"] is not None and m < p:
        raise GraphError(f"1F1B needs at least as many micro-batches as stages ({p}), got {m}")
    batch = int(inputs[0].shape[0])
    if batch % m:
        raise GraphError(f"batch of {batch} does not split into {m} equal micro-batches")
    if t["loss_fn"] is not None and t["target"] is None:
        raise GraphError("training needs a target for the loss")
    params = [sum(x.numel() * x.element_size() for x in list(s.parameters()) + list(s.buffers())) for s in stages]
    check_resources(p, device, params, t["memory"])
    return {**t, "stages": stages, "inputs": inputs, "microbatches": m, "batch": batch, "params": params}


def run_pipelines(runs: Sequence[dict], *, device: str = "cpu", timeout: float = 300.0) -> list[PipelineRun]:
    """Several pipeline runs (each a dict of `run_pipeline`'s keyword arguments, with ``stages``
    and ``inputs``) in one start of the processes: starting them (importing torch) costs
    seconds, so comparing splits or schedules this way is much quicker. Runs go one after
    another, with a barrier between, so they do not disturb each other's timings. Runs with
    different numbers of stages get one start each."""
    tasks = [_prepare(dict(r), device) for r in runs]
    out: list[PipelineRun | None] = [None] * len(tasks)
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        groups.setdefault(len(t["stages"]), []).append(i)
    for p, idx in groups.items():
        for i, run in zip(idx, _launch([tasks[i] for i in idx], p, device, timeout)):
            out[i] = run
    return out  # type: ignore[return-value]


def _launch(tasks: list[dict], p: int, device: str, timeout: float) -> list[PipelineRun]:
    backend = "nccl" if device == "cuda" else "gloo"
    with tempfile.TemporaryDirectory(prefix="devplace-pipe-") as folder:
        for t, task in enumerate(tasks):
            for s, mod in enumerate(task["stages"]):
                torch.save(mod, Path(folder) / f"task{t}_stage{s}.pt")
            micro = tuple(a[: task["batch"] // task["microbatches"]] for a in task["inputs"])
            shapes = _stage_shapes(task["stages"], micro, task["loss_fn"] is not None)
            torch.save({"inputs": task["inputs"], "target": task["target"], "shapes": shapes},
                       Path(folder) / f"task{t}_inputs.pt")
        keep = ("schedule", "microbatches", "loss_fn", "steps", "warmup", "return_outputs", "return_grads")
        job = dict(port=free_port(), world=p, folder=folder, device=device, backend=backend,
                   threads=max(1, available_devices("cpu") // p), timeout=float(timeout),
                   tasks=[{k: task[k] for k in keep} for task in tasks])
        try:
            tmp.start_processes(_worker, args=(job,), nprocs=p, start_method="spawn", join=True)
        except tmp.ProcessRaisedException as e:
            msg = str(e).strip().splitlines()
            raise RuntimeError(f"a pipeline stage failed: {msg[-1] if msg else e}") from e
        recs = [[torch.load(Path(folder) / f"task{t}_rank{r}.pt", weights_only=False) for r in range(p)]
                for t in range(len(tasks))]
    name = device_name(device)
    return [_collect(r, schedule=task["schedule"], microbatches=task["microbatches"], batch=task["batch"],
                     training=task["loss_fn"] is not None, device=name, backend=backend, params=task["params"])
            for r, task in zip(recs, tasks)]


def _collect(recs: list[dict], *, schedule: str, microbatches: int, batch: int, training: bool,
             device: str, backend: str, params: list[int]) -> PipelineRun:
    n_steps = len(recs[0]["steps"])
    steps_ms, busy, events = [], [], []
    fwd: list[list[float]] = [[] for _ in recs]
    bwd: list[list[float]] = [[] for _ in recs]
    fwd_cpu: list[list[float]] = [[] for _ in recs]
    bwd_cpu: list[list[float]] = [[] for _ in recs]
    for i in range(n_steps):
        t0 = min(r["steps"][i][0] for r in recs)
        t1 = max(r["steps"][i][1] for r in recs)
        nxt = min(r["steps"][i + 1][0] for r in recs) if i + 1 < n_steps else math.inf
        steps_ms.append(1000.0 * (t1 - t0))
        row = []
        for s, r in enumerate(recs):
            mine = [e for e in r["stamps"] if t0 <= e[2] < nxt]
            row.append(1000.0 * sum(e[3] - e[2] for e in mine))
            for kind, j, a, b, cpu in mine:
                (fwd if kind == "F" else bwd)[s].append(1000.0 * (b - a))
                (fwd_cpu if kind == "F" else bwd_cpu)[s].append(1000.0 * cpu)
                if i == n_steps - 1:
                    events.append((s, kind, j, 1000.0 * (a - t0), 1000.0 * (b - a)))
        busy.append(row)
    last = recs[-1]
    gpu = backend == "nccl"  # CPU time says nothing of a GPU's work
    med = lambda xs: float(statistics.median(xs)) if xs else 0.0  # noqa: E731
    least = lambda xs: float(min(xs)) if xs else 0.0  # noqa: E731 - interference only ever adds CPU time
    grads: dict[str, torch.Tensor] | None = None
    if any("grads" in r for r in recs):
        grads = {}
        for r in recs:
            grads.update(r.get("grads", {}))
    return PipelineRun(
        schedule=schedule, microbatches=microbatches, batch=batch, training=training, device=device,
        backend=backend, steps_ms=steps_ms, busy_ms=busy, events=sorted(events, key=lambda e: (e[0], e[3])),
        forward_ms=[med(x) for x in fwd], backward_ms=[med(x) for x in bwd],
        forward_cpu_ms=None if gpu else [least(x) for x in fwd_cpu],
        backward_cpu_ms=None if gpu else [least(x) for x in bwd_cpu],
        peak_memory=[r["peak"] if r["peak"] is not None else (2 if training else 1) * b + r["activations"]
                     for r, b in zip(recs, params)],
        activation_bytes=[r["activations"] for r in recs], param_bytes=params, loss=last.get("loss"),
        output=last.get("output"), grads=grads)
