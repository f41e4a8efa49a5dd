"""Capture any model as pipeline segments between candidate split points, and measure them.

Problem
-------
A practitioner's model (torchvision, timm, Hugging Face...) must become a graph the
partitioners can split, and every split must be something PyTorch can run: a list of module
FQNs at which `torch.distributed.pipelining` starts a new stage (``SplitPoint.BEGINNING``).
So the graph's nodes are *segments*: the program between one candidate split point and the
next. A candidate is a module called exactly once (a module called twice cannot mark one
place), at ``granularity="block"`` one that a container holds (``layers.3``, ``h.0``,
``features.2``) or a direct part of the model (single-child wrappers see through); at
``"layer"`` any such module. Candidates that start at the same operator are one split point,
named by the outermost.

How
---
1. **torch.export first** (what ``torch.distributed.pipelining.pipeline`` uses): the model is
   exported once by ``pipeline(model, example, split_policy=...)``, whose policy puts a split
   marker before the first operator of every candidate, read off each node's
   ``nn_module_stack``, and hands values read further on from segment to segment (`split_policy`
   says why). The result is PyTorch's own ``Pipe``: one stage module per segment and the
   wiring between them. A
   parameter read by two segments (tied embeddings) is *replicated* there, each copy
   receiving part of the gradient; `Capture.tied` lists them so a run sums those gradients.
2. **The exported graph cut by devplace's splitter** when torch's stage modules fail to run
   after a sound export: torch's outliner cuts a module whose operators are not contiguous
   (the rotary embedding of Llama-style decoders, computed once and read by every layer) into
   stages that ask for values nobody passes ("Expected positional argument",
   pytorch/pytorch#184361). The model is exported again (`exported_graph`: ``ep.module()``,
   whose nodes keep ``nn_module_stack`` and whose parameters keep their FQNs) and cut at the
   same candidates by `devplace_lite.pipeline.split` (`export_split`), which carries values
   read later (the rotary cosines and sines) through the stages in between; a tied weight is
   replicated on the stages that read it and listed in `Capture.tied`, as on route 1. Each
   torchrun rank exports and cuts the model again, to the same nodes. ``how`` is
   ``"torch.export+devplace split"`` and the notes say why route 1 was left. Where export
   itself fails this route is skipped (it would fail the same way).
3. **torch.fx as the fallback** when export fails (data-dependent control flow, say): the
   model is traced with ``torch.fx``; where tracing fails inside a module, that module is kept
   whole (a leaf) and tracing restarts, up to `MAX_LEAVES` times. Each step is written to
   `Capture.notes` with the module, the source line and the fallback taken. Segments are then
   cut by devplace's own splitter (`devplace_lite.pipeline.split`), which carries skip values
   through the stages in between.
4. **Measure** (`measure_segments`): run the segments in order on the example micro-batch,
   each ``repeats`` times after ``warmup``, timing the forward with the CPU time of the
   calling thread on one torch thread (a shared machine's load does not inflate it: waiting
   for a core is not CPU time), and in training the segment's own backward passes, fed with
   ones, on fresh leaf copies of its inputs (so in-place operators never touch a saved
   tensor): the full backward, and torch's own input-gradient and weight-gradient passes that
   the zero-bubble schedules run instead. A segment's inputs keep the strides the model gives
   them (a boundary made them contiguous; inside a stage the next operator reads them as the
   model made them, and its speed can depend on it: ConvNeXt's depthwise convolutions).
   The repeats go round the segments (a busy machine slows a process for seconds at a time,
   so each segment's runs are spread over the whole measurement); a segment's time is its
   median share of a round times the least round's time (interference only ever adds, and
   the least of whole rounds, like a run's least time of a whole stage, is not the sum of
   each segment's least, which is lower on a busy machine). The model is also timed whole in the same
   rounds: a segment's boundary (its outputs made contiguous, tuples packed and unpacked, one
   more module call) costs time that a stage holding several segments does not pay (T5's
   forward: 8-17 %), so the segments' times of each kind are scaled to sum to the whole
   model's (``boundary_scale``, at most 1). With a GPU
   ``spec`` each run is priced instead by that GPU's roofline of the kernels it launched (the
   profiler's FLOP and bytes count, `devplace_lite.pipeline.profile.KernelLog`). Also recorded:
   the bytes of the parameters each segment holds, the activations autograd saves for its
   backward (and which values several segments save: a producer its output and a consumer the
   same tensor as its input, one tensor inside a stage but a copy per segment here,
   ``shared_saves``, counted once a stage by the planner), and the bytes of every value
   passed between segments.
5. **Graph** (`segment_graph`): one node per segment (and per model input, a zero-cost source
   on the first stage), an edge per value passed, backward nodes paired by colour in
   training. ``comm`` is the bytes a segment sends on, over the link.

Complexity: two exports (three on route 2; or one export and one trace) and ``(warmup + repeats)`` forward (and backward) passes of
the segments and of the whole model.

Example
-------
>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> cap = capture(net, (torch.randn(2, 8),))
>>> cap.how, cap.names
('torch.export', ['0', '1', '2'])
>>> m = measure_segments(cap, repeats=2, warmup=0)
>>> len(m.forward_ms), m.param_bytes
(3, [576, 0, 272])
"""

from __future__ import annotations

import collections
import contextlib
import copy
import linecache
import os
import statistics
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch import nn
from torch.utils._pytree import tree_flatten

from ..errors import GraphError, UsageError
from ..graph import Graph, Node
from .profile import ACC_KERNEL_OVERHEAD_MS, KernelLog, roofline_ms
from .tracer import Tracer

GRANULARITIES = ("block", "layer")
#: Modules made leaves, one per failed trace, before the fx fallback gives up.
MAX_LEAVES = 16
#: Host link assumed for measured CPU segments (PCIe 3.0 x16, as `devplace_lite.pipeline.profile`).
LINK_BYTES_PER_S = 16e9
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
#: Warnings that torch's own pipelining code raises on every capture (it deep-copies a pytree
#: spec, which warns from inside torch, pointing at Python's copyreg), by their exact text.
KNOWN_WARNINGS = ((FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
                  # nn.LSTM and nn.GRU re-assign their list of their own parameters in forward
                  (UserWarning, r"The tensor attributes (self\.\S+\._flat_weights\[\d+\], )*"
                                r"self\.\S+\._flat_weights\[\d+\] were assigned during export"))


@contextlib.contextmanager
def known_warnings_filtered():
    """Run a block with exactly the `KNOWN_WARNINGS` ignored (any other warning still shows)."""
    with warnings.catch_warnings():
        for category, text in KNOWN_WARNINGS:
            warnings.filterwarnings("ignore", message=text, category=category)
        yield


# -- candidate split points --------------------------------------------------------------------
def module_calls(model: nn.Module, inputs: Sequence[Any]) -> tuple[list[str], collections.Counter]:
    """Module FQNs in the order their ``forward`` starts on ``inputs``, and how often each runs."""
    order: list[str] = []
    count: collections.Counter = collections.Counter()

    def hook(name: str):
        def pre(_module: nn.Module, _args: Any) -> None:
            order.append(name)
            count[name] += 1
        return pre

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in model.named_modules() if name]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return order, count


def candidates(model: nn.Module, order: Sequence[str], count: collections.Counter,
               granularity: str = "block") -> list[str]:
    """Candidate split points in call order (see the module docstring)."""
    if granularity not in GRANULARITIES:
        raise UsageError(f"unknown granularity {granularity!r}; expected one of {', '.join(GRANULARITIES)}")
    mods = dict(model.named_modules())

    def depth(name: str) -> int:  # ancestors with more than one child: single-child wrappers are transparent
        parts = name.split(".")
        return sum(len(list(mods[".".join(parts[:i])].children())) > 1 for i in range(len(parts)))

    out: list[str] = []
    for name in dict.fromkeys(order):
        if count[name] != 1:
            continue
        parent = mods[name.rpartition(".")[0]]
        if granularity == "layer" or depth(name) <= 1 or type(parent) in _CONTAINERS:  # not subclasses (MLP blocks)
            out.append(name)
    return out


def _module_path(node: fx.Node) -> list[str]:
    """FQNs of the modules a node runs inside (call_module leaves included)."""
    stack = node.meta.get("nn_module_stack") or {}
    path = []
    for value in stack.values():
        fqn = value[0] if isinstance(value, tuple) else str(value)
        path.append(fqn.split("@")[0].replace("L['self'].", "").replace("L__self___", ""))
    if node.op == "call_module":
        path.append(str(node.target))
    return path


def _first_nodes(gm: fx.GraphModule, cands: Sequence[str]) -> dict[str, str]:
    """Candidate FQN -> the name of the first operator node inside it (candidates with no
    operator of their own are left out; one node keeps its outermost candidate)."""
    wanted = set(cands)
    first: dict[str, str] = {}
    started: set[str] = set()
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        taken = False
        for fqn in _module_path(n):
            parts = fqn.split(".")
            for i in range(1, len(parts) + 1):
                c = ".".join(parts[:i])
                if c in wanted and c not in started:
                    started.add(c)
                    if not taken:  # an inner candidate starting here is the same split point
                        first[c] = n.name
                        taken = True
    return first


# -- the capture -------------------------------------------------------------------------------
@dataclass
class Capture:
    """A model cut into segments at its candidate split points.

    ``names[i]`` is segment ``i``'s split point (the module FQN at which it begins; segment 0
    begins at the model's start and is named after its first candidate, or ``"(start)"``);
    ``modules[i]`` runs it. ``wiring`` is an fx graph calling ``submod_<i>`` in order (the
    export route) or ``None`` (the fx route, whose `split` carries values stage to stage).
    ``tied``: parameter FQN -> segments holding a copy. ``notes``: what the capture had to do.
    """

    model: nn.Module
    example: tuple
    how: str
    names: list[str]
    modules: list[nn.Module]
    wiring: fx.GraphModule | None
    granularity: str
    notes: list[str] = field(default_factory=list)
    tied: dict[str, list[int]] = field(default_factory=dict)
    leaf_modules: list[str] = field(default_factory=list)
    #: The fx route's traced model before it was cut (`_whole` times it).
    traced: nn.Module | None = None
    #: Values made contiguous to cross a boundary (the receiving segment's placeholder name) ->
    #: the strides the model gave them, which a stage holding both segments keeps (export route).
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def num_segments(self) -> int:
        return len(self.modules)

    @property
    def split_points(self) -> list[str]:
        """The FQNs that begin segments 1, 2, ... (``SplitPoint.BEGINNING`` each)."""
        return self.names[1:]


def _reason(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:200] if lines else type(err).__name__


def _user_frame(err: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the error that is neither torch's nor this package's."""
    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = None
    e: BaseException | None = err
    while e is not None:
        for f in traceback.extract_tb(e.__traceback__):
            path = os.path.abspath(f.filename)
            if not path.startswith(torch_dir) and not path.startswith(here) and "<" not in f.filename:
                found = f
        e = e.__cause__ or e.__context__
    return found


def _where(frame: traceback.FrameSummary | None) -> str:
    if frame is None:
        return ""
    code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return f"{os.path.basename(frame.filename)}:{frame.lineno} `{code}`"


def split_policy(points: Sequence[str], chosen: list[str] | None = None,
                 layouts: dict[str, tuple[int, ...]] | None = None):
    """A ``split_policy`` for `torch.distributed.pipelining.pipeline` that begins a stage at
    each module FQN of ``points`` (what ``split_spec={fqn: SplitPoint.BEGINNING}`` does), and
    rewrites the exported graph so that torch's schedules can run any split at those points:
    a model input that a later stage reads is copied on the first stage (the schedules feed
    inputs to the first stage only: a T5 decoder's token ids), values go from each stage to
    the next only (`_carry`), values that cross are contiguous (`_make_contiguous`), and an
    in-place operator never writes into a received tensor (`_copy_mutated_input`).
    ``chosen`` (optional) receives the name of each segment's split point, the first named
    after the model's first candidate or ``"(start)"``. ``layouts`` (optional) receives, for
    each value made contiguous, the strides the model gave it (`Capture.layouts`)."""
    from torch.distributed.pipelining._IR import aten_pipe_split_alias

    names = chosen if chosen is not None else []

    def policy(gm: fx.GraphModule) -> fx.GraphModule:
        first = _first_nodes(gm, points)
        by_node = {v: k for k, v in first.items()}
        ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
        names.append(by_node.get(ops[0].name, "(start)") if ops else "(start)")
        marks = []
        for n in ops[1:]:
            if n.name in by_node:
                with gm.graph.inserting_before(n):
                    marks.append(gm.graph.call_function(aten_pipe_split_alias, ()))
                names.append(by_node[n.name])
        if marks:
            seg = _segment_index(gm)
            for ph in [n for n in gm.graph.nodes if n.op == "placeholder"]:
                late = [u for u in ph.users if seg[u] > 0]
                if late:
                    copy_ = _copy_before(gm, ph, ops[0])
                    seg[copy_] = 0
                    for u in late:
                        u.replace_input_with(ph, copy_)
            for n in list(gm.graph.nodes):
                _carry(gm, n, seg)
            for n in list(gm.graph.nodes):
                _make_contiguous(gm, n, seg, layouts)
            for n in list(gm.graph.nodes):
                _copy_mutated_input(gm, n, seg)
        gm.recompile()
        return gm

    return policy


def _segment_index(gm: fx.GraphModule) -> dict[fx.Node, int]:
    """The segment of every node: the number of split markers before it."""
    from torch.distributed.pipelining._IR import aten_pipe_split_alias

    seg, i = {}, 0
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target == aten_pipe_split_alias:
            i += 1
        seg[n] = i
    return seg


def _copy_before(gm: fx.GraphModule, value: fx.Node, where: fx.Node) -> fx.Node:
    """A clone of ``value`` inserted before ``where``, with the metadata export's tools need."""
    with gm.graph.inserting_before(where):
        copy_ = gm.graph.call_function(torch.ops.aten.clone.default, (value,))
    copy_.meta.update({k: value.meta[k] for k in ("val", "tensor_meta") if k in value.meta})
    copy_.meta["nn_module_stack"] = dict(where.meta.get("nn_module_stack") or {})
    return copy_


def _make_contiguous(gm: fx.GraphModule, value: fx.Node, seg: dict[fx.Node, int],
                     layouts: dict[str, tuple[int, ...]] | None = None) -> None:
    """A value that crosses to a later segment with strides that are not contiguous gets a
    contiguous copy in its own segment: the receiving stage allocates its buffer with the
    traced strides, and gloo sends and receives contiguous memory only. ``layouts`` records the
    copy's name (the receiving segment's placeholder) and the value's own strides."""
    val = value.meta.get("val")
    if value.op in ("output", "get_attr") or not isinstance(val, torch.Tensor) or val.is_contiguous():
        return
    later = [u for u in value.users if seg[u] > seg[value]]
    if not later:
        return
    with gm.graph.inserting_after(value):
        copy_ = gm.graph.call_function(torch.ops.aten.clone.default, (value,),
                                       {"memory_format": torch.contiguous_format})
    copy_.meta["val"] = val.clone(memory_format=torch.contiguous_format)
    copy_.meta["nn_module_stack"] = dict(value.meta.get("nn_module_stack") or {})
    seg[copy_] = seg[value]
    if layouts is not None:
        layouts[copy_.name] = tuple(val.stride())
    for u in later:
        u.replace_input_with(value, copy_)


def _copy_mutated_input(gm: fx.GraphModule, node: fx.Node, seg: dict[fx.Node, int]) -> None:
    """An in-place operator (``ReLU(inplace=True)``) at the start of a segment would write into
    the tensor the stage received, which autograd forbids (a leaf that requires grad): it
    writes into a copy instead, and what read the value after it reads the copy."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not node.args or not schema.arguments:
        return
    alias = schema.arguments[0].alias_info
    value = node.args[0]
    if alias is None or not alias.is_write or not isinstance(value, fx.Node) or seg[value] >= seg[node]:
        return
    copy_ = _copy_before(gm, value, node)
    seg[copy_] = seg[node]
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for u in list(value.users):
        if u is not copy_ and order[u] >= order[node]:
            u.replace_input_with(value, copy_)


def _carry(gm: fx.GraphModule, value: fx.Node, seg: dict[fx.Node, int]) -> None:
    """Hand ``value`` on segment by segment: a value read two or more segments later gets a
    copy at the start of the next segment, which serves the readers after it (and so on).
    Every stage then talks to its neighbours only, which torch's schedules need: a value that
    needs a gradient cannot go to two stages ("backward of skip connections"), and 1F1B's
    paired sends and receives can wait on each other forever across a skip."""
    if value.op in ("output", "get_attr") or not isinstance(value.meta.get("val"), torch.Tensor):
        return
    nxt = seg[value] + 1
    if max((seg[u] for u in value.users), default=0) <= nxt:
        return
    start = next(n for n in gm.graph.nodes if seg.get(n) == nxt and not _is_marker(n))
    copy_ = _copy_before(gm, value, start)
    seg[copy_] = nxt
    for u in [u for u in value.users if seg[u] > nxt]:
        u.replace_input_with(value, copy_)
    _carry(gm, copy_, seg)


def _is_marker(n: fx.Node) -> bool:
    from torch.distributed.pipelining._IR import aten_pipe_split_alias

    return n.op == "call_function" and n.target == aten_pipe_split_alias


def export_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` to export or cut into stages (the caller's model is never modified).
    cuDNN runs an RNN's backward only in training mode, and an export fixes the mode into the
    graph (``aten.lstm(..., train)``); an RNN without dropout computes the same in both modes,
    so the copy's are in training mode, which lets a GPU train them."""
    out = copy.deepcopy(model)
    for m in out.modules():
        if isinstance(m, nn.RNNBase) and not m.dropout:
            m.train()
    return out


def _capture_export(model: nn.Module, example: tuple, cands: Sequence[str], granularity: str) -> Capture:
    import logging

    from torch.distributed.pipelining import pipeline

    names: list[str] = []
    layouts: dict[str, tuple[int, ...]] = {}
    quiet = logging.getLogger("torch.distributed.pipelining")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it logs every parameter shared by two stages at INFO
    try:
        with known_warnings_filtered():
            pipe = pipeline(export_copy(model), example, split_policy=split_policy(cands, names, layouts))
    finally:
        quiet.setLevel(level)
    modules = [pipe.get_stage_module(i) for i in range(pipe.num_stages)]
    if len(modules) != len(names):
        raise GraphError(f"export produced {len(modules)} segments for {len(names)} split points")
    return Capture(model=model, example=example, how=HOW_EXPORT, names=names, modules=modules,
                   wiring=pipe.split_gm, granularity=granularity, tied=tied_parameters(model, modules),
                   layouts=layouts)


def tied_parameters(model: nn.Module, stages: Sequence[nn.Module]) -> dict[str, list[int]]:
    """Trainable parameters of ``model`` held by more than one stage: the first of their FQNs
    -> the stages. Stage modules keep the model's FQNs; a tied weight (one tensor under several
    names) counts as held wherever any of its names is."""
    aliases: dict[int, list[str]] = collections.defaultdict(list)
    for fqn, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            aliases[id(p)].append(fqn)
    held = [{fqn for fqn, _ in m.named_parameters(remove_duplicate=False)} for m in stages]
    tied = {}
    for names in aliases.values():
        where = [i for i, h in enumerate(held) if h.intersection(names)]
        if len(where) > 1:
            tied[names[0]] = where
    return tied


#: `Capture.how` of each route, in the order they are tried (see the module docstring).
HOW_EXPORT, HOW_EXPORT_SPLIT, HOW_FX = "torch.export", "torch.export+devplace split", "torch.fx"


def exported_graph(model: nn.Module, example: tuple) -> fx.GraphModule:
    """``model`` exported once with torch.export (non-strict, as torch's pipelining exports it)
    as one fx graph to cut: ``ExportedProgram.module()``, whose nodes keep ``nn_module_stack``
    and whose parameters keep their FQNs, taking the example's tensors positionally and
    returning what the model returns (export's pytree wrapping of inputs and outputs removed,
    so that a stage cut from it is a plain module), without dead code (an unused buffer's
    read). Deterministic: every torchrun rank exports its own copy and gets the same nodes."""
    with known_warnings_filtered():
        ep = torch.export.export(export_copy(model), example)
    gm = ep.module(check_guards=False)
    codegen = gm.graph._codegen
    out_spec = getattr(getattr(codegen, "pytree_info", None), "out_spec", None)
    gm.graph._codegen = fx.graph.CodeGen()
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    if out_spec is not None:
        output.args = (_plain_output(list(output.args[0]), out_spec),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _plain_output(flat: list[Any], spec: Any) -> Any:
    """The exported graph's flat outputs in the model's own structure where fx can hold it (a
    tensor, tuples, lists, dicts); the flat tuple otherwise (a `ModelOutput`: the run's loss
    reads its first floating-point tensor either way, `torchrun.head`)."""
    from torch.utils._pytree import tree_unflatten

    tree = tree_unflatten(flat, spec)

    def plain(v: Any) -> bool:
        if isinstance(v, (tuple, list)) and type(v) in (tuple, list):
            return all(plain(x) for x in v)
        if type(v) is dict:
            return all(plain(x) for x in v.values())
        return isinstance(v, fx.Node) or v is None
    return tree if plain(tree) else tuple(flat)


def export_split(model: nn.Module, example: tuple, points: Sequence[str]):
    """The model's exported graph (`exported_graph`) cut by devplace's splitter at the module
    FQNs ``points``, tied parameters replicated into every stage that reads them (their
    gradients summed by the run, as on torch's pipelining route): ``(Split, names of the
    stages' split points, the uncut graph)``. What the capture's second route does, and what
    each torchrun rank does again to build its stages."""
    gm = exported_graph(model, example)
    sp, names = fx_split(gm, example, points, replicate_parameters=True)
    return sp, names, gm


def _capture_export_split(model: nn.Module, example: tuple, cands: Sequence[str], granularity: str) -> Capture:
    sp, names, gm = export_split(model, example, cands)
    modules = list(sp.stages)
    return Capture(model=model, example=example, how=HOW_EXPORT_SPLIT, names=names, modules=modules,
                   wiring=None, granularity=granularity, tied=tied_parameters(model, modules), traced=gm)


def trace_with_leaves(model: nn.Module, notes: list[str]) -> tuple[fx.GraphModule, list[str]]:
    """Trace ``model`` with torch.fx, keeping whole each module inside which tracing fails
    (innermost first), and noting each in ``notes``. `GraphError` when the failure is in the
    model's own ``forward`` (no module to keep whole) or after `MAX_LEAVES` leaves."""
    leaves: set[str] = set()
    for _ in range(MAX_LEAVES + 1):
        tracer = Tracer(leaves)
        try:
            graph = tracer.trace(model)
            return fx.GraphModule(tracer.root, graph, type(model).__name__), sorted(leaves)
        except Exception as e:  # noqa: BLE001 - fx raises TraceError, TypeError, RuntimeError...
            stack = list(tracer.module_stack) if tracer.module_stack else []
            module = next((s for s in reversed(stack) if s and s not in leaves), "")
            where = _where(_user_frame(e))
            if not module:
                raise GraphError(f"cannot capture {type(model).__name__}: torch.fx fails in the model's own forward "
                                 f"at {where or 'an unknown line'} ({_reason(e)}); make that code traceable, or "
                                 "wrap it in a module, which is then kept whole") from None
            leaves.add(module)
            notes.append(f"torch.fx: tracing fails inside module {module} at {where or 'an unknown line'} "
                         f"({_reason(e)}); fallback: kept {module} whole as one leaf")
    raise GraphError(f"cannot capture {type(model).__name__} with torch.fx: still failing after {MAX_LEAVES} leaf "
                     "modules")


def fx_split(gm: fx.GraphModule, example: tuple, points: Sequence[str], leaves: Sequence[str] = (),
             replicate_parameters: bool = False):
    """Cut a torch.fx graph into stages beginning at the module FQNs ``points`` (those inside a
    leaf cannot begin one) with devplace's splitter: ``(Split, names of the stages' split points)``.
    ``replicate_parameters``: as `split_module`'s (tied weights on several stages)."""
    from .split import split_module

    points = [c for c in points if not any(c.startswith(leaf + ".") for leaf in leaves)]
    by_node = {v: k for k, v in _first_nodes(gm, points).items()}
    seg, names, stage_of = 0, [], {}
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    for j, n in enumerate(ops):
        if j == 0:
            names.append(by_node.get(n.name, "(start)"))
        elif n.name in by_node:
            seg += 1
            names.append(by_node[n.name])
        stage_of[n.name] = seg
    return split_module(gm, stage_of, example, num_stages=len(names),
                        replicate_parameters=replicate_parameters), names


def _capture_fx(model: nn.Module, example: tuple, cands: Sequence[str], granularity: str,
                notes: list[str]) -> Capture:
    gm, leaves = trace_with_leaves(model, notes)
    sp, names = fx_split(gm, example, cands, leaves)
    return Capture(model=model, example=example, how=HOW_FX, names=names, modules=list(sp.stages),
                   wiring=None, granularity=granularity, leaf_modules=leaves, traced=gm)


def _construct(reason: str) -> str:
    """``reason`` (export's first line) led by the construct it means, where export's words
    do not say it plainly: a guard on a data-dependent value is the model branching on (or
    sizing by) a tensor's values, as a mixture of experts' router may.

    >>> _construct("Could not guard on data-dependent expression Eq(u0, 1)")
    'data-dependent control flow (a branch or a shape decided by a tensor value): Could not guard on data-dependent expression Eq(u0, 1)'
    """
    if "data-dependent" in reason or "_local_scalar_dense" in reason:
        return f"data-dependent control flow (a branch or a shape decided by a tensor value): {reason}"
    return reason


def _export_failed(err: BaseException) -> bool:
    """Whether ``err`` from torch's ``pipeline()`` is torch.export failing to capture the model
    (which it wraps in a RuntimeError of its own), not its outliner or stage building failing
    after a sound export: then cutting the export ourselves cannot help either."""
    return isinstance(err, RuntimeError) and "cannot capture your model as a full graph" in str(err)


def without_cache(model: nn.Module) -> list[str]:
    """Turn off the key-value cache of every Hugging Face model inside ``model``
    (``config.use_cache = False`` where it was true) and name the modules changed.

    In eval mode most decoder and encoder-decoder language models return their cache
    (``DynamicCache``, ``EncoderDecoderCache``) beside the logits: an object torch.export cannot
    put in a graph's output and a pipeline stage cannot send. The cache serves generation one
    token at a time; a pipeline step (training, or one forward pass of inference) computes the
    same logits without it, so the plan is that of the model as it trains.

    Examples
    --------
    >>> class Config:
    ...     use_cache = True
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> net.config = Config()
    >>> without_cache(net), net.config.use_cache
    (['Sequential'], False)
    """
    changed = []
    for name, m in model.named_modules():
        cfg = getattr(m, "config", None)
        if getattr(cfg, "use_cache", None) is True:
            cfg.use_cache = False
            changed.append(name or type(model).__name__)
    return changed


def capture(model: nn.Module, example: Sequence[Any], granularity: str = "block") -> Capture:
    """Capture ``model`` on the example micro-batch ``example`` (a tuple of tensors).

    Tries torch's pipelining over torch.export, then the exported graph cut by devplace's
    splitter (where torch's stage modules fail to run), then torch.fx with automatic leaf
    modules; why an earlier route was left is in ``notes``. A Hugging Face model's key-value cache is turned off first
    (`without_cache`, said in ``notes``). Raises `GraphError` when both routes fail: one line
    with export's reason first (naming the line of the model), then the fallback's.
    """
    example = tuple(example)
    if not example or not all(isinstance(t, torch.Tensor) for t in example):
        raise UsageError("example inputs must be a non-empty tuple of tensors")
    changed = without_cache(model)
    first = [f"use_cache turned off in the config of {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}: "
             "a pipeline stage sends tensors, not a key-value cache"] if changed else []
    try:
        order, count = module_calls(model, example)
    except Exception as e:  # noqa: BLE001 - the user's model failed on its own input
        from ..zoo.external import torchvision_mismatch

        raise GraphError(f"model {type(model).__name__} fails on its example inputs at "
                         f"{_where(_user_frame(e)) or 'an unknown line'}: "
                         f"{torchvision_mismatch(e) or _reason(e)}") from None
    cands = candidates(model, order, count, granularity)
    exported = True  # whether torch.export itself captured the model (torch's outliner may still fail)
    try:
        cap = _capture_export(model, example, cands, granularity)
    except Exception as e:  # noqa: BLE001 - export raises many kinds; we fall back and say why
        where = _where(_user_frame(e))
        why = f"torch.export fails{' at ' + where if where else ''} ({_construct(_reason(e.__cause__ or e))})"
        exported = not _export_failed(e)
    else:
        try:  # torch's stage modules can fail where the model runs (pytorch/pytorch#184361: rotary embeddings)
            for _ in _run_in_order(cap, example):
                pass
            cap.notes = first
            return cap
        except Exception as e:  # noqa: BLE001 - a stage module torch built does not run: the fx route may
            why = f"the stages torch.export gives fail to run ({_reason(e)})"
            if "Expected positional argument" in why:
                why += (" - torch's pipelining outlines some modules wrongly, rotary embeddings of Llama-style "
                        "models among them: pytorch/pytorch#184361")
    if exported:  # the export is sound, torch's cut of it is not: cut the exported graph ourselves
        try:
            cap = _capture_export_split(model, example, cands, granularity)
            for _ in _run_in_order(cap, example):
                pass
        except Exception as e:  # noqa: BLE001 - our splitter refuses (GraphError) or a stage fails to run
            where = _where(_user_frame(e))
            why += (f"; devplace's split of the exported graph fails{' at ' + where if where else ''} "
                    f"({_reason(e)})")
        else:
            cap.notes = first + [f"{why}; fallback: the exported graph cut by devplace's splitter "
                                 "(values read later carried stage to stage)"]
            return cap
    notes = first + [f"{why}; fallback: torch.fx"]
    try:
        cap = _capture_fx(model, example, cands, granularity, notes)
    except GraphError as e:  # both failed: export's reason says what to change, so it comes first
        fx_why = str(e).removeprefix(f"cannot capture {type(model).__name__}: ")
        raise GraphError(f"cannot capture {type(model).__name__}: {why}; the torch.fx fallback: {fx_why}") from None
    cap.notes = notes
    return cap


# -- measuring segments ------------------------------------------------------------------------
@dataclass
class SegmentTimes:
    """What measuring the segments gave, per segment (lists in segment order).

    Times are the least CPU time over the repeats, in ms, on one torch thread;
    ``activation_bytes`` the tensors autograd saves for the segment's backward (training), or
    its output (inference); ``inputs[i]``: ``(source, position, bytes, float)`` of every value
    segment ``i`` reads, the source a segment index (and the output's position) or
    ``"input:<k>"``.
    """

    forward_ms: list[float]
    backward_ms: list[float]
    param_bytes: list[int]
    grad_bytes: list[int]
    activation_bytes: list[int]
    inputs: list[list[tuple[Any, int, bool]]]
    training: bool
    repeats: int
    threads: int = 1
    input_bytes: list[int] = field(default_factory=list)
    device: str = "cpu"
    #: torch's input-gradient and weight-gradient passes (the zero-bubble schedules' ``I`` and
    #: ``W``; their sum is more than the full backward). A segment none of whose inputs takes a
    #: gradient has I 0 and W its whole backward, as torch's first stage runs them.
    backward_input_ms: list[float] = field(default_factory=list)
    backward_weight_ms: list[float] = field(default_factory=list)
    #: Bytes of each segment's outputs (the last one's are the model's: the loss keeps them).
    output_bytes: list[int] = field(default_factory=list)
    #: The accelerator whose roofline gave the times (`measure_segments`' ``spec``), else measured.
    spec: str | None = None
    #: Measured times only: the factor (at most 1) by which each kind's segment times were scaled
    #: so that they sum to the model timed whole (``{"F": ..., "B": ...}``; I and W as B), and those
    #: whole-model times (ms).
    boundary_scale: dict[str, float] | None = None
    whole_ms: dict[str, float] | None = None
    #: Segments that the deadline gave fewer than ``repeats`` timed runs (each got one at least).
    cut_short: int = 0
    #: Training: values that several segments save for their backward (a producer its output, a
    #: consumer its input), ``(bytes, [segments that save it])``: one tensor inside a stage, a
    #: copy per segment in the profile (each segment gets fresh inputs), so counted once a stage.
    shared_saves: list[tuple[int, list[int]]] = field(default_factory=list)


def _bytes(v: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor))


class _Saved:
    """Bytes of distinct tensors autograd saves (parameters excluded)."""

    def __init__(self, skip: set[int]) -> None:
        self.skip, self.seen, self.total = skip, set(), 0
        #: After a pass (`_timed_pass`): bytes saved of each input, and of each top-level output.
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    @staticmethod
    def _key(t: torch.Tensor) -> tuple:
        storage = t.untyped_storage()  # a meta storage has no data: every one's address is 0
        return storage._cdata if t.is_meta else storage.data_ptr(), t.storage_offset(), tuple(t.shape)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = self._key(t)
        if id(t) not in self.skip and key not in self.seen:
            self.seen.add(key)
            self.total += t.numel() * t.element_size()
        return t

    def saved(self, v: Any) -> int:
        """Bytes of ``v`` if it is a tensor this meter saw saved, else 0."""
        return v.numel() * v.element_size() if isinstance(v, torch.Tensor) and self._key(v) in self.seen else 0

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t


def _segment_calls(cap: Capture) -> list[tuple[int, list[tuple]]]:
    """Where each segment's positional inputs come from, read off the export route's wiring:
    ``("input", k)`` or ``("seg", j, position or None)``."""
    placeholders = [n for n in cap.wiring.graph.nodes if n.op == "placeholder"]
    pos = {n: ("input", k) for k, n in enumerate(placeholders)}
    seg_of: dict[fx.Node, int] = {}
    calls = []
    for n in cap.wiring.graph.nodes:
        if n.op != "call_module":
            continue
        i = int(str(n.target).rsplit("_", 1)[-1])
        seg_of[n] = i
        src = []
        for a in n.args:
            if a in pos:
                src.append(pos[a])
            elif a in seg_of:
                src.append(("seg", seg_of[a], None))
            elif isinstance(a, fx.Node) and a.op == "call_function" and a.args[0] in seg_of:
                src.append(("seg", seg_of[a.args[0]], a.args[1]))
            else:
                raise GraphError(f"unexpected value {a} feeding segment {i}")
        calls.append((i, src))
    return calls


def to_device(module: nn.Module, device: str | torch.device) -> nn.Module:
    """``module`` moved to ``device``, with the devices its graphs baked in moved too.

    torch.export records a device it saw when tracing as a constant (``torch.arange(t,
    device=ids.device)`` becomes ``arange(..., device=cpu)``), so a captured segment moved to a
    GPU by ``.to`` alone would still make those tensors on the CPU. torch's pipelining fixes its
    own stages the same way (``build_stage``)."""
    from torch.distributed.pipelining._IR import _modify_graph_op_device

    module = module.to(device)
    if isinstance(module, fx.GraphModule):
        _modify_graph_op_device(module, torch.device(device))
    return module


def _run_in_order(cap: Capture, example: tuple):
    """Yield ``(i, module, input values, sources)`` for each segment in order, with real values
    produced by running the segments once (no grad) on ``example``."""
    outs: dict[int, Any] = {}
    with torch.no_grad():
        if cap.wiring is None:
            cur: Any = example
            for i, m in enumerate(cap.modules):
                args = list(cur)
                src = [("input", k) for k in range(len(args))] if i == 0 else \
                    [("seg", i - 1, j) for j in range(len(args))]
                yield i, m, args, src
                res = m(*args)
                cur = tuple(res) if isinstance(res, (tuple, list)) else (res,)
            return
        for i, src in _segment_calls(cap):
            args = []
            for s in src:
                if s[0] == "input":
                    args.append(example[s[1]])
                else:
                    v = outs[s[1]]
                    args.append(v if s[2] is None else v[s[2]])
            yield i, cap.modules[i], args, src
            outs[i] = cap.modules[i](*args)


def _cpu_ms(fn) -> float:
    c0 = time.thread_time()
    fn()
    return (time.thread_time() - c0) * 1e3


def _cuda_ms(fn) -> float:
    """GPU time of ``fn``'s kernels between two CUDA events (run on an H100, 2026-11-27: `benchmarks/device.sh`)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def _roofline_clock(acc: Any):
    """A clock that runs ``fn`` once and answers the roofline time of the kernels it launched on
    accelerator ``acc`` (`devplace_lite.pipeline.profile`'s FLOP and bytes count, the same for a
    segment as for the layers it holds): deterministic, the same on every machine."""
    def clock(fn) -> float:
        log = KernelLog()
        with log:
            fn()
        return roofline_ms(log.kernels, acc, ACC_KERNEL_OVERHEAD_MS)

    return clock


@contextlib.contextmanager
def _torch_fails(what: str, device: str):
    """A torch error while timing ``what`` as one line that names it (`GraphError`), not a
    traceback: a kernel the device refuses, or memory it lacks."""
    try:
        yield
    except RuntimeError as e:  # torch's kernels raise RuntimeError, and OutOfMemoryError under it
        line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        fix = "; lower --batch or raise --microbatches" if isinstance(e, torch.OutOfMemoryError) else ""
        raise GraphError(f"torch failed timing {what} on {device}: {line[:300]}{fix}") from None


def _whole(cap: Capture) -> Capture:
    """``cap`` as one segment: the model's program without the segment boundaries, which a
    pipeline stage holding several segments does not run either (the export route: torch's
    pipeline with no split point; the routes devplace's splitter cuts: the exported or traced
    graph before it was cut)."""
    if cap.wiring is None:  # devplace's splitter cut it (from a trace or an export): the graph before the cut
        return Capture(model=cap.model, example=cap.example, how=cap.how, names=["(whole)"], modules=[cap.traced],
                       wiring=None, granularity=cap.granularity)
    from torch.distributed.pipelining import pipeline

    with known_warnings_filtered():
        pipe = pipeline(export_copy(cap.model), cap.example, split_policy=split_policy([]))
    return Capture(model=cap.model, example=cap.example, how=cap.how, names=["(whole)"],
                   modules=[pipe.get_stage_module(0)], wiring=pipe.split_gm, granularity=cap.granularity)


def _grads(src: Sequence[tuple]) -> list[bool]:
    """Which of a segment's arguments get a gradient: not the model's inputs, since a
    pipeline's first stage gets data whose gradient nobody computes (an image's gradient
    through the first convolution would add to that stage's backward, and be all of its
    input-gradient pass)."""
    return [s[0] != "input" for s in src]


def _leaves(args: Sequence[Any], grad: Sequence[bool], training: bool) -> list[Any]:
    """Fresh leaf copies of ``args``, those flagged in ``grad`` and floating-point requiring a
    gradient in training, as a stage receives them (cloned, so that an in-place operator never
    writes into the leaf)."""
    xs = []
    for a, g in zip(args, grad):
        if isinstance(a, torch.Tensor):
            leaf = a.detach().requires_grad_(training and g and a.is_floating_point())
            a = leaf.clone() if leaf.requires_grad else leaf
        xs.append(a)
    return xs


def _outputs(out: Any) -> list[torch.Tensor]:
    return [y for y in tree_flatten(out)[0] if isinstance(y, torch.Tensor) and y.requires_grad]


def _timed_pass(m: nn.Module, args: Sequence[Any], grad: Sequence[bool], training: bool, clock,
                meter: _Saved | None = None):
    """One forward of segment ``m`` on fresh leaf copies of ``args`` (`_leaves`) and, in
    training, the backward passes torch's schedules run, fed with ones: its input-gradient and
    weight-gradient passes (torch's own ``stage_backward_input`` and ``stage_backward_weight``,
    which the zero-bubble schedules call; their sum exceeds a full backward: the first walks
    the graph with hooks, the second walks it again from what the first kept), then, after a
    second forward, its full backward. Returns ``(F, I, B, W, output)``; I and W are None when
    no input takes a gradient (torch's first stage runs its whole backward as W), B None when
    there is nothing to differentiate. With ``meter`` the forward alone runs, untimed, and
    counts the saved tensors instead (the hooks cost time)."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    out: list[Any] = []
    f_ms = i_ms = b_ms = w_ms = None
    with torch.set_grad_enabled(training):
        # grad mode set here: `_run_in_order`'s no_grad would otherwise leave the fresh inputs
        # without requires_grad, and the backward would skip the inputs' gradients
        xs = _leaves(args, grad, training)
        if meter is not None:
            with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
                out.append(m(*xs))
            tops = list(out[0]) if isinstance(out[0], (tuple, list)) else [out[0]]
            meter.inputs, meter.outputs = [meter.saved(x) for x in xs], [meter.saved(y) for y in tops]
            return None, None, None, None, out[0]
        f_ms = clock(lambda: out.append(m(*xs)))
    ys = _outputs(out[0]) if training else []
    weights = [p for p in m.parameters() if p.requires_grad]
    if ys and any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs):
        # torch detaches a stage's outputs in place after the input pass, so give it copies (as
        # the run does for the zero-bubble schedules: `torchrun._fresh_copies`)
        ys = [y.clone() for y in ys]
        groups: list[Any] = []
        with warnings.catch_warnings():  # it sets .grad on the inputs: our leaves' clones, not leaves
            warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
            i_ms = clock(lambda: groups.append(stage_backward_input(ys, [torch.ones_like(y) for y in ys], xs,
                                                                    iter(weights))[1]))
        w_ms = clock(lambda: stage_backward_weight(iter(weights), groups[0]))
        for p in weights:
            p.grad = None
        with torch.enable_grad():
            xs = _leaves(args, grad, training)
            ys = _outputs(m(*xs))
    if ys:
        seeds = [torch.ones_like(y) for y in ys]
        b_ms = clock(lambda: torch.autograd.backward(ys, seeds))
    for p in weights:
        p.grad = None
    return f_ms, i_ms, b_ms, w_ms, out[0]


def _model_layout(m: nn.Module, args: Sequence[Any], layouts: dict[str, tuple[int, ...]]) -> list[Any]:
    """``args`` with the strides the model gives them where a boundary made them contiguous
    (`Capture.layouts`): inside a stage the next operator reads them so, and its speed can
    depend on it (ConvNeXt's depthwise convolution's backward on channels-last input: 2x)."""
    names = [n.name for n in m.graph.nodes if n.op == "placeholder"] if isinstance(m, fx.GraphModule) else []
    out = list(args)
    for k, (name, a) in enumerate(zip(names, args)):
        st = layouts.get(name)
        if st is not None and isinstance(a, torch.Tensor) and a.dim() == len(st) and _dense(a.shape, st):
            out[k] = torch.empty_strided(a.shape, st, dtype=a.dtype, device=a.device).copy_(a)
    return out


def _dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``stride`` lays ``shape`` out densely without overlap (a permutation of a
    contiguous layout). A broadcast view (stride 0) is not: one memory location per element
    cannot hold it, so such a value is profiled as the contiguous copy the boundary sends.

    Examples
    --------
    >>> _dense((2, 3, 4), (12, 1, 3)), _dense((2, 4), (1, 0))
    (True, False)
    """
    expected = 1
    for size, st in sorted(((n, s) for n, s in zip(shape, stride) if n > 1), key=lambda d: d[1]):
        if st != expected:
            return False
        expected *= size
    return True


def _round_estimate(rounds: Sequence[Sequence[float]]) -> list[float]:
    """Each segment's time from ``rounds`` (one list of segment times per round): its median
    share of a round times the least round. What a run measures of a stage is its least time
    over the micro-batches, a least *sum* of the stage's segments; the sum of each segment's own
    least time is below that on a busy machine (measured at load 10: 0.8-0.95 of it), so the
    least is taken of whole rounds, and the shares, from medians, are robust to a spike.

    Examples
    --------
    >>> _round_estimate([[1.0, 3.0], [2.0, 6.0], [1.0, 2.0]])  # round 2 a busy moment
    [0.75, 2.25]
    """
    if not rounds:
        return []
    n = len(rounds[0])
    med = [statistics.median(rd[i] for rd in rounds) for i in range(n)]
    total = sum(med)
    least = min(sum(rd) for rd in rounds)
    return [m * least / total if total > 0 else 0.0 for m in med]


def measure_segments(cap: Capture, *, training: bool = False, repeats: int = 5, warmup: int = 1,
                     threads: int = 1, device: str = "cpu", spec: str | None = None,
                     deadline: float | None = None) -> SegmentTimes:
    """Time every segment of ``cap`` on its example micro-batch (see the module docstring).

    The repeats go round the segments (every segment once, then again), and each segment's
    time is its median share of a round times the least round (`_round_estimate`). The model
    is also timed whole (`_whole`, in the same rounds): the segments'
    boundaries (outputs made contiguous, tuples packed and unpacked, one module call each) cost
    time that a stage holding several segments does not pay, so each kind's times are scaled
    by whole / sum of the segments (at most 1), recorded in ``boundary_scale``.

    ``deadline`` (a `time.monotonic` instant): past it no round starts once one timed round is
    in (the warm-ups are skipped if it has already passed); ``cut_short`` then counts every
    segment, since each got fewer than ``repeats`` timed runs.

    ``device="cuda"`` moves the segments to the current GPU and times them with CUDA events
    (the one-GPU measurement of a k-GPU pipeline). ``spec`` (``"V100"``, ``"A100"``,
    ``"H100"``) times them instead by the roofline of that accelerator, from the FLOPs and bytes
    of every kernel each segment launches (`devplace_lite.pipeline.profile`): no repeats, the
    same figures on any machine, a plan for GPUs made on a laptop."""
    if repeats < 1 or warmup < 0:
        raise UsageError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda: torch sees no GPU on this machine (use cpu)")
    clock = _cpu_ms if device == "cpu" else _cuda_ms
    if spec is not None:
        from ..devices import SPECS

        if str(spec).upper() not in SPECS:
            raise UsageError(f"unknown accelerator spec {spec!r}; known: {', '.join(SPECS)}")
        if device != "cpu":
            raise UsageError("a roofline spec counts kernels on the CPU: leave device at cpu")
        clock, repeats, warmup = _roofline_clock(SPECS[str(spec).upper()]), 1, 0
    # a roofline counts kernels where the model lives: on the meta device nothing is copied
    example = tuple(t if spec is not None and t.is_meta else t.to(device) for t in cap.example)
    if device != "cpu":
        cap.modules = [to_device(m, device) for m in cap.modules]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    n = cap.num_segments
    acts, outb = [0] * n, [0] * n
    saves_in: list[list[int]] = [[] for _ in range(n)]
    saves_out: list[list[int]] = [[] for _ in range(n)]
    params, grads, inputs = [0] * n, [0] * n, [[] for _ in range(n)]
    calls: list[tuple[nn.Module, list[Any], list[bool]]] = []
    try:
        for i, m, args, src in _run_in_order(cap, example):
            ps = list(m.parameters())
            params[i] = (sum(p.numel() * p.element_size() for p in ps)
                         + sum(b.numel() * b.element_size() for b in m.buffers()))
            grads[i] = sum(p.numel() * p.element_size() for p in ps if p.requires_grad)
            inputs[i] = [(s[1] if s[0] == "seg" else f"input:{s[1]}", s[-1] if s[0] == "seg" else None, _bytes(a),
                          isinstance(a, torch.Tensor) and a.is_floating_point()) for s, a in zip(src, args)]
            meter = _Saved({id(p) for p in ps})
            with _torch_fails(f"segment {cap.names[i]}", device):
                out = _timed_pass(m, args, _grads(src), training, clock, meter)[4]
            acts[i] = int(meter.total if training else _bytes(out))
            if training:
                saves_in[i], saves_out[i] = meter.inputs, meter.outputs
            outb[i] = _bytes(out)
            calls.append((m, _model_layout(m, args, cap.layouts), _grads(src)))
        # a roofline prices kernels, and the boundaries' copies are kernels a stage runs too
        whole = None
        if spec is None and n > 1 and (cap.wiring is not None or cap.traced is not None):
            w = _whole(cap)
            if device != "cpu":
                w.modules = [to_device(m, device) for m in w.modules]
            for _, wm, wargs, wsrc in _run_in_order(w, example):
                whole = (wm, list(wargs), _grads(wsrc))
        rounds: list[list[tuple]] = []  # per timed round: (F, I, B, W) of each segment, then of the whole model
        for r in range(warmup + repeats):
            late = deadline is not None and time.monotonic() > deadline
            if late and rounds:
                break
            if late and r < warmup:
                continue
            got = []
            for label, (m, args, grad) in zip([f"segment {nm}" for nm in cap.names] + ["the whole model"],
                                              calls + ([whole] if whole else [])):
                with _torch_fails(label, device):
                    got.append(_timed_pass(m, args, grad, training, clock)[:4])
            if r >= warmup:
                rounds.append(got)
    finally:
        torch.set_num_threads(before)
    fwd, bin_, bwd, wgt = (_round_estimate([[t[k] or 0.0 for t in rd[:n]] for rd in rounds]) for k in range(4))
    # no input takes a gradient: torch's input pass does nothing there and its weight pass is the whole backward
    wgt = [b if rounds and rounds[0][i][3] is None else w for i, (w, b) in enumerate(zip(wgt, bwd))]
    scale, whole_ms = None, None
    if whole is not None:
        whole_ms = {key: min(rd[n][k] or 0.0 for rd in rounds) for key, k in (("F", 0), ("B", 2))}
        scale = {key: min(1.0, whole_ms[key] / sum(seg)) if sum(seg) > 0 and whole_ms[key] > 0 else 1.0
                 for key, seg in (("F", fwd), ("B", bwd))}
        fwd = [t * scale["F"] for t in fwd]
        bwd, bin_, wgt = ([t * scale["B"] for t in ts] for ts in (bwd, bin_, wgt))
    return SegmentTimes(forward_ms=fwd, backward_ms=bwd, param_bytes=params, grad_bytes=grads,
                        activation_bytes=acts, inputs=inputs, training=training, repeats=repeats, threads=threads,
                        input_bytes=[_bytes(x) for x in cap.example], device=device, backward_input_ms=bin_,
                        backward_weight_ms=wgt, output_bytes=outb, spec=None if spec is None else str(spec).upper(),
                        boundary_scale=scale, whole_ms=whole_ms,
                        cut_short=n if len(rounds) < repeats else 0,
                        shared_saves=_shared_saves(inputs, saves_in, saves_out))


def _shared_saves(inputs: Sequence[Sequence[tuple]], saves_in: Sequence[Sequence[int]],
                  saves_out: Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
    """The values more than one segment saves: ``(bytes, segments)`` (see `SegmentTimes`).
    A value is a model input or a producer's output position; its producer counts when it
    saved that output (a value the boundary copied is the copy there, and is not matched:
    the count errs high, as before)."""
    by_value: dict[tuple, tuple[int, list[int]]] = {}
    for i, ins in enumerate(inputs):
        for k, (src, position, _, _) in enumerate(ins):
            b = saves_in[i][k] if k < len(saves_in[i]) else 0
            if not b:
                continue
            key = (src, position)
            size, segs = by_value.setdefault(key, (b, []))
            segs.append(i)
            if not isinstance(src, str) and len(segs) == 1:
                outs = saves_out[src]
                q = 0 if position is None else position
                if q < len(outs) and outs[q] == b:
                    segs.insert(0, src)
    return [(size, segs) for size, segs in by_value.values() if len(segs) > 1]


def segment_graph(cap: Capture, times: SegmentTimes, *, link: float | None = None,
                  name: str | None = None) -> Graph:
    """The placement graph of the measured segments (see the module docstring): node ids are
    the segments' split points, model inputs are ``input:<k>``. ``graph.meta["segments"]``
    keeps what the planner needs for memory (parameters, gradients, activations, tied).
    Transfers go over ``link`` bytes/s: the roofline spec's host link, else `LINK_BYTES_PER_S`."""
    from ..devices import SPECS

    acc = SPECS[times.spec] if times.spec is not None else None
    if link is None:
        link = acc.link if acc is not None else LINK_BYTES_PER_S
    n = cap.num_segments
    ids = [f"{i}:{nm}" for i, nm in enumerate(cap.names)]
    sent = [0] * n  # bytes each segment sends to later segments (each value once)
    seen: set[tuple[int, Any]] = set()
    edges: list[tuple[str, str]] = []
    grad_back = [0] * n  # gradient bytes each segment sends back to earlier segments
    used_inputs: dict[int, int] = {}
    for i, ins in enumerate(times.inputs):
        for src, position, nbytes, is_float in ins:
            if isinstance(src, str):
                k = int(src.split(":")[1])
                used_inputs[k] = nbytes
                edges.append((f"input:{k}", ids[i]))
                continue
            edges.append((ids[src], ids[i]))
            key = (src, position)
            if key not in seen:
                seen.add(key)
                sent[src] += nbytes
            if is_float and times.training:
                grad_back[i] += nbytes
    nodes = [Node(id=f"input:{k}", p_acc=0.0, p_cpu=0.0, comm=b / link * 1e3, out_bytes=float(b),
                  name=f"model input {k}") for k, b in sorted(used_inputs.items())]
    back = []
    for i in range(n):
        color = ids[i] if times.training else None
        mem = times.param_bytes[i] + times.activation_bytes[i]
        nodes.append(Node(id=ids[i], p_acc=round(times.forward_ms[i], 6), p_cpu=round(times.forward_ms[i], 6),
                          memory=float(mem), comm=sent[i] / link * 1e3, out_bytes=float(sent[i]),
                          name=cap.names[i], color=color))
        if times.training:
            back.append(Node(id=f"{ids[i]}.grad", p_acc=round(times.backward_ms[i], 6),
                             p_cpu=round(times.backward_ms[i], 6), memory=float(times.grad_bytes[i]),
                             comm=grad_back[i] / link * 1e3, out_bytes=float(grad_back[i]), backward=True,
                             color=color, name=f"{cap.names[i]}.grad"))
    if times.training:
        for s, t in list(edges):
            if not s.startswith("input:"):
                edges.append((f"{t}.grad", f"{s}.grad"))
        edges += [(v, f"{v}.grad") for v in ids]
    meta = {
        "generator": "devplace_lite.pipeline.capture", "model": name or type(cap.model).__name__,
        "capture": cap.how, "notes": list(cap.notes), "granularity": cap.granularity, "training": times.training,
        "batch": int(cap.example[0].shape[0]) if cap.example[0].dim() else 1,
        "inputs": [list(t.shape) for t in cap.example], "times": "measured" if acc is None else "roofline",
        "clock": ("thread CPU time" if times.device == "cpu" else "CUDA events") if acc is None else
                 "roofline of each kernel's FLOPs and bytes",
        "threads": times.threads, "repeats": times.repeats, "torch": torch.__version__,
        "spec": {"name": f"{times.device}-measured", "link": link} if acc is None else
                {"name": acc.name, "flops": acc.flops, "bandwidth": acc.bandwidth, "link": link},
        "segments": {"names": list(cap.names), "param_bytes": times.param_bytes, "grad_bytes": times.grad_bytes,
                     "activation_bytes": times.activation_bytes, "forward_ms": times.forward_ms,
                     "backward_ms": times.backward_ms, "input_bytes": times.input_bytes,
                     "backward_input_ms": times.backward_input_ms, "backward_weight_ms": times.backward_weight_ms,
                     "output_bytes": times.output_bytes,
                     "boundary_scale": times.boundary_scale, "whole_ms": times.whole_ms,
                     "shared_saves": [[b, segs] for b, segs in times.shared_saves]},
        "tied": {k: v for k, v in cap.tied.items()}, "leaf_modules": list(cap.leaf_modules),
    }
    kind = "training" if times.training else "inference"
    return Graph(nodes + back, edges, name=f"{meta['model']}-segments-{kind}", meta=meta)
