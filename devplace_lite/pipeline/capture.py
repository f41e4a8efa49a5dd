"""Capture any model as pipeline segments between its candidate split points.

Problem
-------
A practitioner's model (torchvision, timm, Hugging Face...) must become pieces the planner can
measure and PyTorch can run as pipeline stages. The pieces are *segments*: the program between
one candidate split point (`devplace_lite.pipeline.split_points`) and the next, each a module
that runs on the values the segments before it pass on. No capture route takes every model, so
three are tried in turn, and each step taken is written to `Capture.notes`.

How
---
1. **torch.export first** (what ``torch.distributed.pipelining.pipeline`` uses): the model is
   exported once by ``pipeline(model, example, split_policy=...)``, whose policy
   (`devplace_lite.pipeline.torch_split.split_policy`) puts a split marker before the first
   operator of every candidate and hands values read further on from segment to segment. The
   result is PyTorch's own ``Pipe``: one stage module per segment and the wiring between them.
   A parameter read by two segments (tied embeddings) is *replicated* there, each copy
   receiving part of the gradient; `Capture.tied` lists them so a run sums those gradients.
2. **The exported graph cut by devplace's splitter** when torch's stage modules fail to run
   after a sound export: torch's outliner cuts a module whose operators are not contiguous
   (the rotary embedding of Llama-style decoders, computed once and read by every layer) into
   stages that ask for values nobody passes ("Expected positional argument",
   pytorch/pytorch#184361). Route 1's export is cut again (`exported_graph`: ``ep.module()``,
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

A route counts only when its segments run, one after another, on the example (`_run_in_order`).
Measuring the segments is `devplace_lite.pipeline.measure`; their placement graph,
`devplace_lite.pipeline.segments`.

Exactness: every route computes the model's own program (the segments run in order give its
output); only where to cut is chosen. Complexity: one forward pass to find the candidates, then
one export (two on route 2; or one export and up to `MAX_LEAVES` + 1 traces) and one pass of
the segments per route tried.

Reference: ``torch.export`` and ``torch.distributed.pipelining`` (torch 2.13); torch.fx.

Example
-------
>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> cap = capture(net, (torch.randn(2, 8),))
>>> cap.how, cap.names, cap.split_points
('torch.export', ['0', '1', '2'], ['1', '2'])
"""

from __future__ import annotations

import collections
import contextlib
import copy
import linecache
import logging
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch import nn

from ..errors import GraphError, UsageError
from .split_points import _first_nodes, candidates, module_calls
from .torch_split import known_warnings_filtered, split_policy
from .tracer import Tracer

#: Modules made leaves, one per failed trace, before the fx fallback gives up.
MAX_LEAVES = 16


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
    #: The fx route's traced model before it was cut (`measure._whole` times it).
    traced: nn.Module | None = None
    #: Values made contiguous to cross a boundary (the receiving segment's placeholder name) ->
    #: the strides the model gave them, which a stage holding both segments keeps (export route).
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: Made from a capture of the model cut to a few of its repeated layers
    #: (`devplace_lite.pipeline.repeat.Cut`), else None.
    repeated: Any = None

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


def on_meta(model: nn.Module, example: Sequence[Any]) -> bool:
    """Whether ``model`` or its example lives on the meta device (shapes without numbers: a model
    too large for this machine, built under ``torch.device("meta")``).

    >>> on_meta(nn.Linear(2, 2, device="meta"), ()), on_meta(nn.Linear(2, 2), (torch.zeros(1, 2),))
    (True, False)
    """
    return any(t.is_meta for t in (*model.parameters(), *model.buffers(), *example) if isinstance(t, torch.Tensor))


def meta_run(model: nn.Module, example: Sequence[Any]) -> contextlib.AbstractContextManager:
    """Where ``model`` is on the meta device (`on_meta`), a context that runs it on fake tensors:
    the same shapes and the same kernels, and a model's check of its values (Hugging Face's masks
    ask whether a sequence is packed, which a meta tensor cannot answer) takes the branch it takes
    under torch.export, as a fake tensor says it is being traced; elsewhere nothing."""
    if not on_meta(model, example):
        return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def _export_once(model: nn.Module, example: tuple, memo: dict[str, Any]) -> tuple[nn.Module, Any]:
    """``(copy of model, its ExportedProgram)``, exported on the first call with ``memo`` and
    kept there: the capture's two export routes cut one export (a 70B decoder's takes most of a
    capture), which is what each would have exported, deterministically."""
    if "ep" not in memo:
        copy_ = export_copy(model)
        with known_warnings_filtered():
            memo["ep"] = (copy_, torch.export.export(copy_, example))
    return memo["ep"]


def _capture_export(model: nn.Module, example: tuple, cands: Sequence[str], granularity: str,
                    memo: dict[str, Any]) -> Capture:
    from unittest import mock

    from torch.distributed.pipelining import pipeline
    from torch.distributed.pipelining._IR import Pipe

    names: list[str] = []
    layouts: dict[str, tuple[int, ...]] = {}
    quiet = logging.getLogger("torch.distributed.pipelining")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it logs every parameter shared by two stages at INFO
    try:
        copy_, ep = _export_once(model, example, memo)
        # torch's pipeline exports the module it is given, as `_export_once` did: hand it that export
        with known_warnings_filtered(), mock.patch.object(Pipe, "_trace_with_export", lambda *_a, **_k: ep):
            pipe = pipeline(copy_, example, split_policy=split_policy(cands, names, layouts))
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


def exported_graph(model: nn.Module, example: tuple, ep: Any = None) -> fx.GraphModule:
    """``model`` exported once with torch.export (non-strict, as torch's pipelining exports it)
    as one fx graph to cut: ``ExportedProgram.module()``, whose nodes keep ``nn_module_stack``
    and whose parameters keep their FQNs, taking the example's tensors positionally and
    returning what the model returns (export's pytree wrapping of inputs and outputs removed,
    so that a stage cut from it is a plain module), without dead code (an unused buffer's
    read). Deterministic: every torchrun rank exports its own copy and gets the same nodes.
    ``ep``: the model's ExportedProgram on ``example`` where one is at hand (`_export_once`)."""
    if ep is None:
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
    reads its first floating-point tensor either way, `check.head`)."""
    from torch.utils._pytree import tree_unflatten

    tree = tree_unflatten(flat, spec)

    def plain(v: Any) -> bool:
        if isinstance(v, (tuple, list)) and type(v) in (tuple, list):
            return all(plain(x) for x in v)
        if type(v) is dict:
            return all(plain(x) for x in v.values())
        return isinstance(v, fx.Node) or v is None
    return tree if plain(tree) else tuple(flat)


def export_split(model: nn.Module, example: tuple, points: Sequence[str], ep: Any = None):
    """The model's exported graph (`exported_graph`) cut by devplace's splitter at the module
    FQNs ``points``, tied parameters replicated into every stage that reads them (their
    gradients summed by the run, as on torch's pipelining route): ``(Split, names of the
    stages' split points, the uncut graph)``. What the capture's second route does, and what
    each torchrun rank does again to build its stages."""
    gm = exported_graph(model, example, ep)
    sp, names = fx_split(gm, example, points, replicate_parameters=True)
    return sp, names, gm


def _capture_export_split(model: nn.Module, example: tuple, cands: Sequence[str], granularity: str,
                          memo: dict[str, Any] | None = None) -> Capture:
    memo = {} if memo is None else memo
    sp, names, gm = export_split(model, example, cands, _export_once(model, example, memo)[1])
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
        with meta_run(model, example):
            order, count = module_calls(model, example)
    except Exception as e:  # noqa: BLE001 - the user's model failed on its own input
        from ..zoo.external import torchvision_mismatch

        raise GraphError(f"model {type(model).__name__} fails on its example inputs at "
                         f"{_where(_user_frame(e)) or 'an unknown line'}: "
                         f"{torchvision_mismatch(e) or _reason(e)}") from None
    cands = candidates(model, order, count, granularity)
    exported = True  # whether torch.export itself captured the model (torch's outliner may still fail)
    memo: dict[str, Any] = {}  # the one export both export routes cut (`_export_once`)
    try:
        cap = _capture_export(model, example, cands, granularity, memo)
    except Exception as e:  # noqa: BLE001 - export raises many kinds; we fall back and say why
        where = _where(_user_frame(e))
        why = f"torch.export fails{' at ' + where if where else ''} ({_construct(_reason(e.__cause__ or e))})"
        exported = not _export_failed(e)
    else:
        try:  # torch's stage modules can fail where the model runs (pytorch/pytorch#184361: rotary embeddings)
            with meta_run(model, example):
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
            cap = _capture_export_split(model, example, cands, granularity, memo)
            with meta_run(model, example):
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


# -- running the segments ----------------------------------------------------------------------
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
    own stages the same way (``build_stage``). Its warning for each submodule it leaves alone
    (a tensor-parallel ``nn.Linear`` among them, moved by ``.to`` already) is silenced."""
    from torch.distributed.pipelining._IR import _modify_graph_op_device

    module = module.to(device)
    if isinstance(module, fx.GraphModule):
        quiet = logging.getLogger("torch.distributed.pipelining")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            _modify_graph_op_device(module, torch.device(device))
        finally:
            quiet.setLevel(level)
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
