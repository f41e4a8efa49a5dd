"""The placement graph of a measured capture: a node per segment, an edge per value passed.

Problem
-------
The partitioners split a `devplace_lite.graph.Graph`. A captured model's segments
(`devplace_lite.pipeline.capture`) with their measured times and bytes
(`devplace_lite.pipeline.measure.SegmentTimes`) must become one, in the project's graph format
(``docs/graph-format.md``), keeping in ``graph.meta["segments"]`` what the planner needs
beyond it (memory per segment, the backward's input- and weight-gradient passes, tied weights).

How
---
`segment_graph` makes one node per segment (and per model input, a zero-cost source on the
first stage), an edge per value passed, and in training a backward node per segment, paired
with its forward by colour, with the edges reversed. ``comm`` is the time the bytes a segment
sends on take over the link: the roofline spec's host link, else `LINK_BYTES_PER_S`.

Exactness: a translation, nothing estimated here (the link is an assumption, stated in
``meta``). Complexity: linear in the segments and the values they pass.

Reference: ``docs/graph-format.md`` (the graph format).

Example
-------
>>> import torch
>>> from devplace_lite.pipeline.capture import capture
>>> from devplace_lite.pipeline.measure import measure_segments
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> cap = capture(net, (torch.randn(2, 8),))
>>> g = segment_graph(cap, measure_segments(cap, training=True, repeats=1, warmup=0))
>>> len(g.nodes), g.meta["segments"]["names"]
(7, ['0', '1', '2'])
"""

from __future__ import annotations

from typing import Any

import torch

from ..graph import Graph, Node
from .capture import Capture
from .measure import SegmentTimes

#: Host link assumed for measured CPU segments (PCIe 3.0 x16, as `devplace_lite.pipeline.profile`).
LINK_BYTES_PER_S = 16e9


def segment_graph(cap: Capture, times: SegmentTimes, *, link: float | None = None,
                  name: str | None = None) -> Graph:
    """The placement graph of the measured segments (see the module docstring): node ids are
    the segments' split points, model inputs are ``input:<k>``. ``graph.meta["segments"]``
    keeps what the planner needs for memory (parameters, gradients, activations, tied).
    Transfers go over ``link`` bytes/s: the roofline spec's host link, else `LINK_BYTES_PER_S`."""
    from ..devices import SPECS

    acc = SPECS[times.spec] if times.spec is not None else None
    if link is None:
        link = acc.link if acc is not None else LINK_BYTES_PER_S
    n = cap.num_segments
    ids = [f"{i}:{nm}" for i, nm in enumerate(cap.names)]
    sent = [0] * n  # bytes each segment sends to later segments (each value once)
    seen: set[tuple[int, Any]] = set()
    edges: list[tuple[str, str]] = []
    grad_back = [0] * n  # gradient bytes each segment sends back to earlier segments
    used_inputs: dict[int, int] = {}
    for i, ins in enumerate(times.inputs):
        for src, position, nbytes, is_float in ins:
            if isinstance(src, str):
                k = int(src.split(":")[1])
                used_inputs[k] = nbytes
                edges.append((f"input:{k}", ids[i]))
                continue
            edges.append((ids[src], ids[i]))
            key = (src, position)
            if key not in seen:
                seen.add(key)
                sent[src] += nbytes
            if is_float and times.training:
                grad_back[i] += nbytes
    nodes = [Node(id=f"input:{k}", p_acc=0.0, p_cpu=0.0, comm=b / link * 1e3, out_bytes=float(b),
                  name=f"model input {k}") for k, b in sorted(used_inputs.items())]
    back = []
    for i in range(n):
        color = ids[i] if times.training else None
        mem = times.param_bytes[i] + times.activation_bytes[i]
        nodes.append(Node(id=ids[i], p_acc=round(times.forward_ms[i], 6), p_cpu=round(times.forward_ms[i], 6),
                          memory=float(mem), comm=sent[i] / link * 1e3, out_bytes=float(sent[i]),
                          name=cap.names[i], color=color))
        if times.training:
            back.append(Node(id=f"{ids[i]}.grad", p_acc=round(times.backward_ms[i], 6),
                             p_cpu=round(times.backward_ms[i], 6), memory=float(times.grad_bytes[i]),
                             comm=grad_back[i] / link * 1e3, out_bytes=float(grad_back[i]), backward=True,
                             color=color, name=f"{cap.names[i]}.grad"))
    if times.training:
        for s, t in list(edges):
            if not s.startswith("input:"):
                edges.append((f"{t}.grad", f"{s}.grad"))
        edges += [(v, f"{v}.grad") for v in ids]
    meta = {
        "generator": "devplace_lite.pipeline.segments", "model": name or type(cap.model).__name__,
        "capture": cap.how, "notes": list(cap.notes), "granularity": cap.granularity, "training": times.training,
        "batch": int(cap.example[0].shape[0]) if cap.example[0].dim() else 1,
        "inputs": [list(t.shape) for t in cap.example], "times": "measured" if acc is None else "roofline",
        "clock": ("thread CPU time" if times.device == "cpu" else "CUDA events") if acc is None else
                 "roofline of each kernel's FLOPs and bytes",
        "threads": times.threads, "repeats": times.repeats, "torch": torch.__version__,
        "spec": {"name": f"{times.device}-measured", "link": link} if acc is None else
                {"name": acc.name, "flops": acc.flops, "bandwidth": acc.bandwidth, "link": link},
        "segments": {"names": list(cap.names), "param_bytes": times.param_bytes, "grad_bytes": times.grad_bytes,
                     "activation_bytes": times.activation_bytes, "forward_ms": times.forward_ms,
                     "backward_ms": times.backward_ms, "input_bytes": times.input_bytes,
                     "backward_input_ms": times.backward_input_ms, "backward_weight_ms": times.backward_weight_ms,
                     "output_bytes": times.output_bytes,
                     "boundary_scale": times.boundary_scale, "whole_ms": times.whole_ms,
                     "shared_saves": [[b, segs] for b, segs in times.shared_saves]},
        "tied": {k: v for k, v in cap.tied.items()}, "leaf_modules": list(cap.leaf_modules),
    }
    kind = "training" if times.training else "inference"
    return Graph(nodes + back, edges, name=f"{meta['model']}-segments-{kind}", meta=meta)
