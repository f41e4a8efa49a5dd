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
high-water mark. `Recompute` runs a stage's module under non-reentrant
``torch.utils.checkpoint``: autograd keeps only the stage's inputs between its forward and its
backward, and the backward runs the forward again first (inside torch's input-gradient pass
where the schedule splits the backward). The meter then sees the inputs alone: the recomputed
tensors live inside checkpoint's own hooks during a backward, where no outer hook sees them, so
they are measured apart (`Recompute.transient_bytes`: one forward of the stage's module,
without checkpoint, on a micro-batch it ran, under the meter), and the run adds them to the
rank's peak (the largest of its recomputing stages', `devplace_lite.pipeline.rank`).

Exactness: the tensors autograd saves, counted exactly; not the allocator's memory (its cache,
temporaries freed inside an operator). Complexity: constant time per saved tensor.

Reference: ``torch.autograd.graph.saved_tensors_hooks``, ``torch.utils.checkpoint`` (torch
2.13); recomputation: T. Chen, B. Xu, C. Zhang, C. Guestrin, "Training Deep Nets with Sublinear
Memory Cost", arXiv:1604.06174, 2016.
"""

from __future__ import annotations

import weakref
from typing import Any


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
    """Make ``module`` recompute its activations in its backward: its ``forward`` runs under
    non-reentrant ``torch.utils.checkpoint`` (the RNG state is kept, so dropout draws the same
    mask again), which saves only the forward's inputs. The module is changed in place; the
    first call's inputs are kept (detached) for `transient_bytes`.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Tanh(), torch.nn.Tanh())
    >>> meter, again = ActivationMeter(), Recompute(net)
    >>> with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
    ...     y = net(torch.randn(2, 4, requires_grad=True)).sum()
    >>> meter.peak  # the input alone (2 x 4 floats), not the three tanh outputs
    32
    >>> again.transient_bytes(set())  # what its backward holds again: the three outputs
    96
    """

    def __init__(self, module: Any) -> None:
        from torch.utils.checkpoint import checkpoint

        self.inner = module.forward
        self.first: tuple | None = None

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self.first is None:
                self.first = (tuple(a.detach().requires_grad_(a.requires_grad) if hasattr(a, "detach") else a
                                    for a in args), kwargs)
            return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)

        module.forward = forward

    def transient_bytes(self, skip: set[int]) -> int:
        """Bytes autograd saves in one forward of the module without checkpoint, on the inputs
        of its first call (0 before any): what each of its backwards holds while it runs."""
        import torch

        if self.first is None:
            return 0
        meter = ActivationMeter(skip)
        args, kwargs = self.first
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
            self.inner(*args, **kwargs)
        return int(meter.peak)
