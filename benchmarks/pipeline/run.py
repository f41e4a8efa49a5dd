"""Real pipelines against the cost model, and the exact split against the splits people use.

For each model (layers of unequal cost: Inception-v3 and GNMT from the zoo, tiny size on CPU),
in inference and in training: profile once, split over k = 2 devices with the exact DP (`dp`),
torchgpipe-style balance by time (`time`), DeepSpeed's `parameters` and `uniform`, run every
split as a real pipeline (torch.distributed.pipelining, GPipe, one process per stage) in
interleaved rounds, and record per split

* each stage's measured time per micro-batch next to the profile's prediction;
* the measured bottleneck (slowest stage per micro-batch), step time and throughput;
* the ratio of each baseline's measured bottleneck to the DP's (target: DP no worse than any,
  at least 1.2x better than `uniform` on an unequal-layer model).

On CPU a stage's time is its process's CPU time (a shared machine makes wall time wait for a
core; the wall figures are recorded too). Writes ``results.json`` (a section per device kind,
kept across runs) and the table in ``README.md``.

    python -m benchmarks.pipeline.run                  # CPU processes (gloo), here
    python -m benchmarks.pipeline.run --quick          # one model, one round
    python -m benchmarks.pipeline.run --device cuda    # one GPU: stages timed in one process,
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

# (model, granularity, whole batch, micro-batches) per device kind
CPU_CASES = [("inception", "layer", 32, 4), ("gnmt", "op", 64, 4)]
GPU_CASES = [("inception", "layer", 128, 4), ("gnmt", "layer", 256, 4)]


def _median(xs):
    return float(statistics.median(xs))


def cpu_case(name: str, granularity: str, batch: int, microbatches: int, training: bool, rounds: int,
             k: int) -> dict[str, Any]:
    from devplace_lite.pipeline import available_devices, compare_methods
    from devplace_lite.zoo import get

    z = get(name)
    model, inputs = z.build("tiny"), z.example_input("tiny", batch=batch)
    t0 = time.perf_counter()
    cmp = compare_methods(model, inputs, METHODS, k=k, microbatches=microbatches, training=training,
                          granularity=granularity, rounds=rounds, steps=3, repeats=20)
    rows = cmp.rows()
    dp = next(r for r in rows if r["method"] == "dp")
    for r in rows:
        r["cpu_over_dp"] = r["measured_bottleneck_cpu_ms"] / dp["measured_bottleneck_cpu_ms"]
        r["wall_over_dp"] = r["measured_bottleneck_ms"] / dp["measured_bottleneck_ms"]
        r["predicted_over_dp"] = r["predicted_bottleneck_ms"] / dp["predicted_bottleneck_ms"]
        r["stage_error"] = [m / p - 1 for m, p in zip(r["measured_stage_cpu_ms"], r["predicted_stage_ms"])]
    errors = [abs(e) for r in rows for e in r["stage_error"]]
    return {"model": name, "size": "tiny", "granularity": granularity, "training": training, "batch": batch,
            "microbatches": microbatches, "k": k, "graph_nodes": cmp.graph.n, "rounds": rounds,
            "torch_threads_per_stage": max(1, available_devices("cpu") // k), "seconds": time.perf_counter() - t0,
            "rows": rows, "median_abs_stage_error": _median(errors), "max_abs_stage_error": max(errors)}


def gpu_case(name: str, granularity: str, batch: int, microbatches: int, training: bool, k: int) -> dict[str, Any]:
    """Full-size model on one GPU: profile with CUDA events, split with each method, time every
    stage alone on the GPU; with >= k GPUs also run each split as an NCCL pipeline."""
    import torch

    from devplace_lite.pipeline import available_devices, measure_stages, plan_model, run_pipelines
    from devplace_lite.pipeline.profile import profile
    from devplace_lite.zoo import get

    z = get(name)
    model, inputs = z.build("full"), z.example_input("full", batch=batch)
    mb = batch // microbatches
    micro = tuple(t[:mb] for t in inputs)
    graph = profile(model, micro, granularity=granularity, spec="cuda-measured", training=training,
                    repeats=20, progress=False)
    loss_fn = target = None
    if training:
        with torch.no_grad():
            shape = model(*micro).shape
        target = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        loss_fn = torch.nn.functional.mse_loss
    rows, plans = [], {}
    for m in METHODS:
        plan = plan_model(model, micro, method=m, k=k, granularity=granularity, graph=graph)
        plans[m] = plan
        t = measure_stages(plan.stages, micro, target=target, loss_fn=loss_fn, device="cuda", repeats=20)
        rows.append({"method": m, "stages": plan.num_stages, "predicted_stage_ms": plan.predicted_ms,
                     "predicted_compute_ms": [a - c for a, c in zip(plan.predicted_ms, plan.predicted_comm_ms)],
                     "measured_stage_ms": t.stage_ms, "measured_bottleneck_ms": t.bottleneck_ms,
                     "predicted_bottleneck_ms": plan.predicted_bottleneck_ms,
                     "predicted_k_gpu_throughput": t.predicted_throughput(plan.predicted_comm_ms)})
    dp = rows[0]
    for r in rows:
        r["over_dp"] = r["measured_bottleneck_ms"] / dp["measured_bottleneck_ms"]
        r["stage_error"] = [m / p - 1 for m, p in zip(r["measured_stage_ms"], r["predicted_compute_ms"]) if p > 0]
    out: dict[str, Any] = {"model": name, "size": "full", "granularity": granularity, "training": training,
                           "batch": batch, "microbatches": microbatches, "k": k, "graph_nodes": graph.n,
                           "rows": rows}
    if available_devices("cuda") >= k:
        runs = run_pipelines([dict(stages=plans[m].stages, inputs=inputs, target=None if target is None else
                                   torch.cat([target] * microbatches), loss_fn=loss_fn,
                                   microbatches=microbatches, steps=5, return_outputs=False) for m in METHODS
                              if plans[m].num_stages == k], device="cuda")
        out["nccl_runs"] = {m: r.to_json() for m, r in zip([m for m in METHODS if plans[m].num_stages == k], runs)}
    return out


def table(section: dict[str, Any]) -> str:
    lines = ["| model | mode | method | stages: predicted ms | stages: measured ms | bottleneck measured "
             "(wall) ms | / DP | step ms | samples/s |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for case in section["cases"]:
        mode = "training" if case["training"] else "inference"
        for r in case["rows"]:
            meas = r.get("measured_stage_cpu_ms") or r["measured_stage_ms"]
            wall = f" ({r['measured_bottleneck_ms']:.2f})" if "measured_bottleneck_cpu_ms" in r else ""
            btl = r.get("measured_bottleneck_cpu_ms") or r["measured_bottleneck_ms"]
            ratio = r.get("cpu_over_dp", r.get("over_dp"))
            step = f"{r['measured_step_ms']:.1f}" if "measured_step_ms" in r else "-"
            thr = f"{r['throughput']:.0f}" if "throughput" in r else f"{r['predicted_k_gpu_throughput']:.0f} (forecast)"
            lines.append(f"| {case['model']} {case['granularity']} | {mode} | {r['method']} | "
                         f"{', '.join(f'{x:.2f}' for x in r['predicted_stage_ms'])} | "
                         f"{', '.join(f'{x:.2f}' for x in meas)} | {btl:.2f}{wall} | {ratio:.2f} | {step} | {thr} |")
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
    from devplace_lite.pipeline import device_name

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
