"""torch's own pipeline split, rewritten so that torch's schedules run it at any split points.

Problem
-------
``torch.distributed.pipelining.pipeline(model, example, split_policy=...)`` exports the model
once (torch.export) and outlines one stage module per stretch between split markers: PyTorch's
own ``Pipe``, the capture's first route (`devplace_lite.pipeline.capture`) and what every
torchrun rank builds. At split points the planner chooses, that ``Pipe`` must still run under
every schedule torch ships: the schedules feed model inputs to the first stage only; each stage
may talk to its neighbours only (a value that needs a gradient cannot go to two stages, and
1F1B's paired sends and receives can wait on each other forever across a skip); gloo sends
contiguous memory only; and autograd refuses an in-place operator on a received leaf.

How
---
`split_policy` puts a marker before the first operator of every split point (read off each
node's ``nn_module_stack``, `devplace_lite.pipeline.split_points`), then rewrites the graph: a
model input read by a later stage is copied on the first stage; a value read two or more
segments later is carried segment by segment (`_carry`); a value crossing with strides that are
not contiguous gets a contiguous copy in its own segment, its own strides kept for the profile
(`_make_contiguous`); an in-place operator at a segment's start writes into a copy
(`_copy_mutated_input`).

Exactness: the rewrites add copies and never change a value: a run's outputs and gradients
equal the unsplit model's (the runner's ``--check``). Complexity: linear in the graph's nodes
for each rewrite pass, and a pass over the nodes for each carried hop (at most nodes x segments).

Reference: ``torch.distributed.pipelining`` (``pipeline``, ``split_policy``, the
``pipe_split`` marker), torch 2.13.

Example
-------
>>> import torch
>>> from torch.distributed.pipelining import pipeline
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> names = []
>>> with known_warnings_filtered():
...     pipe = pipeline(net, (torch.randn(2, 8),), split_policy=split_policy(["2"], names))
>>> pipe.num_stages, names
(2, ['(start)', '2'])
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Sequence

import torch
import torch.fx as fx

from .split_points import _first_nodes

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
    each value made contiguous, the strides the model gave it (`capture.Capture.layouts`)."""
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
