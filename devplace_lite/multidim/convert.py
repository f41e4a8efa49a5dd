"""A placement graph converted into Piper's model, with Megatron-style tensor-parallel variants.

Problem: Piper plans from a table per layer and tensor-parallel degree ``t`` (time, parameter
bytes, memory ``a y + b``, re-layout bytes on cut edges); a placement graph (``devplace plan``
profiles, the zoo graphs in ``data/graphs``, any `devplace_lite.load_graph` file) has one
accelerator time, memory and output size per operator. `from_graph` builds the table from the
graph with a stated analytic model; nothing is measured, so its quality is the model's.

The analytic model (everything per micro-batch: one micro-batch is the graph's profiled batch,
``meta["batch"]``; times in seconds, sizes in bytes):

* Layers and edges. Each forward node is one layer; its backward nodes (its colocation class)
  add their time to it. An edge ``u -> v`` of forward nodes carries ``c = out_bytes(u)`` (from
  ``comm`` times the graph's link bandwidth when ``out_bytes`` is 0). An inference graph has no
  backward nodes: its backward time is ``backward_factor`` times the forward time.
* Parameters ``w = memory - out_bytes`` of the forward node (the profiler's rule: memory is the
  parameters plus the output). Memory ``b = state_factor * w_t`` (weights and gradients when 2,
  as Piper's inputs count them; 4 adds Adam's two moments), ``a`` = the stored output ``o_t``.
* Which operators are split (Megatron-LM, Shoeybi et al. 2019): a ``Linear`` (`LINEAR`) whose
  every path forward reaches another ``Linear`` through shardable operators only (`SHARDABLE`:
  activations, dropout, views, transposes, matmul, scaling, softmax, which act per column or
  per head) is
  *column*-parallel; the Linears reached are *row*-parallel; the operators between are *inner*
  (they run on ``1/t`` of the columns or heads). A non-Linear node whose name contains
  ``attention`` (a whole attention block, as layer-granularity profiles have it) is a *block*
  (column-parallel QKV, row-parallel output). Every other operator is *replicated* on the ``t``
  devices: layer norms, residual adds, embeddings, the output head, convolutions (Megatron
  splits the embedding by vocabulary; this model does not). A shardable operator that also reads
  a tensor from outside (an attention mask added to the scores) keeps its region whole: the
  rule is conservative where shapes would be needed to tell a broadcast from a residual.
* Time at degree ``t``: split kinds run ``(fwd + bwd) / t``; replicated ones ``fwd + bwd``. A
  row or block node adds the forward all-reduce of its output (Megatron's ``g``); a column or
  block node adds the backward all-reduce of its input gradient (``f``; the input's bytes are
  shared among the column nodes reading the same tensor, as the q, k, v projections share one
  all-reduce). A ring all-reduce of ``S`` bytes over ``t`` devices takes
  ``2 (t - 1) / t * S / tp_bandwidth``.
* Per-device sizes: ``w_t = w / t`` on split kinds; the output ``o_t = out_bytes / t`` for
  column and inner nodes (sharded), ``out_bytes`` otherwise (after the all-reduce, replicated).
* Recomputation (TMPC ``activation recomp``, offered where ``o_t > 0``): the output is not
  stored (``a = 0``), it is held once while the node's backward runs (``b`` grows by ``o_t``),
  and the forward runs again (its ``g`` all-reduce included). A stage's inputs are counted by
  the stage that produced them.
* Cut edges at ``t > 1`` re-lay their tensor out over the ``t`` devices once: the sync bytes on
  both sides equal the edge's bytes (Piper's own BERT input charges the same); at ``t = 1`` they
  are 0.

At ``t = 1`` the layer's time, parameters and edge bytes equal the graph's costs exactly (a
test checks). Complexity: ``O(n + m)`` per degree after a forward search from each Linear
(``O(n m)`` at worst). References: Tarnawski et al., "Piper", NeurIPS 2021 (the format);
Shoeybi et al., "Megatron-LM", 2019 (the splits); Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models", MLSys 2023 (what recomputation stores).
"""

from __future__ import annotations

import os

from ..devices import AcceleratorSpec
from ..devices import spec as accelerator
from ..errors import GraphError, UsageError
from ..graph import Graph
from .model import MAX_DEVICES, TMPC, Layer, Model, check_cluster

#: The split kinds `split_kinds` assigns.
KINDS = ("column", "row", "inner", "block", "replicated")

#: Names of linear layers (a node's ``name`` is its module class or its function): torch's, the
#: output projection of ``nn.MultiheadAttention``, and Hugging Face's ``Conv1D`` (a Linear with
#: its weight transposed; not ``nn.Conv1d``).
LINEAR = frozenset({"Linear", "linear", "NonDynamicallyQuantizableLinear", "Conv1D"})

#: Operators that act per column (or per head) and so run on a shard unchanged: these names,
#: lower-cased, and any name that contains one of `SHARDABLE_PARTS` (``GELUActivation``, ...).
SHARDABLE = frozenset({"tanh", "sigmoid", "view", "reshape", "transpose", "permute", "contiguous", "matmul", "bmm",
                       "truediv", "div", "mul", "scaled_dot_product_attention"})
SHARDABLE_PARTS = ("gelu", "relu", "silu", "dropout", "softmax")

#: Default bandwidth of the tensor-parallel group's links (bytes/s): NVLink 2 on a V100, one
#: direction, the accelerator of the zoo's profiles.
TP_BANDWIDTH = 150e9
#: Default bandwidth of data-parallel resynchronisation (bytes/s) without a spec.
DP_BANDWIDTH = 25e9
#: Default link bandwidth (bytes/s) for graphs whose edges carry only ``comm`` (the generators').
LINK = 16e9


def _shardable(name: str) -> bool:
    low = name.lower()
    return low in SHARDABLE or any(part in low for part in SHARDABLE_PARTS)


def split_kinds(graph: Graph) -> dict[str, str]:
    """Each forward node's split kind under the Megatron-style model (module docstring).

    Parameters
    ----------
    graph : Graph
        A placement graph; backward nodes are ignored.

    Returns
    -------
    dict
        Forward node id -> one of `KINDS`.

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node("x", name="LayerNorm"), Node("a", name="Linear"), Node("g", name="GELU"),
    ...            Node("b", name="Linear")], [("x", "a"), ("a", "g"), ("g", "b")])
    >>> split_kinds(g)
    {'x': 'replicated', 'a': 'column', 'g': 'inner', 'b': 'row'}
    """
    fwd = [i for i in range(graph.n) if not graph.backward[i]]
    is_fwd = set(fwd)
    succ = [[w for w in graph.succ[i] if w in is_fwd] for i in range(graph.n)]
    pred = [[u for u in graph.pred[i] if u in is_fwd] for i in range(graph.n)]
    name = [v.name for v in graph.nodes]
    linear = [v.name in LINEAR for v in graph.nodes]
    order = [i for i in graph.topological_order().tolist() if i in is_fwd]

    def region(u: int) -> tuple[set[int], set[int]] | None:
        """(inner nodes, row Linears) reached from Linear ``u``, or None when a path leaves
        the shardable operators or ends before a Linear."""
        inner: set[int] = set()
        rows: set[int] = set()
        stack = list(succ[u])
        if not stack:
            return None
        while stack:
            x = stack.pop()
            if linear[x]:
                rows.add(x)
            elif _shardable(name[x]) and succ[x]:
                if x not in inner:
                    inner.add(x)
                    stack.extend(succ[x])
            else:
                return None
        return inner, rows

    kind = {i: "replicated" for i in fwd}
    regions: dict[int, tuple[set[int], set[int]]] = {}
    rows_taken: set[int] = set()
    # in topological order, so a Linear that an earlier region ends on is a row, never a column;
    # regions may share inner nodes (q, k and v meet in the attention matmuls)
    for u in order:
        if linear[u] and u not in rows_taken:
            r = region(u)
            if r is not None:
                regions[u] = r
                rows_taken |= r[1]
    # a sharded node must read sharded tensors only: drop the regions that break it, until none does
    while True:
        sharded = set(regions) | {x for r in regions.values() for x in r[0]}
        bad = {x for r in regions.values() for x in r[0] | r[1] if any(p not in sharded for p in pred[x])}
        drop = [u for u, r in regions.items() if bad & (r[0] | r[1])]
        if not drop:
            break
        for u in drop:
            del regions[u]
    for u, (inner, rows) in regions.items():
        kind[u] = "column"
        kind.update((x, "inner") for x in inner)
        kind.update((x, "row") for x in rows)
    for i in fwd:
        if kind[i] == "replicated" and "attention" in name[i].lower() and not linear[i]:
            kind[i] = "block"
    return {graph.nodes[i].id: kind[i] for i in sorted(fwd)}


def _allreduce(nbytes: float, t: int, bandwidth: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``t`` devices."""
    return 2.0 * (t - 1) / t * nbytes / bandwidth


def from_graph(graph: Graph | str | os.PathLike, degrees: tuple[int, ...] = (1, 2, 4, 8), *,
               batch: int | None = None, tp_bandwidth: float | None = None, state_factor: float = 2.0,
               backward_factor: float = 2.0, recompute: bool = True, devices: int = 8,
               memory: float | None = None, bandwidth: float | None = None, microbatches: int = 64,
               spec: AcceleratorSpec | str | None = None) -> Model:
    """Piper's model of a placement graph (module docstring: the analytic model).

    Parameters
    ----------
    graph : Graph or path
        A placement graph (times in ms) or its file.
    degrees : tuple of int
        The tensor-parallel degrees to offer every layer (1 included).
    batch : int, optional
        Samples in the profiled batch (one micro-batch); defaults to ``meta["batch"]`` or 1.
        Recorded in ``Model.extra``; the times stay per micro-batch.
    tp_bandwidth : float, optional
        Bytes/s of the tensor-parallel all-reduces (default: the spec's NVLink, else `TP_BANDWIDTH`).
    state_factor : float
        Bytes of training state per parameter byte (``b = state_factor * w``).
    backward_factor : float
        Backward time over forward time, for inference graphs only.
    recompute : bool
        Offer the ``activation recomp`` TMPC.
    devices, memory, bandwidth, microbatches
        The cluster the model carries (Piper's ``maxDevices``, ``maxMemoryPerDevice`` (default:
        the spec's memory, else the graph's ``memory`` default, else 16 GiB), ``bandwidth`` for
        data-parallel resynchronisation (default: the spec's NVLink when the devices fit in one
        of its nodes, else its network; without a spec `DP_BANDWIDTH`), ``mbsInBatch``).
    spec : AcceleratorSpec or name, optional
        The GPUs planned for (`devplace_lite.devices.SPECS`): their memory and links. The
        graph's times stay as they were profiled.

    Returns
    -------
    Model
        Layers numbered ``0..`` in the graph's node order; ``extra`` holds ``node_ids``,
        ``kinds``, ``batch``, ``tp_bandwidth`` and the source graph's name.

    Raises
    ------
    UsageError
        On degrees without 1 or outside ``1..MAX_DEVICES``, or a non-positive bandwidth or factor.
    GraphError
        When a backward node has no forward node in its class.

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node("a", p_acc=2.0, memory=30.0, out_bytes=10.0), Node("b", p_acc=1.0, out_bytes=4.0)],
    ...           [("a", "b")])
    >>> m = from_graph(g, degrees=(1,), recompute=False)
    >>> [(o.time_per_sample, o.parameter_size) for x in m.layers for o in x.tmpcs[1]]
    [(0.006, 20.0), (0.003, 0.0)]
    """
    if not isinstance(graph, Graph):
        from ..io import load_graph

        graph = load_graph(graph)
    if isinstance(spec, str):
        spec = accelerator(spec)
    if spec is not None and spec.nvlink is None:
        raise UsageError(f"spec {spec.name} has no NVLink and network figures: name a GPU of devplace_lite.devices.SPECS")
    if tp_bandwidth is None:
        tp_bandwidth = TP_BANDWIDTH if spec is None else spec.nvlink
    if bandwidth is None:
        bandwidth = DP_BANDWIDTH if spec is None else spec.nvlink if devices <= spec.node else spec.network
    degrees = tuple(sorted(set(int(t) for t in degrees)))
    if not degrees or degrees[0] != 1 or degrees[-1] > MAX_DEVICES:
        raise UsageError(f"degrees must include 1 and lie in 1..{MAX_DEVICES}, got {degrees}")
    for what, x in (("tp_bandwidth", tp_bandwidth), ("bandwidth", bandwidth), ("state_factor", state_factor)):
        if not x > 0:
            raise UsageError(f"{what} must be positive, got {x}")
    if not backward_factor >= 0:
        raise UsageError(f"backward_factor must be non-negative, got {backward_factor}")
    batch = int(batch if batch is not None else graph.meta.get("batch") or 1)
    link = float((graph.meta.get("spec") or {}).get("link") or LINK)
    nodes = graph.nodes
    fwd = [i for i in range(graph.n) if not graph.backward[i]]
    is_fwd = set(fwd)
    # backward time of each forward node: its class's backward nodes, shared in proportion to
    # the forward times when a class holds several forward nodes (equally when those are 0)
    cls_fwd: dict[object, list[int]] = {}
    for i in fwd:
        cls_fwd.setdefault(graph.units[i], []).append(i)
    bwd_ms = {i: 0.0 for i in fwd}
    for i in range(graph.n):
        if graph.backward[i]:
            owners = cls_fwd.get(graph.units[i])
            if not owners:
                raise GraphError(f"node {nodes[i].id}: a backward node with no forward node in its class "
                                 "(give it the colour of the forward node it differentiates)")
            tot = sum(graph.p_acc[j] for j in owners)
            for j in owners:
                share = graph.p_acc[j] / tot if tot > 0 else 1.0 / len(owners)
                bwd_ms[j] += float(graph.p_acc[i]) * share
    if not graph.is_training:
        bwd_ms = {i: backward_factor * float(graph.p_acc[i]) for i in fwd}
    out = {i: float(graph.out_bytes[i]) if graph.out_bytes[i] > 0 else float(graph.comm[i]) / 1e3 * link
           for i in fwd}
    kinds_by_id = split_kinds(graph)
    kind = {i: kinds_by_id[nodes[i].id] for i in fwd}
    lid = {i: n for n, i in enumerate(fwd)}
    ins = {i: [u for u in graph.pred[i] if u in is_fwd] for i in fwd}
    outs = {i: [w for w in graph.succ[i] if w in is_fwd] for i in fwd}
    # the backward all-reduce of a tensor read by several column nodes is paid once
    readers = {u: sum(kind[w] in ("column", "block") for w in outs[u]) for u in fwd}
    layers = []
    for i in fwd:
        k = kind[i]
        split = k != "replicated"
        f_s, b_s = float(graph.p_acc[i]) / 1e3, bwd_ms[i] / 1e3
        w = max(0.0, float(graph.memory[i]) - float(graph.out_bytes[i]))
        in_share = sum(out[u] / readers[u] for u in ins[i]) if k in ("column", "block") else 0.0
        by_t = {}
        for t in degrees:
            g = _allreduce(out[i], t, tp_bandwidth) if k in ("row", "block") else 0.0
            f = _allreduce(in_share, t, tp_bandwidth) if k in ("column", "block") else 0.0
            fwd_t = f_s / t if split else f_s
            time = fwd_t + (b_s / t if split else b_s) + g + f
            w_t = w / t if split else w
            o_t = out[i] / t if k in ("column", "inner") else out[i]
            sfw = {lid[u]: (out[u] if t > 1 else 0.0) for u in ins[i]}
            sbw = {lid[x]: (out[i] if t > 1 else 0.0) for x in outs[i]}
            opts = [TMPC("vanilla", time, w_t, o_t, state_factor * w_t, sfw, sbw)]
            if recompute and o_t > 0:
                opts.append(TMPC("activation recomp", time + fwd_t + g, w_t, 0.0, state_factor * w_t + o_t, sfw, sbw))
            by_t[t] = tuple(opts)
        layers.append(Layer(lid[i], nodes[i].id, by_t))
    edges = tuple((lid[u], lid[v], out[u]) for u, v in zip(graph.src.tolist(), graph.dst.tolist())
                  if u in is_fwd and v in is_fwd)
    if memory is None:
        memory = float(spec.memory if spec is not None else graph.defaults.get("memory") or 16 * 2**30)
    m = Model(tuple(layers), edges, int(devices), float(memory), float(bandwidth), int(microbatches),
              extra={"node_ids": [nodes[i].id for i in fwd], "kinds": {nodes[i].id: kind[i] for i in fwd},
                     "batch": batch, "tp_bandwidth": tp_bandwidth, "source": graph.name,
                     "spec": None if spec is None else spec.name})
    check_cluster(m)
    return m
