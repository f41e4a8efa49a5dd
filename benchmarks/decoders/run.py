"""Decoder language models of today through `devplace plan`: capture, plan, run and check.

For each tiny decoder of `devplace_lite.zoo.external.DECODERS` (Llama, Qwen, Mistral, Gemma,
Phi-3, GPT-NeoX, OLMo 2, StableLM, Falcon, Mixtral, Qwen3-MoE, Mamba; random weights from
configs), training with 1F1B, batch 8 in 4 micro-batches:

1. **plan** over k = 4 (`devplace_lite.pipeline.planner.plan`): the capture route and its
   seconds, the segments' measurement seconds, the whole planning time, the stages and the
   gap to the proven bound; then over k = 2 from the same measured graph (`plan_graph`);
2. **run** each plan under torchrun here (gloo, one process per stage) with the check: the
   last stage's outputs and every parameter's gradient (tied weights after their all-reduce)
   against the unsplit model.

No message price is probed (`plan`'s ``action_ms`` 0, as the library's default): the plans use
the k stages they are given where that lowers the bottleneck, so the runs cut the models.

Writes ``results.json`` and the table in ``README.md``. Benchmarks measure; nothing asserts.

    python -m benchmarks.decoders.run                      # every decoder
    python -m benchmarks.decoders.run --models llama mixtral
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.model_rows import record, rows_of

HERE = Path(__file__).parent
KS, MICRO, BATCH = (4, 2), 4, 8


def _load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def case(name: str, steps: int, repeats: int) -> dict[str, Any]:
    """One decoder: its plans at every k of `KS` and their checked runs."""
    from devplace_lite.pipeline.planner import plan, plan_graph
    from devplace_lite.pipeline.torchrun import launch
    from devplace_lite.zoo import external, load

    spec = f"devplace_lite.zoo.external:{name}"
    row: dict[str, Any] = {"model": name, "family": external.DECODERS[name], "load_before": _load_avg()}
    model, inputs = load(spec, batch=BATCH)
    t0 = time.perf_counter()
    first = plan(model, inputs, k=KS[0], microbatches=MICRO, schedule="1f1b", model_spec=spec, repeats=repeats,
                 time_limit=60)
    row.update(capture=first.capture_how, notes=first.notes, segments=len(first.names),
               capture_s=first.seconds["capture"], measure_s=first.seconds["measure"],
               tied=[t["parameter"] for t in first.tied if len(t["stages"]) > 1], plans={})
    plans = {KS[0]: (first, time.perf_counter() - t0)}
    for k in KS[1:]:  # the same measured segments, planned for fewer ranks
        t1 = time.perf_counter()
        q = plan_graph(first.graph, k=k, microbatches=MICRO, schedule="1f1b", batch=BATCH, time_limit=10)
        q.model_spec = spec
        plans[k] = (q, time.perf_counter() - t1)
    with tempfile.TemporaryDirectory(prefix="devplace-decoders-") as tmp:
        for k, (p, seconds) in plans.items():
            run = launch(p.write(Path(tmp) / f"k{k}")["plan"], steps=steps, warmup=1, check=True, timeout=400)
            row["plans"][str(k)] = {"plan_s": seconds, "stages": p.num_stages, "split_points": p.split_points,
                                    "gap": p.gap, "forecast_step_ms": p.forecast()["step_ms"],
                                    "run_step_ms": run["step_ms"], "check": run["check"]}
    row["load_after"] = _load_avg()
    return row


def _check(c: dict[str, Any]) -> str:
    ok = c["outputs_allclose"] and c["grads_allclose"]
    return f"{'pass' if ok else 'FAIL'} ({c['parameters_checked']} grads)"


def table(rows: list[dict[str, Any]]) -> str:
    """The README's table: one line per decoder."""
    cols = " | ".join(f"k={k}: stages, plan s, check" for k in KS)
    lines = [f"| model | family | capture | segments | capture s | measure s | {cols} |",
             "| --- | --- | --- | ---: | ---: | ---: |" + " --- |" * len(KS)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['family']} | refused: {r['error']} | | | |" + " |" * len(KS))
            continue
        per_k = " | ".join(f"{r['plans'][str(k)]['stages']}, {r['plans'][str(k)]['plan_s']:.1f}, "
                           f"{_check(r['plans'][str(k)]['check'])}" for k in KS)
        lines.append(f"| {r['model']} | {r['family']} | {r['capture']} | {r['segments']} | {r['capture_s']:.1f} | "
                     f"{r['measure_s']:.1f} | {per_k} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from devplace_lite.zoo import external

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(external.DECODERS), help="decoder names (DECODERS)")
    ap.add_argument("--steps", type=int, default=1, help="measured steps per torchrun run (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per segment (default 3)")
    args = ap.parse_args(argv)
    rows = rows_of(args.models, lambda name: case(name, args.steps, args.repeats), external.DECODERS)
    record(HERE, "benchmarks.decoders.run", argv, list(external.DECODERS), rows, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
