"""Baselines under Piper's model: what planning fewer dimensions gives up.

* ``pipeline``: pipeline parallelism only (every ``d = t = 1``), TMPCs still chosen per layer;
  the same exact DP restricted (chapter 02's problem on this model). Optimal for that restriction.
* ``data``: data parallelism only: one stage holding every layer, ``t = 1``, the best ``d``
  (``d | N``, ``d <= k``) with the exact knapsack at ``y = 1``.
* ``equal``: equal stages in the style of PipeDream-2BW (Narayanan et al., ICML 2021): the layers
  in a topological order cut into ``p`` runs of equal length (the longer ones last), one ``d``
  and one ``t`` for every stage, each layer's fastest TMPC everywhere or its least-memory TMPC
  everywhere; the best such plan.

Each returns a `Result` with status ``feasible`` (a plan of the full model, not proven optimal
for it), or ``infeasible``; ``pipeline`` also carries its own DP's optimality in ``stats``.
"""

from __future__ import annotations

from dataclasses import replace

from .model import Layer, Model
from .plan import Result, Stage, evaluate
import numpy as np

from .planner import _Arrays, divisors, plan_exact, stage_choice


def pipeline_only(model: Model) -> Result:
    """Pipeline parallelism only (module docstring)."""
    layers = []
    for x in model.layers:
        if 1 not in x.tmpcs:
            return Result("pipeline", "infeasible", None, reason=f"layer {x.id} has no TMPC for t = 1")
        layers.append(Layer(x.id, x.name, {1: x.tmpcs[1]}))
    r = plan_exact(replace(model, layers=tuple(layers)), data_parallel=False)
    r.method = "pipeline"
    r.stats["optimal_for_restriction"] = r.status == "optimal"
    r.status = "feasible" if r.objective is not None else r.status
    r.bound = None
    return r


def _least_memory(x: Layer, t: int) -> str:
    return min(x.tmpcs[t], key=lambda o: (o.memory_a + o.memory_b, o.time_per_sample)).name


def _fastest(x: Layer, t: int) -> str:
    return min(x.tmpcs[t], key=lambda o: (o.time_per_sample, o.memory_a + o.memory_b)).name


def data_only(model: Model) -> Result:
    """Data parallelism only (module docstring): one stage, ``t = 1``, the best ``d``."""
    if any(1 not in x.tmpcs for x in model.layers):
        return Result("data", "infeasible", None, reason="some layer has no TMPC for t = 1")
    arr = _Arrays(model)
    everything = np.ones(len(model.layers), np.uint8)
    best = None
    for d in divisors(model.microbatches, min(model.devices, model.microbatches)):
        st = stage_choice(model, arr, everything, 1, d, 1)
        if st.tmpcs:
            obj, ev, _ = evaluate(model, [st])
            if obj is not None and (best is None or obj < best.objective):
                best = Result("data", "feasible", obj, ev)
    if best is None:
        return Result("data", "infeasible", None, reason="the whole model fits no device at any degree")
    return best


def _topological(model: Model) -> list[int]:
    indeg = {x.id: 0 for x in model.layers}
    outs: dict[int, list[int]] = {x.id: [] for x in model.layers}
    for u, v, _ in model.edges:
        indeg[v] += 1
        outs[u].append(v)
    order, ready = [], sorted(v for v, k in indeg.items() if k == 0)
    while ready:
        u = ready.pop(0)
        order.append(u)
        for v in outs[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
        ready.sort()
    return order


def equal_stages(model: Model) -> Result:
    """Equal stages, one ``d`` and ``t``, recomputation everywhere or nowhere (module docstring)."""
    order = _topological(model)
    n, K, N = len(order), model.devices, model.microbatches
    by_id = {x.id: x for x in model.layers}
    degrees = sorted(set.intersection(*(set(x.tmpcs) for x in model.layers)))
    best = None
    for p in range(1, min(n, K) + 1):
        size, larger = divmod(n, p)
        runs, i = [], 0
        for st in range(p):
            ln = size + (st >= p - larger)
            runs.append(order[i:i + ln])
            i += ln
        for d in divisors(N, min(K, N) // p):
            for t in degrees:
                if p * d * t > K:
                    break
                for pick in (_fastest, _least_memory):
                    stages = [Stage(tuple(r), d, t, {v: pick(by_id[v], t) for v in r}) for r in runs]
                    obj, ev, _ = evaluate(model, stages)
                    if obj is not None and (best is None or obj < best[0]):
                        best = (obj, ev)
    if best is None:
        return Result("equal", "infeasible", None, reason="no equal-stage plan fits the memory")
    return Result("equal", "feasible", best[0], best[1])


def best_baseline(model: Model) -> Result | None:
    """The best plan of the cheap baselines (``equal``, ``data``), or None when none fits."""
    found = [r for r in (equal_stages(model), data_only(model)) if r.objective is not None]
    return min(found, key=lambda r: r.objective) if found else None
