"""What a measured segment graph costs a pipeline: the search's per-segment times and bytes.

Problem: the schedule search (`devplace_lite.schedules.search`) and its replay take, per segment,
the forward, backward (torch's input- and weight-gradient passes) and the bytes a stage holds,
and per cut the transfer both ways; the capture (`segments.segment_graph`) measured them as a
graph. This module reads one into the other: parameters, gradients and optimizer state as each
stage's static bytes, the activations autograd saves per micro-batch, what each cut moves.

Exactness: a reading, no search. Complexity: ``O(n + e)`` over the graph's segments and edges.
"""

from __future__ import annotations

from ..graph import Graph
from ..schedules.search import SegmentCosts

#: Optimizer state per parameter byte: SGD with momentum keeps one buffer, Adam two; mixed-precision
#: Adam on 16-bit parameters keeps an fp32 master copy and two fp32 moments, 12 bytes per 2
#: (Rajbhandari et al., ZeRO, 2020: 16 bytes per parameter with the weight and its gradient).
OPTIMIZERS = {"none": 0, "sgd": 1, "adam": 2, "mixed-adam": 6}


def in_flight(schedule: str, microbatches: int, stages: int, stage: int, training: bool) -> int:
    """Micro-batches whose activations stage ``stage`` holds at once under GPipe or 1F1B (the
    other schedules: `devplace_lite.schedules.simulate`'s replay; GPipe's ``m`` bounds them all)."""
    if not training:
        return 1
    return min(microbatches, stages - stage) if schedule == "1f1b" else microbatches


def segment_costs(graph: Graph, optimizer: str = "none", microbatches: int = 1) -> SegmentCosts:
    """The segments' times, bytes and cut transfer times, as `devplace_lite.schedules.search` takes them.

    ``I`` and ``W`` are torch's measured input- and weight-gradient passes; a graph measured
    before ``W`` was kept takes ``W`` as the rest of the backward, and one measured before ``I``
    was kept splits the backward in halves and says so in ``graph.meta["notes"]``.
    A cut after segment ``i`` moves every value made at or before ``i`` (model inputs included)
    that a later segment reads, at the profile's link speed; the gradients of the floating-point
    ones come back the same way.
    """
    seg = graph.meta["segments"]
    names = seg["names"]
    n = len(names)
    training = bool(graph.is_training)
    grads = [g if training else 0 for g in seg["grad_bytes"]]
    static = [p + g * (1 + OPTIMIZERS[optimizer]) for p, g in zip(seg["param_bytes"], grads)]
    bi = seg.get("backward_input_ms")
    if training and not bi:
        bi = [b / 2 for b in seg["backward_ms"]]
        graph.meta.setdefault("notes", []).append("no inputs-only backward measured: I and W taken as half the "
                                                  "backward each")
    pos = {f"{i}:{nm}": i for i, nm in enumerate(names)}
    last: dict[str, int] = {}
    for u, v in graph.edges:
        if u.endswith(".grad") or v.endswith(".grad") or v not in pos:
            continue
        last[u] = max(last.get(u, -1), pos[v])
    comm = {v.id: float(v.comm) for v in graph.nodes}
    sent = {v.id: float(v.out_bytes) for v in graph.nodes}
    cut = [0.0] * max(n - 1, 0)
    back = [0.0] * max(n - 1, 0)
    cut_bytes = [0.0] * max(n - 1, 0)  # what a stage beginning after the cut receives: its input
    for u, far in last.items():
        for c in range(max(pos.get(u, 0), 0), far):  # a model input sits on the first stage
            cut[c] += comm[u]
            cut_bytes[c] += sent[u]
            if u in pos:
                back[c] += comm[u]
    first_in = sum(sent[v.id] for v in graph.nodes if v.id.startswith("input:"))
    return SegmentCosts(forward_ms=list(seg["forward_ms"]), backward_ms=list(seg["backward_ms"]) if training else
                        [0.0] * n, input_ms=list(bi) if training else None,
                        weight_ms=list(seg["backward_weight_ms"]) if training and seg.get("backward_weight_ms") else None,
                        static_bytes=static,
                        activation_bytes=list(seg["activation_bytes"]), cut_ms=cut, cut_back_ms=back,
                        step_bytes=_loss_bytes(seg, microbatches) if training else 0.0, cut_bytes=cut_bytes,
                        first_input_bytes=first_in, action_ms=float(seg.get("action_ms") or 0.0),
                        shared_saves=[(float(b), list(segs)) for b, segs in seg.get("shared_saves") or []])


def _loss_bytes(seg: dict, microbatches: int) -> float:
    """What the last stage holds for the whole step in training: torch's schedule keeps every
    micro-batch's output (to merge them) and its target chunk (a view of the batch's), and the
    loss saves both, so they count as saved activations from the first micro-batch to the end."""
    out = seg.get("output_bytes") or []
    return 2.0 * microbatches * float(out[-1]) if out else 0.0
