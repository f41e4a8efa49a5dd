"""What a pipeline run measured, gathered from its ranks, and its step replayed from them.

Problem
-------
Each torchrun rank writes its own figures (`devplace_lite.pipeline.rank`); a run's answer is
their union, set beside the plan's forecast in the terms the forecast uses, so that the model
of run time can be judged against the clock on a machine shared with other work.

How
---
`_gather` gathers:

* per stage and action kind (``F``, ``B``, or ``I`` and ``W`` where the schedule splits the
  backward), the CPU time of one micro-batch on the rank's thread (the least over micro-batches
  and steps: a shared machine's load does not inflate it), the wall time of each step, the last
  step's actions (for a Gantt chart), and the schedule's replay with those CPU times
  (`replay_measured`);
* per rank, its thread's CPU time outside its passes per message its passes exchange
  (``action_overhead_ms``, `_overhead`: torch's schedule runtime, messages and bookkeeping),
  and over the run, the wall-clock price per message a pass exchanges at which the replay of
  its CPU times takes its measured step (``action_wall_ms``, `wall_price`: the runtime's CPU
  time, its messages' waits, the ranks' interference), which
  `devplace_lite.pipeline.calibration.message_price` measures on a small zoo model for a plan
  to price before its run;
* per rank, the peak memory: parameters, their gradients when training, and the high-water
  mark of the activations autograd saves (`devplace_lite.pipeline.activations`);
* with a check, the ranks' comparisons with the unsplit model in one verdict
  (`devplace_lite.pipeline.check.check_failure`).

`summary` is the line rank 0 prints at the end of a run.

Exactness: measurements; the replay is exact for the CPU times given (the schedule's own
action order, `devplace_lite.schedules.simulate`), and `wall_price` is the exact price at which
it meets the measured step, to a relative 1e-6 by bisection (the replay is monotone in it).
Complexity: linear in the ranks' records; `wall_price` replays the schedule
O(log(price / 1e-6)) times.

Reference: the schedules of ``torch.distributed.pipelining`` (torch 2.13), replayed by
`devplace_lite.schedules.simulate`.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Sequence

from ..errors import UsageError
from .check import check_failure


def _overhead(steps: Sequence[tuple[float, float]], step_cpu_ms: Sequence[float], record: Sequence[tuple],
              ends: Sequence[int]) -> float | None:
    """The rank thread's CPU time in a step outside its passes, per message its forward and
    backward (or input-gradient) passes exchange with another rank (``ends[s]`` per pass of
    stage ``s``, `devplace_lite.schedules.simulate.message_ends`), median over the measured
    steps: torch's schedule runtime around the passes (posting and waiting for messages,
    bookkeeping, the loss on the last stage), priced as the replay prices a message."""
    per = []
    for (t0, t1), cpu in zip(steps, step_cpu_ms):
        passes = [r for r in record if t0 <= r[1] <= t1]
        count = sum(ends[r[4]] for r in passes if r[0] != "W")
        if count:
            per.append(max(0.0, cpu - sum(r[3] for r in passes)) / count)
    return float(statistics.median(per)) if per else None


def summary(plan: dict, ranks: Sequence[dict], folder: Path) -> str:
    """What a run printed at its end (rank 0): the step's wall time (first start to last end over
    the ranks, median over the measured steps) beside the plan's forecast, the loss, and where
    each rank's JSON went.

    >>> plan = {"stages": 2, "schedule": "1f1b", "microbatches": 4, "microbatch": 2, "training": True,
    ...         "forecast": {"step_ms": 9.5}}
    >>> ranks = [{"steps": [[0.0, 0.010], [1.0, 1.012]], "loss": None}, {"steps": [[0.001, 0.011], [1.0, 1.013]],
    ...          "loss": 0.5}]
    >>> print(summary(plan, ranks, Path("plan/run")))
    run_pipeline: 2 stages, 1f1b, 4 micro-batches of 2: step 12.0 ms wall (median of 2; plan's forecast 9.5 ms CPU), loss 0.5; per-rank JSON in plan/run/rank0.json .. rank1.json
    >>> print(summary({**plan, "training": False}, [{**r, "loss": None} for r in ranks], Path("plan/run")))
    run_pipeline: 2 stages, forwards only in 1f1b's order, 4 micro-batches of 2: step 12.0 ms wall (median of 2; plan's forecast 9.5 ms CPU), inference, no loss; per-rank JSON in plan/run/rank0.json .. rank1.json
    """
    n = min(len(r["steps"]) for r in ranks)
    steps = [1e3 * (max(r["steps"][i][1] for r in ranks) - min(r["steps"][i][0] for r in ranks)) for i in range(n)]
    loss = next((r["loss"] for r in ranks if r["loss"] is not None), None)
    said = f"loss {loss:.4g}" if loss is not None else ("no loss" if plan["training"] else "inference, no loss")
    fc = plan.get("forecast", {}).get("step_ms")
    forecast = f"; plan's forecast {fc:.1f} ms CPU" if fc is not None else ""
    rel = os.path.relpath(folder)
    where = Path(folder if rel.startswith("..") else rel)
    files = f"{where / 'rank0.json'}" + (f" .. rank{len(ranks) - 1}.json" if len(ranks) > 1 else "")
    how = plan["schedule"] if plan["training"] else f"forwards only in {plan['schedule']}'s order"
    return (f"run_pipeline: {plan['stages']} stages, {how}, {plan['microbatches']} micro-batches of "
            f"{plan['microbatch']}: step {statistics.median(steps):.1f} ms wall (median of {n}{forecast}), {said}; "
            f"per-rank JSON in {files}")


def _mean(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(sum(values) / len(values))


def replay_measured(plan: dict, cpu: dict[str, float], overhead: float | None = None) -> float | None:
    """The schedule's replay with the run's own least CPU time of every stage and action kind
    (plus the runtime's measured ``overhead`` per message a pass exchanges with another rank,
    as the forecast prices it), no transfers: the step a machine with one free core per rank
    would take (a wall-clock step on a shared machine also holds the other processes' time)."""
    from ..schedules.simulate import simulate

    n = int(plan["stages"])
    f = [cpu.get(f"{s}:F", 0.0) for s in range(n)]
    i = [cpu.get(f"{s}:I", 0.0) for s in range(n)]
    w = [cpu.get(f"{s}:W", 0.0) for s in range(n)]
    b = [cpu.get(f"{s}:B", i[s] + w[s]) for s in range(n)]
    times = {"F": f, "B": b, "I": i, "W": w} if plan["training"] else {"F": f}
    try:
        return simulate(plan["schedule"], int(plan.get("ranks", n)), int(plan["microbatches"]), times,
                        per_rank=int(plan.get("stages_per_rank", 1)), training=bool(plan["training"]),
                        message_ms=overhead or 0.0).step_ms
    except UsageError:
        return None


def wall_price(plan: dict, cpu: dict[str, float], step_ms: float) -> float | None:
    """The price per message a forward or backward (or input-gradient) pass exchanges with
    another rank at which the replay of the run's CPU times (`replay_measured`, with that price)
    takes the run's wall-clock step ``step_ms``: what a message costs its pass on the wall clock
    beyond the pass's own CPU time (the runtime's CPU time, a late receive's wait, the ranks'
    interference). 0 when the replay without it already takes as long; None for one stage (no
    messages) or a schedule the replay refuses. The replay is monotone in the price, so a
    bisection finds it.

    >>> plan = {"stages": 2, "ranks": 2, "schedule": "gpipe", "microbatches": 2, "training": True}
    >>> cpu = {"0:F": 1.0, "0:B": 2.0, "1:F": 1.0, "1:B": 2.0}
    >>> replay_measured(plan, cpu)   # F F, then B B on each rank, one pass apart
    9.0
    >>> round(wall_price(plan, cpu, 12.0), 6)   # 9 + 6 passes on the critical path x 0.5
    0.5
    >>> wall_price(plan, cpu, 7.0), wall_price({**plan, "stages": 1, "ranks": 1}, cpu, 12.0)
    (0.0, None)
    """
    unpriced = replay_measured(plan, cpu, 0.0) if int(plan["stages"]) > 1 else None
    if unpriced is None:
        return None
    if unpriced >= step_ms:
        return 0.0
    lo, hi = 0.0, 1.0
    while replay_measured(plan, cpu, hi) < step_ms:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-6 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if replay_measured(plan, cpu, mid) < step_ms else (lo, mid)
    return (lo + hi) / 2


def _gather(plan: dict, ranks: list[dict], cmds: list[list[str]], nodes: int) -> dict[str, Any]:
    n_steps = len(ranks[0]["steps"])
    steps_ms = [1e3 * (max(r["steps"][i][1] for r in ranks) - min(r["steps"][i][0] for r in ranks))
                for i in range(n_steps)]
    # the least CPU time of each stage's actions: interference only ever adds CPU time
    cpu = {key: ms for r in ranks for key, ms in r["cpu_ms"].items()}
    n_stages = int(plan["stages"])
    overhead = _mean([r.get("action_overhead_ms") for r in ranks])
    fwd = [cpu.get(f"{s}:F", 0.0) for s in range(n_stages)]
    inp = [cpu.get(f"{s}:I") for s in range(n_stages)]
    wgt = [cpu.get(f"{s}:W") for s in range(n_stages)]
    bwd = [cpu[f"{s}:B"] if f"{s}:B" in cpu else cpu.get(f"{s}:I", 0.0) + cpu.get(f"{s}:W", 0.0)
           for s in range(n_stages)]
    out: dict[str, Any] = {
        "stages": n_stages, "ranks": len(ranks), "nodes": nodes, "stage_input_cpu_ms": inp,
        "stage_weight_cpu_ms": wgt,
        "events": [r["events"] for r in ranks], "hosts": sorted({r["host"] for r in ranks}),
        "backend": ranks[0]["backend"], "schedule": plan["schedule"], "microbatches": plan["microbatches"],
        "step_ms": float(statistics.median(steps_ms)), "steps_ms": steps_ms,
        "stage_forward_cpu_ms": fwd, "stage_backward_cpu_ms": bwd,
        "stage_cpu_ms": [f + b for f, b in zip(fwd, bwd)], "action_overhead_ms": overhead,
        "cpu_ms": cpu, "step_cpu_replay_ms": replay_measured(plan, cpu, overhead),
        "action_wall_ms": None if str(ranks[0].get("device", "cpu")).startswith("cuda") else
        wall_price(plan, cpu, float(statistics.median(steps_ms))),
        "loss": next((r["loss"] for r in ranks if r["loss"] is not None), None),
        "param_bytes": [r["param_bytes"] for r in ranks],
        "activation_peak_bytes": [r["activation_peak_bytes"] for r in ranks],
        "recompute": sorted(s for r in ranks for s in r.get("recompute", [])),
        "recompute_transient_bytes": [r.get("recompute_transient_bytes", 0) for r in ranks],
        # measured peak: parameters, their gradients when training, the saved activations' high-water mark
        # (and a recomputing stage's activations during its backward, measured apart)
        "peak_memory": [r["param_bytes"] + (r["grad_bytes"] if plan["training"] else 0) + r["activation_peak_bytes"]
                        + r.get("recompute_transient_bytes", 0) for r in ranks],
        "commands": [" ".join(c[1:]).replace("-m torch.distributed.run", "torchrun") for c in cmds],
    }
    if all("check" in r for r in ranks):
        checks = [r["check"] for r in ranks]
        holder = next((c for r, c in zip(ranks, checks) if n_stages - 1 in r.get("stages", [])), checks[-1])
        out["check"] = {"outputs_allclose": holder.get("outputs_allclose"),
                        "max_output_diff": holder.get("max_output_diff")}
        if plan["training"]:
            out["check"].update(grads_allclose=all(c.get("grads_allclose") for c in checks),
                                max_grad_diff=max(c.get("max_grad_diff", 0.0) for c in checks),
                                parameters_checked=sum(c.get("parameters_checked", 0) for c in checks))
        # as built, before rank 0's model was handed to the others (`rank.same_on_every_rank`)
        out["check"]["built_alike"] = len({c.get("model_digest") for c in checks}) == 1
        stage_outputs = {int(s): v for c in checks for s, v in c.get("stage_outputs", {}).items()}
        out["check"]["stage_outputs"] = [stage_outputs.get(s) for s in range(n_stages)]
        for key in ("microbatched", "split_here"):
            if key in holder:
                out["check"][key] = holder[key]
        failure = check_failure(plan, out["check"])
        out["check"].update(passed=failure is None, failure=failure)
    return out
