"""Profile a PyTorch model into a placement graph: FLOPs, bytes and times of its layers or operators.

Problem
-------
Turn an ``nn.Module`` and an example input into a `Graph` whose nodes are the model's layers
(``granularity="layer"``) or operators (``"op"``), with accelerator and CPU times, memory,
output bytes and communication costs, optionally with a backward node per forward node. These
are the graphs the partitioning chapters study (``data/graphs``, ``devplace profile``); the
road from a model to a *run* is `devplace_lite.pipeline.planner` (segments between split
points), which this module does not take.

How
---
1. **Trace** with the package's one torch.fx tracer (`devplace_lite.pipeline.tracer.Tracer`,
   the capture's fallback route). At both granularities a built-in
   ``torch.nn`` module is one node: each is one operator (convolution, batch norm, linear,
   LayerNorm, a whole LSTM layer) and fx cannot enter them anyway (their ``forward`` checks
   shapes in Python). Operator granularity traces everything else down to functions and tensor
   methods (``matmul``, ``softmax``, ``view``, ``+``...); layer granularity also keeps whole any
   module class with ``devplace_layer = True`` (the zoo's attention blocks) or listed in
   ``leaf_modules``.
2. **Count** by running the traced graph node by node (`torch.fx.passes.shape_prop.ShapeProp`)
   on *meta* tensors (shapes only, no arithmetic, so a full-size model costs nothing) under a
   dispatch mode that sees every ATen kernel a node launches. A kernel's FLOPs come from
   torch's own formulas (`torch.utils.flop_counter`: matmul, convolution, attention; a
   multiply-add is 2 FLOPs) or are one per output element (elementwise, normalisation,
   reductions); its bytes are the tensors it reads plus the tensors it writes. Views move
   nothing and cost nothing. Training graphs also run each node's local backward
   (``torch.autograd.grad`` of its outputs with respect to its inputs and parameters) to count
   the backward kernels: about 2x the forward FLOPs for matmul and convolution, as expected;
   an output read by k consumers adds k - 1 gradient sums. Recurrent layers (``nn.LSTM``,
   ``GRU``, ``RNN``) are counted from their shapes as GPU libraries run them (see
   `_rnn_kernels`). A model that cannot run on meta tensors (it reads values: ``.item()``, a
   data-dependent branch kept whole, a mask's nonzero count) is counted on a real CPU copy
   with the example input instead, and ``graph.meta["counted_on"]`` says so.
3. **Time**, either with a roofline or by measurement:

   * roofline (``spec="V100"|"A100"|"H100"`` or an `AcceleratorSpec`): each kernel takes
     ``max(flops / peak, bytes / bandwidth) + overhead``; a node's time is the sum over its
     kernels. ``ACC_KERNEL_OVERHEAD_MS`` = 4 us on the accelerator (a kernel launch and its
     tail), ``CPU_KERNEL_OVERHEAD_MS`` = 2 us on a CPU core (eager dispatch). ``p_cpu`` uses
     the same rule with `CPU_CORE`, a generic server core (see its comment). Deterministic:
     the same model gives the same bytes on any machine. Bytes are those of the tensors as
     the model holds them (fp32 for the zoo) while the named specs' peaks are dense FP16
     tensor-core rates: an optimistic, mixed-precision roofline (convert the model with
     ``.half()`` first for half-precision traffic).
   * measured (``"cpu-measured"``, ``"cuda-measured"``): each node runs ``warmup`` times, then
     ``repeats`` timed runs, median; backward nodes time the node's local backward. CPU runs
     on one thread use that thread's CPU time (``time.thread_time``: a busy machine's waits
     for a core are not counted), on several ``time.perf_counter``; CUDA runs use CUDA events
     and ``torch.cuda.synchronize``.
     ``p_cpu`` is always measured on one CPU thread; ``p_acc`` on the GPU, or for
     ``cpu-measured`` on ``threads`` CPU threads (default 1: one pipeline stage per core, and
     a figure a shared machine's other work disturbs least; ``graph.meta["threads"]`` records
     it). Profiling works on copies: the caller's model is not modified.

Memory of a forward node is the bytes of the parameters and buffers it uses (each tensor
counted once, at its first user, so tied weights are not counted twice) plus its output
activation (none for a view, which launches no kernel and aliases its input); a backward node
holds the gradients of its parameters. ``out_bytes`` is the size of the output (the tensors
consumers read); ``comm = out_bytes / link`` in ms, with the
spec's host link (16 GB/s for ``cpu-measured``, measured for ``cuda-measured``). A backward
node's output is the gradient it sends back, the largest gradient of an input.

Nodes that carry no tensor (``x.shape``, ``x.size(1)``: shape arithmetic) are dropped with
their edges, since a consumer needs only the shape, known statically; ``getitem`` on a tuple
(``lstm(x)[0]``) is merged into the node that made the tuple; parameters (``get_attr``) become
memory of their users; graph inputs are zero-cost source nodes whose output must reach the
device.

Complexity: one pass over the graph on meta tensors (plus one local backward per node for
training); measured profiles add ``(warmup + repeats)`` runs per node and pass.

Example
-------
>>> import torch
>>> from devplace_lite.pipeline.profile import profile
>>> net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
>>> g = profile(net, torch.randn(4, 64), spec="A100", progress=False)
>>> g.ids, g.node("_0").flops
(['input_1', '_0', '_1', '_2'], 32768.0)

Reference: roofline model, Williams, Waterman and Patterson, CACM 2009.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import io as _io
import itertools
import math
import operator
import os
import platform
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry

from ..devices import SPECS, AcceleratorSpec
from ..graph import Graph, GraphError, Node
from .tracer import Tracer

GRANULARITIES = ("layer", "op")
MEASURED = ("cpu-measured", "cuda-measured")
SPEC_NAMES = MEASURED + tuple(SPECS)

#: One server CPU core running fp32 eagerly: two AVX-512 FMA units at ~3 GHz peak near
#: 190 GFLOP/s, and about half of it is what a single-threaded GEMM attains; ~10 GB/s is one
#: core's share of DRAM bandwidth. Used for roofline ``p_cpu``; chapter 01 compares it with
#: measurements on the reader's machine.
CPU_CORE = AcceleratorSpec("cpu-core", flops=100e9, bandwidth=10e9, memory=math.inf, link=math.inf)
ACC_KERNEL_OVERHEAD_MS = 0.004
CPU_KERNEL_OVERHEAD_MS = 0.002
#: Host link assumed by ``cpu-measured`` graphs (PCIe 3.0 x16, as for the generated graphs).
DEFAULT_LINK_BYTES_PER_S = 16e9

_aten = torch.ops.aten
# Kernels that allocate or relabel memory without reading or writing it.
_FREE = {_aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default,
         _aten.new_empty.default, _aten.new_empty_strided.default, _aten._unsafe_view.default,
         _aten.lift_fresh.default}
# Gathers read only the rows they return from their first argument, not the whole table.
_GATHERS = {_aten.embedding, _aten.index_select, _aten.gather, _aten.index}


# torch's CPU build runs scaled-dot-product attention as one fused kernel (flash for CPU): it is
# priced as the GPU's flash kernel is, whose FLOP formulas read the same leading arguments
_FUSED_ON_CPU = {_aten._scaled_dot_product_flash_attention_for_cpu: _aten._scaled_dot_product_flash_attention,
                 _aten._scaled_dot_product_flash_attention_for_cpu_backward:
                     _aten._scaled_dot_product_flash_attention_backward}


class FusedAttention(TorchFunctionMode):
    """Scaled-dot-product attention on meta (or fake) tensors run as one fused kernel, as torch
    runs it on a CPU or GPU, not as the math fallback the meta device dispatches to (scores
    written, upcast to fp32, soft-maxed and saved: about ten times the bytes and four times the
    saved activations of the fused kernel).

    The kernel run is torch's fused CPU kernel, which has a meta kernel and an autograd formula,
    takes a mask and grouped keys, saves what the GPU's flash kernel saves (the inputs, the
    output and its log-sum-exp) and is priced by `KernelLog` with the flash kernel's FLOP
    formulas. A boolean mask becomes its additive bias on the mask's own storage, so a mask
    broadcast over the heads (a causal LM's) is read, and saved, once: a flash kernel masks by
    position and reads none. Tensors with data are left to torch's own dispatch.

    Examples
    --------
    >>> q = torch.zeros(1, 2, 256, 64, device="meta", dtype=torch.bfloat16)
    >>> log = KernelLog()
    >>> with FusedAttention(), log:
    ...     _ = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    >>> len(log.kernels)  # one kernel; the math fallback launches a dozen
    1
    """

    _SDPA = (torch.nn.functional.scaled_dot_product_attention, _aten.scaled_dot_product_attention.default)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self._SDPA or not args[0].is_meta and not _is_fake(args[0]):
            return func(*args, **kwargs)
        q, k, v = args[:3]
        given = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), args[3:]), **kwargs)
        mask = given.get("attn_mask")
        if mask is not None and mask.dtype == torch.bool:
            small = mask[tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                               for st, n in zip(mask.stride(), mask.shape))]
            mask = torch.zeros(small.shape, dtype=q.dtype, device=q.device).masked_fill(
                small.logical_not(), float("-inf")).expand(mask.shape)
        return _aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, given.get("dropout_p", 0.0), given.get("is_causal", False), attn_mask=mask,
            scale=given.get("scale"))[0]


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


# -- tracing ------------------------------------------------------------------------------------
def _first_sentence(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text.split(". ")[0].rstrip(".")


def _untraceable(model: nn.Module, tracer: Tracer, err: Exception) -> GraphError:
    """One line naming the first call fx could not trace: the user's source line, its
    function and module path, and fx's reason."""
    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.abspath(__file__)
    frame = None
    for f in reversed(traceback.extract_tb(err.__traceback__)):
        path = os.path.abspath(f.filename)
        if not path.startswith(torch_dir) and path != here:
            frame = f
            break
    module = next(reversed(tracer.module_stack), "") if tracer.module_stack else ""
    where = ""
    if frame is not None:
        code = (frame.line or "").split("#")[0].strip()
        where = f" at `{code}`" if code else " at"
        where += f" ({os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name}"
        where += f", module '{module}')" if module else ")"
    reason = _first_sentence(err)
    return GraphError(f"cannot trace {type(model).__name__} with torch.fx{where}: {reason} "
                      "(data-dependent Python control flow or tensor-to-Python conversion; "
                      "rewrite it, or pass that module in leaf_modules)")


def trace(model: nn.Module, granularity: str = "layer", leaf_modules: Sequence[type] = ()) -> fx.GraphModule:
    """Trace ``model`` with torch.fx at ``granularity`` (``"layer"`` or ``"op"``).

    A model fx cannot trace raises `GraphError` naming the first untraceable call.
    """
    if granularity not in GRANULARITIES:
        raise GraphError(f"unknown granularity {granularity!r}; expected layer or op")
    tracer = Tracer(classes=tuple(leaf_modules), blocks=granularity == "layer")
    try:
        graph = tracer.trace(model)
    except Exception as e:  # noqa: BLE001 - fx raises TraceError, TypeError, RuntimeError...
        raise _untraceable(model, tracer, e) from None
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


# -- counting -----------------------------------------------------------------------------------
def _tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _read_bytes(t: torch.Tensor) -> int:
    # a broadcast (stride-0) view reads only its storage
    return min(_nbytes(t), t.untyped_storage().nbytes())


@functools.lru_cache(maxsize=None)
def _is_view(func) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class KernelLog(TorchDispatchMode):
    """Records ``(flops, bytes)`` of every ATen kernel run while active (the cost model of the
    profiler here and of the capture's roofline segments).

    Examples
    --------
    >>> log = KernelLog()
    >>> with log:
    ...     _ = torch.ones(2, 3) @ torch.ones(3, 4)
    >>> log.kernels[-1]  # 2 x 3 x 4 multiply-adds; reads 6 + 12 floats, writes 8
    (48.0, 104.0)
    """

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[tuple[float, float]] = []
        self.active = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # prim ops are questions a fake tensor asks (its device), not kernels a GPU launches
        if not self.active or func in _FREE or _is_view(func) or func.namespace == "prim":
            return out
        packet = _FUSED_ON_CPU.get(func._overloadpacket, func._overloadpacket)
        outs = _tensors(out)
        if packet in flop_registry:
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
        else:
            flops = float(sum(t.numel() for t in outs if t.is_floating_point()))
        seen: set[int] = set()
        read = 0
        for i, t in enumerate(_tensors((args, kwargs))):
            if id(t) in seen:
                continue
            seen.add(id(t))
            if i == 0 and packet in _GATHERS:
                read += sum(_nbytes(o) for o in outs)
            else:
                read += _read_bytes(t)
        self.kernels.append((flops, float(read + sum(_nbytes(t) for t in outs))))
        return out

    @contextlib.contextmanager
    def paused(self):
        self.active = False
        try:
            yield
        finally:
            self.active = True


@dataclass
class _Cost:
    """What one fx node costs: forward and backward kernels, and the gradients it handles."""

    forward: list[tuple[float, float]] = field(default_factory=list)
    backward: list[tuple[float, float]] = field(default_factory=list)
    requires_grad: bool = False
    grad_out_bytes: float = 0.0  # the largest gradient it sends to a producer
    out_numel: int = 0  # elements of the outputs that need a gradient (for gradient sums)
    out_bytes: int = 0


def _rnn_kernels(m: nn.RNNBase, x: torch.Tensor) -> tuple[list, list, tuple]:
    """Kernels of a cuDNN-style recurrent layer, and meta outputs of the right shapes.

    The outputs are zeros: counting needs their shapes only.

    Per layer and direction: one GEMM of the inputs of all steps, then per step one GEMM of
    the recurrent state and one fused pointwise kernel (gates, cell). The backward runs the
    same recurrence backwards (a GEMM and a pointwise kernel per step), then one GEMM for the
    input gradient and one per weight matrix. Counting it this way (rather than running
    the layer's step-by-step decomposition on meta tensors) is fast and matches how GPU
    libraries run recurrent layers.
    """
    gates = {"LSTM": 4, "GRU": 3}.get(m.mode, 1)
    batched = x.dim() == 3
    steps = x.shape[1 if m.batch_first and batched else 0]
    batch = x.shape[0 if m.batch_first else 1] if batched else 1
    dirs = 2 if m.bidirectional else 1
    h, h_out = m.hidden_size, (m.proj_size or m.hidden_size)
    es = x.element_size()
    fwd: list[tuple[float, float]] = []
    bwd: list[tuple[float, float]] = []
    for layer in range(m.num_layers):
        i = m.input_size if layer == 0 else dirs * h_out
        for _ in range(dirs):
            g = gates * h
            x_all, gates_all = steps * batch * i, steps * batch * g
            fwd.append((2.0 * gates_all * i, float(es * (x_all + i * g + gates_all))))
            step_gemm = (2.0 * batch * g * h_out, float(es * (batch * h_out + h_out * g + batch * g)))
            pointwise = (float(batch * g + 4 * batch * h), float(es * (2 * batch * g + 3 * batch * h)))
            fwd += [step_gemm, pointwise] * steps
            bwd += [step_gemm, pointwise] * steps
            bwd.append((2.0 * gates_all * i, float(es * (gates_all + i * g + x_all))))  # input gradient
            bwd.append((2.0 * gates_all * i, float(es * (gates_all + x_all + i * g))))  # input weights
            bwd.append((2.0 * gates_all * h_out, float(es * (gates_all + steps * batch * h_out + h_out * g))))
    lead = (batch, steps) if m.batch_first else (steps, batch)
    out = x.new_zeros((*lead, dirs * h_out) if batched else (steps, dirs * h_out))
    state = (dirs * m.num_layers, batch, h_out) if batched else (dirs * m.num_layers, h_out)
    if m.mode == "LSTM":
        cell = (dirs * m.num_layers, batch, h) if batched else (dirs * m.num_layers, h)
        return fwd, bwd, (out, (x.new_zeros(state), x.new_zeros(cell)))
    return fwd, bwd, (out, x.new_zeros(state))


class _Counter(ShapeProp):
    """ShapeProp that also logs each node's kernels; with ``training``, each node runs on
    fresh leaf copies of its inputs so that its local backward can be counted alone."""

    def __init__(self, gm: fx.GraphModule, training: bool) -> None:
        super().__init__(gm)
        self.training = training
        self.costs: dict[str, _Cost] = {}
        self._log = KernelLog()
        self._leaves: list[tuple[torch.Tensor, bool]] = []  # (fresh leaf, is a parameter)
        self._rnn: tuple[list, list] | None = None

    def fetch_args_kwargs_from_env(self, n: fx.Node):
        args, kwargs = super().fetch_args_kwargs_from_env(n)
        self._leaves = []
        if not self.training or n.op in ("placeholder", "get_attr", "output"):
            return args, kwargs

        def fresh(t):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                leaf = t.detach().requires_grad_()
                self._leaves.append((leaf, isinstance(t, nn.Parameter)))
                return leaf.clone()  # in-place ops may write into the clone, not the leaf
            return t

        with self._log.paused():
            return tree_map(fresh, (args, kwargs))

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        m = self.module.get_submodule(target)
        if isinstance(m, nn.RNNBase) and args and isinstance(args[0], torch.Tensor):
            with self._log.paused():
                fwd, bwd, out = _rnn_kernels(m, args[0])
            needs_grad = self.training and (args[0].requires_grad or any(p.requires_grad for p in m.parameters()))
            self._rnn = (fwd, bwd if needs_grad else [])
            return tree_map(lambda t: t.requires_grad_(needs_grad), out)
        return super().call_module(target, args, kwargs)

    def run_node(self, n: fx.Node) -> Any:
        if n.op in ("placeholder", "get_attr", "output"):
            return super().run_node(n)
        self._log = KernelLog()
        self._rnn = None
        cost = _Cost()
        with torch.set_grad_enabled(self.training), self._log:
            result = super().run_node(n)
        cost.forward = self._log.kernels
        # inference counts no backward, even where a parameter used outside a module call
        # (ViT's class token) hands requires_grad on
        outs = [t for t in _tensors(result) if t.requires_grad] if self.training else []
        if outs:
            if self._rnn is not None:
                cost.forward, cost.backward = self._rnn
            else:
                params = list(self.module.get_submodule(n.target).parameters()) if n.op == "call_module" else []
                wrt = [leaf for leaf, _ in self._leaves] + [p for p in params if p.requires_grad]
                log = KernelLog()
                with log.paused():
                    seeds = [torch.ones_like(t) for t in outs]
                with log:
                    torch.autograd.grad(outs, wrt, seeds, allow_unused=True)
                cost.backward = log.kernels
            cost.requires_grad = True
            cost.grad_out_bytes = float(max((_nbytes(t) for t, is_param in self._leaves if not is_param), default=0))
            cost.out_numel = sum(t.numel() for t in outs)
            cost.out_bytes = sum(_nbytes(t) for t in outs)
        elif self._rnn is not None:
            cost.forward = self._rnn[0]
        self.costs[n.name] = cost
        return tree_map(lambda t: t.detach().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
                        and not t.is_leaf else t, result)


def _meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters and buffers are meta tensors (ties kept)."""
    memo: dict[int, Any] = {}
    for t in itertools.chain(model.parameters(), model.buffers()):
        if id(t) not in memo:
            m = torch.empty_like(t, device="meta")
            memo[id(t)] = nn.Parameter(m, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else m
    return copy.deepcopy(model, memo)


def _to_meta(x: Any) -> Any:
    return tree_map(lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta")
                    if isinstance(t, torch.Tensor) else t, x)


def _count(gm: fx.GraphModule, inputs: tuple, training: bool) -> dict[str, _Cost]:
    counter = _Counter(gm, training)
    err = _io.StringIO()
    try:
        with contextlib.redirect_stderr(err):  # ShapeProp prints a traceback before raising
            counter.propagate(*inputs)
    except Exception as e:  # noqa: BLE001 - report the failing node in one line
        reason = _first_sentence(e.__cause__ or e)
        node = next((n for n in gm.graph.nodes if n.name not in counter.costs and n.op not in
                     ("placeholder", "get_attr", "output")), None)
        at = f" at node {node.name} ({node.op} {node.target})" if node is not None else ""
        raise GraphError(f"cannot run {gm.__class__.__name__} on the example input{at}: {reason}") from None
    return counter.costs


# -- graph structure ----------------------------------------------------------------------------
def _has_tensor(n: fx.Node) -> bool:
    return "tensor_meta" in n.meta


def _meta_bytes(tm: Any) -> int:
    if hasattr(tm, "shape") and hasattr(tm, "dtype"):
        return math.prod(tm.shape) * tm.dtype.itemsize
    if isinstance(tm, (list, tuple)):
        return sum(_meta_bytes(x) for x in tm)
    if isinstance(tm, dict):
        return sum(_meta_bytes(x) for x in tm.values())
    return 0


@dataclass
class _Structure:
    kept: list[fx.Node]
    preds: dict[str, list[str]]
    out_bytes: dict[str, int]
    params: dict[str, list[torch.Tensor]]


def _structure(gm: fx.GraphModule) -> _Structure:
    """Which fx nodes become graph nodes, their edges, output bytes and owned parameters."""
    owner: dict[str, str] = {}  # merged tuple getitem -> node that made the tuple
    kept: list[fx.Node] = []
    names: set[str] = set()
    for n in gm.graph.nodes:
        if n.op in ("output", "get_attr") or not _has_tensor(n):
            continue
        src = n.args[0] if n.op == "call_function" and n.target is operator.getitem else None
        tuple_src = isinstance(src, fx.Node) and src.meta.get("type") in (tuple, list)
        if tuple_src and (src.name in names or src.name in owner):
            owner[n.name] = owner.get(src.name, src.name)
            continue
        kept.append(n)
        names.add(n.name)

    def used_bytes(n: fx.Node) -> int:
        if n.meta.get("type") not in (tuple, list):
            return _meta_bytes(n.meta["tensor_meta"])
        total = 0
        for u in n.users:
            if owner.get(u.name) is not None:
                total += used_bytes(u) if u.users else 0
            else:
                return _meta_bytes(n.meta["tensor_meta"])
        return total

    seen: set[int] = set()
    preds: dict[str, list[str]] = {}
    params: dict[str, list[torch.Tensor]] = {}
    for n in kept:
        ps: list[str] = []
        own: list[torch.Tensor] = []
        for a in n.all_input_nodes:
            if a.op == "get_attr":
                own.append(_attr(gm, a.target))
            elif a.name in names or a.name in owner:
                p = owner.get(a.name, a.name)
                if p not in ps:
                    ps.append(p)
        if n.op == "call_module":
            m = gm.get_submodule(n.target)
            own += list(m.parameters()) + list(m.buffers())
        mine = []
        for t in own:
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                mine.append(t)
        preds[n.name] = ps
        params[n.name] = mine
    return _Structure(kept, preds, {n.name: used_bytes(n) for n in kept}, params)


def _attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _describe(gm: fx.GraphModule, n: fx.Node) -> str:
    if n.op == "placeholder":
        return f"input {n.target}"
    if n.op == "call_module":
        return type(gm.get_submodule(n.target)).__name__
    if n.op == "call_method":
        return str(n.target)
    return getattr(n.target, "__name__", str(n.target))


# -- timing -------------------------------------------------------------------------------------
def roofline_ms(kernels: Iterable[tuple[float, float]], spec: AcceleratorSpec, overhead_ms: float) -> float:
    """Sum over kernels of ``max(flops / peak, bytes / bandwidth)`` plus ``overhead_ms`` each, in ms."""
    return sum(max(f / spec.flops, b / spec.bandwidth) * 1e3 + overhead_ms for f, b in kernels)


def _cpu_clock() -> Callable[[], float]:
    """The clock of a CPU pass. With one torch thread all the arithmetic runs on the calling
    thread, so its CPU time is the node's time, and time spent waiting for a core on a busy
    machine is not counted (the pipeline's stage times, `pipeline.cpu_clock`, count the same
    way). With several threads, or where the thread clock is coarse (Windows: 15.6 ms), wall
    time."""
    fine = time.get_clock_info("thread_time").resolution <= 1e-6
    return time.thread_time if torch.get_num_threads() == 1 and fine else time.perf_counter


def _time_cpu(fn: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    clock = _cpu_clock()
    samples = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        samples.append((clock() - t0) * 1e3)
    return statistics.median(samples)


def _time_cuda(fn: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


class _Timer(fx.Interpreter):
    """Runs the graph node by node, timing each kept node (and its local backward)."""

    def __init__(self, gm: fx.GraphModule, keep: set[str], training: bool, clock: Callable, repeats: int,
                 warmup: int, bar) -> None:
        super().__init__(gm)
        self.keep, self.training, self.clock = keep, training, clock
        self.repeats, self.warmup, self.bar = repeats, warmup, bar
        self.forward_ms: dict[str, float] = {}
        self.backward_ms: dict[str, float] = {}

    def run_node(self, n: fx.Node) -> Any:
        if n.name not in self.keep:
            with torch.set_grad_enabled(self.training):
                return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        leaves: list[torch.Tensor] = []

        def fresh(t):
            if self.training and isinstance(t, torch.Tensor) and t.requires_grad:
                leaf = t.detach().requires_grad_()
                leaves.append(leaf)
                return leaf.clone()
            return t

        args, kwargs = tree_map(fresh, (args, kwargs))
        # every run gets its own copies of the inputs, made before the clock starts: an in-place
        # operator (ReLU(inplace=True)) must not write twice into a tensor autograd saved
        copies = iter([tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t,
                                (args, kwargs)) for _ in range(self.repeats + self.warmup + 1)])

        def call():
            a, k = next(copies)
            return getattr(self, n.op)(n.target, a, k)

        with torch.set_grad_enabled(self.training):
            self.forward_ms[n.name] = self.clock(call, self.repeats, self.warmup)
            result = call()
        outs = [t for t in _tensors(result) if t.requires_grad] if self.training else []
        if outs:
            params = list(self.module.get_submodule(n.target).parameters()) if n.op == "call_module" else []
            wrt = leaves + [p for p in params if p.requires_grad]
            seeds = [torch.ones_like(t) for t in outs]
            self.backward_ms[n.name] = self.clock(
                lambda: torch.autograd.grad(outs, wrt, seeds, retain_graph=True, allow_unused=True),
                self.repeats, self.warmup)
        self.bar.update(1)
        return tree_map(lambda t: t.detach().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
                        and not t.is_leaf else t, result)


@contextlib.contextmanager
def _threads(k: int):
    before = torch.get_num_threads()
    torch.set_num_threads(k)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cuda_link_bytes_per_s(device: torch.device) -> float:
    """Host-to-device copy bandwidth of pinned memory (64 MiB, median of 5)."""
    host = torch.empty(64 * 2**20, dtype=torch.uint8).pin_memory()
    dev = torch.empty_like(host, device=device)
    ms = _time_cuda(lambda: dev.copy_(host, non_blocking=True), 5, 2)
    return host.numel() / (ms / 1e3)


def _measure(model: nn.Module, gm_meta: fx.GraphModule, inputs: tuple, keep: set[str], training: bool,
             where: str, repeats: int, warmup: int, progress: bool, label: str, threads: int) -> dict[str, Any]:
    """Times of every kept node: pass "acc" on the GPU (or on ``threads`` CPU threads), pass
    "cpu" on one CPU thread (skipped, and equal to "acc", when ``threads`` is 1 on a CPU)."""
    from tqdm import tqdm

    if any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
        raise GraphError("a measured profile needs a model with real weights (this one is on the meta device)")
    passes = ["acc"] if (where == "cpu" and threads == 1) else ["acc", "cpu"]
    out: dict[str, Any] = {}
    with tqdm(total=len(keep) * len(passes), desc=f"profile {label}", disable=not progress, unit="node",
              leave=False) as bar:
        for kind in passes:
            if kind == "acc" and where == "cuda":
                dev = torch.device("cuda", torch.cuda.current_device())
            else:
                dev = torch.device("cpu")
            net = copy.deepcopy(model).to(dev).train(training)  # the caller's model is never modified
            gm = fx.GraphModule(net, copy.deepcopy(gm_meta.graph), gm_meta.__class__.__name__)
            xs = tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, inputs)
            clock = _time_cuda if dev.type == "cuda" else _time_cpu
            with _threads(threads if kind == "acc" else 1):
                timer = _Timer(gm, keep, training, clock, repeats, warmup, bar)
                timer.run(*xs)
            out[kind] = (timer.forward_ms, timer.backward_ms)
            if kind == "acc" and dev.type == "cuda":
                out["device"] = torch.cuda.get_device_name(dev)
                out["link"] = _cuda_link_bytes_per_s(dev)
                out["memory"] = float(torch.cuda.get_device_properties(dev).total_memory)
            elif kind == "acc":
                out["device"] = f"{_cpu_name()} ({threads} thread{'s' if threads > 1 else ''})"
                out["link"] = DEFAULT_LINK_BYTES_PER_S
    out.setdefault("cpu", out["acc"])
    out["cpu_device"] = f"{_cpu_name()} (1 thread)"
    return out


# -- the profiler -------------------------------------------------------------------------------
def _r(x: float) -> float:
    """Six significant digits: readable files, and no platform float noise in the last bits."""
    return float(f"{x:.6g}")


def profile(model: nn.Module, example_input: Any, *, granularity: str = "layer",
            spec: str | AcceleratorSpec = "A100", training: bool = False, batch: int | None = None,
            repeats: int = 20, warmup: int = 3, progress: bool = True, name: str | None = None,
            config: dict | None = None, leaf_modules: Sequence[type] = (), threads: int | None = None) -> Graph:
    """Profile ``model`` on ``example_input`` into a `Graph` (see the module docstring).

    Parameters
    ----------
    model : nn.Module
        Any module torch.fx can trace; it is not modified (profiling works on copies).
    example_input : Tensor or tuple of Tensors
        The positional inputs of one forward call; their shapes set the batch and sizes.
    granularity : "layer" or "op"
    spec : "A100", "V100", "H100", an `AcceleratorSpec`, "cpu-measured" or "cuda-measured"
        Roofline of a named accelerator (deterministic), or times measured here.
    training : bool
        Add a backward node per forward node that needs a gradient, in its colocation class.
    batch : int, optional
        The batch size recorded in ``graph.meta`` (default: leading size of the first input).
    repeats, warmup : int
        Timed and untimed runs per node (measured specs only).
    progress : bool
        Show a tqdm progress bar while measuring.
    name, config : optional
        Model name and configuration recorded in ``graph.meta`` (default: the class name).
    leaf_modules : sequence of module classes
        Extra classes to keep whole (one node) at both granularities.
    threads : int, optional
        ``cpu-measured`` only: CPU threads of the pass that gives ``p_acc`` (default 1, recorded
        in ``graph.meta["threads"]``); with 1, ``p_acc`` equals the one-thread ``p_cpu``.

    Returns
    -------
    Graph
        Node ids are fx node names (``layer1_0_conv1``); a backward node is ``<id>.grad``.
        Times in ms, memory and bytes in bytes; provenance in ``graph.meta``.
    """
    if granularity not in GRANULARITIES:
        raise GraphError(f"unknown granularity {granularity!r}; expected layer or op")
    if isinstance(spec, AcceleratorSpec):
        acc = spec
    elif isinstance(spec, str) and spec.lower() in MEASURED:
        spec = spec.lower()
        acc = None
    elif isinstance(spec, str) and spec.upper() in SPECS:
        acc = SPECS[spec.upper()]
    else:
        raise GraphError(f"unknown spec {spec!r}; known: {', '.join(SPEC_NAMES)}")
    if spec == "cuda-measured" and not torch.cuda.is_available():
        raise GraphError("spec cuda-measured: no CUDA device is available here (use cpu-measured or a named spec)")
    if repeats < 1 or warmup < 0:
        raise GraphError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    if threads is not None and (int(threads) != threads or threads < 1):
        raise GraphError(f"threads must be a positive integer, got {threads!r}")
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise GraphError("example_input must be a tensor or a tuple of tensors")
    label = name or type(model).__name__
    if batch is None:
        batch = int(inputs[0].shape[0]) if inputs[0].dim() else 1

    gm = trace(_meta_copy(model).train(training), granularity, leaf_modules)
    counted_on = "meta"
    try:
        costs = _count(gm, _to_meta(inputs), training)
    except GraphError:
        # a module that reads values (a data-dependent branch kept whole, .item()) cannot run on
        # shapes alone: count on a real copy with the example input instead
        if any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
            raise
        real = copy.deepcopy(model).cpu().train(training)
        gm = fx.GraphModule(real, copy.deepcopy(gm.graph), gm.__class__.__name__)
        costs = _count(gm, tree_map(lambda t: t.cpu(), inputs), training)
        counted_on = "cpu"
    st = _structure(gm)
    kept_names = [n.name for n in st.kept]
    if training:  # an output read by k consumers receives k gradients: k - 1 sums in its backward
        trained = [n for n in kept_names if n in costs and costs[n].requires_grad]
        users = collections.Counter(p for n in trained for p in st.preds[n])
        for p, k in users.items():
            c = costs.get(p)
            if c is not None and c.requires_grad and k > 1:
                c.backward = c.backward + [(float(c.out_numel), 3.0 * c.out_bytes)] * (k - 1)

    info: dict[str, Any] = {}
    if acc is None:
        timed = {n.name for n in st.kept if n.op != "placeholder"}
        info = _measure(model, gm, inputs, timed, training, "cuda" if spec == "cuda-measured" else "cpu",
                        repeats, warmup, progress, label, int(threads or 1))
        link = info["link"]
    else:
        link = acc.link

    def times(n: str, backward: bool) -> tuple[float, float]:
        if acc is None:
            i = 1 if backward else 0
            return info["acc"][i].get(n, 0.0), info["cpu"][i].get(n, 0.0)
        kernels = costs[n].backward if backward else costs[n].forward
        return (roofline_ms(kernels, acc, ACC_KERNEL_OVERHEAD_MS),
                roofline_ms(kernels, CPU_CORE, CPU_KERNEL_OVERHEAD_MS))

    nodes: list[Node] = []
    back: list[Node] = []
    edges: list[tuple[str, str]] = []
    for n in st.kept:
        nid = n.name
        cost = costs.get(n.name, _Cost())
        param_bytes = sum(_nbytes(t) for t in st.params[n.name])
        grad_bytes = sum(_nbytes(t) for t in st.params[n.name] if t.requires_grad)
        out_bytes = st.out_bytes[n.name]
        p_acc, p_cpu = times(n.name, False) if n.op != "placeholder" else (0.0, 0.0)
        color = nid if training and cost.requires_grad else None
        fresh = out_bytes if (cost.forward or n.op == "placeholder") else 0  # a view allocates nothing
        nodes.append(Node(id=nid, p_acc=_r(p_acc), p_cpu=_r(p_cpu), memory=float(param_bytes + fresh),
                          comm=_r(out_bytes / link * 1e3), name=_describe(gm, n), out_bytes=float(out_bytes),
                          flops=float(sum(f for f, _ in cost.forward)), color=color))
        if training and cost.requires_grad:
            b_acc, b_cpu = times(n.name, True)
            back.append(Node(id=f"{nid}.grad", p_acc=_r(b_acc), p_cpu=_r(b_cpu), memory=float(grad_bytes),
                             comm=_r(cost.grad_out_bytes / link * 1e3), backward=True, color=color,
                             name=f"{_describe(gm, n)}.grad", out_bytes=cost.grad_out_bytes,
                             flops=float(sum(f for f, _ in cost.backward))))
    has_grad = {k for k in kept_names if costs.get(k, _Cost()).requires_grad}
    for n in kept_names:
        for p in st.preds[n]:
            edges.append((p, n))
            if training and p in has_grad and n in has_grad:
                edges.append((f"{n}.grad", f"{p}.grad"))  # gradients flow backwards
        if training and n in has_grad:
            edges.append((n, f"{n}.grad"))  # the stashed activation

    meta: dict[str, Any] = {
        "generator": "devplace_lite.pipeline.profile",
        "model": label,
        "config": dict(config or {}),
        "granularity": granularity,
        "training": training,
        "batch": int(batch),
        "inputs": [list(t.shape) for t in inputs],
        "parameter_bytes": int(sum(_nbytes(t) for ts in st.params.values() for t in ts)),
        "flops": float(sum(v.flops for v in nodes + back)),
    }
    if counted_on != "meta":
        meta["counted_on"] = "cpu: the model does not run on meta tensors, so costs hold for this example input"
    defaults: dict[str, Any] = {}
    if acc is not None:
        meta["times"] = "roofline"
        meta["spec"] = {"name": acc.name, "flops": acc.flops, "bandwidth": acc.bandwidth, "link": acc.link}
        meta["cpu_core"] = {"flops": CPU_CORE.flops, "bandwidth": CPU_CORE.bandwidth}
        meta["kernel_overhead_ms"] = {"accelerator": ACC_KERNEL_OVERHEAD_MS, "cpu": CPU_KERNEL_OVERHEAD_MS}
        defaults["memory"] = float(acc.memory)
    else:
        meta["times"] = "measured"
        meta["spec"] = {"name": spec, "link": info["link"]}
        meta["device"] = info["device"]
        meta["cpu_device"] = info["cpu_device"]
        meta["torch"] = torch.__version__
        meta["repeats"] = repeats
        meta["warmup"] = warmup
        if spec == "cpu-measured":
            meta["threads"] = int(threads or 1)
        if "memory" in info:
            defaults["memory"] = info["memory"]
    kind = "training" if training else "inference"
    return Graph(nodes + back, edges, name=f"{label}-{granularity}-{kind}", defaults=defaults,
                 meta=dict(sorted(meta.items())))
