"""Where a pipeline stage may begin: a model's candidate split points.

Problem
-------
Every split the planner proposes must be one PyTorch can run: a list of module FQNs at which
`torch.distributed.pipelining` starts a new stage (``SplitPoint.BEGINNING``). A candidate is a
module called exactly once (a module called twice cannot mark one place); at
``granularity="block"`` one that a container holds (``layers.3``, ``h.0``, ``features.2``) or a
direct part of the model (single-child wrappers see through), at ``"layer"`` any such module.
Candidates that start at the same operator are one split point, named by the outermost
(`_first_nodes`, on a graph whose nodes keep ``nn_module_stack``: an export or a torch.fx trace).

Exactness: the candidates are read off one run of the model (forward pre-hooks count the
calls), not guessed from its classes. Complexity: one forward pass, then linear in the modules;
`_first_nodes` is linear in the graph's nodes times their module depth.

Reference: ``torch.distributed.pipelining`` (``pipeline``, ``SplitPoint``), torch 2.13.

Example
-------
>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> order, count = module_calls(net, (torch.randn(2, 8),))
>>> candidates(net, order, count)
['0', '1', '2']
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch import nn

from ..errors import UsageError

GRANULARITIES = ("block", "layer")
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


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
