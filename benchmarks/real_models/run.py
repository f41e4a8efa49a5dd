"""`devplace plan` on models nobody here wrote, against the splits practitioners use.

For each external model (`devplace_lite.zoo.external`: torchvision, timm, Hugging Face encoder,
decoder and encoder-decoder, random weights from configs), training with 1F1B, 4 micro-batches:

1. **plan** over k = 4 devices and record: capture route, segments, planning time, the gap
   to the proven bound, stage memory forecast;
2. **run** that plan under torchrun as two loopback nodes of two processes each
   (``--nnodes 2``): outputs and gradients against the unsplit model, measured peak memory
   per stage against the forecast;
3. **calibrate** it (run, fit forward/backward scales, re-plan, run again): the largest
   per-stage error of the compute forecast before and after;
4. **compare** at k = 2 (two processes on the two cores): the plan's split, evenly spaced
   split points (what torch users write by hand) and a compute-only balance (PiPPy's proposed
   ``auto_partition``), each run under torchrun in interleaved rounds. Reported as ratios to
   the plan's split measured in the same run: step wall time, and the bottleneck stage's CPU
   time per micro-batch (which a shared machine's load does not inflate).

Writes ``results.json`` and the table in ``README.md``. Benchmarks measure; nothing asserts.

    python -m benchmarks.real_models.run                # all eight models
    python -m benchmarks.real_models.run --models gpt2 t5 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.model_rows import record, rows_of

HERE = Path(__file__).parent
K_PLAN, K_TIME, MICRO, BATCH = 4, 2, 4, 8


def _load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def case(name: str, rounds: int, steps: int) -> dict[str, Any]:
    from devplace_lite.pipeline.calibration import calibrate
    from devplace_lite.pipeline.baseline_splits import compute_only, even_split, with_stages
    from devplace_lite.pipeline.planner import plan, plan_graph
    from devplace_lite.pipeline.torchrun import launch
    from devplace_lite.zoo import external, load

    spec = f"devplace_lite.zoo.external:{name}"
    row: dict[str, Any] = {"model": name, "family": external.MODELS[name], "load_before": _load_avg()}
    model, inputs = load(spec, batch=BATCH)
    t0 = time.perf_counter()
    p = plan(model, inputs, k=K_PLAN, microbatches=MICRO, schedule="1f1b", model_spec=spec, time_limit=10)
    row.update(capture=p.capture_how, notes=p.notes, segments=len(p.names), plan_s=time.perf_counter() - t0,
               gap=p.gap, stages=p.num_stages, split_points=p.split_points, tied=p.tied,
               forecast_memory=[m["peak"] for m in p.stage_memory()])
    with tempfile.TemporaryDirectory(prefix="devplace-bench-") as tmp:
        run = launch(p.write(Path(tmp) / "plan")["plan"], nodes=2, steps=steps, check=True)
        row.update(check=run["check"], measured_memory=run["peak_memory"],
                   memory_ratio=[m / f for m, f in zip(run["peak_memory"], row["forecast_memory"])])
        cal = calibrate(p, Path(tmp) / "cal", steps=steps, first=run)  # the checked run is its first run
        row["calibration"] = {k: cal[k] for k in ("forward_scale", "backward_scale", "error_before", "error_after",
                                                   "max_error_before", "max_error_after")}
        p2 = plan_graph(p.graph, k=K_TIME, microbatches=MICRO, schedule="1f1b", batch=BATCH, time_limit=10)
        p2.model_spec = spec
        splits = {"plan": p2, "even": with_stages(p2, even_split(p2.graph, K_TIME), "even"),
                  "compute-only": with_stages(p2, compute_only(p2), "compute-only")}
        measured: dict[str, list[dict]] = {s: [] for s in splits}
        distinct = {s: q for s, q in splits.items() if s == "plan" or q.split_points != p2.split_points}
        for r in range(rounds):
            for s, q in distinct.items():  # a baseline that picks the plan's split points is the plan's run
                measured[s].append(launch(q.write(Path(tmp) / f"{s}{r}")["plan"], steps=steps))
        for s in set(splits) - set(distinct):
            measured[s] = measured["plan"]
    med = lambda xs: float(statistics.median(xs))  # noqa: E731
    base_step = med([m["step_ms"] for m in measured["plan"]])
    base_cpu = med([max(m["stage_cpu_ms"]) for m in measured["plan"]])
    row["compare_k2"] = {
        s: {"split_points": q.split_points, "forecast_bottleneck_ms": q.result.objective,
            "same_as_plan": s != "plan" and s not in distinct,
            "step_ms": med([m["step_ms"] for m in measured[s]]),
            "bottleneck_cpu_ms": med([max(m["stage_cpu_ms"]) for m in measured[s]]),
            "step_ratio": med([m["step_ms"] for m in measured[s]]) / base_step,
            "bottleneck_ratio": med([max(m["stage_cpu_ms"]) for m in measured[s]]) / base_cpu}
        for s, q in splits.items()}
    row["load_after"] = _load_avg()
    return row


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _ratios(rec: dict[str, Any]) -> str:
    if rec.get("same_as_plan"):
        return "same split as the plan"
    return f"{rec['step_ratio']:.2f}, {rec['bottleneck_ratio']:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | family | capture | segments | plan s | gap | outputs / grads equal | memory measured / "
            "forecast | calibration: worst stage error before -> after | k=2 even: step, bottleneck | "
            "k=2 compute-only: step, bottleneck |\n| --- | --- | --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['family']} | failed: {r['error']} | | | | | | | | |")
            continue
        c, k2 = r["check"], r["compare_k2"]
        mem = f"{min(r['memory_ratio']):.2f}-{max(r['memory_ratio']):.2f}"
        cal = r["calibration"]
        lines.append(
            f"| {r['model']} | {r['family']} | {r['capture']} | {r['segments']} | {r['plan_s']:.1f} | {_pct(r['gap'])} | "
            f"{'yes' if c['outputs_allclose'] else 'NO'} / {'yes' if c['grads_allclose'] else 'NO'} | {mem} | "
            f"{_pct(cal['max_error_before'])} -> {_pct(cal['max_error_after'])} | "
            f"{_ratios(k2['even'])} | {_ratios(k2['compute-only'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from devplace_lite.zoo import external

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(external.MODELS), help="external model names")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the k=2 comparison (default 2)")
    ap.add_argument("--steps", type=int, default=3, help="measured steps per torchrun run (default 3)")
    args = ap.parse_args(argv)
    rows = rows_of(args.models, lambda name: case(name, args.rounds, args.steps), external.MODELS)
    record(HERE, "benchmarks.real_models.run", argv, list(external.MODELS), rows, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
