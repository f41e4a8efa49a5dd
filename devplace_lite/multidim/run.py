"""Run a multidimensional plan with torch's own engines and check it against the unsplit model.

Problem: a plan under Piper's model (`devplace_lite.multidim.parallelize`, or stages checked by
`devplace_lite.multidim.evaluate`) says, per pipeline stage, which layers it runs, on how many
data-parallel replicas ``d`` and on how many tensor-parallel devices ``t``. `run_plan` executes
it: ``d * stages * t`` processes meet in a 3-D ``torch.distributed.device_mesh.DeviceMesh``
(dimensions ``dp``, ``pp``, ``tp``); each builds the model from the same seed, keeps its stage's
layers, splits the transformer blocks among its ``tp`` group Megatron-style with
``torch.distributed.tensor.parallel`` (the feed-forward block's first linear column-wise, its
second row-wise: one all-reduce forward and one backward), wraps the stage in
``DistributedDataParallel`` over its ``dp`` group, and hands it to a
``torch.distributed.pipelining.PipelineStage`` over its ``pp`` group, driven by ``ScheduleGPipe``
or ``Schedule1F1B`` over the ``N / d`` micro-batches of its share of the batch. CPU processes
talk through gloo on loopback; the same code takes NCCL and one CUDA device per process
(``device="cuda"``), a path never run here (this machine has no GPU).

The ranks are laid out ``dp``-major and ``tp``-minor (rank ``= (i_dp * stages + i_pp) * t +
i_tp``): a tensor-parallel group, which talks at every layer, sits on adjacent ranks (one
machine under torchrun), the replicas, which talk once a step, across machines.

Exactness: none to prove; the run is checked. With ``check`` the unsplit model runs the whole
batch in this process and every rank's outputs (last stage) and parameter gradients (the
tensor-parallel shards gathered) are compared with it, each with its largest absolute and
relative difference; the mean-squared-error loss of each micro-batch over the micro-batch
count, summed over the micro-batches and averaged over the replicas by DDP, is the whole
batch's mean.

What torch composes and what it refuses (torch 2.13, gloo):

* the mesh's ``pp`` sub-group carries the pipeline's point-to-point sends; a plan whose stages
  differ in ``d`` or ``t`` does not fit one mesh and is refused (UsageError);
* ``PipelineStage`` recognises a DDP-wrapped stage module (``no_sync`` on all but the last
  micro-batch); DDP does not take DTensor parameters, so the tensor-parallel stage goes through
  ``torch.distributed.tensor.parallel.ddp._pre_dp_module_transform`` (local shards as DDP's
  parameters, DTensors rebuilt around each forward), torch's own bridge for TP + DDP;
* DDP's own forward arms its reducer for every micro-batch, on top of PipelineStage arming it
  before the last backward; the first step's bucket rebuild then counts each parameter once
  per micro-batch and fails an internal assert (``rebuilt parameter indices size is not same
  as original model parameters size``): the stage's DDP forward is kept from arming
  (``require_backward_grad_sync = False``), PipelineStage's arming alone reduces the gradients;
* the schedules' ``scale_grads`` divides the gradients of ``stage.submod.parameters()`` after
  the step, which behind the TP + DDP bridge no longer lists the split layers' parameters (they
  are DTensor attributes between forwards) and left their gradients ``micro-batches`` times too
  large: the loss carries the division instead (``scale_grads=False``);
* ``torch.nn.TransformerEncoderLayer`` packs the query, key and value projections in one
  parameter, which a column split would cut across q, k and v: its attention stays replicated
  on the ``tp`` group and only its feed-forward block is split (`megatron_plan`); pass
  ``tp_plan`` to split other blocks.

`chain_model` builds the Piper model of a ``torch.nn.Sequential`` on this CPU (the
calibration): per child the forward plus backward CPU time per sample on one thread, its
parameter bytes, its saved activations per micro-batch, the bytes it hands on, and a ``t = 2``
variant (for the children `megatron_plan` splits: the split linears' time halved plus two
all-reduces of the block's output over the stated bandwidth; the others run whole on each of
the ``t`` devices). Its time per sample is in seconds, so the plan's forecast compares with
what a run measures: the busiest rank's CPU time per sample, inside its stage's actions (the
model's compute and collectives) and in all (with the schedule's bookkeeping and gloo's
threads). On this CPU, beside other loads, the first was 0.8 to 1.6 times the forecast for
data and pipeline parallelism and 3 to 4 times it with tensor parallelism, whose DTensor dispatch on
tensors this small the analytic ``t = 2`` variant does not see
(benchmarks/parallelize/run_plan.md).

Complexity: a process start (importing torch) per rank, then the steps; the check runs the
model once more on the whole batch. Reference: Tarnawski et al., "Piper: Multidimensional
Planner for DNN Parallelization", NeurIPS 2021; Shoeybi et al., "Megatron-LM", 2019.

Example
-------
A ``dp x pp x tp = 2 x 2 x 2`` run of a two-block encoder (eight gloo processes)::

    import torch
    from devplace_lite.multidim import evaluate, Stage
    from devplace_lite.multidim.run import chain_model, encoder_stack, run_plan

    spec = dict(layers=2, width=32, heads=4, ffn=64, features=16)
    x, y = torch.randn(16, 8, 16), torch.randn(16, 8, 16)
    model = chain_model(encoder_stack, spec, x[:2], devices=8, microbatches=4)
    plan = [Stage((0, 1), 2, 2, {0: "vanilla", 1: "vanilla"}),
            Stage((2, 3), 2, 2, {2: "vanilla", 3: "vanilla"})]
    forecast, stages, _ = evaluate(model, plan)
    run = run_plan(stages, encoder_stack, spec, x, y, microbatches=4, forecast=forecast)
    run["check"]["ok"], run["measured_actions_per_sample"], run["forecast_per_sample"]

The planner's own plan runs the same way when its stages share one ``(d, t)``
(``run_plan(parallelize(model), ...)``; a plan that mixes them is refused, see above).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..errors import GraphError, UsageError, rank_error, read_logs
from .model import TMPC, Layer, Model
from .plan import Result, Stage

SCHEDULES = ("gpipe", "1f1b")
#: The default tolerances of the check, for float64 runs (a float32 dp2 x pp2 x tp2 1F1B run here
#: differed by at most 4.8e-7 in outputs and 3e-8 in gradients: pass rtol=1e-4, atol=1e-6).
RTOL, ATOL = 1e-9, 1e-11


# -- the model of the example and the test -------------------------------------------------
def encoder_stack(layers: int = 2, width: int = 32, heads: int = 4, ffn: int = 64, features: int = 16) -> nn.Sequential:
    """A ``torch.nn.Sequential`` of ``layers + 2`` children: a linear embedding of ``features``
    into ``width``, ``layers`` ``torch.nn.TransformerEncoderLayer`` blocks (batch first, no
    dropout, so a run is deterministic) and a linear head back to ``features``.

    Examples
    --------
    >>> m = encoder_stack(layers=2)
    >>> len(m), type(m[1]).__name__
    (4, 'TransformerEncoderLayer')
    """
    blocks = [nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, batch_first=True) for _ in range(layers)]
    return nn.Sequential(nn.Linear(features, width), *blocks, nn.Linear(width, features))


def megatron_plan(block: nn.Module) -> dict[str, Any] | None:
    """The Megatron-style tensor-parallel plan of one child, or None where none applies.

    A ``torch.nn.TransformerEncoderLayer``'s feed-forward block: ``linear1`` column-wise,
    ``linear2`` row-wise (its output all-reduced, its input's gradient all-reduced). Its
    attention packs q, k and v into one parameter and stays replicated.

    Examples
    --------
    >>> sorted(megatron_plan(encoder_stack()[1]))
    ['linear1', 'linear2']
    >>> megatron_plan(nn.Linear(2, 2)) is None
    True
    """
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if isinstance(block, nn.TransformerEncoderLayer):
        return {"linear1": ColwiseParallel(), "linear2": RowwiseParallel()}
    return None


# -- the calibration: Piper's model of a chain, measured here ----------------------------------
def _fwd_bwd_seconds(module: nn.Module, inp: torch.Tensor, repeats: int) -> float:
    """The least CPU time (this thread) of one forward and backward of ``module`` on ``inp``."""
    best = math.inf
    for _ in range(repeats):
        x = inp.detach().requires_grad_(True)
        c0 = time.thread_time()
        out = module(x)
        out.backward(torch.ones_like(out))
        best = min(best, time.thread_time() - c0)
    module.zero_grad(set_to_none=True)
    return best


def _saved_bytes(module: nn.Module, inp: torch.Tensor) -> int:
    """Bytes autograd saves for the backward of one forward of ``module`` (its parameters not
    counted: they are memory ``b``)."""
    own = {q.data_ptr() for q in module.parameters()}
    total = 0

    def pack(x: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if x.data_ptr() not in own:
            total += x.numel() * x.element_size()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        module(inp.detach().requires_grad_(True))
    return total


def _bytes(params: Any) -> int:
    return sum(q.numel() * q.element_size() for q in params)


def chain_model(model_fn: Callable[..., nn.Module] | str, model_kwargs: dict | None, microbatch: torch.Tensor, *,
                devices: int, microbatches: int, memory: float = 2.0 ** 40, bandwidth: float = 1e9,
                tensor_parallel: Sequence[int] = (1, 2), tp_plan: Callable | str = megatron_plan,
                repeats: int = 5, seed: int = 0, dtype: str = "float64") -> Model:
    """Piper's model of a ``torch.nn.Sequential`` chain, measured on this CPU (the calibration).

    Layer ``i`` is child ``i``; edge ``i -> i+1`` carries the child's output bytes per sample.
    Its ``vanilla`` TMPC at ``t = 1``: the least CPU time of a forward and backward on one
    thread over ``repeats`` (per sample), its parameter bytes, memory ``a`` = the bytes autograd
    saves per micro-batch and ``b`` = twice the parameter bytes (weights and gradients). At each
    ``t > 1``: the same for the children ``tp_plan`` does not split (each of the ``t`` devices
    runs them whole), and for those it splits the split submodules' time and parameters
    divided by ``t``, plus a forward and a backward all-reduce of the block's output per sample
    (``2 (t - 1) / t`` of its bytes each, over ``bandwidth``); activations as at ``t = 1`` (an
    upper bound); and, as Piper's inputs state it, the edges' bytes as the syncs of a cut edge.
    Times are in seconds, as the plan's time per sample then is.

    Parameters
    ----------
    model_fn, model_kwargs
        As for `run_plan`.
    microbatch : torch.Tensor
        One micro-batch of inputs (its first dimension: samples).
    devices, microbatches, memory, bandwidth
        Piper's cluster: ``k``, ``N``, bytes per device, bytes per second.
    tensor_parallel : sequence of int
        The degrees to model (1 is always there).
    tp_plan, repeats, seed, dtype
        The split of each child (`megatron_plan`), the timing repeats, the weights' seed and dtype.

    Returns
    -------
    Model

    Raises
    ------
    UsageError
        When the model is not a ``torch.nn.Sequential`` or a value is out of range.

    Examples
    --------
    >>> m = chain_model(encoder_stack, {"layers": 1}, torch.randn(2, 4, 16), devices=4, microbatches=2, repeats=1)
    >>> [sorted(x.tmpcs) for x in m.layers], len(m.edges)
    ([[1, 2], [1, 2], [1, 2]], 2)
    """
    spec = {"model_fn": _ref_name(model_fn), "model_kwargs": dict(model_kwargs or {}), "seed": seed, "dtype": dtype}
    model = _build(spec)
    tp_plan = _load(_ref_name(tp_plan))
    if repeats < 1 or any(int(t) != t or t < 1 for t in tensor_parallel):
        raise UsageError("repeats and tensor-parallel degrees must be positive integers")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank runs; idle intra-op workers also spin on this thread's clock
    try:
        return _chain(model, microbatch.to(getattr(torch, dtype)), tp_plan, devices, microbatches, memory, bandwidth,
                      tensor_parallel, repeats)
    finally:
        torch.set_num_threads(threads)


def _chain(model: nn.Sequential, h: torch.Tensor, tp_plan: Callable, devices: int, microbatches: int, memory: float,
           bandwidth: float, tensor_parallel: Sequence[int], repeats: int) -> Model:
    from .model import check_cluster

    m = h.shape[0]
    out = model(h.detach().requires_grad_(True))  # warm up: the first call of each kernel is slower
    out.backward(torch.ones_like(out))
    model.zero_grad(set_to_none=True)
    layers, edges, prev_bytes = [], [], 0.0
    for i, child in enumerate(model):
        with torch.no_grad():
            out = child(h)
        out_bytes = out.numel() * out.element_size() / m
        p1 = _fwd_bwd_seconds(child, h, repeats) / m
        w1 = float(_bytes(child.parameters()))
        a1 = float(_saved_bytes(child, h))
        ins = {i - 1: 0.0} if i else {}
        outs = {i + 1: 0.0} if i + 1 < len(model) else {}
        tmpcs = {1: (TMPC("vanilla", p1, w1, a1, 2 * w1, ins, outs),)}
        layout = tp_plan(child)
        for t in sorted(set(tensor_parallel) - {1}):  # unsplit: each of the t devices runs it whole
            tmpcs[t] = tmpcs[1]
        if layout:
            subs = [child.get_submodule(name) for name in layout]
            seen: dict[nn.Module, torch.Tensor] = {}
            hooks = [s_.register_forward_pre_hook(lambda mod, args: seen.setdefault(mod, args[0].detach()))
                     for s_ in subs]
            with torch.no_grad():
                child(h)
            for hk in hooks:
                hk.remove()
            split = sum(_fwd_bwd_seconds(s_, seen[s_], repeats) for s_ in subs) / m
            ws = float(sum(_bytes(s_.parameters()) for s_ in subs))
            for t in sorted(set(tensor_parallel) - {1}):
                comm = 2 * 2 * (t - 1) / t * out_bytes / bandwidth
                tmpcs[t] = (TMPC("vanilla", p1 - split * (1 - 1 / t) + comm, w1 - ws * (1 - 1 / t), a1,
                                 2 * (w1 - ws * (1 - 1 / t)), {u: prev_bytes for u in ins},
                                 {v: out_bytes for v in outs}),)
        layers.append(Layer(i, type(child).__name__, tmpcs))
        if i + 1 < len(model):
            edges.append((i, i + 1, out_bytes))
        h, prev_bytes = out, out_bytes
    result = Model(tuple(layers), tuple(edges), devices, memory, bandwidth, microbatches,
                   extra={"calibrated": "CPU seconds per sample, one thread, this machine"})
    check_cluster(result)
    return result


# -- the plan as a mesh --------------------------------------------------------------------
def mesh_of(plan: Result | Sequence[Stage], children: int) -> tuple[int, int, int, list[tuple[int, int]]]:
    """``(d, stages, t, [(first child, end child) per stage])`` of a plan over a chain.

    The model's children are Piper's layers, ids ``0 .. children - 1`` in order; each stage
    must hold a contiguous run of them, the stages in order, all with the same ``d`` and ``t``.

    Raises
    ------
    UsageError
        When the plan has no stage, skips or repeats a child, or mixes degrees.
    """
    stages = list(plan.stages if isinstance(plan, Result) else plan)
    if not stages:
        raise UsageError("the plan has no stage (no plan was found?)")
    bounds, nxt = [], 0
    for i, s in enumerate(stages):
        ids = sorted(s.layers)
        if ids != list(range(nxt, nxt + len(ids))) or not ids:
            raise UsageError(f"stage {i} holds layers {ids}: each stage must run the next contiguous "
                             f"children of the model, from child {nxt}")
        bounds.append((nxt, nxt + len(ids)))
        nxt += len(ids)
    if nxt != children:
        raise UsageError(f"the plan covers {nxt} layers but the model has {children} children")
    degrees = {(s.data_parallel, s.tensor_parallel) for s in stages}
    if len(degrees) != 1:
        raise UsageError(f"the stages mix (data, tensor) parallel degrees {sorted(degrees)}: one device mesh "
                         "needs the same degrees on every stage")
    (d, t), = degrees
    return d, len(stages), t, bounds


# -- one rank --------------------------------------------------------------------------------
def _load(ref: str) -> Callable[..., nn.Module]:
    mod, _, name = ref.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _build(spec: dict) -> nn.Sequential:
    dtype = getattr(torch, spec["dtype"])
    torch.manual_seed(spec["seed"])
    model = _load(spec["model_fn"])(**spec["model_kwargs"])
    if not isinstance(model, nn.Sequential):
        raise UsageError(f"{spec['model_fn']} must return a torch.nn.Sequential, got {type(model).__name__}")
    return model.to(dtype)


def _rank(folder: str) -> None:
    """What every rank runs: ``python -m devplace_lite.multidim.run FOLDER`` with torchrun's
    environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``),
    set by `_launch` or by torchrun itself."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
    from torch.nn.parallel import DistributedDataParallel

    spec = json.loads((Path(folder) / "spec.json").read_text())
    torch.set_num_threads(spec["threads"])
    cuda = spec["device"] == "cuda"
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    from datetime import timedelta

    dist.init_process_group(spec["backend"], timeout=timedelta(seconds=spec["timeout"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    d, p, t = spec["mesh"]
    if world != d * p * t:
        raise UsageError(f"the plan needs {d * p * t} processes, {world} started")
    mesh = init_device_mesh(device.type, (d, p, t), mesh_dim_names=("dp", "pp", "tp"))
    dp, pp, tp = (mesh.get_local_rank(n) for n in ("dp", "pp", "tp"))
    model = _build(spec)
    lo, hi = spec["bounds"][pp]
    mod = nn.Sequential(OrderedDict((str(i), model[i]) for i in range(lo, hi))).to(device)  # global child names
    tp_plan = _load(spec["tp_plan"])
    if t > 1:
        split = 0
        for i in range(lo, hi):
            layout = tp_plan(mod[i - lo])
            if layout:
                parallelize_module(mod[i - lo], mesh["tp"], layout)
                split += 1
        if not split:
            raise UsageError(f"tensor-parallel degree {t}, but {spec['tp_plan']} splits no child of stage {pp}")
    params = dict(mod.named_parameters())  # what DDP reduces (torch's TP bridge below swaps the
    if d > 1:                              # module's attributes around each forward)
        if t > 1:  # DDP takes no DTensor parameter: torch's bridge hands it the local shards
            _pre_dp_module_transform(mod)
            params = dict(mod.named_parameters())
        mod = DistributedDataParallel(mod, process_group=mesh.get_group("dp"),
                                      device_ids=[device.index] if cuda else None)
        # PipelineStage arms DDP's reducer itself before a replica's last backward (no_sync on
        # the others); DDP's forward would arm it for every micro-batch too, and the first
        # step's bucket rebuild then counts each parameter once per micro-batch and fails.
        mod.require_backward_grad_sync = False
    stage = PipelineStage(mod, pp, p, device, group=mesh.get_group("pp"))
    actions = [0.0]  # main-thread CPU seconds inside the stage's forward and backward actions
    for name in ("forward_one_chunk", "backward_one_chunk"):
        inner = getattr(stage, name)

        def timed(*args: Any, _inner: Callable = inner, **kwargs: Any) -> Any:
            c = time.thread_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                actions[0] += time.thread_time() - c

        setattr(stage, name, timed)
    micro = spec["microbatches"]
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[spec["schedule"]]

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out, target) / micro

    # the loss carries the 1 / micro-batches, not the schedule's scale_grads: that divides the
    # gradients of the stage's parameters() after the step, and behind torch's TP + DDP bridge
    # the split layers' parameters are DTensor attributes there, left undivided
    sched = cls(stage, n_microbatches=micro, loss_fn=loss_fn, scale_grads=False)
    data = torch.load(Path(folder) / "batch.pt")
    share = data["x"].shape[0] // d
    x = data["x"][dp * share:(dp + 1) * share].to(device)
    y = data["y"][dp * share:(dp + 1) * share].to(device)
    walls, cpus, threads, acts, out = [], [], [], [], None
    for _ in range(spec["warmup"] + spec["steps"]):
        for prm in params.values():
            prm.grad = None
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        actions[0] = 0.0
        c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        args = (x,) if pp == 0 else ()
        kwargs = {"target": y} if pp == p - 1 else {}
        res = sched.step(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        cpus.append(time.process_time() - c0)
        threads.append(time.thread_time() - m0)
        acts.append(actions[0])
        walls.append(time.perf_counter() - w0)
        if pp == p - 1:
            out = res
    grads = {}
    for name, prm in params.items():
        g = prm.grad
        if g is not None and hasattr(prm, "_st_info"):  # a shard DDP saw: rebuild its DTensor
            s = prm._st_info
            g = DTensor.from_local(g, s.mesh, s.placements, run_check=False, shape=s.shape, stride=s.stride)
        if isinstance(g, DTensor):
            g = g.full_tensor()
        grads[name] = None if g is None else g.detach().cpu()
    torch.save({"rank": rank, "coords": [dp, pp, tp], "out": None if out is None else out.detach().cpu(),
                "grads": grads, "wall": walls[spec["warmup"]:], "cpu": cpus[spec["warmup"]:],
                "main_thread": threads[spec["warmup"]:], "actions": acts[spec["warmup"]:]},
               Path(folder) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(folder: str, world: int, threads: int, timeout: float, nodes: int = 1) -> list[list[str]]:
    """Start the ranks and wait for them: one process per rank with torchrun's environment
    (``nodes == 1``), or one ``torchrun`` per node on a loopback rendezvous (``nodes > 1``, the
    multi-machine path on one machine). Plain processes rather than torch.multiprocessing's
    spawn, which re-imports the caller's main module in every rank (a script without a
    ``__main__`` guard would start ranks recursively)."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
           # the ranks import what this process imports (this checkout, the model's module)
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if nodes == 1:
        cmds = [[sys.executable, "-m", "devplace_lite.multidim.run", folder] for _ in range(world)]
        envs = [{**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for r in range(world)]
    else:
        cmds = [[sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(r),
                 "--nproc-per-node", str(world // nodes), "--rdzv-endpoint", f"127.0.0.1:{port}",
                 "--max-restarts", "0", "-m", "devplace_lite.multidim.run", folder] for r in range(nodes)]
        envs = [env] * nodes
    logs = [tempfile.TemporaryFile() for _ in cmds]
    procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
             for c, e, log in zip(cmds, envs, logs)]
    deadline = time.monotonic() + timeout
    try:
        while any(pr.poll() is None for pr in procs):
            if time.monotonic() > deadline:
                raise GraphError(f"the run did not finish within {timeout:.0f} s (a rank stuck or a slow machine); "
                                 "raise the timeout")
            if any(pr.returncode for pr in procs if pr.returncode is not None):
                break  # one rank failed: the others wait for it until their timeout
            time.sleep(0.05)
    finally:
        for pr in procs:
            if pr.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pr.pid, signal.SIGKILL)
                pr.wait()
        texts = read_logs(logs)
    if any(pr.returncode for pr in procs):
        raise GraphError(f"a rank failed: {rank_error(texts, 600)}")
    return cmds


# -- the front door ------------------------------------------------------------------------
def _ref_name(fn: Callable | str) -> str:
    if isinstance(fn, str):
        _load(fn)
        return fn
    mod, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or "<" in name or mod == "__main__":
        raise UsageError(f"{fn!r} must be a module-level function importable by the ranks (or 'module:name')")
    return f"{mod}:{name}"


def run_plan(plan: Result | Sequence[Stage], model_fn: Callable[..., nn.Module] | str, model_kwargs: dict | None,
             batch: torch.Tensor, target: torch.Tensor, *, microbatches: int, schedule: str = "gpipe",
             steps: int = 2, warmup: int = 1, check: bool = True, seed: int = 0, dtype: str = "float64",
             tp_plan: Callable | str = megatron_plan, forecast: float | None = None, threads: int = 1,
             device: str = "cpu", nodes: int = 1, timeout: float = 240.0, rtol: float = RTOL,
             atol: float = ATOL) -> dict[str, Any]:
    """Execute a plan on ``d * stages * t`` processes (gloo on CPU) and check it.

    Parameters
    ----------
    plan : Result or sequence of Stage
        The stages (`devplace_lite.multidim.parallelize`'s answer, or `evaluate`'s stages); stage
        ``i`` runs the next contiguous children of the model; every stage has the same ``d`` and ``t``.
    model_fn : callable or str
        A module-level function (or ``"module:name"``) returning a ``torch.nn.Sequential`` whose
        children are the plan's layers ``0 .. n-1``; called with ``model_kwargs`` after
        ``torch.manual_seed(seed)`` by every rank and by the check.
    model_kwargs : dict or None
        Its keyword arguments (JSON values).
    batch, target : torch.Tensor
        The whole batch (first dimension: samples) and the regression target of the
        mean-squared-error loss.
    microbatches : int
        Piper's ``N``: micro-batches per batch; each replica runs ``N / d`` of them through the
        pipeline, so ``d`` divides ``N`` and ``N`` divides the batch.
    schedule : {"gpipe", "1f1b"}
        ``ScheduleGPipe`` or ``Schedule1F1B``.
    steps, warmup : int
        Timed steps, after untimed ones (no optimizer: every step has the same gradients).
    check : bool
        Compare outputs and gradients with the unsplit model here (module docstring).
    seed, dtype : int, str
        The weights' seed; ``"float64"`` (default: the check's tolerances are tight) or ``"float32"``.
    tp_plan : callable or str
        Child -> ``parallelize_module`` plan or None (default `megatron_plan`).
    forecast : float, optional
        The plan's time per sample (seconds) to report beside the measurement; by default a
        `Result`'s objective.
    threads : int
        Intra-op threads per rank.
    device : {"cpu", "cuda"}
        ``"cuda"``: NCCL, one GPU per rank (never run here).
    nodes : int
        1: the ranks are processes started here with torchrun's environment; more: one
        ``torchrun`` per node on a loopback rendezvous, the command a cluster runs on each
        machine (``torchrun --nnodes NODES --node-rank R --nproc-per-node RANKS/NODES
        --rdzv-endpoint HOST:PORT -m devplace_lite.multidim.run FOLDER``, FOLDER holding the
        ``spec.json`` and ``batch.pt`` this function writes; returned as ``commands``).
    timeout : float
        Wall seconds for the whole run.
    rtol, atol : float
        The check's tolerances (`torch.allclose`'s meaning).

    Returns
    -------
    dict
        ``mesh`` (``{"dp", "pp", "tp"}``), ``processes``, ``backend``, ``schedule``,
        ``microbatches``, ``batch``, per rank its coordinates, CPU and wall seconds per step;
        ``measured_cpu_per_sample`` (the busiest rank's CPU time of a step, all its threads,
        the least over the steps, over the batch: what its device was busy for),
        ``measured_main_thread_per_sample`` (the same, its main thread only: without gloo's
        transport threads), ``measured_actions_per_sample`` (the same, inside the stage's
        forward and backward actions only: without the schedule's bookkeeping and waits),
        ``measured_wall_per_sample``, ``forecast_per_sample``, ``nodes``,
        ``commands`` (how the ranks were started); with ``check``: ``check`` holding
        ``outputs_max_abs``, ``outputs_max_rel``, ``grads_max_abs``, ``grads_max_rel`` (the
        largest difference over the largest reference entry, per tensor), ``parameters_checked``,
        ``rtol``, ``atol`` and ``ok``.

    Raises
    ------
    UsageError
        On a plan that does not fit the model or one mesh, or bad sizes.
    GraphError
        When a rank fails or the run passes ``timeout`` (the first rank's error in one line).

    Examples
    --------
    See the module docstring (it starts eight processes).
    """
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"device must be 'cpu' or 'cuda', got {device!r}")
    for name, v, low in (("steps", steps, 1), ("warmup", warmup, 0), ("threads", threads, 1),
                         ("microbatches", microbatches, 1), ("nodes", nodes, 1)):
        if int(v) != v or v < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {v}")
    ref, tp_ref = _ref_name(model_fn), _ref_name(tp_plan)
    model_kwargs = dict(model_kwargs or {})
    spec = {"model_fn": ref, "model_kwargs": model_kwargs, "seed": seed, "dtype": dtype, "tp_plan": tp_ref}
    reference = _build(spec)
    d, p, t, bounds = mesh_of(plan, len(reference))
    if microbatches % d or batch.shape[0] % microbatches or batch.shape[0] != target.shape[0]:
        raise UsageError(f"the batch of {batch.shape[0]} samples must split into {microbatches} equal micro-batches, "
                         f"{microbatches} divisible by the data-parallel degree {d}, and match the target's "
                         f"{target.shape[0]}")
    world = d * p * t
    if world % nodes:
        raise UsageError(f"{world} processes do not split evenly over {nodes} nodes")
    if device == "cuda" and torch.cuda.device_count() < world // nodes:
        raise UsageError(f"device 'cuda' needs one GPU per rank, {world // nodes} on this machine; "
                         f"it has {torch.cuda.device_count()}")
    if forecast is None and isinstance(plan, Result):
        forecast = plan.objective
    spec.update(mesh=[d, p, t], bounds=bounds, microbatches=microbatches // d, schedule=schedule, steps=steps,
                warmup=warmup, threads=threads, device=device, timeout=timeout,
                backend="nccl" if device == "cuda" else "gloo")
    dt = getattr(torch, dtype)
    with tempfile.TemporaryDirectory(prefix="devplace-mdrun-") as folder:
        (Path(folder) / "spec.json").write_text(json.dumps(spec))
        torch.save({"x": batch.to(dt), "y": target.to(dt)}, Path(folder) / "batch.pt")
        cmds = _launch(folder, world, threads, timeout, nodes)
        ranks = [torch.load(Path(folder) / f"rank{r}.pt") for r in range(world)]
    out = _gather(spec, ranks, reference if check else None, batch.to(dt), target.to(dt), forecast, rtol, atol)
    out["nodes"] = nodes
    out["commands"] = [" ".join(c).replace(folder, "FOLDER") for c in cmds[:1 if nodes == 1 else nodes]]
    return out


def _gather(spec: dict, ranks: list[dict], reference: nn.Sequential | None, batch: torch.Tensor, target: torch.Tensor,
            forecast: float | None, rtol: float, atol: float) -> dict[str, Any]:
    d, p, t = spec["mesh"]
    n = batch.shape[0]
    busiest = max(min(r["cpu"]) for r in ranks)
    main = max(min(r["main_thread"]) for r in ranks)
    acts = max(min(r["actions"]) for r in ranks)
    wall = max(min(r["wall"]) for r in ranks)
    out: dict[str, Any] = {
        "mesh": {"dp": d, "pp": p, "tp": t}, "processes": len(ranks), "backend": spec["backend"],
        "schedule": spec["schedule"], "microbatches": spec["microbatches"] * d, "batch": n, "dtype": spec["dtype"],
        "ranks": [{"rank": r["rank"], "dp": r["coords"][0], "pp": r["coords"][1], "tp": r["coords"][2],
                   "cpu_per_step": r["cpu"], "main_thread_cpu_per_step": r["main_thread"],
                   "actions_cpu_per_step": r["actions"],
                   "wall_per_step": r["wall"]} for r in ranks],
        "measured_cpu_per_sample": busiest / n, "measured_main_thread_per_sample": main / n,
        "measured_actions_per_sample": acts / n,
        "measured_wall_per_sample": wall / n,
        "forecast_per_sample": forecast,
    }
    if reference is None:
        return out
    ref_out = reference(batch)
    nn.functional.mse_loss(ref_out, target).backward()
    ref_grads = {k: v.grad for k, v in reference.named_parameters()}
    share = n // d
    worst = {"outputs_max_abs": 0.0, "outputs_max_rel": 0.0, "grads_max_abs": 0.0, "grads_max_rel": 0.0}
    ok, checked = True, set()

    def diff(a: torch.Tensor, b: torch.Tensor, kind: str) -> None:
        nonlocal ok
        if a.shape != b.shape:
            raise GraphError(f"a rank's {kind} has shape {tuple(a.shape)}, the unsplit model's {tuple(b.shape)}")
        e = (a - b).abs()
        worst[f"{kind}_max_abs"] = max(worst[f"{kind}_max_abs"], float(e.max()))
        worst[f"{kind}_max_rel"] = max(worst[f"{kind}_max_rel"], float(e.max() / b.abs().max().clamp_min(atol)))
        ok = ok and bool(torch.allclose(a, b, rtol=rtol, atol=atol))

    for r in ranks:
        dp, pp, _ = r["coords"]
        if pp == p - 1:
            if r["out"] is None:
                raise GraphError(f"rank {r['rank']} (last stage) returned no output")
            diff(r["out"], ref_out[dp * share:(dp + 1) * share].detach(), "outputs")
        for name, g in r["grads"].items():
            if g is None or ref_grads.get(name) is None:
                raise GraphError(f"parameter {name} has no gradient on rank {r['rank']} or in the unsplit model")
            diff(g, ref_grads[name], "grads")
            checked.add(name)
    if checked != set(ref_grads):
        raise GraphError(f"parameters no rank holds: {sorted(set(ref_grads) - checked)[:5]}")
    out["check"] = {**worst, "parameters_checked": len(checked), "rtol": rtol, "atol": atol, "ok": ok}
    return out



def main(argv: Sequence[str] | None = None) -> int:
    """One rank: ``python -m devplace_lite.multidim.run FOLDER`` (what `_launch` and torchrun start)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not (Path(args[0]) / "spec.json").is_file():
        print("usage: python -m devplace_lite.multidim.run FOLDER (with spec.json and batch.pt, written by run_plan)",
              file=sys.stderr)
        return 2
    _rank(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
