"""Cut a traced torch model into pipeline stages: one `torch.fx.GraphModule` per stage.

This cuts for two of the capture's routes (`devplace_lite.pipeline.capture.fx_split`): the
exported graph where torch's own outliner cuts it wrongly (rotary embeddings), and the torch.fx
trace where torch.export cannot capture a model; it makes their segments, and the stages a
torchrun rank builds (`devplace_lite.pipeline.rank`).

Problem: given a model's fx graph and a stage index for its nodes (a chain of ideals: every
edge goes from a stage to the same or a later one), build one module per stage such that
running them one after another computes the model. A stage only talks to its neighbours (that
is what `torch.distributed.pipelining.PipelineStage` sends and receives), so an activation
read ``j`` stages later is *carried*: every stage in between takes it as an input and hands it
on unchanged as an output. Stage ``s`` (``s < p - 1``) returns the tuple of values live across
the boundary after it; the last stage returns what the model returns.

Three kinds of nodes need care:

* ``get_attr`` nodes (parameters, buffers, constants) and nodes whose value holds no tensor
  (``x.size(0)``, shape arithmetic) are *replicated*: copied into every stage that reads them,
  since only tensors travel between stages and recomputing a shape costs nothing. A trainable
  parameter read by two stages would be trained twice, so that is an error; so is one module
  with trainable weights called from two stages (shared weights). A module without weights
  (one ``nn.Dropout`` called at ten places) is copied into every stage that calls it.
* nodes without a stage run at the earliest stage
  their inputs allow, i.e. the largest stage among their inputs;
* ``getitem`` on a node that returns a tuple of tensors (an LSTM's output) stays with that node:
  a tuple cannot cross a stage boundary.

Complexity: ``O(p (n + m))`` for ``n`` fx nodes, ``m`` uses and ``p`` stages, plus one run of
the model on the example inputs to learn which values are tensors and how many bytes each
boundary carries.

Example
-------
>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> from devplace_lite.pipeline.tracer import Tracer
>>> gm = torch.fx.GraphModule(net, Tracer().trace(net))
>>> sp = split_module(gm, {"_0": 0, "_1": 0, "_2": 1}, (torch.randn(3, 4),))
>>> sp.num_stages, sp.carried
(2, [['_1']])
>>> x = torch.randn(3, 4)
>>> torch.allclose(sp.stages[1](*sp.stages[0](x)), net(x))
True

Reference: the stage and schedule API is PyTorch's ``torch.distributed.pipelining`` (``PipelineStage``,
``ScheduleGPipe``, ``Schedule1F1B``); the carry-through of skip activations is the classic way to
pipeline non-sequential models (Huang et al., "GPipe", 2019; Kim et al., "torchgpipe", 2020).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
import torch.fx as fx
from torch import nn

from ..graph import GraphError


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward; backward hands on a contiguous gradient (what a stage sends back)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class ContiguousGrad(nn.Module):
    """Identity on its input, but the gradient flowing back into it is made contiguous:
    communication backends (gloo) send and receive contiguous memory only, and a stage's input
    gradient may come out of autograd with any strides (an LSTM's, for one). A module, not a
    function, so that it survives the re-tracing with which fx unpickles a stage."""

    def forward(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.requires_grad:
            return _ContiguousGrad.apply(x)
        return x


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


_GRAD_GUARD = "devplace_grad_guard"


class _Recorder(fx.Interpreter):
    """Runs the graph once, keeping for every node whether it holds a tensor and its bytes."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.kind: dict[str, str] = {}
        self.bytes: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.kind[n.name] = ("tensor" if isinstance(out, torch.Tensor)
                             else "container" if _has_tensor(out) else "value")
        self.bytes[n.name] = _nbytes(out)
        return out


@dataclass
class Split:
    """The stages of a model and what crosses each boundary.

    ``stages[s]`` is stage ``s``'s module; ``carried[b]`` the fx node names sent from stage ``b``
    to ``b + 1`` (in that order: the positional outputs of stage ``b`` and inputs of ``b + 1``);
    ``carried_bytes[b]`` their size for the example batch; ``stage_of`` the stage of every
    computing node (replicated nodes are listed in ``replicated`` with their stages).
    """

    stages: list[fx.GraphModule]
    carried: list[list[str]]
    carried_bytes: list[int]
    stage_of: dict[str, int]
    replicated: dict[str, list[int]] = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def param_bytes(self) -> list[int]:
        """Bytes of parameters and buffers held by each stage."""
        return [sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
                for m in self.stages]

    def run_sequential(self, *inputs: Any) -> Any:
        """Run the stages one after another in this process (what the pipeline computes)."""
        out: Any = inputs
        for m in self.stages[:-1]:
            out = m(*out)
        return self.stages[-1](*out)


def split_module(gm: fx.GraphModule, stage_of: Mapping[str, int], example_inputs: Sequence[Any],
                 num_stages: int | None = None, replicate_parameters: bool = False) -> Split:
    """Split ``model`` into stages from ``stage_of`` (fx node name -> stage index).

    Parameters
    ----------
    gm : fx.GraphModule
        The model as the capture's tracer gives it (`devplace_lite.pipeline.tracer.Tracer`).
    stage_of : mapping
        Stage index (``0..p-1``) of fx nodes; nodes left out follow the rule in the module
        docstring; names that are not nodes of the graph are an error.
    example_inputs : sequence
        Positional inputs of one (micro-)batch, used to tell tensors from other values.
    num_stages : int, optional
        ``p``; default: one more than the largest stage index given. Stages may be empty
        (they hand their inputs on).
    replicate_parameters : bool
        A trainable parameter read by several stages (a tied embedding and head, one tensor
        read by ``get_attr``) is copied into each of them, as torch's pipelining replicates
        it; the caller then sums the copies' gradients (`Split.replicated` says where).
        Default: that is an error.

    Raises
    ------
    GraphError
        An edge goes backwards between stages, a non-tensor value must cross a boundary, a
        trainable parameter or a module is used by two stages, or a boundary carries nothing.
    """
    if not isinstance(gm, fx.GraphModule):
        raise GraphError(f"split_module cuts a traced model (torch.fx.GraphModule), got {type(gm).__name__}")
    nodes = list(gm.graph.nodes)
    by_name = {n.name: n for n in nodes}
    unknown = sorted(set(stage_of) - set(by_name))
    if unknown:
        raise GraphError(f"stage map names {unknown[0]!r}, which is not a node of the traced model "
                         f"({len(unknown)} unknown name(s) in all)")
    given = {k: int(v) for k, v in stage_of.items()}
    if any(v < 0 for v in given.values()):
        bad = min(given, key=given.get)
        raise GraphError(f"node {bad}: negative stage index {given[bad]}")
    p = int(num_stages) if num_stages is not None else max(given.values(), default=0) + 1
    if p < 1:
        raise GraphError(f"need at least one stage, got {p}")
    if given and max(given.values()) >= p:
        bad = max(given, key=given.get)
        raise GraphError(f"node {bad}: stage {given[bad]} but there are only {p} stage(s)")

    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*example_inputs)
    kind = rec.kind

    # -- which nodes are replicated, and the stage of every other node ------------------------
    replicable = {n.name for n in nodes
                  if n.op == "get_attr" or (n.op not in ("placeholder", "output") and kind.get(n.name) == "value")}
    stage: dict[str, int] = {}
    earliest: dict[str, int] = {}
    for n in nodes:
        if n.op == "output":
            continue
        ins = [earliest[a.name] for a in n.all_input_nodes]
        low = max(ins, default=0)
        if n.op == "placeholder":
            stage[n.name] = earliest[n.name] = 0
        elif n.name in replicable:
            earliest[n.name] = low
        else:
            if (n.op == "call_function" and n.target is operator.getitem
                    and kind.get(n.args[0].name) == "container"):
                s = stage[n.args[0].name]  # a tuple of tensors cannot cross a boundary
            else:
                s = given.get(n.name, low)
            if s < low:
                src = max(n.all_input_nodes, key=lambda a: earliest[a.name])
                raise GraphError(f"node {n.name} is on stage {s} but reads {src.name} from stage "
                                 f"{earliest[src.name]}: stages must form a chain (edges go forward)")
            stage[n.name] = earliest[n.name] = s

    # replicated nodes go to every stage that reads them (reverse order: users first)
    rep: dict[str, set[int]] = {}
    for n in reversed(nodes):
        if n.name not in replicable:
            continue
        where: set[int] = set()
        for u in n.users:
            if u.op == "output":
                where.add(p - 1)
            elif u.name in replicable:
                where |= rep[u.name]
            else:
                where.add(stage[u.name])
        rep[n.name] = where
    for n in nodes:
        if n.op == "get_attr" and len(rep.get(n.name, ())) > 1:
            obj = _attr(gm, str(n.target))
            if isinstance(obj, torch.Tensor) and obj.requires_grad and not replicate_parameters:
                s = sorted(rep[n.name])
                raise GraphError(f"parameter {n.target} is read by stages {s[0]} and {s[1]}: "
                                 f"put the nodes that use it on one stage")
    owner: dict[str, int] = {}
    for n in nodes:
        if n.op == "call_module" and any(t.requires_grad for t in gm.get_submodule(str(n.target)).parameters()):
            s = stage[n.name]  # a module without trainable weights (dropout, ReLU) may run anywhere
            if owner.setdefault(str(n.target), s) != s:
                raise GraphError(f"module {n.target} is called on stages {owner[str(n.target)]} and {s} "
                                 f"(shared weights): put its calls on one stage")

    # -- liveness: a value is carried over every boundary between its stage and its last use ---
    def use_stages(u: fx.Node) -> set[int]:
        if u.op == "output":
            return {p - 1}
        return rep[u.name] if u.name in replicable else {stage[u.name]}

    carried: list[list[str]] = [[] for _ in range(p - 1)]
    for n in nodes:
        if n.op == "output" or n.name in replicable:
            continue
        # a replicated user that nothing reads (dead code) is on no stage, and extends nothing
        last = max((s for u in n.users for s in use_stages(u)), default=stage[n.name])
        for b in range(stage[n.name], last):
            if kind.get(n.name) != "tensor":
                raise GraphError(f"value {n.name} ({kind.get(n.name)}) would cross from stage {b} to "
                                 f"{b + 1}: only tensors travel between stages")
            carried[b].append(n.name)
    for b, names in enumerate(carried):
        if not names:
            raise GraphError(f"nothing crosses from stage {b} to {b + 1}: the later stages do not "
                             f"depend on the earlier ones")

    # -- one fx graph per stage -----------------------------------------------------------------
    stages: list[fx.GraphModule] = []
    for s in range(p):
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        if s > 0:
            for name in carried[s - 1]:
                env[by_name[name]] = g.call_module(_GRAD_GUARD, (g.placeholder(name),))
        for n in nodes:
            if n.op == "placeholder":
                if s == 0:
                    env[n] = g.node_copy(n)
            elif n.op == "output":
                if s == p - 1:
                    g.node_copy(n, lambda a: env[a])
                else:  # communication backends send contiguous memory only
                    g.output(tuple(g.call_method("contiguous", (env[by_name[name]],)) for name in carried[s]))
            elif (n.name in replicable and s in rep[n.name]) or stage.get(n.name) == s:
                env[n] = g.node_copy(n, lambda a: env[a])
        for n in g.nodes:
            if isinstance(n.type, str):  # string annotations (`from __future__ import annotations`) do not pickle
                n.type = None
        g.lint()
        root = {str(n.target): _attr(gm, str(n.target)) for n in g.nodes
                if n.op in ("call_module", "get_attr") and n.target != _GRAD_GUARD}
        root[_GRAD_GUARD] = ContiguousGrad()
        stages.append(fx.GraphModule(root, g, class_name=f"Stage{s}"))
    return Split(stages=stages, carried=carried,
                 carried_bytes=[sum(rec.bytes[x] for x in names) for names in carried],
                 stage_of=dict(stage), replicated={k: sorted(v) for k, v in rep.items() if v})


def _attr(gm: nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
