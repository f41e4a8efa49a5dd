"""Run a model over data, pipeline and tensor parallelism at once, on torch's own engines.

Problem: ``dp x pp x tp`` processes train one model so that its outputs and every parameter
gradient equal the unsplit model's. Each rank, launched by torchrun (`torchrun.run_ranks`, the
pipeline runner's launcher), does what a practitioner's trainer does with torch:

* ``init_device_mesh`` lays the ranks out as a ``(dp, pp, tp)`` mesh (rank
  ``(d pp + p) tp + k`` is data replica ``d``, stage ``p``, tensor shard ``k``);
* the model is exported and cut into ``pp`` stages by the project's own splitter (the capture's
  exported-graph route, `capture.exported_graph` and `capture.fx_split`), after the column-then-row
  groups found on that graph (`tensor_parallel.find`) were made module calls with shape-free
  views (`tensor_parallel.prepare`);
* ``parallelize_module`` splits each stage's groups over the ``tp`` sub-mesh with
  ``ColwiseParallel`` and ``RowwiseParallel`` (local tensors between them, one all-reduce per row
  module in the forward and per column group in the backward);
* ``DistributedDataParallel`` over the ``dp`` sub-mesh averages the gradients (after
  ``_pre_dp_module_transform``, which torch provides to compose tensor parallelism with DDP);
* a ``PipelineStage`` over the ``pp`` sub-mesh and torch's ``Schedule1F1B`` (or ``ScheduleGPipe``)
  move the micro-batches.

gloo on CPU, NCCL on GPUs: the same code. With ``check`` each rank gathers its tensor shards'
gradients (all-gather over ``tp``) and compares them, and the last stage its outputs, with the
unsplit model trained on the whole batch in the same process.

Complexity: a process start (importing torch) and one export per rank, then the steps.

Example
-------
>>> run = launch("devplace_lite.zoo.external:llama", dp=2, pp=2, tp=2, check=True)  # doctest: +SKIP
>>> run["check"]["passed"], run["check"]["parameters_checked"]                       # doctest: +SKIP
(True, 39)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import GraphError, UsageError

_SCRIPT = """import sys
from devplace_lite.pipeline.mesh_run import main
sys.exit(main())
"""


def blocks(model: Any) -> tuple[str, int]:
    """The FQN of the model's longest ``nn.ModuleList`` (its layers) and its length.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.ReLU()] * 3), torch.nn.ModuleList([torch.nn.Tanh()]))
    >>> blocks(net)
    ('0', 3)
    """
    from torch import nn

    lists = [(name, len(m)) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise GraphError(f"{type(model).__name__} holds no nn.ModuleList of layers to cut into stages")
    return max(lists, key=lambda x: x[1])


def even_points(model: Any, stages: int) -> list[str]:
    """Split points of ``stages`` stages holding equal numbers of the model's layers (`blocks`).

    >>> import torch
    >>> even_points(torch.nn.Sequential(torch.nn.ModuleList([torch.nn.ReLU()] * 4)), 2)
    ['0.2']
    """
    name, n = blocks(model)
    if n % stages:
        raise UsageError(f"{n} layers of {name} do not split evenly into {stages} stages")
    return [f"{name}.{s * n // stages}" for s in range(1, stages)]


def tp_stages(model: Any, micro: tuple, points: Sequence[str], tp: int) -> tuple[Any, Any]:
    """The model's pipeline stages, ready for ``parallelize_module``, and the groups found:
    ``(Split, TensorParallelPlan)``. Raises `UsageError` when degree ``tp`` does not split the
    groups found, in one line."""
    from .capture import exported_graph, fx_split
    from .tensor_parallel import Refused, find, prepare

    gm = exported_graph(model, micro)
    plan = find(gm)
    why = plan.why_not(tp)
    if why:
        raise UsageError(why)
    try:
        prepare(gm, plan)
    except Refused as e:
        raise UsageError(str(e)) from None
    split, _ = fx_split(gm, micro, points, replicate_parameters=True)
    return split, plan


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one rank of a dp x pp x tp run (run me under torchrun)")
    p.add_argument("--model", required=True)
    p.add_argument("--dp", type=int, required=True)
    p.add_argument("--pp", type=int, required=True)
    p.add_argument("--tp", type=int, required=True)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--points", default=None, help="split points, comma-separated (default: equal layers)")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--check", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=300.0)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """What each torchrun rank runs (see the module docstring)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    import torch.distributed.pipelining as pipelining
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.nn.parallel import DistributedDataParallel

    from ..schedules.simulate import SCHEDULES
    from ..zoo import load
    from .capture import tied_parameters, to_device, without_cache
    from .check import head
    from .rank import _example, _instrument, same_on_every_rank, stage_shapes

    a = _args(argv)
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=a.timeout))
    try:
        mesh = init_device_mesh(device.type, (a.dp, a.pp, a.tp), mesh_dim_names=("dp", "pp", "tp"))
        d, p, k = (mesh[x].get_local_rank() for x in ("dp", "pp", "tp"))
        model, inputs = load(a.model, batch=a.batch, seed=a.seed)
        without_cache(model)
        inputs = same_on_every_rank(model, inputs, device)
        model, inputs = model.cpu(), tuple(t.cpu() for t in inputs)
        per = a.batch // a.dp
        mb = per // a.microbatches
        micro = tuple(t[:mb] for t in inputs)
        points = even_points(model, a.pp) if a.points is None else [x for x in a.points.split(",") if x]
        split, plan = tp_stages(model, micro, points, a.tp)
        if split.num_stages != a.pp:
            raise UsageError(f"split points {points} give {split.num_stages} stages, not {a.pp}")
        styles = plan.styles()
        # a weight tied across stages (an LM head reading the token embedding): every stage holding
        # a copy gets the sum of the copies' gradients, over the pipeline group
        named = dict(model.named_parameters(remove_duplicate=False))
        tied = [[n for n, q in named.items() if q is named[fqn]] for fqn in tied_parameters(model, split.stages)]
        ins, outs = stage_shapes(split.stages, micro, True)[p]
        mod = to_device(split.stages[p], device)
        mine = {}
        for fqn, style in styles.items():
            try:
                mod.get_submodule(fqn)
            except AttributeError:
                continue
            mine[fqn] = ColwiseParallel() if style == "colwise" else RowwiseParallel()
        # the dimension each shard splits: a column module's weight and bias by output features, a
        # row module's weight by input features (its bias is added once, whole)
        shards = {f"{fqn}.{n}": 0 if styles[fqn] == "colwise" else 1 if n == "weight" else None
                  for fqn in mine for n, _ in mod.get_submodule(fqn).named_parameters()}
        parallelize_module(mod, mesh["tp"], mine)
        local_shards(mod)
        local = dict(mod.named_parameters())
        partial = [local[n] for n in plan.shared() if n in local]
        ddp = DistributedDataParallel(mod, process_group=mesh["dp"].get_group())
        stage = PipelineStage(ddp, p, a.pp, device, input_args=tuple(_example(m, device) for m in ins),
                              output_args=tuple(_example(m, device) for m in outs), group=mesh["pp"].get_group())
        _instrument(stage, [], cuda)  # gloo sends contiguous tensors only
        with torch.no_grad():
            shape = head(model(*inputs)).shape
        target = torch.randn(shape, generator=torch.Generator().manual_seed(a.seed + 1))
        rows = slice(d * per, (d + 1) * per)
        xs = tuple(t[rows].to(device) for t in inputs)
        y = target[rows].to(device)
        schedule = getattr(pipelining, SCHEDULES[a.schedule].torch_class)
        sched = schedule(stage, a.microbatches, loss_fn=lambda out, t: F.mse_loss(head(out), t))
        first, last = p == 0, p == a.pp - 1
        cpu, wall, out = [], [], None
        for _ in range(a.steps):
            for q in local.values():
                q.grad = None
            dist.barrier()
            c0, w0 = time.thread_time(), time.perf_counter()
            out = sched.step(*(xs if first else ()), target=y if last else None)
            for q in partial:  # read whole by a shard's heads only: each holds a part of the gradient
                dist.all_reduce(q.grad, group=mesh["tp"].get_group())
            for names in tied:
                sum_copies([local[n] for n in names if n in local], named[names[0]], mesh["pp"].get_group(), device)
            cpu.append(1e3 * (time.thread_time() - c0))
            dist.barrier()  # the step ends when every rank's has
            wall.append(1e3 * (time.perf_counter() - w0))
        rec: dict[str, Any] = {"rank": dist.get_rank(), "coords": [d, p, k], "step_cpu_ms": cpu, "step_wall_ms": wall,
                               "tp_modules": sorted(mine), "backend": dist.get_backend()}
        if a.check:
            rec["check"] = _check(model, inputs, target, local, shards, mesh["tp"].get_group(), a.tp,
                                  (out, rows) if last else None)
        Path(a.out, f"rank{dist.get_rank()}.json").write_text(json.dumps(rec))
    finally:
        dist.destroy_process_group()
    return 0


def sum_copies(copies: Sequence[Any], like: Any, group: Any, device: Any) -> None:
    """Give every copy of a weight replicated on several stages (``copies``: this rank's, maybe
    none; ``like``: the model's, for the shape) the sum of all copies' gradients over ``group``.
    Every rank of the group calls it, holding a copy or not (a collective)."""
    import torch
    import torch.distributed as dist

    grad = torch.zeros(like.shape, dtype=like.dtype, device=device)
    for q in {id(q): q for q in copies}.values():
        if q.grad is not None:
            grad += q.grad
    dist.all_reduce(grad, group=group)
    for q in copies:
        q.grad = grad.clone()


def local_shards(module: Any) -> None:
    """Hold each DTensor parameter of ``module`` (a tensor-parallel shard) as a plain local
    ``nn.Parameter`` between forwards, wrapped back into a DTensor (``DTensor.from_local``, so
    its gradient reaches the local parameter) for the duration of its module's forward: what DDP
    reduces and what a pipeline stage scales over micro-batches are then ordinary parameters.

    torch's own ``tensor.parallel.ddp._pre_dp_module_transform`` swaps the DTensors in but, in
    torch 2.13, not out: after the first forward the shards have left ``parameters()``, and a
    pipeline stage's division of the gradients by the number of micro-batches misses them
    (measured here: every column and row weight's gradient off by up to 0.016 on Llama at
    ``tp = 2``, two micro-batches).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Linear(2, 2)
    >>> local_shards(net)   # no DTensor parameter: nothing changes
    >>> sorted(n for n, _ in net.named_parameters())
    ['bias', 'weight']
    """
    from torch import nn
    from torch.distributed.tensor import DTensor

    for sub in module.modules():
        specs = {n: (p.device_mesh, p.placements, p.shape, p.stride())
                 for n, p in sub.named_parameters(recurse=False) if isinstance(p, DTensor)}
        if not specs:
            continue
        held = {n: nn.Parameter(sub._parameters[n]._local_tensor.detach().clone(), requires_grad=p.requires_grad)
                for n, p in list(sub._parameters.items()) if n in specs}
        sub._parameters.update(held)

        def wrap(m: Any, _args: Any, held: dict = held, specs: dict = specs) -> None:
            for n, q in held.items():
                mesh, placements, shape, stride = specs[n]
                del m._parameters[n]
                setattr(m, n, DTensor.from_local(q, mesh, placements, run_check=False, shape=shape, stride=stride))

        def unwrap(m: Any, _args: Any, _out: Any, held: dict = held) -> None:
            for n, q in held.items():
                delattr(m, n)
                m._parameters[n] = q

        sub.register_forward_pre_hook(wrap)
        sub.register_forward_hook(unwrap)


def _check(model: Any, inputs: tuple, target: Any, local: dict[str, Any], shards: dict[str, int | None], group: Any,
           tp: int, last: tuple | None) -> dict[str, Any]:
    """This rank's gradients (of its parameters ``local``, by name), its tensor shards gathered
    along their split dimension (``shards``), and (last stage) its outputs, against the unsplit
    model trained on the whole batch here."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from .check import _close, head

    model.zero_grad(set_to_none=True)
    ref = head(model(*inputs))
    F.mse_loss(ref, target).backward()
    params = dict(model.named_parameters(remove_duplicate=False))
    res: dict[str, Any] = {}
    if last is not None:
        out, rows = last
        res["outputs_allclose"], res["max_output_diff"] = _close(head(out), ref[rows])
    ok, worst, n, sharded, where = True, 0.0, 0, 0, None
    for name, q in local.items():
        g = q.grad.detach() if q.grad is not None else None
        if g is None or name not in params:
            ok = False
            continue
        dim = shards.get(name)
        if dim is not None:  # a tensor shard: gather its peers' along the split dimension
            parts = [torch.empty_like(g) for _ in range(tp)]
            dist.all_gather(parts, g.contiguous(), group=group)
            g = torch.cat(parts, dim=dim)
            sharded += 1
        same, diff = _close(g.cpu(), params[name].grad)
        ok &= same
        if diff >= worst:
            worst, where = diff, name
        n += 1
    res.update(grads_allclose=ok and n > 0, max_grad_diff=worst, worst_parameter=where, parameters_checked=n,
               sharded_checked=sharded)
    return res


def launch(model: str, *, dp: int, pp: int, tp: int, microbatches: int = 2, batch: int | None = None, seed: int = 0,
           points: Sequence[str] | None = None, schedule: str = "1f1b", steps: int = 1, check: bool = True,
           timeout: float = 600.0, device: str = "cpu") -> dict[str, Any]:
    """Run model spec ``model`` (`devplace_lite.zoo.load`) on ``dp x pp x tp`` processes here
    under torchrun and gather what the ranks report.

    Parameters
    ----------
    model : str
        A model spec, e.g. ``devplace_lite.zoo.external:llama``.
    dp, pp, tp : int
        Data-parallel replicas, pipeline stages (equal numbers of layers each), tensor shards.
    microbatches : int
        Micro-batches per step and replica (``1f1b``: at least ``pp``).
    batch : int, optional
        The whole batch (default ``dp x microbatches``, one sample per micro-batch).
    points : sequence of str, optional
        Module FQNs where stages 1.. begin (a plan's split points); default equal numbers of layers.
    schedule : str
        ``"1f1b"`` or ``"gpipe"`` (one stage per rank).
    seed, steps, device : the model's seed, the steps run, ``"cpu"`` (gloo) or ``"cuda"`` (NCCL).
    check : bool
        Compare outputs and every gradient with the unsplit model (``check["passed"]``).
    timeout : float
        Seconds the whole run may take.

    Returns
    -------
    dict
        ``ranks`` (each rank's record: mesh coordinates, CPU and wall time per step, its
        tensor-parallel modules), ``step_wall_ms`` (the median step, slowest rank, wall clock),
        ``commands``, and with ``check`` the ``check`` summary.

    Raises
    ------
    UsageError
        Degrees that do not fit the model or the batch.
    GraphError
        A rank failed or the run outlived ``timeout`` (one line).
    """
    from ..schedules.simulate import spec
    from ..zoo import load
    from .capture import without_cache
    from .torchrun import run_ranks, torchrun_commands

    for name, v in (("dp", dp), ("pp", pp), ("tp", tp), ("microbatches", microbatches), ("steps", steps)):
        if int(v) != v or v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v!r}")
    batch = dp * microbatches if batch is None else batch
    if batch % (dp * microbatches):
        raise UsageError(f"batch {batch} does not split into {dp} replicas x {microbatches} micro-batches")
    if not (spec(schedule).fixed and spec(schedule).per_rank == 1):
        raise UsageError(f"{schedule} puts several stages on a rank; this runner runs gpipe or 1f1b (one stage a rank)")
    if schedule == "1f1b" and microbatches < pp:
        raise UsageError(f"1f1b needs at least as many micro-batches as stages ({microbatches} < {pp})")
    if points is not None and len(points) != pp - 1:
        raise UsageError(f"{pp} stages need {pp - 1} split point(s), got {len(points)}")
    built, inputs = load(model, batch=batch, seed=seed)  # refuse here, in one line, what every rank would
    without_cache(built)
    cut = even_points(built, pp) if points is None else list(points)
    split, _ = tp_stages(built, tuple(t[: batch // (dp * microbatches)] for t in inputs), cut, tp)
    if split.num_stages != pp:
        raise UsageError(f"split points {cut} give {split.num_stages} stages, not {pp}")
    world = dp * pp * tp
    with tempfile.TemporaryDirectory(prefix="devplace-mesh-") as out:
        script = Path(out, "run_mesh.py")
        script.write_text(_SCRIPT)
        extra = ["--model", model, "--dp", str(dp), "--pp", str(pp), "--tp", str(tp), "--microbatches",
                 str(microbatches), "--batch", str(batch), "--seed", str(seed), "--steps", str(steps),
                 "--schedule", schedule, *(["--points", ",".join(points)] if points is not None else []),
                 "--device", device, "--out", out, "--timeout", str(max(30.0, timeout))] + (["--check"] if check else [])
        cmds = torchrun_commands(script, world, extra=extra)
        run_ranks(cmds, timeout=timeout)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    # a step's wall time: the slowest rank's, its median over the steps
    walls = [max(r["step_wall_ms"][i] for r in ranks) for i in range(steps)]
    res: dict[str, Any] = {"ranks": ranks, "commands": [" ".join(c[1:]) for c in cmds],
                           "step_wall_ms": sorted(walls)[len(walls) // 2]}
    if check:
        checks = [r["check"] for r in ranks]
        outs = [c for c in checks if "outputs_allclose" in c]
        res["check"] = {
            "outputs_allclose": bool(outs) and all(c["outputs_allclose"] for c in outs),
            "max_output_diff": max((c["max_output_diff"] for c in outs), default=None),
            "grads_allclose": all(c["grads_allclose"] for c in checks),
            "max_grad_diff": max(c["max_grad_diff"] for c in checks),
            "parameters_checked": sum(c["parameters_checked"] for r, c in zip(ranks, checks) if r["coords"][0] == 0
                                      and r["coords"][2] == 0),
            "sharded_checked": sum(c["sharded_checked"] for r, c in zip(ranks, checks) if r["coords"][0] == 0
                                   and r["coords"][2] == 0),
        }
        res["check"]["passed"] = res["check"]["outputs_allclose"] and res["check"]["grads_allclose"]
    return res
