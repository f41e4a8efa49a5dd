"""A plan under Piper's model, its checks and its time per sample (the objective).

A plan is a sequence of stages, the first nearest the inputs. Stage ``i`` runs a set of layers
``S_i`` on ``d_i * t_i`` devices: ``d_i`` data-parallel replicas of a ``t_i``-way tensor-parallel
group, one TMPC per layer (at degree ``t_i``). It is valid when

* the stages partition the layers and each union ``S_i ∪ ... ∪ S_r`` is closed under successors
  (the stages are differences of a chain of ideals: no edge runs backwards);
* ``d_i`` divides ``N`` (the micro-batches per batch), ``sum d_i t_i <= k`` and
  ``sum d_i <= min(N, k)`` (as Piper's program bounds it);
* each stage fits a device: ``sum_v (a_v y_i + b_v) <= memory`` with ``y_i = ceil(D_i / d_i)``
  micro-batches in flight, ``D_i = d_i + ... + d_r`` (1F1B-style: the first stage holds most).

The time per sample of a stage (Piper's formula, all communication in bytes over the bandwidth
``B``) is ``sum_v [ (e_v / d + 4 (d - 1) w_v / (d N)) / B + p_v / d ]``, with ``e_v`` twice the
size plus sync of every edge of ``v`` that crosses the stage boundary; the plan's time per sample
is the largest stage's. Reference: Tarnawski et al., Piper, NeurIPS 2021, section 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import UsageError
from ..result import PlanAnswer
from .model import Model


@dataclass(frozen=True)
class Stage:
    """One stage of a plan: its layers (ids), degrees, TMPC names and, when evaluated, figures."""

    layers: tuple[int, ...]
    data_parallel: int
    tensor_parallel: int
    tmpcs: dict[int, str]
    time_per_sample: float = math.nan
    memory: float = math.nan
    in_flight: int = 0

    @property
    def recomputed(self) -> list[int]:
        """The layers whose TMPC recomputes activations (its name says "recomp")."""
        return sorted(v for v, n in self.tmpcs.items() if "recomp" in n.lower())

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "data_parallel": self.data_parallel,
                "tensor_parallel": self.tensor_parallel, "devices": self.data_parallel * self.tensor_parallel,
                "recomputed": self.recomputed, "tmpcs": {str(v): n for v, n in sorted(self.tmpcs.items())},
                "time_per_sample": self.time_per_sample, "memory": self.memory, "in_flight": self.in_flight}


@dataclass
class Result(PlanAnswer):
    """The answer of `devplace_lite.parallelize` (a `PlanAnswer`: its fields and ``--json`` keys
    are every plan's): ``objective`` (seconds per sample) is None unless a plan was found."""

    unit = "s per sample"
    method: str
    status: str  # "optimal", "infeasible", "time_limit" or "feasible"
    objective: float | None
    stages: list[Stage] = field(default_factory=list)
    reason: str | None = None
    bound: float | None = None
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**self.answer(), "reason": self.reason,
                "devices_used": sum(s.data_parallel * s.tensor_parallel for s in self.stages),
                "stages": [s.to_dict() for s in self.stages], "seconds": self.seconds, "stats": self.stats}


def work_bound(model: Model) -> float:
    """A proven lower bound on the time per sample of every plan of ``model`` (memory aside):
    stage ``i`` runs on ``d_i t_i`` devices for at least ``sum_v p_v(t_i) / d_i`` (its
    communication adds to it), so ``k T >= sum_i d_i t_i T >= sum_v min_t t p_v(t)`` over the
    plan's ``sum d_i t_i <= k`` devices: ``T >= sum_v min_{t, TMPC} t p_v / k``. Closed form,
    ``O(TMPCs)``; what certifies a plan that no search proved (a baseline's, a greedy knapsack's,
    the incumbent when the time ran out).

    >>> from devplace_lite.multidim.generate import random_model
    >>> from devplace_lite.multidim.planner import plan_exact
    >>> m = random_model(1, layers=4, devices=4)
    >>> 0 < work_bound(m) <= plan_exact(m).objective
    True
    """
    work = 0.0
    for x in model.layers:
        options = [t * o.time_per_sample for t, opts in x.tmpcs.items() for o in opts]
        if not options:  # a layer with no TMPC: no plan at all, nothing to bound
            return math.inf
        work += min(options)
    return work / model.devices


def stage_time(model: Model, layers: set[int], d: int, t: int, tmpcs: dict[int, str]) -> tuple[float, float, float]:
    """(time per sample, memory coefficient sum a, memory constant sum b) of one stage."""
    by_id = {x.id: x for x in model.layers}
    ins: dict[int, list[tuple[int, float]]] = {}
    outs: dict[int, list[tuple[int, float]]] = {}
    for u, v, c in model.edges:
        outs.setdefault(u, []).append((v, c))
        ins.setdefault(v, []).append((u, c))
    N, B = model.microbatches, model.bandwidth
    total = sa = sb = 0.0
    for v in sorted(layers):
        opts = {o.name: o for o in by_id[v].tmpcs.get(t, ())}
        if tmpcs.get(v) not in opts:
            raise UsageError(f"layer {v} has no TMPC {tmpcs.get(v)!r} at tensor-parallel degree {t}")
        o = opts[tmpcs[v]]
        e = sum(2.0 * (c + o.sync_fw[u]) for u, c in ins.get(v, ()) if u not in layers)
        e += sum(2.0 * (c + o.sync_bw[w]) for w, c in outs.get(v, ()) if w not in layers)
        total += (e / d + 4.0 * (d - 1) * o.parameter_size / d / N) / B + o.time_per_sample / d
        sa += o.memory_a
        sb += o.memory_b
    return total, sa, sb


def evaluate(model: Model, stages: list[Stage]) -> tuple[float | None, list[Stage], str | None]:
    """Check a plan and compute its time per sample (module docstring).

    Returns
    -------
    (objective, stages with their time, memory and micro-batches in flight, reason)
        ``objective`` is None, with the reason, when the plan breaks memory; other rule
        violations raise.

    Raises
    ------
    UsageError
        When the stages do not partition the layers, run an edge backwards, or break a
        device or divisibility rule.
    """
    ids = [x.id for x in model.layers]
    seen: set[int] = set()
    for s in stages:
        if seen & set(s.layers) or not s.layers:
            raise UsageError("the stages must be non-empty and disjoint")
        seen |= set(s.layers)
    if seen != set(ids):
        raise UsageError("the stages must cover every layer")
    pos = {v: i for i, s in enumerate(stages) for v in s.layers}
    for u, v, _ in model.edges:
        if pos[u] > pos[v]:
            raise UsageError(f"edge {u}->{v} runs from a later stage to an earlier one")
    N, K = model.microbatches, model.devices
    if sum(s.data_parallel * s.tensor_parallel for s in stages) > K:
        raise UsageError(f"the plan uses more than {K} devices")
    if sum(s.data_parallel for s in stages) > min(N, K):
        raise UsageError("the data-parallel degrees sum to more than min(micro-batches, devices)")
    out: list[Stage] = []
    worst, reason = 0.0, None
    suffix = sum(s.data_parallel for s in stages)
    for s in stages:
        d, t = s.data_parallel, s.tensor_parallel
        if d < 1 or t < 1 or N % d:
            raise UsageError(f"data-parallel degree {d} must divide the {N} micro-batches")
        y = -(-suffix // d)
        suffix -= d
        tps, sa, sb = stage_time(model, set(s.layers), d, t, s.tmpcs)
        mem = sa * y + sb
        if mem > model.memory and reason is None:
            reason = f"stage {len(out)} needs {mem:.6g} bytes per device, over {model.memory:.6g}"
        worst = max(worst, tps)
        out.append(Stage(tuple(s.layers), d, t, dict(s.tmpcs), tps, mem, y))
    return (None if reason else worst), out, reason
