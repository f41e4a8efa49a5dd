"""A decoder's repeated layers captured once: the capture of a large model on a roofline.

Problem
-------
A 70B-class decoder repeats one layer 80 times. Capturing it (`capture.capture`: an export of
the whole model, then its cut into segments) costs time in proportion to its layers, though
on a roofline (`measure._signature`) every middle layer is priced once. Capture instead a
copy with few layers and repeat its middle layer's segments, when the model is proven to run
the same program in every middle layer.

How
---
`find_stack` takes the model's longest `nn.ModuleList` of one class whose children hold the
same parameters and buffers (names, shapes, dtypes, trainability) and no parameter shared
with anything else. One fake forward of the whole model (`fingerprint`) records, in order,
every aten operator each layer runs and every operator outside the layers, with its
non-tensor arguments, each tensor argument's shape, stride and dtype and where it comes from
(made in the same layer, ``d`` layers before, by the code outside the layers (its rank among
the values made there), or neither: a parameter, a buffer, an input). The same is recorded
for the model cut to `KEEP` layers (the list sliced; `truncated`). The capture of the cut
model stands for the whole one when

* the code outside the layers runs the same operators on the same values in both,
* layer 0 runs the same in both, and every other layer of both runs one program, and
* the cut capture's segments of layers 1 and 2 have one roofline signature
  (`measure._signature`: operators, shapes, the values they receive),

and then `capture_repeated` returns the cut capture with the segments of layer 1 repeated
for layers ``1 .. L-2`` and those of its last layer for layer ``L-1``, renamed: the
segments, their names, tied parameters and wiring of the whole model's capture. Otherwise
(or a model on real weights, whose values differ per layer) the whole model is captured.

Exactness: an equality of programs, shown operator by operator on the fake forward; its use
is tested against the whole capture (``tests/test_repeat.py``: the same segment graph, shares
and plan). The segments' modules repeat one module object (its parameters stand for each
layer's: same shapes, and the model is on the meta device, without values).
Complexity: one fake forward of the model and one of the cut model, then a capture of the
cut model (`KEEP` layers) instead of ``L``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: Layers kept in the cut model: layer 0, two middle layers (compared), the last.
KEEP = 4


@dataclass(frozen=True)
class Stack:
    """``path``: FQN of the repeated `nn.ModuleList`; ``count``: its layers."""

    path: str
    count: int


@dataclass(frozen=True)
class Cut:
    """How a capture was made from a cut model (`capture_repeated`): the ``stack``, the cut
    capture's segment ``names`` and, per segment of the whole model, ``where`` (`layer_map`)."""

    stack: Stack
    names: list[str]
    where: list[tuple[int, int | None]]


def _structure(m: nn.Module) -> tuple:
    return (type(m),
            tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in m.named_parameters(remove_duplicate=False)),
            tuple((n, tuple(b.shape), b.dtype) for n, b in m.named_buffers(remove_duplicate=False)))


def find_stack(model: nn.Module) -> Stack | None:
    """The model's longest `nn.ModuleList` of more than `KEEP` layers of one structure (class,
    parameter and buffer names, shapes, dtypes), none of whose parameters another module also
    holds and none of which two of its layers share; None where there is none.

    Examples
    --------
    >>> net = nn.Sequential(nn.ModuleList([nn.Linear(2, 2) for _ in range(6)]))
    >>> find_stack(net)
    Stack(path='0', count=6)
    """
    best: Stack | None = None
    for name, m in model.named_modules():
        if not isinstance(m, nn.ModuleList) or len(m) <= KEEP or (best and len(m) <= best.count):
            continue
        if len({_structure(c) for c in m}) != 1:
            continue
        inside = {id(p) for p in m.parameters()}
        if len(inside) != sum(1 for _ in m.named_parameters(remove_duplicate=False)):  # tied inside the stack
            continue
        outside = [p for n, p in model.named_parameters(remove_duplicate=False)
                   if not (n.startswith(f"{name}.") if name else True)]
        if any(id(p) in inside for p in outside):
            continue
        best = Stack(name, len(m))
    return best


@contextlib.contextmanager
def truncated(model: nn.Module, stack: Stack, keep: int = KEEP) -> Iterator[nn.Module]:
    """``model`` with the stack cut to its first ``keep`` layers (in place, restored on exit)."""
    parent_name, _, attr = stack.path.rpartition(".")
    parent = model.get_submodule(parent_name)
    whole = getattr(parent, attr)
    setattr(parent, attr, nn.ModuleList(list(whole)[:keep]))
    try:
        yield model
    finally:
        setattr(parent, attr, whole)


class _Recorder(TorchDispatchMode):
    """Each aten operator, with where its tensor arguments come from (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer: int | None = None
        self.layers: dict[int, list] = {}
        self.outside: list = []
        self.made: dict[int, tuple[Any, torch.Tensor]] = {}  # id -> (layer or ("out", rank), tensor kept alive)
        self.ranks = 0

    def _arg(self, a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return repr(a)
        got = self.made.get(id(a))
        src: Any = "external"
        if got is not None and got[1] is a:
            src = got[0] if isinstance(got[0], tuple) else (
                ("layer", self.layer - got[0]) if self.layer is not None else ("layer", got[0]))
        return tuple(a.shape), tuple(a.stride()), a.dtype, src

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        row = (str(func), [self._arg(a) for a in tree_flatten((args, kwargs))[0]])
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                if self.layer is None:
                    self.made[id(t)] = (("outside", self.ranks), t)
                    self.ranks += 1
                else:
                    self.made[id(t)] = (self.layer, t)
        (self.outside if self.layer is None else self.layers.setdefault(self.layer, [])).append(row)
        return out


def fingerprint(model: nn.Module, example: Sequence[Any], stack: Stack) -> tuple[list, list[list]]:
    """The operators run outside the stack's layers and those each layer runs (see the module),
    from one forward on fake tensors.

    Parameters
    ----------
    model : nn.Module
        The model (meta device or not: the forward runs on fake tensors where it is on meta).
    example : sequence of tensors
        One micro-batch.
    stack : Stack
        The repeated layers (`find_stack`).

    Returns
    -------
    tuple
        ``(outside, layers)``: each a list of ``(operator, arguments)``, an argument described by
        its repr or, for a tensor, ``(shape, stride, dtype, source)``; the source of a value a
        layer made is ``("layer", d)``: ``d`` layers before the reader when a layer reads it,
        ``d`` layers before the last when the code outside reads it.

    Examples
    --------
    >>> net = nn.Sequential(nn.ModuleList([nn.Linear(2, 2) for _ in range(5)]))
    >>> net.forward = lambda x: net[0][1](net[0][0](x))
    >>> outside, layers = fingerprint(net, (torch.zeros(1, 2),), Stack("0", 5))
    >>> layers[0] == layers[1], layers[2]
    (False, [])
    """
    from .capture import meta_run

    layers = model.get_submodule(stack.path)
    rec = _Recorder()
    count = len(layers)

    def pre(k: int):
        def hook(_m: nn.Module, _a: Any) -> None:
            rec.layer = k
        return hook

    def post(_m: nn.Module, _a: Any, _o: Any) -> None:
        rec.layer = None

    handles = [h for k, m in enumerate(layers) for h in (m.register_forward_pre_hook(pre(k)),
                                                         m.register_forward_hook(post))]
    try:
        with meta_run(model, example), torch.no_grad(), rec:
            model(*example)
    finally:
        for h in handles:
            h.remove()
    # outside reads of a layer's value: as the distance from the last layer
    outside = [(op, [(*a[:3], ("layer", count - 1 - a[3][1])) if isinstance(a, tuple) and a[3][0] == "layer" else a
                     for a in args]) for op, args in rec.outside]
    return outside, [rec.layers.get(k, []) for k in range(count)]


def _layer_of(name: str, stack: Stack) -> int | None:
    head = f"{stack.path}."
    if not name.startswith(head):
        return None
    k = name[len(head):].split(".", 1)[0]
    return int(k) if k.isdigit() else None


def _renamed(name: str, stack: Stack, k: int) -> str:
    rest = name[len(stack.path) + 1:].split(".", 1)
    return f"{stack.path}.{k}" + (f".{rest[1]}" if len(rest) > 1 else "")


def layer_map(names: Sequence[str], stack: Stack) -> list[tuple[int, int | None]] | None:
    """For each segment of the whole model, ``(segment of the cut capture, layer it stands
    for or None)``, from the cut capture's segment ``names``; None where the segments are not
    prefix, layers ``0 .. KEEP-1`` in order, suffix, with layers 1 and 2 cut alike.

    >>> layer_map(["emb", "l.0", "l.1", "l.2", "l.3", "norm"], Stack("l", 6))
    [(0, None), (1, 0), (2, 1), (2, 2), (2, 3), (2, 4), (4, 5), (5, None)]
    """
    of = [_layer_of(nm, stack) for nm in names]
    inside = [i for i, k in enumerate(of) if k is not None]
    if not inside or inside != list(range(inside[0], inside[-1] + 1)):
        return None
    seq = [of[i] for i in inside]
    if seq != sorted(seq) or sorted(set(seq)) != list(range(KEEP)):
        return None
    segs = {k: [i for i in inside if of[i] == k] for k in range(KEEP)}
    tail = [names[i][len(f"{stack.path}.{of[i]}"):] for i in segs[1]]
    if tail != [names[i][len(f"{stack.path}.{of[i]}"):] for i in segs[2]]:
        return None
    out: list[tuple[int, int | None]] = [(i, None) for i in range(inside[0])]
    for j in range(stack.count):
        k = 0 if j == 0 else KEEP - 1 if j == stack.count - 1 else 1
        out += [(i, j) for i in segs[k]]
    out += [(i, None) for i in range(inside[-1] + 1, len(names))]
    return out


def _same_program(model: nn.Module, example: Sequence[Any], stack: Stack) -> bool:
    """Whether the cut model runs the whole model's program outside the layers, in layer 0 and
    in every other layer (see the module)."""
    try:
        outside, layers = fingerprint(model, example, stack)
        with truncated(model, stack) as cut:
            cut_outside, cut_layers = fingerprint(cut, example, Stack(stack.path, KEEP))
    except Exception:  # noqa: BLE001 - a model that does not run cut (or recorded): capture it whole
        return False
    rest = layers[1:] + cut_layers[1:]
    return outside == cut_outside and layers[0] == cut_layers[0] and all(r == rest[0] for r in rest)


def capture_repeated(model: nn.Module, example: Sequence[Any], granularity: str = "block") -> Any:
    """The capture of ``model`` (`capture.capture`), made from a capture of the model cut to
    `KEEP` layers where the module's conditions hold (a model on the meta device whose stack
    runs one program), else of the whole model.

    Parameters
    ----------
    model : nn.Module
        The model (on the meta device for the cut to apply).
    example : sequence of tensors
        One micro-batch.
    granularity : str
        As `capture.capture`.

    Returns
    -------
    Capture
        The whole model's segments, names, tied parameters; on the cut path ``repeated`` says
        how (`Cut`) and ``traced`` is None (no graph of the whole model was made).

    Raises
    ------
    GraphError
        As `capture.capture`.

    Examples
    --------
    >>> import torch
    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    >>> capture_repeated(net, (torch.randn(2, 4),)).names
    ['0', '1']
    """
    from .capture import _run_in_order, capture, meta_run, on_meta
    from ..errors import GraphError
    from .measure import _grads, _signature

    example = tuple(example)
    stack = find_stack(model) if example and on_meta(model, example) else None
    if stack is None or not _same_program(model, example, stack):
        return capture(model, example, granularity)
    try:
        with truncated(model, stack):
            cut = capture(model, example, granularity)
    except GraphError:  # the cut model does not capture: the whole one says why, if it fails too
        return capture(model, example, granularity)
    where = layer_map(cut.names, stack)
    if cut.wiring is not None or where is None:
        return capture(model, example, granularity)
    of = [_layer_of(nm, stack) for nm in cut.names]
    firsts = {k: of.index(k) for k in (1, 2)}
    sigs = {}
    with meta_run(model, example):
        for i, m, args, src in _run_in_order(cut, example):
            if i in firsts.values():
                sigs[i] = _signature(m, args, _grads(src))
    if sigs[firsts[1]] is None or sigs[firsts[1]] != sigs[firsts[2]]:
        return capture(model, example, granularity)
    names = [cut.names[i] if j is None else _renamed(cut.names[i], stack, j) for i, j in where]
    modules = [cut.modules[i] for i, _ in where]
    # no parameter of the stack is tied (`find_stack`): a tied one outside it is held by the copies of its segments
    tied = {fqn: [f for f, (i, _) in enumerate(where) if i in segs] for fqn, segs in cut.tied.items()}
    return replace(cut, model=model, names=names, modules=modules, traced=None, tied=tied,
                   repeated=Cut(stack, list(cut.names), where))


def expand_shares(shares: dict[str, list[float]], where: Sequence[tuple[int, int | None]]) -> dict[str, list[float]]:
    """`tp_cost.segment_shares` of the cut capture's segments, per segment of the whole model.

    >>> expand_shares({"share": [0.0, 0.5, 0.6]}, [(0, None), (1, 0), (1, 1), (2, None)])
    {'share': [0.0, 0.5, 0.5, 0.6]}
    """
    return {k: [v[i] for i, _ in where] for k, v in shares.items()}


def expand_plan(tpp: Any, stack: Stack) -> Any | None:
    """The cut model's `TensorParallelPlan` for the whole model: each group and refused region of
    layer 1 repeated for layers ``1 .. L-2`` and those of the cut's last layer for layer
    ``L-1``, renamed; ``nodes`` and ``split_dims`` (names of the cut export's nodes) emptied.
    None where a group or region spans two layers, or a layer and the rest."""
    from .tensor_parallel import TensorParallelPlan

    def layer(mods: Sequence[str]) -> Any:
        ks = {_layer_of(m, stack) for m in mods}
        return ks.pop() if len(ks) == 1 else "mixed"

    if any(layer(g.column + g.row) == "mixed" for g in tpp.groups) or any(layer(r[0]) == "mixed"
                                                                        for r in tpp.refused):
        return None

    def at(mods: Sequence[str], j: int) -> list[str]:
        return [m if _layer_of(m, stack) is None else _renamed(m, stack, j) for m in mods]

    def spread(items: list, mods_of, rebuild) -> list | None:
        """Items in the whole model's order: those before the stack, layer by layer, those after."""
        ks = [layer(mods_of(it)) for it in items]
        inside = [i for i, k in enumerate(ks) if k is not None]
        if inside and any(ks[i] is None for i in range(inside[0], inside[-1] + 1)):
            return None  # an item outside the stack between two layers' items
        out = [it for i, (it, k) in enumerate(zip(items, ks)) if k is None and (not inside or i < inside[0])]
        for j in range(stack.count):
            rep = 0 if j == 0 else KEEP - 1 if j == stack.count - 1 else 1
            out += [rebuild(it, j) for it, k in zip(items, ks) if k == rep]
        return out + [it for i, (it, k) in enumerate(zip(items, ks)) if k is None and inside and i > inside[-1]]

    groups = spread(tpp.groups, lambda g: g.column + g.row,
                    lambda g, j: replace(g, column=at(g.column, j), row=at(g.row, j), shared=at(g.shared, j), nodes=[]))
    refused = spread(tpp.refused, lambda r: r[0], lambda r, j: (at(r[0], j), r[1]))
    if groups is None or refused is None:
        return None
    return TensorParallelPlan([replace(g, nodes=[]) for g in groups], refused, {})  # nodes: outside the stack too
