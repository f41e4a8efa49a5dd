"""The package's one torch.fx tracer: fx's rule, plus modules kept whole by name, class or mark.

Problem: the capture's fallback route (`devplace_lite.pipeline.capture`, where torch.export
cannot capture a model) and the profiler (`devplace_lite.pipeline.profile`, layer and operator
graphs) both trace a model with torch.fx and must agree on which modules are one node. This
class is that rule, in one place. Tracing is one pass over the model's ``forward``.
"""

from __future__ import annotations

from typing import Sequence

import torch.fx as fx
from torch import nn


class Tracer(fx.Tracer):
    """The package's one torch.fx tracer. fx's own rule keeps a built-in ``torch.nn`` module
    whole (one operator: its ``forward`` checks shapes in Python, which fx cannot trace); this
    one also keeps whole the modules named in ``leaves`` (where tracing failed, see
    `trace_with_leaves`), the instances of ``classes``, and with ``blocks`` every module whose
    class sets ``devplace_layer = True`` (the zoo's attention blocks: the profiler's layer
    granularity).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
    >>> [n.target for n in Tracer(leaves={"1"}).trace(net).nodes if n.op == "call_module"]
    ['0', '1']
    """

    def __init__(self, leaves: Sequence[str] = (), classes: Sequence[type] = (), blocks: bool = False) -> None:
        super().__init__()
        self.leaves, self.classes, self.blocks = set(leaves), tuple(classes), blocks

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        if qualname in self.leaves or isinstance(m, self.classes) or super().is_leaf_module(m, qualname):
            return True
        return self.blocks and bool(getattr(type(m), "devplace_layer", False))
