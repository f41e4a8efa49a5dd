"""Real pipelines against the cost model, and the exact split against the splits people use.

For each model (layers of unequal cost: Inception-v3 and GNMT from the zoo, tiny size on CPU),
in inference and in training, on the package's one road (`devplace_lite.pipeline`: capture ->
`PipelinePlan` -> torchrun): capture and measure the segments once, split them over k = 2
ranks with the exact DP (`dp`), torchgpipe-style balance by time (`time`), DeepSpeed's
`parameters` and `uniform` (`baseline_splits.with_method`: every split scored by the same cost model),
run every split under torchrun (torch.distributed.pipelining, GPipe, one process per rank) in
interleaved rounds, and record per split

* each stage's measured CPU time per micro-batch next to the plan's forecast;
* the measured bottleneck (slowest stage per micro-batch), step time and throughput;
* the ratio of each baseline's measured bottleneck to the DP's (target: DP no worse than any,
  at least 1.2x better than `uniform` on an unequal-layer model).

On CPU a stage's time is its rank's thread CPU time (a shared machine makes wall time wait for
a core; the wall step is recorded too). Writes ``results.json`` (a section per device kind,
kept across runs) and the table in ``README.md``.

    python -m benchmarks.pipeline.run                  # CPU processes (gloo), here
    python -m benchmarks.pipeline.run --quick          # one model, one round
    python -m benchmarks.pipeline.run --device cuda    # segments timed on one GPU (CUDA events),
                                                       # full-size models; also NCCL runs with >= k GPUs

The GPU run also writes ``data/pipeline/<device>.json``, which chapter 08 shows as recorded.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results.json"
DATA = ROOT / "data" / "pipeline"
METHODS = ("dp", "time", "parameters", "uniform")
TARGET_UNIFORM_OVER_DP = 1.2
STAGE_TOLERANCE = 0.15  # per-stage |measured / predicted - 1| target on GPU

# (model, granularity of the split points, whole batch, micro-batches) per device kind
CPU_CASES = [("inception", "block", 32, 4), ("gnmt", "block", 64, 4)]
GPU_CASES = [("inception", "block", 128, 4), ("gnmt", "block", 256, 4)]


def _median(xs):
    return float(statistics.median(xs))


def _plans(name: str, size: str, granularity: str, batch: int, microbatches: int, training: bool, k: int,
           device: str) -> tuple[Any, dict[str, Any]]:
    """One capture and measurement, then each method's split of it scored alike."""
    from devplace_lite.pipeline.baseline_splits import with_method
    from devplace_lite.pipeline.planner import plan
    from devplace_lite.zoo import load

    model, inputs = load(name, size=size, batch=batch)
    p = plan(model, inputs, k=k, microbatches=microbatches, schedule="gpipe", training=training,
             granularity=granularity, model_spec=name, repeats=20, device=device)
    return p, {m: with_method(p, m) for m in METHODS}


def _row(m: str, q: Any) -> dict[str, Any]:
    return {"method": m, "stages": q.num_stages, "split_points": q.split_points,
            "predicted_bottleneck_ms": q.result.objective, "predicted_stage_ms": q.load_ms,
            "predicted_compute_ms": q.compute_ms, "predicted_step_ms": q.step_ms()}


def cpu_case(name: str, granularity: str, batch: int, microbatches: int, training: bool, rounds: int,
             k: int) -> dict[str, Any]:
    from devplace_lite.pipeline.torchrun import launch

    t0 = time.perf_counter()
    p, plans = _plans(name, "tiny", granularity, batch, microbatches, training, k, "cpu")
    runs: dict[str, list[dict]] = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        paths = {m: plans[m].write(Path(tmp) / m)["plan"] for m in METHODS}
        for _ in range(rounds):  # interleaved: a disturbance of the shared machine hits every method alike
            for m in METHODS:
                runs[m].append(launch(paths[m], steps=3))
    rows = []
    for m in METHODS:
        cpu = [_median(col) for col in zip(*(r["stage_cpu_ms"] for r in runs[m]))]
        rows.append({**_row(m, plans[m]), "measured_stage_cpu_ms": cpu, "measured_bottleneck_cpu_ms": max(cpu),
                     "rounds_bottleneck_cpu_ms": [max(r["stage_cpu_ms"]) for r in runs[m]],
                     "measured_step_ms": _median(r["step_ms"] for r in runs[m]),
                     "throughput": 1000.0 * batch / _median(r["step_ms"] for r in runs[m]), "rounds": rounds})
    dp = rows[0]
    for r in rows:
        r["cpu_over_dp"] = r["measured_bottleneck_cpu_ms"] / dp["measured_bottleneck_cpu_ms"]
        r["predicted_over_dp"] = r["predicted_bottleneck_ms"] / dp["predicted_bottleneck_ms"]
        r["stage_error"] = [mm / pp - 1 for mm, pp in zip(r["measured_stage_cpu_ms"], r["predicted_compute_ms"])
                            if pp > 0]
    errors = [abs(e) for r in rows for e in r["stage_error"]]
    return {"model": name, "size": "tiny", "granularity": granularity, "training": training, "batch": batch,
            "microbatches": microbatches, "k": k, "segments": len(p.names), "capture": p.capture_how,
            "rounds": rounds, "torch_threads_per_rank": 1, "seconds": time.perf_counter() - t0, "rows": rows,
            "median_abs_stage_error": _median(errors), "max_abs_stage_error": max(errors)}


def gpu_case(name: str, granularity: str, batch: int, microbatches: int, training: bool, k: int) -> dict[str, Any]:
    """Full-size model on one GPU: its segments timed with CUDA events, split with each method;
    the forecast of each split is that of a k-GPU pipeline of this GPU. With >= k GPUs each split
    also runs under torchrun (NCCL)."""
    from devplace_lite.pipeline.resources import available_devices
    from devplace_lite.pipeline.torchrun import launch

    p, plans = _plans(name, "full", granularity, batch, microbatches, training, k, "cuda")
    rows = [{**_row(m, plans[m]), "predicted_k_gpu_throughput": 1000.0 * batch / plans[m].step_ms()}
            for m in METHODS]
    dp = rows[0]
    for r in rows:
        r["predicted_over_dp"] = r["predicted_bottleneck_ms"] / dp["predicted_bottleneck_ms"]
    out: dict[str, Any] = {"model": name, "size": "full", "granularity": granularity, "training": training,
                           "batch": batch, "microbatches": microbatches, "k": k, "segments": len(p.names),
                           "rows": rows}
    if available_devices("cuda") >= k:
        with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
            runs = {m: launch(plans[m].write(Path(tmp) / m)["plan"], steps=5, device="cuda") for m in METHODS}
        for r in rows:
            run = runs[r["method"]]
            r["measured_stage_ms"] = run["stage_cpu_ms"]  # on a GPU: wall time up to a device synchronise
            r["measured_bottleneck_ms"] = max(run["stage_cpu_ms"])
            r["measured_step_ms"] = run["step_ms"]
            r["stage_error"] = [mm / pp - 1 for mm, pp in zip(run["stage_cpu_ms"], r["predicted_compute_ms"]) if pp > 0]
        for r in rows:
            r["over_dp"] = r["measured_bottleneck_ms"] / rows[0]["measured_bottleneck_ms"]
    return out


def table(section: dict[str, Any]) -> str:
    lines = ["| model | mode | method | stages: forecast ms | stages: measured ms | bottleneck measured ms | "
             "/ DP (forecast) | step ms | samples/s |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for case in section["cases"]:
        mode = "training" if case["training"] else "inference"
        for r in case["rows"]:
            meas = r.get("measured_stage_cpu_ms") or r.get("measured_stage_ms")
            btl = r.get("measured_bottleneck_cpu_ms") or r.get("measured_bottleneck_ms")
            ratio = r.get("cpu_over_dp", r.get("over_dp"))
            step = f"{r['measured_step_ms']:.1f}" if "measured_step_ms" in r else "-"
            thr = f"{r['throughput']:.0f}" if "throughput" in r else f"{r['predicted_k_gpu_throughput']:.0f} (forecast)"
            lines.append(f"| {case['model']} {case['granularity']} | {mode} | {r['method']} | "
                         f"{', '.join(f'{x:.2f}' for x in r['predicted_compute_ms'])} | "
                         + (f"{', '.join(f'{x:.2f}' for x in meas)} | {btl:.2f} | " if meas else "- | - | ")
                         + (f"{ratio:.2f}" if ratio is not None else "-") + f" ({r['predicted_over_dp']:.2f}) | "
                         f"{step} | {thr} |")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--quick", action="store_true", help="one model, one round")
    ap.add_argument("-k", type=int, default=2)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    from devplace_lite.io import write_json_atomic
    from devplace_lite.pipeline.resources import device_name

    cases = []
    spec = CPU_CASES if args.device == "cpu" else GPU_CASES
    for name, gran, batch, m in spec[:1] if args.quick else spec:
        for training in (False, True):
            print(f"  {name} {gran} {'training' if training else 'inference'}", flush=True)
            if args.device == "cpu":
                cases.append(cpu_case(name, gran, batch, m, training, rounds=1 if args.quick else 3, k=args.k))
            else:
                cases.append(gpu_case(name, gran, batch, m, training, k=args.k))
    section = {
        "device": device_name(args.device), "torch": torch.__version__, "python": platform.python_version(),
        "command": "python -m benchmarks.pipeline.run " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "date": time.strftime("%Y-%m-%d"), "cases": cases,
    }
    summary = []
    for case in cases:
        rows = {r["method"]: r for r in case["rows"]}
        key = "cpu_over_dp" if args.device == "cpu" else "over_dp"
        if key not in rows["dp"]:  # one GPU: forecasts only
            key = "predicted_over_dp"
        worst_base = min(rows[m][key] for m in METHODS if m != "dp")
        item = {"model": case["model"], "training": case["training"], "uniform_over_dp": rows["uniform"][key],
                "best_baseline_over_dp": worst_base, "dp_no_worse_than_all": worst_base >= 1.0,
                "uniform_target_met": rows["uniform"][key] >= TARGET_UNIFORM_OVER_DP}
        if "rounds_bottleneck_cpu_ms" in rows["dp"]:  # run-to-run spread of the DP split itself: the noise
            own = rows["dp"]["rounds_bottleneck_cpu_ms"]
            item["dp_round_spread"] = max(own) / min(own)
        summary.append(item)
    section["summary"] = summary
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[args.device] = section
    write_json_atomic(RESULTS, results)
    if args.device == "cuda":
        DATA.mkdir(parents=True, exist_ok=True)
        write_json_atomic(DATA / f"{_slug(section['device'])}.json", section)
    readme = HERE / "README.md"
    text = readme.read_text()
    marker = f"<!-- table:{args.device} -->"
    head, _, rest = text.partition(marker)
    _, _, tail = rest.partition("<!-- end -->")
    readme.write_text(f"{head}{marker}\n{table(section)}\n\nDevice: {section['device']}; torch {section['torch']}; "
                      f"command: `{section['command'].strip()}`; {section['date']}.\n<!-- end -->{tail}")
    for s in summary:
        print(f"  {s['model']} {'training' if s['training'] else 'inference'}: uniform / DP = "
              f"{s['uniform_over_dp']:.2f}, best baseline / DP = {s['best_baseline_over_dp']:.2f}"
              + (f" (DP's own spread over rounds {s['dp_round_spread']:.2f}x)" if "dp_round_spread" in s else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
