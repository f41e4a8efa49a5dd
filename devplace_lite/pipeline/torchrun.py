"""Run a `PipelinePlan` under ``torchrun``: one process per stage, on one machine or several.

Problem: a plan (`devplace_lite.pipeline.planner`) names the module FQNs where stages begin.
Run those stages with PyTorch's own engine the way a practitioner launches a job: ``torchrun``
starts one process per rank on every node, they meet through the ``env://`` rendezvous, each
builds the whole model, lets ``torch.distributed.pipelining.pipeline`` cut it at the split
points and keeps its own stages (one, or several for the interleaved and V schedules, placed as
the plan's ``stage_to_rank`` says, which is torch's own placement), and the plan's schedule
class (any of torch 2.13's seven, `devplace_lite.schedules.simulate.SCHEDULES`) moves micro-batches
between ranks (gloo on CPU, NCCL on GPUs: the same code; on one H100, 2026-11-27, a one-rank NCCL run
with ``--check`` passed; no run over two or more GPUs has been made).

`devplace_lite.pipeline.script` writes ``run_pipeline.py`` beside ``plan.json``: the split
points as ``SplitPoint.BEGINNING`` and a call of `main`, which every rank runs. `launch` starts torchrun
here (``nodes=2`` runs two torchrun "nodes" on loopback, ``--nnodes 2 --node-rank 0/1
--rdzv-endpoint 127.0.0.1:PORT``, the multi-machine path on one machine) and gathers what the
ranks wrote:

* per stage and action kind (``F``, ``B``, or ``I`` and ``W`` where the schedule splits the
  backward), the CPU time of one micro-batch on the rank's thread (the least over micro-batches
  and steps: a shared machine's load does not inflate it), the wall time of each step, the last
  step's actions (for a Gantt chart), and the schedule's replay with those CPU times;
* per rank, its thread's CPU time outside its passes per message its passes exchange
  (``action_overhead_ms``: torch's schedule runtime, messages and bookkeeping), and over the
  run, the wall-clock price per message a pass exchanges at which the replay of its CPU times
  takes its measured step (``action_wall_ms``, `wall_price`: the runtime's CPU time, its
  messages' waits, the ranks' interference), which
  `devplace_lite.pipeline.calibration.message_price` measures on a small zoo model for a plan to
  price before its run;
* per rank, the peak memory: parameters, their gradients when training, and the high-water
  mark of the activations autograd saves, counted in the first step (the counting hooks cost
  CPU time, so the measured steps run without them);
* with ``check``: the last stage's outputs against the unsplit model's, every stage's parameter
  gradients (tied weights after their all-reduce) against the unsplit model's.

A stage the plan marks in ``recompute`` runs its module under ``torch.utils.checkpoint``
(non-reentrant, `recompute_module`): autograd keeps only the stage's inputs between its forward
and its backward, and the backward runs the forward again first (inside torch's input-gradient
pass where the schedule splits the backward). The activation meter then sees the inputs alone:
the recomputed tensors live inside checkpoint's own hooks during a backward, where no outer
hook sees them, so they are measured apart (`Recompute.transient_bytes`: one forward of the
stage's module, without checkpoint, on a micro-batch it ran, under the meter) and added to the
rank's peak (the largest of its recomputing stages').

The stages are built by the same split policy the capture used (`capture.split_policy`),
which places split markers exactly where ``split_spec`` would and also hands model inputs that
a later stage reads to the first stage (the schedules feed inputs to the first stage only).

Complexity: a process start (importing torch) and one export per rank, then the steps.

Example
-------
See ``tests/test_plan.py``::

    p = plan(model, inputs, k=4, microbatches=4)
    paths = p.write("out/")
    run = launch(paths["plan"], nodes=2, check=True)
    run["check"]["outputs_allclose"], run["stage_forward_cpu_ms"]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

from ..errors import GraphError, UsageError, rank_error, read_logs
from ..schedules.simulate import message_ends
from .resources import check_resources, free_port

#: Unmeasured first steps of a run: glibc hands a process's first large buffers back and forth
#: with the kernel (page faults) until its allocation thresholds have grown. Measured here, one
#: warm-up step left the next steps at up to 5.5x the later ones (DistilBERT 104, 83, 66 ms,
#: then 62; ShuffleNet 662, 161, 147, then 120), with 125-3,440 minor faults a step, none later.
WARMUP = 3


class ActivationMeter:
    """Bytes of tensors autograd keeps for the backward pass, and their high-water mark.

    Used as ``torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack)``: a tensor
    counts from the first time it is saved until it is freed (a finaliser), once however many
    operations save it; parameters (``skip``, by ``id``) are not activations. This is the memory
    a schedule decides: GPipe keeps every micro-batch's activations until the backward phase,
    1F1B at most about ``p`` of them.

    Examples
    --------
    >>> import torch
    >>> w = torch.randn(4, 4, requires_grad=True)
    >>> meter = ActivationMeter({id(w)})
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = (torch.randn(2, 4) @ w).relu()
    >>> meter.peak  # the input of the matmul and the relu's output, 2 x 4 floats each
    64
    """

    def __init__(self, skip: set[int] | None = None):
        self.skip = skip or set()
        self.live = self.peak = 0
        self._seen: set[int] = set()

    def _free(self, key: int, size: int) -> None:
        self._seen.discard(key)
        self.live -= size

    def pack(self, t: Any) -> Any:
        key = id(t)
        if key not in self._seen and key not in self.skip:
            size = t.numel() * t.element_size()
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._free, key, size)
        return t

    @staticmethod
    def unpack(t: Any) -> Any:
        return t


def stage_shapes(stages: Sequence[Any], micro: tuple, training: bool) -> list[tuple[list, list]]:
    """``(shape, dtype, requires_grad)`` of every stage's inputs and outputs for one
    micro-batch, from one pass here. Handing them to `PipelineStage` (its static mode) spares
    the stages a shape-inference pass on uninitialised tensors, which fails on integer inputs
    (token ids carried to a later stage index out of range)."""
    import torch

    def shape(t: Any) -> tuple:
        if not isinstance(t, torch.Tensor):
            raise GraphError(f"stage values must be tensors, got {type(t).__name__}")
        return tuple(t.shape), t.dtype, bool(t.requires_grad)

    out: list[tuple[list, list]] = []
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


class Recompute:
    """Make ``module`` recompute its activations in its backward: its ``forward`` runs under
    non-reentrant ``torch.utils.checkpoint`` (the RNG state is kept, so dropout draws the same
    mask again), which saves only the forward's inputs. The module is changed in place; the
    first call's inputs are kept (detached) for `transient_bytes`.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Tanh(), torch.nn.Tanh())
    >>> meter, again = ActivationMeter(), Recompute(net)
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = net(torch.randn(2, 4, requires_grad=True)).sum()
    >>> meter.peak  # the input alone (2 x 4 floats), not the three tanh outputs
    32
    >>> again.transient_bytes(set())  # what its backward holds again: the three outputs
    96
    """

    def __init__(self, module: Any) -> None:
        from torch.utils.checkpoint import checkpoint

        self.inner = module.forward
        self.first: tuple | None = None

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self.first is None:
                self.first = (tuple(a.detach().requires_grad_(a.requires_grad) if hasattr(a, "detach") else a
                                    for a in args), kwargs)
            return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)

        module.forward = forward

    def transient_bytes(self, skip: set[int]) -> int:
        """Bytes autograd saves in one forward of the module without checkpoint, on the inputs
        of its first call (0 before any): what each of its backwards holds while it runs."""
        import torch

        if self.first is None:
            return 0
        meter = ActivationMeter(skip)
        args, kwargs = self.first
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
            self.inner(*args, **kwargs)
        return int(meter.peak)


def _example(meta: tuple, device: Any) -> Any:
    import torch

    size, dtype, grad = meta
    return torch.empty(size, dtype=dtype, device=device).requires_grad_(grad)


# -- one rank ----------------------------------------------------------------------------------
def _contiguous(values: Any) -> Any:
    import torch

    return tuple(v.contiguous() if isinstance(v, torch.Tensor) else v for v in values)


def _fresh_copies(values: Any) -> Any:
    import torch

    return tuple(v.clone(memory_format=torch.contiguous_format) if isinstance(v, torch.Tensor) else v
                 for v in values)


def _instrument(stage: Any, record: list, cuda: bool = False, fresh: bool = False,
                seen: dict | None = None) -> None:
    """Record ``(kind, start, end, ms, stage, chunk)`` of every action the stage runs (kind
    ``F``, ``B``, or ``I`` and ``W`` when a zero-bubble schedule splits the backward; ms: the
    thread's CPU time on CPU, on a GPU the wall time up to a device synchronise), and hand on
    contiguous tensors: gloo sends contiguous memory only, while a stage's outputs and its
    inputs' gradients may come out of the model or autograd with any strides. ``fresh`` (the
    zero-bubble schedules): a stage's outputs are copied, because torch 2.13's input-gradient
    pass detaches them in place, which autograd refuses for a view or for a tensor a later
    operator of the stage saved (an in-place ReLU's output). ``seen`` (a check): each
    micro-batch's outputs as the stage sent them, copied, by ``(stage, chunk)``; the last step's
    stay."""
    import torch

    for kind, name in (("F", "forward_one_chunk"), ("B", "backward_one_chunk"), ("W", "backward_weight_one_chunk")):
        inner = getattr(stage, name)

        def timed(chunk: int, *args: Any, _inner=inner, _kind=kind, **kwargs: Any) -> Any:
            if _kind != "F" and not stage.has_backward:  # inference: torch calls it, and it does nothing
                return _inner(chunk, *args, **kwargs)
            if _kind == "B" and not kwargs.get("full_backward", True):
                _kind = "I"
            c0, t0 = time.thread_time(), time.perf_counter()
            out = _inner(chunk, *args, **kwargs)
            if cuda:
                torch.cuda.synchronize()
                c0 = time.thread_time() - (time.perf_counter() - t0)  # report the wall time
            if _kind == "F" and chunk in stage.fwd_cache:
                outputs, rest = stage.fwd_cache[chunk]
                stage.fwd_cache[chunk] = (_fresh_copies(outputs) if fresh else _contiguous(outputs), rest)
                if seen is not None:
                    seen[stage.stage_index, chunk] = tuple(
                        v.detach().clone() if isinstance(v, torch.Tensor) else v for v in stage.fwd_cache[chunk][0])
            elif _kind in ("B", "I") and chunk in stage.bwd_cache:
                stage.bwd_cache[chunk] = _contiguous(stage.bwd_cache[chunk])
            record.append((_kind, t0, time.perf_counter(), (time.thread_time() - c0) * 1e3, stage.stage_index, chunk))
            return out

        setattr(stage, name, timed)


def _no_self_pairs(stage: Any, rank: int) -> None:
    """Drop the warm-up messages a stage would send to its own rank: torch 2.13's
    ``_get_init_p2p_neighbors_ops`` greets the neighbouring stages' ranks, which is this rank
    when a V schedule puts two neighbouring stages on it, and gloo has no pair to itself."""
    inner = getattr(stage, "_get_init_p2p_neighbors_ops", None)
    if inner is None:
        return

    def ops() -> list:
        return [op for op in inner() if op.group_peer != rank]

    stage._get_init_p2p_neighbors_ops = ops


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one rank of a devplace pipeline (run me under torchrun)")
    p.add_argument("--steps", type=int, default=3, help="measured steps (default 3)")
    p.add_argument("--warmup", type=int, default=WARMUP, help=f"unmeasured first steps (default {WARMUP})")
    p.add_argument("--check", action="store_true", help="compare outputs and gradients with the unsplit model")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="gloo on CPU, NCCL with one GPU per rank")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank on CPU (default 1)")
    p.add_argument("--out", help="folder for this run's per-rank JSON (default: beside plan.json, run/)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a collective may wait")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        p.error("--steps and --threads must be >= 1 and --warmup >= 0")
    return a


def main(plan_path: str | Path, split_spec: dict | None = None, argv: Sequence[str] | None = None) -> int:
    """What each torchrun rank runs: build its stage(s) from the plan and run the schedule."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining as tp
    import torch.nn.functional as F
    from torch.distributed.pipelining import pipeline

    from ..schedules.simulate import SCHEDULES

    from ..zoo import load
    from .capture import HOW_EXPORT_SPLIT, HOW_FX, export_copy, known_warnings_filtered, split_policy, without_cache

    args = _args(argv)
    plan_path = Path(plan_path)
    plan = json.loads(plan_path.read_text())
    cuda = args.device == "cuda"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        n_stages = plan["stages"]
        s2r = plan.get("stage_to_rank") or list(range(n_stages))
        ranks = plan.get("ranks", n_stages)
        if world != ranks:
            raise UsageError(f"the plan has {ranks} ranks but torchrun started {world} processes "
                             f"(--nproc-per-node x --nnodes must be {ranks})")
        mine = [s for s in range(n_stages) if s2r[s] == rank]
        model, inputs = load(plan["model"], batch=plan["batch"], seed=plan["seed"])
        without_cache(model)  # as the capture did: a stage sends tensors, not a key-value cache
        built = model_digest(model) if args.check else None  # as built here, before any step
        inputs = same_on_every_rank(model, inputs, device)
        m = plan["microbatches"]
        micro = tuple(t[: plan["microbatch"]] for t in inputs)
        points = list(split_spec) if split_spec is not None else list(plan["split_points"])
        training = plan["training"]
        if plan["capture"] in (HOW_FX, HOW_EXPORT_SPLIT):  # devplace's splitter cut it: cut it again here
            split = own_split(plan["capture"], model, micro, points)
            stages = [_own_stage(split, micro, s, n_stages, device, training) for s in mine]
            order = list(range(len(micro)))
            every_stage = lambda: list(split.stages)  # noqa: E731 - as the pipe's stage modules below
        else:
            with known_warnings_filtered():
                pipe = pipeline(export_copy(model), micro, split_policy=split_policy(points))
            if pipe.num_stages != n_stages:
                raise GraphError(f"the split points give {pipe.num_stages} stages, not {n_stages}")
            stages, order = [pipe.build_stage(s, device) for s in mine], first_stage_inputs(pipe)
            every_stage = lambda: [pipe.get_stage_module(s) for s in range(n_stages)]  # noqa: E731
        record: list = []
        split_backward = SCHEDULES[plan["schedule"]].split_backward
        recompute = plan.get("recompute") or [False] * n_stages
        again = [Recompute(st.submod) for st in stages if training and recompute[st.stage_index]]
        seen: dict | None = {} if args.check else None
        for st in stages:
            _instrument(st, record, cuda, fresh=split_backward and training, seen=seen)
            _no_self_pairs(st, rank)
        target = None
        if training:
            with torch.no_grad():
                shape = head(model(*inputs)).shape
            target = torch.randn(shape, generator=torch.Generator().manual_seed(plan["seed"] + 1)).to(device)
        spec = SCHEDULES[plan["schedule"]]
        sched_cls = getattr(tp, spec.torch_class)
        one = spec.fixed and spec.per_rank == 1
        sched = sched_cls(stages[0] if one else stages, m, loss_fn=(lambda out, y: F.mse_loss(head(out), y)) if training else None)
        named = dict(model.named_parameters(remove_duplicate=False))
        aliases = {t["parameter"]: [n for n, p in named.items() if p is named[t["parameter"]]] for t in plan["tied"]}
        # a replicated weight: copies on this rank are summed here, across ranks by an all-reduce
        groups = []
        for t in plan["tied"]:
            if len(t["stages"]) > 1:
                on = sorted({s2r[s] for s in t["stages"]})
                groups.append((t["parameter"], on, dist.new_group(on) if len(on) > 1 else None))
        first, last = 0 in mine, n_stages - 1 in mine
        xs = tuple(inputs[i].to(device) for i in order)
        params = [p for st in stages for p in st.submod.parameters()]
        meter = ActivationMeter({id(p) for p in params})
        steps, out, losses, events, mine_cpu = [], None, [], [], []
        for it in range(args.warmup + args.steps):
            if it == args.warmup:
                record.clear()  # warm-up chunks allocate buffers once: not part of the figures
            for p in params:
                p.grad = None
            losses = []
            dist.barrier()
            c0, t0 = time.thread_time(), time.perf_counter()
            if training:
                # saved activations are counted in the first step only: the hooks cost CPU time
                hooks = torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack) if it == 0 else \
                    contextlib.nullcontext()
                with hooks:
                    out = sched.step(*(xs if first else ()), target=target if last else None,
                                     losses=losses if last else None)
                for fqn, on, group in groups:  # a replicated weight: every copy gets the whole gradient
                    if rank in on:
                        _sum_tied([st.submod for st in stages], set(aliases[fqn]), group, device)
            else:
                with torch.no_grad():
                    out = sched.step(*(xs if first else ()))
            if cuda:
                torch.cuda.synchronize()
            t1, c1 = time.perf_counter(), time.thread_time()
            if it >= args.warmup:
                steps.append((t0, t1))
                mine_cpu.append(1e3 * (c1 - c0))
            if it == args.warmup + args.steps - 1:  # the last step's actions, for a Gantt chart
                events = [(k, s, c, 1e3 * (a - t0), 1e3 * (b - t0)) for k, a, b, _, s, c in record if a >= t0]
        rec: dict[str, Any] = {
            "rank": rank, "world": world, "host": socket.gethostname(), "device": str(device),
            "backend": dist.get_backend(), "steps": steps,
            "stages": mine, "events": events,
            # least CPU time of each (stage, kind) over the measured chunks
            "cpu_ms": {f"{s}:{kind}": min(ms for k, _, _, ms, st, _ in record if k == kind and st == s)
                       for s in mine for kind in "FBIW" if any(k == kind and st == s for k, *_, st, _ in record)},
            "forward_cpu_ms": [c for k, _, _, c, *_ in record if k == "F"],
            "backward_cpu_ms": [c for k, _, _, c, *_ in record if k in "BIW"],
            "loss": sum(float(x.detach()) for x in losses) / len(losses) if last and losses else None,
            "action_overhead_ms": None if cuda else _overhead(steps, mine_cpu, record, message_ends(s2r)),
            "param_bytes": sum(p.numel() * p.element_size() for p in params),
            "grad_bytes": sum(p.numel() * p.element_size() for p in params if p.requires_grad),
            "activation_peak_bytes": int(meter.peak),
            "recompute": [s for s in mine if training and recompute[s]],
            "recompute_transient_bytes": max((a.transient_bytes(meter.skip) for a in again), default=0),
        }
        if args.check:
            rec["check"] = _check(model, inputs, target, training, [st.submod for st in stages],
                                  out if last else None)
            rec["check"]["model_digest"] = built
            rec["check"].update(_check_stages(every_stage(), xs, m, seen or {}, *((model, inputs) if last else ())))
        folder = Path(args.out) if args.out else plan_path.with_name("run")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".rank{rank}.tmp"
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, folder / f"rank{rank}.json")
        every: list[Any] = [None] * world
        dist.all_gather_object(every, {"steps": steps, "loss": rec["loss"]})
        if rank == 0:
            print(summary(plan, every, folder), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


def _overhead(steps: Sequence[tuple[float, float]], step_cpu_ms: Sequence[float], record: Sequence[tuple],
              ends: Sequence[int]) -> float | None:
    """The rank thread's CPU time in a step outside its passes, per message its forward and
    backward (or input-gradient) passes exchange with another rank (``ends[s]`` per pass of
    stage ``s``, `message_ends`), median over the measured steps: torch's schedule runtime
    around the passes (posting and waiting for messages, bookkeeping, the loss on the last
    stage), priced as the replay prices a message."""
    per = []
    for (t0, t1), cpu in zip(steps, step_cpu_ms):
        passes = [r for r in record if t0 <= r[1] <= t1]
        count = sum(ends[r[4]] for r in passes if r[0] != "W")
        if count:
            per.append(max(0.0, cpu - sum(r[3] for r in passes)) / count)
    return float(statistics.median(per)) if per else None


def head(out: Any) -> Any:
    """The tensor a step's loss reads: the output itself, else the first floating-point tensor in
    it (the logits of a Hugging Face ``ModelOutput``, the first of a tuple)."""
    import torch
    from torch.utils._pytree import tree_flatten

    if isinstance(out, torch.Tensor):
        return out
    leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise GraphError(f"the model's output ({type(out).__name__}) holds no floating-point tensor to train on")
    return leaves[0]


def summary(plan: dict, ranks: Sequence[dict], folder: Path) -> str:
    """What a run printed at its end (rank 0): the step's wall time (first start to last end over
    the ranks, median over the measured steps) beside the plan's forecast, the loss, and where
    each rank's JSON went.

    >>> plan = {"stages": 2, "schedule": "1f1b", "microbatches": 4, "microbatch": 2, "training": True,
    ...         "forecast": {"step_ms": 9.5}}
    >>> ranks = [{"steps": [[0.0, 0.010], [1.0, 1.012]], "loss": None}, {"steps": [[0.001, 0.011], [1.0, 1.013]],
    ...          "loss": 0.5}]
    >>> print(summary(plan, ranks, Path("plan/run")))
    run_pipeline: 2 stages, 1f1b, 4 micro-batches of 2: step 12.0 ms wall (median of 2; plan's forecast 9.5 ms CPU), loss 0.5; per-rank JSON in plan/run/rank0.json .. rank1.json
    >>> print(summary({**plan, "training": False}, [{**r, "loss": None} for r in ranks], Path("plan/run")))
    run_pipeline: 2 stages, forwards only in 1f1b's order, 4 micro-batches of 2: step 12.0 ms wall (median of 2; plan's forecast 9.5 ms CPU), inference, no loss; per-rank JSON in plan/run/rank0.json .. rank1.json
    """
    n = min(len(r["steps"]) for r in ranks)
    steps = [1e3 * (max(r["steps"][i][1] for r in ranks) - min(r["steps"][i][0] for r in ranks)) for i in range(n)]
    loss = next((r["loss"] for r in ranks if r["loss"] is not None), None)
    said = f"loss {loss:.4g}" if loss is not None else ("no loss" if plan["training"] else "inference, no loss")
    fc = plan.get("forecast", {}).get("step_ms")
    forecast = f"; plan's forecast {fc:.1f} ms CPU" if fc is not None else ""
    rel = os.path.relpath(folder)
    where = Path(folder if rel.startswith("..") else rel)
    files = f"{where / 'rank0.json'}" + (f" .. rank{len(ranks) - 1}.json" if len(ranks) > 1 else "")
    how = plan["schedule"] if plan["training"] else f"forwards only in {plan['schedule']}'s order"
    return (f"run_pipeline: {plan['stages']} stages, {how}, {plan['microbatches']} micro-batches of "
            f"{plan['microbatch']}: step {statistics.median(steps):.1f} ms wall (median of {n}{forecast}), {said}; "
            f"per-rank JSON in {files}")


def own_split(how: str, model: Any, micro: tuple, points: Sequence[str]) -> Any:
    """The stages devplace's splitter cuts, built again in a rank as the capture built them
    (`devplace_lite.pipeline.split.Split`): for ``how`` ``torch.fx`` from a trace (leaf modules
    chosen as in the capture), for ``torch.export+devplace split`` from the rank's own export
    of the model (`capture.export_split`: the same graph and node names in every rank, tied
    parameters replicated). Each rank cuts the whole model and keeps its stages."""
    from .capture import HOW_FX, export_copy, export_split, fx_split, trace_with_leaves

    if how == HOW_FX:
        gm, leaves = trace_with_leaves(export_copy(model), [])
        return fx_split(gm, micro, points, leaves)[0]
    return export_split(model, micro, points)[0]


def _own_stage(split: Any, micro: tuple, index: int, count: int, device: Any, training: bool) -> Any:
    """Stage ``index`` of ``split`` (`own_split`) as a manual `PipelineStage` that talks to its
    neighbours only (values read later are carried through), its shapes given (`stage_shapes`)."""
    from torch.distributed.pipelining import PipelineStage

    from .capture import to_device

    if split.num_stages != count:
        raise GraphError(f"the split points give {split.num_stages} stages, not {count}")
    ins, outs = stage_shapes(split.stages, micro, training)[index]
    return PipelineStage(to_device(split.stages[index], device), index, count, device,
                         input_args=tuple(_example(m, device) for m in ins),
                         output_args=tuple(_example(m, device) for m in outs))


def first_stage_inputs(pipe: Any) -> list[int]:
    """Which model input each positional input of the first stage is: the schedule hands the
    batch to the first stage as is, and the split may list the model's inputs in another order
    (T5: the decoder's token ids are read first)."""
    graph = pipe.split_gm.graph
    roots = [n for n in graph.nodes if n.op == "placeholder"]
    call = next(n for n in graph.nodes if n.op == "call_module" and str(n.target).endswith("_0"))
    if not all(a in roots for a in call.args):
        raise GraphError("the first stage reads a value other than the model's inputs")
    return [roots.index(a) for a in call.args]


def _sum_tied(modules: Sequence[Any], names: set[str], group: Any, device: Any) -> None:
    import torch
    import torch.distributed as dist

    held = [p for module in modules for n, p in module.named_parameters(remove_duplicate=False) if n in names]
    if not held:
        return
    grad = torch.zeros_like(held[0])
    for p in {id(p): p for p in held}.values():
        if p.grad is not None:
            grad += p.grad
    if group is not None:
        dist.all_reduce(grad, group=group)
    for p in held:
        p.grad = grad.clone()


def _check(model: Any, inputs: tuple, target: Any, training: bool, stage_modules: Sequence[Any],
           out: Any) -> dict[str, Any]:
    """This rank's outputs (last rank) and gradients against the unsplit model's."""
    import torch
    import torch.nn.functional as F

    ref_model = model
    ref_model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(training):
        ref = head(ref_model(*inputs))
        if training:
            F.mse_loss(ref, target.cpu()).backward()
    res: dict[str, Any] = {}
    if out is not None:
        o = head(out).detach().cpu()
        res["outputs_allclose"] = bool(torch.allclose(o, ref.detach(), rtol=1e-4, atol=1e-5))
        res["max_output_diff"] = float((o - ref.detach()).abs().max())
    if training:
        params = dict(ref_model.named_parameters(remove_duplicate=False))
        diffs, ok, n = [], True, 0
        for name, p in ((n, p) for mod in stage_modules for n, p in mod.named_parameters(remove_duplicate=False)):
            if p.grad is None or name not in params or params[name].grad is None:
                continue
            g, r = p.grad.detach().cpu(), params[name].grad
            diffs.append(float((g - r).abs().max()))
            ok &= bool(torch.allclose(g, r, rtol=1e-4, atol=1e-5))
            n += 1
        res.update(grads_allclose=ok and n > 0, max_grad_diff=max(diffs, default=0.0), parameters_checked=n)
    return res


def same_on_every_rank(model: Any, inputs: tuple, device: Any) -> tuple:
    """Hand rank 0's parameters, buffers and example inputs to every rank (a broadcast, in
    place) and return the inputs. Every rank builds the model from its spec, and a builder
    whose draws are not fixed by its seed (weights from a generator it does not seed, another
    library's random state) gives each rank another model: the stages then compute pieces of
    different models, and the check compares the run with a model it did not run (Mamba from
    its config, unseeded: outputs off by up to 6.8, issue 40)."""
    import torch
    import torch.distributed as dist

    tensors = {id(t): t for _, t in [*model.named_parameters(remove_duplicate=False),
                                      *model.named_buffers(remove_duplicate=False)]}
    def sent(t: Any) -> Any:
        buf = t.detach().to(device).contiguous()
        dist.broadcast(buf, src=0)
        return buf.to(t.device)

    with torch.no_grad():
        for t in tensors.values():
            t.copy_(sent(t))
    return tuple(sent(t) for t in inputs)


def model_digest(model: Any) -> str:
    """A digest of the model's parameters and buffers, by name: every rank builds the model from
    its spec, and a check means something only when they all built the same one.

    >>> import torch
    >>> torch.manual_seed(0); a = torch.nn.Linear(2, 2)  # doctest: +ELLIPSIS
    <...>
    >>> torch.manual_seed(0); b = torch.nn.Linear(2, 2)  # doctest: +ELLIPSIS
    <...>
    >>> model_digest(a) == model_digest(b) != model_digest(torch.nn.Linear(2, 2))
    True
    """
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _close(a: Any, b: Any) -> tuple[bool, float]:
    """Whether two values (tensors, or tuples of them) agree within the check's tolerance, and
    their largest difference."""
    import torch

    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    ok, worst = len(a) == len(b), 0.0
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            continue
        if x.shape != y.shape:
            return False, float("inf")
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.is_floating_point() or y.is_floating_point():
            x, y = x.double(), y.double()
            worst = max(worst, float((x - y).abs().max())) if x.numel() else worst
            ok &= bool(torch.allclose(x, y, rtol=1e-4, atol=1e-5))
        else:
            ok &= bool(torch.equal(x, y))
    return ok, worst


def _check_stages(modules: Sequence[Any], xs: tuple, microbatches: int, seen: dict, model: Any = None,
                  inputs: tuple = ()) -> dict[str, Any]:
    """Where a failed check's difference comes from. The whole split is run again here, in this
    one process, stage after stage on each micro-batch (copies of its inputs, no grad); each of
    this rank's stages' outputs in the run (``seen``, by ``(stage, chunk)``) is compared with it,
    so the first stage that differs names the boundary where the run went wrong. With ``model``
    (the last rank, ``inputs`` in the model's order) the unsplit model also runs on each
    micro-batch alone: if that differs from the model on the whole batch, the model is not
    batch-independent and micro-batching changes its answer (``microbatched``); if the split run
    here differs from it, the split itself computes something else (``split_here``)."""
    import torch

    def cut(values: tuple, c: int) -> tuple:
        return tuple(t.tensor_split(microbatches)[c] if isinstance(t, torch.Tensor) and t.dim() else t
                     for t in values)

    res: dict[str, Any] = {"stage_outputs": {}}
    chunks = [cut(xs, c) for c in range(microbatches)]
    finals = []
    with torch.no_grad():
        for c, cur in enumerate(chunks):
            for s, mod in enumerate(modules):
                got = mod(*(v.detach().clone() if isinstance(v, torch.Tensor) else v for v in cur))
                cur = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                if (s, c) in seen:
                    ok, diff = _close(seen[s, c], cur)
                    was = res["stage_outputs"].setdefault(str(s), {"allclose": True, "max_diff": 0.0})
                    was["allclose"] &= ok
                    was["max_diff"] = max(was["max_diff"], diff)
            finals.append(cur)
        if model is not None:
            alone = torch.cat([head(model(*cut(inputs, c))) for c in range(microbatches)])
            ok, diff = _close(alone, head(model(*inputs)))
            res["microbatched"] = {"allclose": ok, "max_diff": diff}
            ok, diff = _close(torch.cat([head(f) for f in finals]), alone)
            res["split_here"] = {"allclose": ok, "max_diff": diff}
    return res


# -- launching ---------------------------------------------------------------------------------
def torchrun_commands(script: str | Path, stages: int, *, nodes: int = 1, port: int | None = None,
                      extra: Sequence[str] = ()) -> list[list[str]]:
    """The torchrun command of each node (loopback rendezvous on ``port``)."""
    if nodes < 1 or stages % nodes:
        raise UsageError(f"{stages} stages do not split evenly over {nodes} node(s)")
    port = port or free_port()
    return [[sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(r),
             "--nproc-per-node", str(stages // nodes), "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
             str(script), *extra] for r in range(nodes)]


def launch(plan_path: str | Path, *, nodes: int = 1, steps: int = 3, warmup: int = WARMUP, check: bool = False,
           threads: int = 1, timeout: float = 300.0, device: str = "cpu") -> dict[str, Any]:
    """Run the plan's script under torchrun here and gather the ranks' figures.

    ``nodes > 1`` starts that many torchrun "nodes" on loopback (static rendezvous at
    127.0.0.1 on a free port), each with ``stages / nodes`` processes. The whole run is bounded
    by ``timeout`` seconds; a stuck or failed run is one `GraphError` line with the failing
    rank's last message.
    """
    plan_path = Path(plan_path)
    plan = json.loads(plan_path.read_text())
    script = plan_path.with_name("run_pipeline.py")
    if not script.exists():
        raise UsageError(f"no run_pipeline.py beside {plan_path}: write the plan with PipelinePlan.write")
    for name, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("threads", threads, 1), ("nodes", nodes, 1)):
        if int(value) != value or value < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {value}")
    p = int(plan.get("ranks", plan["stages"]))
    if device == "cuda":
        check_resources(p, device)
    with tempfile.TemporaryDirectory(prefix="devplace-torchrun-") as out:
        extra = ["--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads), "--out", out,
                 "--device", device, "--timeout", str(max(30.0, timeout))] + (["--check"] if check else [])
        cmds = torchrun_commands(script, p, nodes=nodes, extra=extra)
        run_ranks(cmds, timeout=timeout, threads=threads, schedule=plan["schedule"])
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(p)]
    return _gather(plan, ranks, cmds, nodes)


def run_ranks(cmds: Sequence[Sequence[str]], *, timeout: float, threads: int = 1, schedule: str | None = None) -> None:
    """Run the torchrun commands ``cmds`` (one per node) here, within ``timeout`` seconds, the
    ranks seeing this process's import path and ``threads`` threads each. A stuck or failed run
    is one `GraphError` line with the failing rank's last message (and, for a ``schedule``, the
    way out where one is known)."""
    # the ranks import what this process can (a model module on a path a notebook added)
    path = os.pathsep.join(dict.fromkeys([os.path.abspath(x or ".") for x in sys.path] +
                                         [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    logs = [tempfile.TemporaryFile() for _ in cmds]
    procs = [subprocess.Popen(list(c), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
             for c, log in zip(cmds, logs)]
    deadline = time.monotonic() + timeout
    try:
        for pr in procs:
            pr.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(procs)
        raise GraphError(f"torchrun did not finish within {timeout:.0f} s (a stage stuck or a slow machine); "
                         "raise the timeout") from None
    finally:
        _stop(procs)
    texts = read_logs(logs)
    if any(pr.returncode for pr in procs):
        why = rank_error(texts)
        raise GraphError(f"torchrun failed: {_with_fix(why, schedule) if schedule else why}")


def _with_fix(why: str, schedule: str) -> str:
    """A rank's error, with the way out where one is known: torch's zero-bubble schedules run
    each stage's backward as two passes over its graph, which some splits break (T5 under
    ZB-V, `benchmarks/schedules/README.md`) where the one-pass backward of the others runs.

    >>> why = "RuntimeError: Trying to backward through the graph a second time"
    >>> _with_fix(why, "zbv").endswith("plan it under 1f1b or interleaved-1f1b)"), _with_fix(why, "1f1b") == why
    (True, True)
    """
    from ..schedules.simulate import spec

    if spec(schedule).split_backward and "backward through the graph a second time" in why:
        return f"{why} (torch's split backward fails at this split: plan it under 1f1b or interleaved-1f1b)"
    return why


def _mean(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(sum(values) / len(values))


def _stop(procs: list) -> None:
    for pr in procs:
        if pr.poll() is None:
            try:
                os.killpg(pr.pid, signal.SIGTERM)
                pr.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(pr.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def replay_measured(plan: dict, cpu: dict[str, float], overhead: float | None = None) -> float | None:
    """The schedule's replay with the run's own least CPU time of every stage and action kind
    (plus the runtime's measured ``overhead`` per message a pass exchanges with another rank,
    as the forecast prices it), no transfers: the step a machine with one free core per rank
    would take (a wall-clock step on a shared machine also holds the other processes' time)."""
    from ..schedules.simulate import simulate

    n = int(plan["stages"])
    f = [cpu.get(f"{s}:F", 0.0) for s in range(n)]
    i = [cpu.get(f"{s}:I", 0.0) for s in range(n)]
    w = [cpu.get(f"{s}:W", 0.0) for s in range(n)]
    b = [cpu.get(f"{s}:B", i[s] + w[s]) for s in range(n)]
    times = {"F": f, "B": b, "I": i, "W": w} if plan["training"] else {"F": f}
    try:
        return simulate(plan["schedule"], int(plan.get("ranks", n)), int(plan["microbatches"]), times,
                        per_rank=int(plan.get("stages_per_rank", 1)), training=bool(plan["training"]),
                        message_ms=overhead or 0.0).step_ms
    except UsageError:
        return None


def wall_price(plan: dict, cpu: dict[str, float], step_ms: float) -> float | None:
    """The price per message a forward or backward (or input-gradient) pass exchanges with
    another rank at which the replay of the run's CPU times (`replay_measured`, with that price)
    takes the run's wall-clock step ``step_ms``: what a message costs its pass on the wall clock
    beyond the pass's own CPU time (the runtime's CPU time, a late receive's wait, the ranks'
    interference). 0 when the replay without it already takes as long; None for one stage (no
    messages) or a schedule the replay refuses. The replay is monotone in the price, so a
    bisection finds it.

    >>> plan = {"stages": 2, "ranks": 2, "schedule": "gpipe", "microbatches": 2, "training": True}
    >>> cpu = {"0:F": 1.0, "0:B": 2.0, "1:F": 1.0, "1:B": 2.0}
    >>> replay_measured(plan, cpu)   # F F, then B B on each rank, one pass apart
    9.0
    >>> round(wall_price(plan, cpu, 12.0), 6)   # 9 + 6 passes on the critical path x 0.5
    0.5
    >>> wall_price(plan, cpu, 7.0), wall_price({**plan, "stages": 1, "ranks": 1}, cpu, 12.0)
    (0.0, None)
    """
    unpriced = replay_measured(plan, cpu, 0.0) if int(plan["stages"]) > 1 else None
    if unpriced is None:
        return None
    if unpriced >= step_ms:
        return 0.0
    lo, hi = 0.0, 1.0
    while replay_measured(plan, cpu, hi) < step_ms:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-6 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if replay_measured(plan, cpu, mid) < step_ms else (lo, mid)
    return (lo + hi) / 2


def _gather(plan: dict, ranks: list[dict], cmds: list[list[str]], nodes: int) -> dict[str, Any]:
    n_steps = len(ranks[0]["steps"])
    steps_ms = [1e3 * (max(r["steps"][i][1] for r in ranks) - min(r["steps"][i][0] for r in ranks))
                for i in range(n_steps)]
    # the least CPU time of each stage's actions: interference only ever adds CPU time
    cpu = {key: ms for r in ranks for key, ms in r["cpu_ms"].items()}
    n_stages = int(plan["stages"])
    overhead = _mean([r.get("action_overhead_ms") for r in ranks])
    fwd = [cpu.get(f"{s}:F", 0.0) for s in range(n_stages)]
    inp = [cpu.get(f"{s}:I") for s in range(n_stages)]
    wgt = [cpu.get(f"{s}:W") for s in range(n_stages)]
    bwd = [cpu[f"{s}:B"] if f"{s}:B" in cpu else cpu.get(f"{s}:I", 0.0) + cpu.get(f"{s}:W", 0.0)
           for s in range(n_stages)]
    out: dict[str, Any] = {
        "stages": n_stages, "ranks": len(ranks), "nodes": nodes, "stage_input_cpu_ms": inp,
        "stage_weight_cpu_ms": wgt,
        "events": [r["events"] for r in ranks], "hosts": sorted({r["host"] for r in ranks}),
        "backend": ranks[0]["backend"], "schedule": plan["schedule"], "microbatches": plan["microbatches"],
        "step_ms": float(statistics.median(steps_ms)), "steps_ms": steps_ms,
        "stage_forward_cpu_ms": fwd, "stage_backward_cpu_ms": bwd,
        "stage_cpu_ms": [f + b for f, b in zip(fwd, bwd)], "action_overhead_ms": overhead,
        "cpu_ms": cpu, "step_cpu_replay_ms": replay_measured(plan, cpu, overhead),
        "action_wall_ms": None if str(ranks[0].get("device", "cpu")).startswith("cuda") else
        wall_price(plan, cpu, float(statistics.median(steps_ms))),
        "loss": next((r["loss"] for r in ranks if r["loss"] is not None), None),
        "param_bytes": [r["param_bytes"] for r in ranks],
        "activation_peak_bytes": [r["activation_peak_bytes"] for r in ranks],
        "recompute": sorted(s for r in ranks for s in r.get("recompute", [])),
        "recompute_transient_bytes": [r.get("recompute_transient_bytes", 0) for r in ranks],
        # measured peak: parameters, their gradients when training, the saved activations' high-water mark
        # (and a recomputing stage's activations during its backward, measured apart)
        "peak_memory": [r["param_bytes"] + (r["grad_bytes"] if plan["training"] else 0) + r["activation_peak_bytes"]
                        + r.get("recompute_transient_bytes", 0) for r in ranks],
        "commands": [" ".join(c[1:]).replace("-m torch.distributed.run", "torchrun") for c in cmds],
    }
    if all("check" in r for r in ranks):
        checks = [r["check"] for r in ranks]
        holder = next((c for r, c in zip(ranks, checks) if n_stages - 1 in r.get("stages", [])), checks[-1])
        out["check"] = {"outputs_allclose": holder.get("outputs_allclose"),
                        "max_output_diff": holder.get("max_output_diff")}
        if plan["training"]:
            out["check"].update(grads_allclose=all(c.get("grads_allclose") for c in checks),
                                max_grad_diff=max(c.get("max_grad_diff", 0.0) for c in checks),
                                parameters_checked=sum(c.get("parameters_checked", 0) for c in checks))
        # as built, before rank 0's model was handed to the others (`same_on_every_rank`)
        out["check"]["built_alike"] = len({c.get("model_digest") for c in checks}) == 1
        stage_outputs = {int(s): v for c in checks for s, v in c.get("stage_outputs", {}).items()}
        out["check"]["stage_outputs"] = [stage_outputs.get(s) for s in range(n_stages)]
        for key in ("microbatched", "split_here"):
            if key in holder:
                out["check"][key] = holder[key]
        failure = check_failure(plan, out["check"])
        out["check"].update(passed=failure is None, failure=failure)
    return out


def check_failure(plan: dict, check: dict[str, Any]) -> str | None:
    """One line saying what differs from the unsplit model, and where, or None when the check
    passed: the outputs (the first stage whose outputs in the run differ from the same stages
    run in one process, else whether micro-batching or the split itself changes the answer) and
    the gradients. No output or no parameter gradient compared is a failure too: a check that
    compared nothing proves nothing.

    >>> plan = {"stages": 2, "training": True, "split_points": ["blocks.2"]}
    >>> check = {"outputs_allclose": False, "max_output_diff": 5.8, "grads_allclose": False, "max_grad_diff": 0.017,
    ...          "parameters_checked": 9, "stage_outputs": [{"allclose": True, "max_diff": 0.0},
    ...                                                       {"allclose": False, "max_diff": 5.8}]}
    >>> check_failure(plan, check)
    'check failed: outputs differ from the unsplit model by up to 5.8 (first at stage 1, which begins at blocks.2), parameter gradients by up to 0.017'
    >>> check_failure(plan, {**check, "outputs_allclose": True, "grads_allclose": True}) is None
    True
    """
    parts = []
    if check.get("outputs_allclose") is not True:
        diff = check.get("max_output_diff")
        where = ""
        first = next((s for s, v in enumerate(check.get("stage_outputs") or []) if v and not v["allclose"]), None)
        if first is not None:
            points = plan.get("split_points") or []
            where = (f" (first at stage {first}, which begins at {points[first - 1]})" if 0 < first <= len(points)
                     else f" (first at stage {first}, the first stage)")
        elif not (check.get("microbatched") or {"allclose": True})["allclose"]:
            where = (f" (every stage computes what it computes in one process; the model itself on "
                     f"{plan.get('microbatches', '?')} micro-batches of {plan.get('microbatch', '?')} differs from it on the "
                     f"whole batch by up to {check['microbatched']['max_diff']:.3g}: its computation is not "
                     "batch-independent, so micro-batching changes its answer)")
        elif not (check.get("split_here") or {"allclose": True})["allclose"]:
            where = (" (the split run stage after stage in one process differs too, by up to "
                     f"{check['split_here']['max_diff']:.3g}: the split itself computes something else)")
        parts.append("no output to compare" if diff is None else
                     f"outputs differ from the unsplit model by up to {diff:.3g}{where}")
    if plan.get("training"):
        if not check.get("parameters_checked"):
            parts.append("no parameter gradient compared")
        elif check.get("grads_allclose") is not True:
            parts.append(f"parameter gradients by up to {check.get('max_grad_diff', float('nan')):.3g}")
    return "check failed: " + ", ".join(parts) if parts else None
