"""One rank of a pipeline run: build this rank's stages of a plan and run its schedule, measured.

Problem
-------
Under ``torchrun`` every rank starts a fresh Python process, builds the whole model from the
plan's spec and must end up holding exactly its own stages of the plan's split (one, or
several for the interleaved and V schedules, placed as the plan's ``stage_to_rank`` says, which
is torch's own placement), talking to its neighbours through the plan's schedule class (any of
torch 2.13's seven, `devplace_lite.schedules.simulate.SCHEDULES`), and measure what it does
without the measuring changing it.

How
---
`main` (what ``run_pipeline.py``, written by `devplace_lite.pipeline.script`, calls on every
rank) joins the process group (gloo on CPU, NCCL on GPUs: the same code; on one H100,
2026-11-27, a one-rank NCCL run with ``--check`` passed; no run over two or more GPUs has been
made), builds the model and hands rank 0's weights and inputs to every rank
(`same_on_every_rank`), then builds its stages the way the capture did:

* torch's route: ``torch.distributed.pipelining.pipeline`` with the capture's split policy
  (`devplace_lite.pipeline.torch_split.split_policy`), which places split markers exactly
  where ``split_spec`` would and also hands model inputs that a later stage reads to the first
  stage (the schedules feed inputs to the first stage only);
* devplace's splitter (the capture's other routes): the rank traces or exports the model again
  and cuts it to the same nodes (`own_split`), each stage a manual ``PipelineStage`` with its
  shapes given (`stage_shapes`).

A stage the plan marks in ``recompute`` runs each of its segments under checkpoint
(`devplace_lite.pipeline.activations.Recompute`). Every action a stage runs is timed on the
rank's thread (`_instrument`, which also hands on contiguous tensors, as gloo needs); saved
activations are counted in the first step only (the counting hooks cost CPU time); replicated
weights' gradients are summed (`_sum_tied`); with ``--check`` the outputs and gradients are
compared with the unsplit model's (`devplace_lite.pipeline.check`). The rank writes its figures
as JSON, which `devplace_lite.pipeline.run_figures` gathers.

Exactness: the run is torch's own engine on the plan's split; the figures are measurements
(`WARMUP` unmeasured steps first). Complexity: a process start (importing torch) and one export
(or trace) per rank, then ``warmup + steps`` steps of the schedule.

Reference: ``torch.distributed.pipelining`` (``pipeline``, ``PipelineStage``, the schedules),
``torchrun`` (torch 2.13).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import GraphError, UsageError
from ..schedules.simulate import message_ends
from .activations import ActivationMeter, Recompute
from .check import _check, _check_stages, head, model_digest
from .run_figures import _overhead, summary

#: Unmeasured first steps of a run: glibc hands a process's first large buffers back and forth
#: with the kernel (page faults) until its allocation thresholds have grown. Measured here, one
#: warm-up step left the next steps at up to 5.5x the later ones (DistilBERT 104, 83, 66 ms,
#: then 62; ShuffleNet 662, 161, 147, then 120), with 125-3,440 minor faults a step, none later.
WARMUP = 3


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


def _example(meta: tuple, device: Any) -> Any:
    import torch

    size, dtype, grad = meta
    return torch.empty(size, dtype=dtype, device=device).requires_grad_(grad)


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
    from .capture import HOW_EXPORT_SPLIT, HOW_FX, export_copy, without_cache
    from .torch_split import known_warnings_filtered, split_policy

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
        names, segs = plan.get("segment_names") or [], plan.get("stage_segments") or []
        inner = [[names[i] for i in segs[s][1:]] if s < len(segs) and names else [] for s in range(n_stages)]
        again = [Recompute(st.submod, inner[st.stage_index]) for st in stages
                 if training and recompute[st.stage_index]]
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
