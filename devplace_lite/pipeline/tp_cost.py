"""The cost of each tensor-parallel degree of a model's column-then-row groups, on a GPU's roofline.

Problem: split a group (`devplace_lite.pipeline.tensor_parallel.Group`: an attention or MLP block's
column and row products and what lies between) over ``t`` devices; how long does one device
take? Each device runs ``1/t`` of every operator of the group (its weight rows or columns, its
heads, its MLP width) except two: the column products read the whole input, replicated, and
the row products write a whole-width partial sum. Each kernel is priced as the profiler prices
kernels (`devplace_lite.pipeline.profile.roofline_ms`: ``max(flops / peak, bytes / bandwidth)``
plus a launch overhead) on a named accelerator (`devplace_lite.devices.SPECS`). Then the row
outputs are summed over the devices by a ring all-reduce, ``2 (t - 1) / t`` of their bytes
through each device's link, in the forward; in training the backward sums the column inputs'
gradients the same way, and its kernels take twice the forward's (the gradients of the input
and of the weight).

The link is the spec's unless given (`link_for`): NVLink while the ``t`` devices fit in one of the
spec's nodes, the network between nodes beyond, the host link for a spec without either.

Complexity: ``O(n)`` over the group's nodes per degree.

Example
-------
>>> from devplace_lite.devices import SPECS                                 # doctest: +SKIP
>>> rows = degree_costs(gm, tp, SPECS["H100"], training=True)               # doctest: +SKIP
>>> [(r["t"], round(r["step_ms"], 4)) for r in rows]                        # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from ..devices import AcceleratorSpec
from .profile import ACC_KERNEL_OVERHEAD_MS, roofline_ms
from .tensor_parallel import Group, TensorParallelPlan, _bytes, _flops, _is_parameter, products

#: ops that move no data (views): free on every device, as the profiler counts them
_FREE = {torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default,
         torch.ops.aten.transpose.int, torch.ops.aten.permute.default, torch.ops.aten.unsqueeze.default,
         torch.ops.aten.expand.default, torch.ops.aten.alias.default, torch.ops.aten.t.default,
         torch.ops.aten.slice.Tensor, torch.ops.aten.select.int, torch.ops.aten.squeeze.dim}


def _kernels(gm: fx.GraphModule, group: Group, t: int) -> list[tuple[float, float]]:
    """``(flops, bytes)`` of each kernel one of ``t`` devices runs for the group's forward."""
    prods = products(gm)
    by_name = {n.name: n for n in gm.graph.nodes}
    inside = set(group.nodes)
    rows = {n for n in prods if prods[n][1] in group.row}
    out = []
    for name in group.nodes:
        n = by_name[name]
        if n.op != "call_function" or n.target in _FREE or not isinstance(n.meta.get("val"), torch.Tensor):
            continue
        flops = _flops(n, prods) or float(n.meta["val"].numel())
        read = 0.0
        for a in n.all_input_nodes:
            if a.op == "get_attr":  # a weight or bias: split over the devices (a row bias is whole)
                read += _bytes_param(gm, a) / (1 if n in rows and a is not n.args[1] else t)
            elif a.name in inside:
                read += _bytes(a) / t
            else:  # the replicated input of a column product, or a mask or rotary table
                read += _bytes(a)
        write = _bytes(n) if n in rows else _bytes(n) / t
        out.append((flops / t, read + write))
    return out


def _bytes_param(gm: fx.GraphModule, n: fx.Node) -> float:
    t = gm.get_parameter(str(n.target)) if _is_parameter(gm, n) else None
    return float(t.numel() * t.element_size()) if isinstance(t, torch.Tensor) else 0.0


def allreduce_ms(nbytes: float, t: int, link: float) -> float:
    """A ring all-reduce of ``nbytes`` over ``t`` devices: ``2 (t - 1) / t`` of them through each
    device's link of ``link`` bytes/s, in ms (0 for one device).

    >>> allreduce_ms(1e6, 1, 1e9), allreduce_ms(1e6, 2, 1e9), allreduce_ms(1e6, 4, 1e9)
    (0.0, 1.0, 1.5)
    """
    return 0.0 if t == 1 else 2.0 * (t - 1) / t * nbytes / link * 1e3


def link_for(spec: AcceleratorSpec, t: int) -> float:
    """Bytes/s each device's share of a ``t``-way all-reduce crosses on ``spec``'s cluster: NVLink
    within a node (``t <= spec.node``), the network between nodes, else the host link.

    >>> from devplace_lite.devices import SPECS
    >>> link_for(SPECS["H100"], 8), link_for(SPECS["H100"], 16)
    (450000000000.0, 50000000000.0)
    """
    if t <= spec.node and spec.nvlink:
        return spec.nvlink
    return spec.network or spec.link


def group_cost(gm: fx.GraphModule, group: Group, t: int, spec: AcceleratorSpec, *, training: bool = True,
               link: float | None = None) -> dict[str, float]:
    """One device's time for ``group`` split over ``t`` devices on ``spec``: compute, all-reduce.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The exported graph `find` read (its nodes' fake tensors give the sizes).
    group : Group
        A group of `find`'s plan.
    t : int
        The tensor-parallel degree; must divide every size in ``group.sizes``.
    spec : AcceleratorSpec
        The accelerator whose roofline prices the kernels.
    training : bool
        Forward and backward (the backward's kernels twice the forward's, plus the all-reduce of
        the column inputs' gradients), else the forward alone.
    link : float, optional
        Bytes/s of the link the all-reduce crosses (default `link_for`).

    Returns
    -------
    dict
        ``compute_ms``, ``comm_ms`` (the all-reduces) and ``ms`` (their sum: no overlap, as the
        project's cost model counts a device's load).

    Raises
    ------
    ValueError
        ``t`` does not divide the group's split sizes.
    """
    if int(t) != t or t < 1 or any(s % t for s in group.sizes):
        raise ValueError(f"degree {t} does not split {group.column} -> {group.row} (sizes {sorted(group.sizes)})")
    fwd = roofline_ms(_kernels(gm, group, t), spec, ACC_KERNEL_OVERHEAD_MS)
    link = link_for(spec, t) if link is None else link
    comm = allreduce_ms(group.row_output_bytes, t, link)
    compute = fwd
    if training:
        prods = products(gm)
        ins = {prods[n][0] for n in prods if prods[n][1] in group.column}
        comm += allreduce_ms(sum(_bytes(x) for x in ins), t, link)
        compute = 3.0 * fwd
    return {"compute_ms": compute, "comm_ms": comm, "ms": compute + comm}


def degree_costs(gm: fx.GraphModule, plan: TensorParallelPlan, spec: AcceleratorSpec, *,
                 degrees: Sequence[int] | None = None, training: bool = True,
                 link: float | None = None) -> list[dict[str, Any]]:
    """One row per tensor-parallel degree: the time of one device for all groups of ``plan``
    (`group_cost` summed), its compute and all-reduce parts, and the speed-up over ``t = 1``.

    Parameters
    ----------
    gm, plan : the exported graph and what `find` recognised on it.
    spec : AcceleratorSpec
        The accelerator whose roofline prices the kernels.
    degrees : sequence of int, optional
        Default: every degree the plan allows (`TensorParallelPlan.degrees`).
    training, link : as `group_cost`.

    Returns
    -------
    list of dict
        ``t``, ``compute_ms``, ``comm_ms``, ``ms``, ``speedup`` (time at ``t = 1`` over time at ``t``).

    Raises
    ------
    ValueError
        A degree the plan does not allow (its one-line reason).
    """
    rows = []
    base = None
    for t in (degrees if degrees is not None else plan.degrees()):
        why = plan.why_not(t)
        if why:
            raise ValueError(why)
        parts = [group_cost(gm, g, t, spec, training=training, link=link) for g in plan.groups]
        row = {"t": t, **{k: math.fsum(p[k] for p in parts) for k in ("compute_ms", "comm_ms", "ms")}}
        if base is None:
            base = sum(group_cost(gm, g, 1, spec, training=training, link=link)["ms"] for g in plan.groups)
        row["speedup"] = base / row["ms"] if row["ms"] else math.nan
        rows.append(row)
    return rows


def _segment_of(model: Any, names: Sequence[str]) -> Callable[[str], int]:
    """Module FQN -> the segment it runs in: the last segment beginning at or before it in the
    model's module order (segments are cut at module boundaries, in that order)."""
    order = {m: i for i, (m, _) in enumerate(model.named_modules())}
    starts = [order.get(nm, -1) for nm in names]

    def seg(fqn: str) -> int:
        at = order.get(fqn, -1)
        return max((i for i, s in enumerate(starts) if s <= at), default=0)
    return seg


def segment_shares(model: Any, gm: fx.GraphModule, plan: TensorParallelPlan, names: Sequence[str],
                   scale: float = 1.0) -> dict[str, list[float]]:
    """What tensor parallelism splits in each segment of a capture (``names``: its split points).

    Parameters
    ----------
    model : nn.Module
        The model ``gm`` was exported from (its module order places modules in segments).
    gm, plan : the exported graph and what `find` recognised on it.
    names : sequence of str
        The segments' first modules (`Capture.names`).
    scale : float
        Profile micro-batch size over the export's batch (the all-reduced bytes scale with it).

    Returns
    -------
    dict of lists, one value per segment
        ``share``: the FLOPs inside groups over all the segment's FLOPs (weight and attention
        products; every other operator one per output element); ``param_bytes``: the groups'
        parameter bytes (split ``t`` ways); ``groups``: groups in the segment (one all-reduce
        each per pass); ``forward_bytes`` and ``backward_bytes``: what the forward's row outputs
        and the backward's column-input gradients all-reduce.
    """
    seg = _segment_of(model, names)
    n = len(names)
    out = {k: [0.0] * n for k in ("share", "param_bytes", "groups", "forward_bytes", "backward_bytes")}
    prods = products(gm)
    inside = {name for g in plan.groups for name in g.nodes}
    total, split = [0.0] * n, [0.0] * n
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op != "call_function" or not stack or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        i = seg(list(stack.values())[-1][0])
        f = _flops(node, prods) or float(node.meta["val"].numel())
        total[i] += f
        if node.name in inside:
            split[i] += f
    params = dict(gm.named_parameters())
    for g in plan.groups:
        i = seg(g.column[0])
        out["groups"][i] += 1
        out["param_bytes"][i] += sum(float(q.numel() * q.element_size()) for name, q in params.items()
                                     if name.rpartition(".")[0] in g.column + g.row)
        out["forward_bytes"][i] += g.row_output_bytes * scale
        ins = {prods[x][0] for x in prods if prods[x][1] in g.column}
        out["backward_bytes"][i] += sum(_bytes(x) for x in ins) * scale
    out["share"] = [s / t if t else 0.0 for s, t in zip(split, total)]
    return out
