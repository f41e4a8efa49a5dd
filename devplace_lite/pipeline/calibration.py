"""Running a plan to measure it: the price of a message on this machine, and calibration.

Problem
-------
A plan's forecast prices what it cannot see from one process: what a message between ranks
costs a pass on this machine's wall clock (`message_price`, measured by running `PROBE`'s plan
under torchrun), and how far the measured segment times are from what the stages take when
the ranks run together (`calibrate`: run, scale each stage's times by measured / forecast,
re-plan, run again, keep the plan whose forecast was nearer its run).

This is the one module of the road that plans *and* runs: `devplace_lite.pipeline.planner`
plans without running anything, `devplace_lite.pipeline.torchrun` runs without planning.

Exactness and complexity: measurements, not proofs; each call is one or two torchrun runs of
the plan (``steps`` steps each) plus one re-plan (`planner.plan_graph`).
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import GraphError, UsageError
from ..graph import Graph
from .pipeline_plan import PipelinePlan
from .planner import plan, plan_graph

#: The model, split and schedule `message_price` runs (a zoo model: no download, no torch.hub).
PROBE = {"model": "resnet50", "k": 2, "schedule": "gpipe", "microbatches": 8, "batch": 16, "steps": 8, "launches": 3}


def message_price(device: str = "cpu", *, threads: int = 1, timeout: float = 300.0) -> float:
    """Milliseconds a message costs the forward or backward pass that sends or receives it on
    this machine's wall clock, beyond the pass's own CPU time: `PROBE`'s plan run under
    torchrun here, and the price per message at which the replay of the run's CPU times takes
    its median wall-clock step (`run_figures.wall_price`; every run reports its own as
    ``action_wall_ms``), the median over ``PROBE["launches"]`` launches. It holds torch's
    schedule runtime (the ranks' CPU time outside their passes, ``action_overhead_ms``), the
    waits of messages whose receive is posted after the send (gloo moves the data once both
    sides have posted; `benchmarks/schedules/heldout.md`) and the ranks' interference. Each
    launch draws its own price (on a 2-vCPU machine a late receive costs a pair of processes
    about 0.15 ms or 2-4 ms, for the pair's life), and the run the plan forecasts is one more
    draw: the median of a few launches is nearer it than one launch. What `plan` takes as
    ``action_ms``. CPU (gloo) only: on a GPU the passes are asynchronous and a thread's CPU
    time does not separate them.

    Raises
    ------
    UsageError
        A device other than ``"cpu"``.
    GraphError
        A run failed, or the launches took longer than ``timeout`` seconds together.
    """
    from ..zoo import load
    from .torchrun import launch

    if device != "cpu":
        raise UsageError(f"the price of a message is measured on CPU (gloo) only, not on {device!r}")
    model, inputs = load(PROBE["model"], batch=PROBE["batch"])
    p = plan(model, inputs, k=PROBE["k"], microbatches=PROBE["microbatches"], schedule=PROBE["schedule"], repeats=1,
             model_spec=PROBE["model"])
    deadline = time.monotonic() + timeout
    prices = []
    with tempfile.TemporaryDirectory(prefix="devplace-probe-") as tmp:
        script = p.write(tmp)["plan"]
        for _ in range(PROBE["launches"]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise GraphError(f"the probe's {PROBE['launches']} launches took longer than {timeout:g} s: "
                                 "raise --timeout")
            prices.append(launch(script, steps=PROBE["steps"], threads=threads, timeout=left)["action_wall_ms"] or 0.0)
    return float(statistics.median(prices))


def _fit(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Least-squares scale ``a`` of ``measured ~ a * predicted`` (1 when nothing is predicted)."""
    num = sum(p * m for p, m in zip(predicted, measured))
    den = sum(p * p for p in predicted)
    return num / den if den > 0 else 1.0


def scaled_graph(graph: Graph, forward: float | Sequence[float], backward: float | Sequence[float],
                 backward_input: float | Sequence[float] | None = None,
                 backward_weight: float | Sequence[float] | None = None) -> Graph:
    """``graph`` with forward times times ``forward`` and backward times times ``backward``
    (numbers, or one factor per segment); the input- and weight-gradient passes (``I``,
    ``W``) times ``backward_input`` and ``backward_weight`` (default: as the backward)."""
    seg = dict(graph.meta["segments"])
    n = len(seg["names"])
    per = lambda x: [float(x)] * n if isinstance(x, (int, float)) else [float(v) for v in x]  # noqa: E731
    fs, bs = per(forward), per(backward)
    is_ = bs if backward_input is None else per(backward_input)
    ws = bs if backward_weight is None else per(backward_weight)
    index = {f"{i}:{nm}": i for i, nm in enumerate(seg["names"])}

    def factor(v) -> float:
        i = index.get(v.id[:-5] if v.backward else v.id)
        return 1.0 if i is None else (bs[i] if v.backward else fs[i])

    nodes = [dataclasses.replace(v, p_acc=v.p_acc * factor(v), p_cpu=None if v.p_cpu is None else v.p_cpu * factor(v))
             for v in graph.nodes]
    g = graph.with_nodes(nodes)
    seg["forward_ms"] = [t * a for t, a in zip(seg["forward_ms"], fs)]
    seg["backward_ms"] = [t * a for t, a in zip(seg["backward_ms"], bs)]
    for key, scale in (("backward_input_ms", is_), ("backward_weight_ms", ws)):
        if seg.get(key):
            seg[key] = [t * a for t, a in zip(seg[key], scale)]
    one = lambda xs: xs[0] if len(set(xs)) == 1 else xs  # noqa: E731
    g.meta = {**g.meta, "segments": seg, "calibration": {"forward_scale": one(fs), "backward_scale": one(bs)}}
    return g


def _errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    return [abs(p - m) / m if m > 0 else 0.0 for p, m in zip(predicted, measured)]


def _stage_scales(p: PipelinePlan, run: dict[str, Any]) -> dict[str, list[float]]:
    """Measured / forecast per stage and action kind (``F``, ``B``, ``I``, ``W``); 1 where either
    is missing, and the backward's where the schedule ran no split backward."""
    def ratio(pred: Sequence[float], meas: Sequence[float | None]) -> list[float]:
        return [m / q if (m is not None and q > 0 and m > 0) else 1.0 for q, m in zip(pred, meas)]

    def own(meas: Sequence[float | None]) -> list[float | None]:
        """A recomputing stage's measured backward less its measured forward, which it ran again."""
        return [None if x is None else (x - f if rc and f is not None else x)
                for x, f, rc in zip(meas, run["stage_forward_cpu_ms"], p.recompute_flags)]

    out = {"F": ratio(p.forward_ms, run["stage_forward_cpu_ms"]),
           "B": ratio(p.backward_ms, own(run["stage_backward_cpu_ms"])) if p.training else [1.0] * p.num_stages}
    for kind, key, pred in (("I", "stage_input_cpu_ms", p.input_ms), ("W", "stage_weight_cpu_ms", p.weight_ms)):
        meas = run.get(key) or [None] * p.num_stages
        if not p.training or all(x is None for x in meas):
            out[kind] = list(out["B"])  # the schedule ran no split backward: scale it as the backward
        else:
            out[kind] = ratio(pred, own(meas) if kind == "I" else meas)
    return out


def _forecast_error(p: PipelinePlan, run: dict[str, Any]) -> dict[str, Any]:
    """Per-stage compute error and step error (against the run's wall-clock step: the forecast
    prices what a pass costs there beyond its CPU time, ``action_ms``)."""
    stages = _errors(p.compute_ms, run["stage_cpu_ms"])
    wall = run.get("step_ms")
    step = abs(p.step_ms() - wall) / wall if wall else None
    return {"stages": stages, "max_stage": max(stages), "step": step}


def calibrate(p: PipelinePlan, folder: str | Path, *, steps: int = 3, nodes: int = 1, timeout: float = 600.0,
              first: dict[str, Any] | None = None, device: str = "cpu") -> dict[str, Any]:
    """Run ``p`` under torchrun, scale each stage's forward, backward, input- and weight-gradient
    times by measured / forecast (one factor per stage and action kind, applied to that stage's
    segments) and price a message as the run measured it (``action_wall_ms``),
    re-plan with the scaled profile, run that plan, and keep whichever forecast was
    nearer its own run (the largest per-stage error of the compute forecast; ties keep the
    calibrated one): calibration never leaves the plan's forecast worse than it found it. The
    kept plan's files are in ``folder``; the first plan's also in ``folder/uncalibrated``.
    ``first``: a torchrun run of ``p`` already made (`launch`'s answer), to save the first run.

    Returns the factors, the split points, both forecasts' errors, and ``kept``
    (``"calibrated"`` or ``"uncalibrated"``).
    """
    from .torchrun import launch

    if first is None:
        first = launch(p.write(Path(folder) / "uncalibrated")["plan"], nodes=nodes, steps=steps, timeout=timeout,
                       device=device)
    else:
        p.write(Path(folder) / "uncalibrated")
    scales = _stage_scales(p, first)
    seg_stage = p.stage_of
    g = scaled_graph(p.graph, *([scales[k][s] for s in seg_stage] for k in "FBIW"))
    if first.get("action_wall_ms") is not None and p.num_stages > 1:  # a message's price, as the run measured it
        g.meta["segments"]["action_ms"] = float(first["action_wall_ms"])
    q = plan_graph(g,
                   k=p.k or p.ranks, per_rank=p.per_rank, microbatches=p.microbatches, schedule=p.schedule,
                   batch=p.batch, memory=p.memory, optimizer=p.optimizer, method=p.method,
                   time_limit=max(1.0, p.seconds.get("bound", 1.0) + 1.0), seed=p.seed,
                   recompute=p.recompute_mode)
    q.model_spec, q.capture = p.model_spec, p.capture
    second = launch(q.write(folder)["plan"], nodes=nodes, steps=steps, timeout=timeout, device=device)
    before, after = _forecast_error(p, first), _forecast_error(q, second)
    kept = "calibrated" if after["max_stage"] <= before["max_stage"] else "uncalibrated"
    if kept == "uncalibrated":
        p.write(folder)
    return {"stage_scales": scales, "forward_scale": _fit(p.forward_ms, first["stage_forward_cpu_ms"]),
            "backward_scale": _fit(p.backward_ms, first["stage_backward_cpu_ms"]) if p.training else 1.0,
            "clock": "thread CPU time per micro-batch", "kept": kept,
            "split_points_before": p.split_points, "split_points_after": q.split_points,
            "predicted_before_ms": p.compute_ms, "measured_before_ms": first["stage_cpu_ms"],
            "predicted_after_ms": q.compute_ms, "measured_after_ms": second["stage_cpu_ms"],
            "error_before": before["stages"], "error_after": after["stages"],
            "max_error_before": before["max_stage"], "max_error_after": after["max_stage"],
            "step_error_before": before["step"], "step_error_after": after["step"],
            "max_error_kept": min(before["max_stage"], after["max_stage"])}
