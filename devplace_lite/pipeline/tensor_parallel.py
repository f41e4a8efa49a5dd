"""Tensor parallelism found on the captured model: Megatron's column-then-row pairs, from the graph.

Problem: which weight matrices of a model can be split Megatron-style over ``t`` devices, the
first of a pair by its output features (``ColwiseParallel``: each device computes a block of
them) and the second by its input features (``RowwiseParallel``: each device multiplies its
block, one all-reduce sums the partial results), so that nothing between them needs the other
devices' blocks? In a decoder block these are the query/key/value projections with the output
projection, and the gate/up (or fc1) with the down (or fc2) projection.

They are recognised on the exported graph (`devplace_lite.pipeline.capture.exported_graph`),
not from a table of module names: every weight product (``aten.linear``, and ``aten.addmm`` with
a ``(in, out)`` weight: GPT-2's ``Conv1D``) starts a region whose *split dimension* (the
output features) is followed through its users by the rules of `_RULES` (elementwise ops,
views and reshapes by their prefix products, transposes, the attention's batched products and
softmax, reductions over another dimension); a region ends at a weight product that reads the
split dimension as its input features (the row partner). A region whose split values reach
anything else is refused, with the first reason: an unsplit tensor of full width joined to a
split one (the residual stream), a slice along the split dimension (a fused projection whose
parts are stacked: GPT-2's ``c_attn``, Phi-3's ``qkv_proj``), a reduction over it (a norm over
all heads), an operator without a rule, or the graph's output (the LM head). Regions that meet
in one operator (the queries and keys in their product, gate and up in their product) form one
group; its column and row modules are the plan. A group splits over ``t`` devices when ``t``
divides every size the split dimension takes inside it: the query and key-value head counts
(grouped-query attention: ``num_key_value_heads``), the MLP width. Head-interleaved fused
projections (GPT-NeoX's ``query_key_value``, Falcon's grouped ``query_key_value``) pass: their
split dimension is the head (or head group), which the rules follow.

The sizes come from the export's fake tensors (``node.meta["val"]``); a batch of one would hide a
batch dimension among the size-one dimensions, so export with two or more.

`prepare` makes the graph runnable by torch's tensor parallelism: each recognised product
becomes a call of an ``nn.Linear`` sharing the weight (``parallelize_module`` hooks modules), and
each view, reshape or expand inside a region has ``-1`` at the split dimension (the export
fixes sizes as constants; a device holds ``1/t`` of them).

Complexity: ``O(n + m)`` over the graph's nodes and uses, plus a union-find over regions.

Example
-------
>>> from devplace_lite.zoo.external import llama                      # doctest: +SKIP
>>> from devplace_lite.pipeline.capture import exported_graph          # doctest: +SKIP
>>> model, x = llama(batch=2, layers=1)                                # doctest: +SKIP
>>> tp = find(exported_graph(model, x))                                # doctest: +SKIP
>>> tp.styles()["model.model.layers.0.self_attn.o_proj"], tp.degrees()  # doctest: +SKIP
('rowwise', [1, 2])

Reference: Shoeybi et al., "Megatron-LM", 2019 (the column-then-row split of the attention and
MLP blocks); torch's ``torch.distributed.tensor.parallel`` styles name the two halves.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

aten = torch.ops.aten

#: ops whose output has the input's split dimension (after right-aligned broadcasting)
_ELEMENTWISE = {
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.neg.default, aten.pow.Tensor_Scalar,
    aten.pow.Tensor_Tensor, aten.silu.default, aten.gelu.default, aten.relu.default, aten.tanh.default,
    aten.sigmoid.default, aten.exp.default, aten.rsqrt.default, aten.sqrt.default, aten.dropout.default,
    aten.contiguous.default, aten.clone.default, aten.alias.default, aten.detach.default, aten.to.dtype,
    aten.to.dtype_layout, aten._to_copy.default, aten.type_as.default, aten.where.self, aten.where.ScalarOther,
    aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.add.Scalar, aten.mul.Scalar, aten.div.Scalar,
    aten.sub.Scalar, aten.clamp.default, aten.softplus.default, aten.erf.default, aten.abs.default,
    aten.maximum.default, aten.minimum.default, aten.rsub.Scalar, aten.square.default, aten.gelu_.default,
    aten.silu_.default, aten.relu_.default, aten.add_.Tensor, aten.mul_.Tensor, aten.div_.Tensor,
    aten.sub_.Tensor, aten.mul_.Scalar, aten.div_.Scalar, aten.add_.Scalar,
}
_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.flatten.using_ints}
#: ops whose arguments hold the output's sizes (the export writes them as constants)
_SIZED = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.expand.default,
          aten.broadcast_to.default}
_SLICES = {aten.slice.Tensor, aten.narrow.default, aten.select.int}
_SPLITS = {aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int}
_REDUCTIONS = {aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.var.correction, aten.var_mean.correction}
_SOFTMAX = {aten.softmax.int, aten._softmax.default, aten.log_softmax.int, aten._log_softmax.default}
_MATMUL = {aten.matmul.default, aten.bmm.default}
_NO_VALUE = {aten._assert_tensor_metadata.default}


class Refused(Exception):
    """A region cannot be split: the message says why, in one line."""


@dataclass
class Group:
    """One column-then-row group: ``column`` modules split by output features, ``row`` by input
    features; ``sizes``: the sizes the split dimension takes inside it (``t`` must divide each);
    ``kind``: ``"attention"`` when a softmax or attention product lies inside, else ``"mlp"``;
    ``flops``: forward FLOPs of the group's weight and attention products for the example;
    ``row_output_bytes``: what the row products' all-reduce sums; ``nodes``: the graph nodes of
    the group (its products, the region between them), by name; ``shared``: parameters read
    whole inside the region (Qwen3's per-head query and key norms): each device sees only its
    heads, so their gradients are partial sums, to be summed over the devices."""

    column: list[str]
    row: list[str]
    sizes: set[int]
    kind: str
    flops: float = 0.0
    row_output_bytes: float = 0.0
    nodes: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)

    @property
    def divisor(self) -> int:
        """The largest ``t`` that divides every size of the split dimension (their gcd)."""
        return math.gcd(*self.sizes)


@dataclass
class TensorParallelPlan:
    """What `find` recognised: the groups, the regions refused (modules and the reason), and for
    each node of an accepted region its split dimension (what `prepare` rewrites)."""

    groups: list[Group]
    refused: list[tuple[list[str], str]]
    split_dims: dict[str, int] = field(default_factory=dict)

    def styles(self) -> dict[str, str]:
        """Module FQN -> ``"colwise"`` or ``"rowwise"``, for every group.

        Examples
        --------
        >>> p = TensorParallelPlan([Group(["a.q"], ["a.o"], {4, 2}, "attention")], [])
        >>> p.styles(), p.degrees()
        ({'a.q': 'colwise', 'a.o': 'rowwise'}, [1, 2])
        """
        out = {m: "colwise" for g in self.groups for m in g.column}
        out.update({m: "rowwise" for g in self.groups for m in g.row})
        return out

    def shared(self) -> list[str]:
        """Parameters read whole inside a region, whose gradients each device holds in part."""
        return sorted({q for g in self.groups for q in g.shared})

    def degrees(self) -> list[int]:
        """Every tensor-parallel degree that splits all groups (divisors of their common gcd)."""
        if not self.groups:
            return [1]
        g = math.gcd(*(x.divisor for x in self.groups))
        return [t for t in range(1, g + 1) if g % t == 0]

    def why_not(self, t: int) -> str | None:
        """One line saying why degree ``t`` does not split the plan, or None when it does."""
        if int(t) != t or t < 1:
            return f"tensor-parallel degree must be a positive integer, got {t!r}"
        if t > 1 and not self.groups:
            return "no column-then-row pair found on the model" + (f" ({self.refused[0][1]})" if self.refused else "")
        for g in self.groups:
            bad = sorted(s for s in g.sizes if s % t)
            if bad:
                return (f"degree {t} does not divide {bad[0]}, a size of the split dimension of "
                        f"{', '.join(g.column)} -> {', '.join(g.row)} (a head count, key-value heads included, "
                        f"or the width): degrees {self.degrees()} do")
        return None


def _size(n: Any) -> tuple[int, ...] | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return tuple(int(s) for s in v.shape) if isinstance(v, torch.Tensor) else None


def _weight(gm: fx.GraphModule, n: Any) -> str | None:
    """The FQN of the parameter node ``n`` reads, if it is a parameter."""
    if isinstance(n, fx.Node) and n.op == "get_attr":
        try:
            t = gm.get_parameter(str(n.target))
        except AttributeError:
            return None
        return str(n.target) if t.dim() == 2 else None
    return None


def products(gm: fx.GraphModule) -> dict[fx.Node, tuple[fx.Node, str, bool]]:
    """Weight products of the graph: node -> (its activation input, the weight's module FQN,
    whether the weight is stored ``(in, out)`` as GPT-2's ``Conv1D``). A product is
    ``aten.linear``, ``aten.addmm`` of an ``(in, out)`` weight, or ``aten.matmul`` of the
    transpose of an ``(out, in)`` weight."""
    out = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is aten.linear.default and _weight(gm, n.args[1]):
            out[n] = (n.args[0], _weight(gm, n.args[1]).rsplit(".", 1)[0], False)
        elif n.target is aten.addmm.default and _weight(gm, n.args[2]):
            out[n] = (n.args[1], _weight(gm, n.args[2]).rsplit(".", 1)[0], True)
        elif n.target is aten.matmul.default and _transposed_weight(gm, n.args[1]):
            out[n] = (n.args[0], _transposed_weight(gm, n.args[1]).rsplit(".", 1)[0], False)
    return out


def _transposed_weight(gm: fx.GraphModule, n: Any) -> str | None:
    """The FQN of the ``(out, in)`` parameter whose transpose ``n`` is (``x @ W.T``: Falcon's linear)."""
    if not (isinstance(n, fx.Node) and n.op == "call_function"):
        return None
    if n.target in (aten.numpy_T.default, aten.t.default) or (
            n.target is aten.transpose.int and sorted(d % 2 for d in n.args[1:3]) == [0, 1]):
        return _weight(gm, n.args[0])
    return None


def _is_parameter(gm: fx.GraphModule, n: fx.Node) -> bool:
    try:
        gm.get_parameter(str(n.target))
    except AttributeError:
        return False
    return True


def _prefix(shape: tuple[int, ...], i: int) -> int:
    return math.prod(shape[:i])


def _reshaped(ins: tuple[int, ...], outs: tuple[int, ...], i: int) -> int:
    """Where split dimension ``i`` of a tensor of shape ``ins`` lies after a reshape to ``outs``:
    the output dimension starting at the same flat offset that either is it, holds its leading
    factor (a split into heads: the shards stay whole heads), or merges it with whole trailing
    dimensions (heads back into features)."""
    p = _prefix(ins, i)
    for j in range(len(outs)):
        if _prefix(outs, j) == p and outs[j] != 1:
            if outs[j] == ins[i]:
                return j
            if ins[i] % outs[j] == 0 and any(math.prod(outs[j:k]) == ins[i] for k in range(j + 1, len(outs) + 1)):
                return j
            if outs[j] % ins[i] == 0 and any(math.prod(ins[i:k]) == outs[j] for k in range(i + 1, len(ins) + 1)):
                return j
            break
    raise Refused(f"a reshape from {list(ins)} to {list(outs)} scatters the split dimension {i}")


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _rule(n: fx.Node, split: dict[fx.Node, int]) -> int:
    """The split dimension of ``n``'s output from its inputs' (``split``), or `Refused`."""
    f, outs = n.target, _size(n)
    ins = [a for a in n.all_input_nodes if a in split]
    x = ins[0]
    i, xs = split[x], _size(x)
    name = getattr(f, "__name__", str(f))
    if f is operator.getitem:
        return i
    if outs is None:
        if f in _SPLITS:
            d = _dim(n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0), len(xs))
            if f is aten.unbind.int:
                d = _dim(n.args[1] if len(n.args) > 1 else 0, len(xs))
                if d == i:
                    raise Refused(f"{name} unbinds the split dimension")
                return i - (d < i)
            if d == i:
                raise Refused(f"{name} cuts the split dimension into parts (a fused projection whose parts are "
                              "stacked, not interleaved by head)")
            return i
        raise Refused(f"{name} has a split input and no tensor output")
    if f in _ELEMENTWISE or f in _SOFTMAX:
        if f in _SOFTMAX and _dim(n.args[1], len(xs)) == i:
            raise Refused(f"{name} normalises over the split dimension")
        j = i + len(outs) - len(xs)
        for a in n.all_input_nodes:
            s = _size(a)
            if a in split:
                if split[a] + len(outs) - len(s) != j:
                    raise Refused(f"{name} joins values split along different dimensions")
            elif s is not None:
                k = j - (len(outs) - len(s))
                if 0 <= k < len(s) and s[k] != 1:
                    raise Refused(f"{name} joins the split features with an unsplit tensor of full width "
                                  f"{list(s)} (the residual stream, or a bias over all heads)")
        return j
    if f in _VIEWS:
        return _reshaped(xs, outs, i)
    if f is aten.transpose.int:
        a, b = (_dim(d, len(xs)) for d in n.args[1:3])
        return b if i == a else a if i == b else i
    if f is aten.permute.default:
        return [_dim(d, len(xs)) for d in n.args[1]].index(i)
    if f is aten.t.default:
        return 1 - i
    if f is aten.unsqueeze.default:
        return i + (_dim(n.args[1], len(outs)) <= i)
    if f in (aten.squeeze.dim, aten.squeeze.dims):
        return _reshaped(xs, outs, i)
    if f in (aten.expand.default, aten.broadcast_to.default):
        j = i + len(outs) - len(xs)
        if outs[j] != xs[i]:
            raise Refused("expand widens the split dimension")
        return j
    if f in _SLICES:
        d = _dim(n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0), len(xs))
        if d == i and outs[i] != xs[i]:
            raise Refused(f"{name} takes part of the split dimension (a fused projection whose parts are stacked, "
                          "not interleaved by head)")
        return i - (f is aten.select.int and d < i)
    if f is aten.index.Tensor:  # advanced indexing after the split dimension keeps it in place
        idx = list(n.args[1])
        if all(k > i for k, t in enumerate(idx) if t is not None):
            return i
        raise Refused("index.Tensor indexes the split dimension or one before it")
    if f is aten.cat.default:
        d = _dim(n.args[1] if len(n.args) > 1 else 0, len(outs))
        if any(a not in split or split[a] != i for a in n.args[0]):
            raise Refused("cat joins split and unsplit values")
        if d == i:
            raise Refused("cat stacks along the split dimension")
        return i
    if f in _REDUCTIONS:
        dims = [_dim(d, len(xs)) for d in (n.args[1] if len(n.args) > 1 and n.args[1] is not None else range(len(xs)))]
        if i in dims:
            raise Refused(f"{name} reduces over the split dimension (a norm over all heads)")
        return _reshaped(xs, outs, i) if len(outs) != len(xs) else i
    if f in _MATMUL:
        a, b = n.args[0], n.args[1]
        sa, sb = _size(a), _size(b)
        if a in split and b in split:
            ia, ib = split[a], split[b]
            if ia - len(sa) == ib - len(sb) and ia < len(sa) - 2:
                return ia + len(outs) - len(sa)
        raise Refused(f"{name} contracts or mixes the split dimension with an unsplit operand")
    if f is aten.scaled_dot_product_attention.default:
        q, k, v = n.args[:3]
        if all(t in split and split[t] == split[q] == 1 for t in (q, k, v)):
            return 1
        raise Refused("scaled_dot_product_attention with inputs not all split by head")
    raise Refused(f"no rule for {name} on a split value")


class _Sets:
    """Union-find over the regions' seeds (weight-product nodes)."""

    def __init__(self) -> None:
        self.up: dict[fx.Node, fx.Node] = {}

    def find(self, x: fx.Node) -> fx.Node:
        self.up.setdefault(x, x)
        while self.up[x] is not x:
            self.up[x] = self.up[self.up[x]]
            x = self.up[x]
        return x

    def union(self, a: fx.Node, b: fx.Node) -> None:
        self.up[self.find(a)] = self.find(b)


def find(gm: fx.GraphModule) -> TensorParallelPlan:
    """Recognise the column-then-row groups of an exported graph (see the module docstring).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The model's exported graph, with the fake tensors of its nodes (``meta["val"]``).

    Returns
    -------
    TensorParallelPlan
        The groups (column and row module FQNs, the sizes ``t`` must divide), the regions
        refused with their reason, and the split dimension of every node of an accepted region.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
    >>> gm = torch.export.export(mlp, (torch.randn(2, 3, 8),)).module()
    >>> tp = find(gm)
    >>> tp.styles(), tp.degrees()[-1], tp.refused
    ({'0': 'colwise', '2': 'rowwise'}, 32, [])
    """
    prods = products(gm)
    split: dict[fx.Node, int] = {}
    seeds: dict[fx.Node, set[fx.Node]] = {}
    sizes: dict[fx.Node, set[int]] = {}
    sets, bad, rows = _Sets(), {}, {}
    attention: set[fx.Node] = set()
    for n in gm.graph.nodes:
        if n in prods:
            x = prods[n][0]
            if x in split and split[x] == len(_size(x)) - 1:  # reads split features: a row partner
                for s in seeds[x]:
                    rows.setdefault(sets.find(s), set()).add(n)
            elif x in split:
                for s in seeds[x]:
                    bad.setdefault(s, "a weight product reads the split values along another dimension")
            split[n], seeds[n] = len(_size(n)) - 1, {n}
            sizes[n] = {_size(n)[-1]}
            continue
        srcs = [a for a in n.all_input_nodes if a in split]
        if not srcs:
            continue
        mine = set().union(*(seeds[a] for a in srcs))
        first = next(iter(mine))
        for s in mine:
            sets.union(s, first)
        if n.op == "output":
            for s in mine:
                bad.setdefault(s, "the split values reach the graph output")
            continue
        if n.op == "call_function" and n.target in _NO_VALUE:
            continue
        try:
            if n.op != "call_function":
                raise Refused(f"{n.op} {n.target} reads a split value")
            d = _rule(n, split)
        except Refused as e:
            for s in mine:
                bad.setdefault(s, str(e))
            continue
        except (IndexError, TypeError, ValueError) as e:  # arguments in a form the rules do not read
            for s in mine:
                bad.setdefault(s, f"{getattr(n.target, '__name__', n.target)} with arguments the rules do not read ({e})")
            continue
        split[n], seeds[n] = d, mine
        if n.target in _SOFTMAX or n.target is aten.scaled_dot_product_attention.default:
            attention |= mine
        out = _size(n)
        if out is not None:
            for s in mine:
                sizes[s].add(out[d])
    members: dict[fx.Node, list[fx.Node]] = {}
    for s in prods:
        members.setdefault(sets.find(s), []).append(s)
    row_of: dict[fx.Node, set[fx.Node]] = {}
    for root, rs in rows.items():  # unions after a row was recorded moved the roots
        row_of.setdefault(sets.find(root), set()).update(rs)
    groups, refused, dims = [], [], {}
    for root, ss in members.items():
        names = [prods[s][1] for s in ss]
        why = next((bad[s] for s in ss if s in bad), None)
        if why is None and not row_of.get(root):
            why = "no weight product reads the split values as its input features"
        if why is not None:
            refused.append((names, why))
            continue
        rs = sorted(row_of[root], key=lambda n: n.name)
        inside = [n for n in split if n not in prods and sets.find(next(iter(seeds[n]))) is root]
        shared, why = _read_whole(gm, inside, {*ss, *inside})
        if why is not None:
            refused.append((names, why))
            continue
        groups.append(Group(column=names, row=[prods[r][1] for r in rs],
                            sizes=set().union(*(sizes[s] for s in ss)),
                            kind="attention" if attention & set(ss) else "mlp",
                            flops=sum(_flops(n, prods) for n in [*ss, *inside, *rs]),
                            row_output_bytes=float(sum(_bytes(r) for r in rs)),
                            nodes=[n.name for n in [*ss, *inside, *rs]],
                            shared=shared))
        dims.update({n.name: split[n] for n in [*ss, *inside]})
    # a row partner starts a region of its own, which its residual add refuses: not news
    rowed = {m for g in groups for m in g.row}
    refused = [(names, why) for names, why in refused if not set(names) <= rowed]
    return TensorParallelPlan(groups, refused, dims)


def _read_whole(gm: fx.GraphModule, inside: list[fx.Node], region: set[fx.Node]) -> tuple[list[str], str | None]:
    """The parameters a region reads whole, not through its column products (a per-head norm's
    weight, directly or as ``1 + w``): each device's gradient of one is the part its heads give,
    summed over the devices after the backward. That sum is right only if the parameter's value
    reaches nothing but the region; else ``(…, reason)``."""
    feed: set[fx.Node] = set()
    stack = [a for n in inside for a in n.all_input_nodes if a not in region]
    while stack:
        a = stack.pop()
        if a not in feed:
            feed.add(a)
            stack.extend(b for b in a.all_input_nodes if b not in region)
    params = sorted((a for a in feed if a.op == "get_attr" and _is_parameter(gm, a)), key=lambda a: str(a.target))
    for p in params:
        stack, seen = [p], {p}
        while stack:
            for w in stack.pop().users:
                if w in region or w in seen or (w.op == "call_function" and w.target in _NO_VALUE):
                    continue
                if w not in feed:
                    return [], (f"parameter {p.target} is read inside the split region and outside it: its gradient "
                                "would be part partial, part whole")
                seen.add(w)
                stack.append(w)
    return [str(p.target) for p in params], None


def _bytes(n: fx.Node) -> float:
    v = n.meta.get("val")
    return float(v.numel() * v.element_size()) if isinstance(v, torch.Tensor) else 0.0


def _flops(n: fx.Node, prods: dict) -> float:
    """Forward FLOPs of a weight product or a batched product (2 per multiply-add), 0 otherwise."""
    out = _size(n)
    if out is None:
        return 0.0
    if n in prods:
        x = _size(prods[n][0])
        return 2.0 * math.prod(out) * x[-1]
    if n.target in _MATMUL:
        return 2.0 * math.prod(out) * _size(n.args[0])[-1]
    if n.target is aten.scaled_dot_product_attention.default:
        q, k = _size(n.args[0]), _size(n.args[1])
        return 4.0 * math.prod(q[:-1]) * k[-2] * q[-1]
    return 0.0


def prepare(gm: fx.GraphModule, plan: TensorParallelPlan) -> fx.GraphModule:
    """Make ``gm`` (in place) runnable under torch's tensor parallelism for ``plan``: each weight
    product of a group becomes a call of an ``nn.Linear`` at the weight's module FQN sharing its
    parameters, and each view, reshape or expand of a region gets ``-1`` at its split dimension
    (another ``-1`` there is replaced by its size). The graph computes what it computed before.

    Raises
    ------
    Refused
        A group holds a ``Conv1D``-style ``(in, out)`` weight (``nn.Linear`` stores ``(out, in)``).
    """
    prods = products(gm)
    modules = set(plan.styles())
    for n, (x, fqn, transposed) in list(prods.items()):
        if fqn not in modules:
            continue
        if transposed:
            raise Refused(f"{fqn} stores its weight (in, out) (a Conv1D): torch's Colwise/RowwiseParallel "
                          "split nn.Linear weights")
        weight = gm.get_parameter(f"{fqn}.weight")
        bias_node = n.args[2] if len(n.args) > 2 else None
        lin = nn.Linear(weight.shape[1], weight.shape[0], bias=bias_node is not None, device="meta")
        lin.weight = weight
        if bias_node is not None:
            lin.bias = gm.get_parameter(str(bias_node.target))
        parent, _, leaf = fqn.rpartition(".")
        owner = gm.get_submodule(parent) if parent else gm
        for pname, p in owner.get_submodule(leaf).named_parameters(recurse=False):
            if getattr(lin, pname, None) is not p:
                raise Refused(f"{fqn} holds parameter {pname} beside its weight and bias")
        setattr(owner, leaf, lin)
        with gm.graph.inserting_after(n):
            call = gm.graph.call_module(fqn, (x,))
        call.meta = dict(n.meta)
        n.replace_all_uses_with(call)
        gm.graph.erase_node(n)
    _out_of_place(gm, {n for n in gm.graph.nodes if n.op == "call_module" and n.target in modules
                       or n.name in plan.split_dims})
    for n in gm.graph.nodes:
        if n.name in plan.split_dims and n.op == "call_function" and n.target in _SIZED:
            j, shape = plan.split_dims[n.name], list(n.args[1])
            if n.target not in (aten.expand.default, aten.broadcast_to.default):  # one -1 per view: the others' sizes written out
                shape = _fill(shape, _size(n))
            shape[j] = -1
            n.args = (n.args[0], shape, *n.args[2:])
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _out_of_place(gm: fx.GraphModule, values: set[fx.Node]) -> None:
    """Replace each in-place operator on one of ``values`` by its out-of-place twin, later readers
    of the value reading the result: torch's parallel styles hand on their outputs as views of
    DTensors' local tensors, which autograd forbids changing in place (Falcon's
    ``mlp_output += attention_output``)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload) or not n.args:
            continue
        name = n.target._overloadpacket.__name__
        if not name.endswith("_") or name.startswith("_") or n.args[0] not in values:
            continue
        pure = getattr(getattr(aten, name[:-1]), n.target._overloadname)
        x = n.args[0]
        with gm.graph.inserting_after(n):
            new = gm.graph.call_function(pure, n.args, n.kwargs)
        new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        for user in list(x.users):  # read after the change: read the result
            if user is not n and order.get(user, -1) > order[n]:
                user.replace_input_with(x, new)
        gm.graph.erase_node(n)
        values.add(new)


def _fill(shape: list, out: tuple[int, ...]) -> list:
    """``shape`` with each ``-1`` replaced by the output's size there."""
    return [out[k] if s == -1 else s for k, s in enumerate(shape)]

