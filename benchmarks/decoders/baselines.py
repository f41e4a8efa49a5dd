"""The plan's split of a decoder LM against the splits people run by default.

For each decoder of `devplace_lite.zoo.external.DECODERS`, built with `LAYERS` layers, training,
batch 8 in 8 micro-batches, measured once (`devplace_lite.pipeline.planner.plan`, thread CPU
time) and planned from that one measured graph at 2, 4 and 8 stages: 1F1B on 2, 4 and 8 ranks,
and interleaved 1F1B with 2 stages on each of 2 and 4 ranks (`CONFIGS`):

* **plan**: devplace's split (`plan_graph`: the schedule-aware search, proven or with its gap);
* **torchtitan**: torchtitan's default (`torchtitan_split`: equal layers, the embedding and the
  head weighed as one layer each; `generate_llm_fqn_per_model_part`, torchtitan 0.3);
* **ds-parameters**, **ds-uniform**: DeepSpeed's ``partition_method`` ``parameters`` (stages of
  balanced memory) and ``uniform`` (equal numbers of units), the project's `parameters` and
  `uniform` methods over the same chain of segments.

Each split's **forecast step** is the replay of torch's action order for the schedule on the
measured costs (`PipelinePlan.step_ms`), reported as a ratio to the plan's. At 2 ranks
(``--measure-ranks``) under 1F1B each distinct split also **runs** under torchrun (gloo, one process and one thread per
rank) ``--rounds`` times in interleaved rounds: its step replayed from the CPU time each rank's
passes measured (a shared machine's load does not inflate CPU time), median over the rounds.
Under a **memory cap** (`--cap`, a share of the torchtitan split's largest stage peak at 4
ranks, 1F1B) the plan either fits or proves that no split does.

Writes ``baselines.json`` and the table in ``BASELINES.md``. Benchmarks measure; nothing asserts.

    python -m benchmarks.decoders.baselines                  # every decoder
    python -m benchmarks.decoders.baselines --models llama mixtral --rounds 1
    python -m benchmarks.decoders.baselines --models llama mixtral mamba --measure-ranks 4
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).parent
RESULTS = HERE / "baselines.json"
PAGE = HERE / "BASELINES.md"
LAYERS, BATCH, MICRO = 8, 8, 8
#: (schedule, ranks): 2, 4 and 8 stages under 1F1B, 4 and 8 under interleaved 1F1B (2 a rank)
CONFIGS = (("1f1b", 2), ("1f1b", 4), ("1f1b", 8), ("interleaved-1f1b", 2), ("interleaved-1f1b", 4))
BASELINES = ("torchtitan", "ds-parameters", "ds-uniform")


def __getattr__(name: str) -> Callable:
    """``NAME_deep``: the decoder ``NAME`` with `LAYERS` layers, as a model spec the torchrun
    ranks can load (``benchmarks.decoders.baselines:llama_deep``)."""
    from devplace_lite.zoo import external

    family = name.removesuffix("_deep")
    if not name.endswith("_deep") or family not in external.DECODERS:
        raise AttributeError(name)
    factory = getattr(external, family)

    def deep(batch: int = BATCH, seed: int = 0):
        return factory(batch=batch, seed=seed, layers=LAYERS)

    return deep


def _load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def splits(q: Any) -> dict[str, list[int]]:
    """Stage of each segment under each baseline, over as many stages as torch's schedule asks
    for at ``q``'s ranks (``q.k`` ranks times the stages each holds)."""
    import dataclasses
    import math

    from devplace_lite.devices import Cluster
    from devplace_lite.pipeline.baseline_splits import method_split
    from devplace_lite.pipeline.titan import torchtitan_split

    stages = q.k * q.per_rank
    wide = dataclasses.replace(q, cluster=Cluster(accelerators=stages, cpus=0, memory=math.inf))
    return {"torchtitan": torchtitan_split(q.names, stages), "ds-parameters": method_split(wide, "parameters"),
            "ds-uniform": method_split(wide, "uniform")}


def forecast(graph: Any, spec: str) -> list[dict[str, Any]]:
    """Every schedule and rank count of `CONFIGS`: the plan's forecast step and each baseline's."""
    from devplace_lite.pipeline.baseline_splits import with_stages
    from devplace_lite.pipeline.planner import plan_graph

    rows = []
    for schedule, k in CONFIGS:
        q = plan_graph(graph, k=k, microbatches=MICRO, schedule=schedule, batch=BATCH, time_limit=30)
        q.model_spec = spec
        row: dict[str, Any] = {"schedule": schedule, "ranks": k, "status": q.status, "gap": q.gap,
                               "stages": q.num_stages, "plan_ms": q.step_ms(), "split_points": q.split_points}
        for name, stage_of in splits(q).items():
            b = with_stages(q, stage_of, name)
            row[name] = {"ms": b.step_ms(), "ratio": b.step_ms() / row["plan_ms"], "split_points": b.split_points}
        rows.append(row)
    return rows


def measured(graph: Any, spec: str, rounds: int, steps: int, ranks: int = 2) -> dict[str, Any]:
    """At ``ranks`` ranks, 1F1B: each distinct split run under torchrun ``rounds`` times, in turns."""
    from devplace_lite.pipeline.baseline_splits import with_stages
    from devplace_lite.pipeline.planner import plan_graph
    from devplace_lite.pipeline.torchrun import launch

    q = plan_graph(graph, k=ranks, microbatches=MICRO, schedule="1f1b", batch=BATCH, time_limit=30)
    q.model_spec = spec
    plans = {"plan": q, **{n: with_stages(q, s, n) for n, s in splits(q).items()}}
    same = {n: next(m for m in plans if plans[m].stage_of == p.stage_of) for n, p in plans.items()}
    replay: dict[str, list[float]] = {n: [] for n in plans if same[n] == n}
    with tempfile.TemporaryDirectory(prefix="devplace-baselines-") as tmp:
        for r in range(rounds):
            for n in replay:
                run = launch(plans[n].write(Path(tmp) / f"{n}{r}")["plan"], steps=steps, threads=1)
                replay[n].append(run["step_cpu_replay_ms"])
    out = {n: {"replay_ms": statistics.median(replay[same[n]]), "runs": replay[same[n]], "same_as": same[n]}
           for n in plans}
    for n in out:
        out[n]["ratio"] = out[n]["replay_ms"] / out["plan"]["replay_ms"]
    return out


def capped(graph: Any, share: float) -> dict[str, Any]:
    """At 4 ranks, 1F1B, a memory cap of ``share`` times the torchtitan split's largest stage
    peak: whether that split fits, and what the plan does under the cap."""
    from devplace_lite.errors import GraphError
    from devplace_lite.pipeline.baseline_splits import with_stages
    from devplace_lite.pipeline.planner import plan_graph
    from devplace_lite.pipeline.titan import torchtitan_split

    q = plan_graph(graph, k=4, microbatches=MICRO, schedule="1f1b", batch=BATCH, time_limit=30)
    tt = with_stages(q, torchtitan_split(q.names, 4), "torchtitan")
    cap = share * max(m["peak"] for m in tt.stage_memory())
    row: dict[str, Any] = {"cap_bytes": cap, "torchtitan_fits": max(m["peak"] for m in tt.stage_memory()) <= cap}
    try:
        p = plan_graph(graph, k=4, microbatches=MICRO, schedule="1f1b", batch=BATCH, memory=cap, time_limit=30)
    except GraphError as e:
        row.update(plan="refused", why=str(e), proven=bool(getattr(e, "proven", False)))
    else:
        row.update(plan="fits", status=p.status, peak=max(m["peak"] for m in p.stage_memory()),
                   recompute=p.recompute_flags, ratio=p.step_ms() / tt.step_ms())
    return row


def case(name: str, rounds: int, steps: int, share: float, repeats: int, ranks: int = 2) -> dict[str, Any]:
    from devplace_lite.pipeline.planner import plan
    from devplace_lite.zoo import external, load

    spec = f"benchmarks.decoders.baselines:{name}_deep"
    row: dict[str, Any] = {"model": name, "family": external.DECODERS[name], "load_before": _load_avg()}
    model, inputs = load(spec, batch=BATCH)
    t0 = time.perf_counter()
    p = plan(model, inputs, k=2, microbatches=MICRO, schedule="1f1b", model_spec=spec, repeats=repeats, time_limit=60)
    row.update(capture=p.capture_how, segments=len(p.names), profile_s=time.perf_counter() - t0)
    row["forecast"] = forecast(p.graph, spec)
    row["capped"] = capped(p.graph, share)
    if rounds:
        row["measured"] = measured(p.graph, spec, rounds, steps, ranks)
        row["measured_ranks"] = ranks
    row["load_after"] = _load_avg()
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """One line per decoder, schedule and rank count: the plan's status and forecast step, each
    baseline's forecast over the plan's, and at the measured rank count under 1F1B the measured ratios."""
    lines = ["| model | schedule | ranks | plan | plan step ms | " + " | ".join(BASELINES)
             + " | measured: " + ", ".join(BASELINES) + " |",
             "| --- | --- | ---: | --- | ---: | " + " | ".join("---:" for _ in BASELINES) + " | --- |"]
    for r in rows:
        for f in r["forecast"]:
            m = r.get("measured") if (f["schedule"], f["ranks"]) == ("1f1b", r.get("measured_ranks")) else None
            meas = ", ".join(f"{m[b]['ratio']:.2f}" for b in BASELINES) if m else ""
            lines.append(f"| {r['model']} | {f['schedule']} | {f['ranks']} | {f['status']} | {f['plan_ms']:.1f} | "
                         + " | ".join(f"{f[b]['ratio']:.2f}" for b in BASELINES) + f" | {meas} |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """What the table says in numbers: the least forecast ratio (1 or more: never slower), how
    many splits differ, the measured ratios, the memory cap."""
    ratios = [f[b]["ratio"] for r in rows for f in r["forecast"] for b in BASELINES]
    out = [f"forecast: {len(ratios)} baseline splits, least ratio to the plan {min(ratios):.3f}, median "
           f"{statistics.median(ratios):.3f}, largest {max(ratios):.2f}; "
           f"{sum(x > 1 + 1e-9 for x in ratios)} slower than the plan, none faster"
           if min(ratios) >= 1 - 1e-9 else f"forecast: {sum(x < 1 - 1e-9 for x in ratios)} baseline(s) FASTER "
           f"than the plan (least ratio {min(ratios):.3f})"]
    meas = [r["measured"][b]["ratio"] for r in rows if "measured" in r for b in BASELINES
            if r["measured"][b]["same_as"] != "plan"]
    if meas:
        out.append(f"measured at {rows[0]['measured_ranks']} ranks (CPU-time replay, median of the rounds), splits that "
                   "differ from the plan's: "
                   f"{len(meas)}, ratios {min(meas):.2f}-{max(meas):.2f}, median {statistics.median(meas):.2f}, "
                   f"{sum(x < 1 for x in meas)} below 1")
    caps = [r["capped"] for r in rows]
    out.append(f"memory cap: torchtitan's split over it in {sum(not c['torchtitan_fits'] for c in caps)} of "
               f"{len(caps)}; the plan fits in {sum(c['plan'] == 'fits' for c in caps)}, refused with a proof in "
               f"{sum(c['plan'] == 'refused' and c['proven'] for c in caps)}")
    return out


def main(argv: list[str] | None = None) -> int:
    from devplace_lite.pipeline.resources import device_name
    from devplace_lite.zoo import external

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(external.DECODERS))
    ap.add_argument("--rounds", type=int, default=3, help="torchrun runs of each split at 2 ranks (0: none)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="measurement rounds of the profile")
    ap.add_argument("--cap", type=float, default=0.8, help="memory cap as a share of torchtitan's largest stage")
    ap.add_argument("--measure-ranks", type=int, default=2, help="ranks of the measured runs (1F1B); other than 2, "
                    "the results go to baselines_kN.json and BASELINES_kN.md")
    args = ap.parse_args(argv)
    suffix = "" if args.measure_ranks == 2 else f"_k{args.measure_ranks}"
    results, page = RESULTS.with_stem(RESULTS.stem + suffix), PAGE.with_stem(PAGE.stem + suffix)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    for name in args.models:  # written after each model: a long run stopped early keeps what it measured
        rows.append(case(name, args.rounds, args.steps, args.cap, args.repeats, args.measure_ranks))
        print("\n".join(table(rows[-1:]).splitlines()[2:]), flush=True)
        meta = {"command": "python -m benchmarks.decoders.baselines " + shlex.join(argv or sys.argv[1:]),
                "started": started, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{device_name('cpu')}, Python {platform.python_version()}",
                "layers": LAYERS, "batch": BATCH, "microbatches": MICRO, "summary": summary(rows),
                "models": f"{len(rows)} of {len(args.models)}"}
        results.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        page.write_text(_page(meta, rows))
    print("\n".join(meta["summary"]))
    return 0


def _page(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    doc = __doc__.split("\n\n    python")[0]
    return (f"# Decoders: the plan's split against torchtitan's and DeepSpeed's\n\n{doc}\n\n"
            f"Command: `{meta['command']}`, {meta['started']} to {meta['finished']} ({meta['models']} models), "
            f"on {meta['machine']}; "
            f"load averages before and after each model are in `baselines.json`.\n\n"
            "Each baseline's cell: its step over the plan's (1.00: the same step; above 1: slower); the "
            "plan's status says whether its split is proven the best.\n\n"
            + table(rows) + "\n\n" + "\n".join(f"- {s}" for s in meta["summary"]) + "\n")


if __name__ == "__main__":
    sys.exit(main())
