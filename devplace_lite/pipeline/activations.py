"""Activation memory on a pipeline rank: what autograd keeps, and a stage that recomputes it.

Problem
-------
A schedule decides how many micro-batches' activations a rank keeps alive (GPipe every
micro-batch's until the backward phase, 1F1B at most about ``p`` of them), and a plan may have
a stage recompute its activations in its backward to fit in memory. A run must carry out the
recomputation the plan asks for, and measure the memory both decide.

How
---
`ActivationMeter` counts, through ``torch.autograd.graph.saved_tensors_hooks``, the bytes of
the tensors autograd saves for the backward, each from its first save until it is freed (a
finaliser), once however many operations save it, parameters excluded, and keeps the
high-water mark. `Recompute` cuts a stage's module at its segments (the plan's split-point
candidates inside the stage, one layer each on a decoder) and runs each piece under
non-reentrant ``torch.utils.checkpoint``, as Megatron-LM and torchtitan's full activation
checkpointing recompute one layer at a time: autograd keeps only the pieces' inputs between
the stage's forward and its backward, and the backward runs each piece's forward again just
before its own backward (inside torch's input-gradient pass where the schedule splits the
backward), so it holds one piece's activations at a time. The meter then sees the inputs
alone: the recomputed tensors live inside checkpoint's own hooks during a backward, where no
outer hook sees them, so they are measured apart (`Recompute.transient_bytes`: the largest one
forward of a piece saves beyond its inputs, without checkpoint, on a micro-batch it ran, under
the meter), and the run adds them to the rank's peak (the largest of its recomputing
stages', `devplace_lite.pipeline.rank`).

Exactness: the tensors autograd saves, counted exactly; not the allocator's memory (its cache,
temporaries freed inside an operator). Complexity: constant time per saved tensor.

Reference: ``torch.autograd.graph.saved_tensors_hooks``, ``torch.utils.checkpoint`` (torch
2.13); recomputation: T. Chen, B. Xu, C. Zhang, C. Guestrin, "Training Deep Nets with Sublinear
Memory Cost", arXiv:1604.06174, 2016.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence


class ActivationMeter:
    """Bytes of tensors autograd keeps for the backward pass, and their high-water mark.

    Used as ``torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack)``: a tensor
    counts from the first time it is saved until it is freed (a finaliser), once however many
    operations save it; parameters (``skip``, by ``id``) are not activations. This is the memory
    a schedule decides: GPipe keeps every micro-batch's activations until the backward phase,
    1F1B at most about ``p`` of them.

    Examples
    --------
    >>> import torch
    >>> w = torch.randn(4, 4, requires_grad=True)
    >>> meter = ActivationMeter({id(w)})
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = (torch.randn(2, 4) @ w).relu()
    >>> meter.peak  # the input of the matmul and the relu's output, 2 x 4 floats each
    64
    """

    def __init__(self, skip: set[int] | None = None):
        self.skip = skip or set()
        self.live = self.peak = 0
        self._seen: set[int] = set()

    def _free(self, key: int, size: int) -> None:
        self._seen.discard(key)
        self.live -= size

    def pack(self, t: Any) -> Any:
        key = id(t)
        if key not in self._seen and key not in self.skip:
            size = t.numel() * t.element_size()
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._free, key, size)
        return t

    @staticmethod
    def unpack(t: Any) -> Any:
        return t


class Recompute:
    """Make ``module`` recompute its activations in its backward, one segment at a time (as
    Megatron-LM and torchtitan's full activation checkpointing recompute one layer at a time):
    an ``fx.GraphModule`` stage is cut where each of ``points`` (the plan's segments inside the
    stage, module FQNs) begins, and each piece runs under non-reentrant
    ``torch.utils.checkpoint`` (the RNG state is kept, so dropout draws the same mask again),
    which saves only that piece's inputs; without points found, the whole module is one piece.
    The module is changed in place (its parameters stay its own); each piece's first call's
    inputs are kept (detached) for `transient_bytes`.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Tanh(), torch.nn.Tanh())
    >>> meter, again = ActivationMeter(), Recompute(net)
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = net(torch.randn(2, 4, requires_grad=True)).sum()
    >>> meter.peak  # the input alone (2 x 4 floats), not the three tanh outputs
    32
    >>> again.transient_bytes(set())  # what its backward holds beyond it: the three outputs
    96
    >>> gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Tanh(), torch.nn.Tanh()))
    >>> meter, again = ActivationMeter(), Recompute(gm, ["1", "2"])
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = gm(torch.randn(2, 4, requires_grad=True)).sum()
    >>> len(again.pieces), meter.peak, again.transient_bytes(set())  # three inputs kept, one output again
    (3, 96, 32)
    """

    def __init__(self, module: Any, points: Sequence[str] = ()) -> None:
        from torch.utils.checkpoint import checkpoint

        self._parted, self.pieces = _pieces(module, points)
        self.first: list[tuple | None] = [None] * len(self.pieces)

        def wrap(k: int, inner: Any) -> Any:
            def forward(*args: Any, **kwargs: Any) -> Any:
                if self.first[k] is None:
                    self.first[k] = (tuple(a.detach().requires_grad_(a.requires_grad) if hasattr(a, "detach") else a
                                           for a in args), kwargs)
                return checkpoint(inner, *args, use_reentrant=False, **kwargs)
            return forward

        self.inner = [piece.forward for piece in self.pieces]
        for k, piece in enumerate(self.pieces):
            piece.forward = wrap(k, self.inner[k])
        if self._parted is not None:
            module.forward = self._parted.forward

    def transient_bytes(self, skip: set[int]) -> int:
        """The most bytes autograd saves, beyond the piece's own inputs (kept already), in one
        forward of one piece without checkpoint, on the inputs of its first call (0 before
        any): what a backward holds on top of the kept inputs while it recomputes a piece."""
        import torch

        most = 0
        for inner, first in zip(self.inner, self.first):
            if first is None:
                continue
            args, kwargs = first
            meter = ActivationMeter(skip | {id(a) for a in args})
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
                inner(*args, **kwargs)
            most = max(most, int(meter.peak))
        return most


def _pieces(module: Any, points: Sequence[str]) -> tuple[Any, list[Any]]:
    """``module`` cut where each of ``points`` begins (`torch.fx.passes.split_module`, the
    pieces holding the module's own parameters) and its pieces in order; ``(None, [module])``
    where it is not an ``fx.GraphModule`` or no point begins inside it."""
    import torch.fx
    from torch.fx.passes.split_module import split_module

    from .split_points import _first_nodes

    if not points or not isinstance(module, torch.fx.GraphModule):
        return None, [module]
    starts = set(_first_nodes(module, points).values())
    piece, i = {}, 0
    for n in module.graph.nodes:
        i += n.name in starts
        piece[n.name] = i
    if i == 0:
        return None, [module]
    for n in module.graph.nodes:  # a weight read where it is used: not an input handed between pieces
        if n.op == "get_attr" and n.users:
            piece[n.name] = min(piece[u.name] for u in n.users)
    parted = split_module(module, module, lambda n: piece[n.name], keep_original_order=True)
    return parted, [getattr(parted, f"submod_{k}") for k in sorted(set(piece.values()))
                    if hasattr(parted, f"submod_{k}")]
