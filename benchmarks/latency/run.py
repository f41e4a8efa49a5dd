"""Single-sample latency on the authors' eight published latency inputs (issue 20).

For every file of ``latency-inputs`` (cluster from the file: accelerators, CPU cores, memory):

* ``greedy``: the paper's greedy (`devplace_lite.single_sample.search.greedy_latency`);
* ``DP split``: the throughput-optimal chain split of the exact DP (`devplace_lite.throughput.dp`, through
  `devplace_lite.methods`, 30 s), scored for latency;
* ``ip`` and ``local-search`` at 10 s and 60 s, each run as the command a user types,
  ``devplace latency FILE --method M --time-limit L --json``, timed from outside (the wall
  time of the whole command) with the machine's load average before and after;
* ``best bound``: `devplace_lite.single_sample.segments.best_latency_bound` (critical path, the path
  and interval programs, then the segment bound of `devplace_lite.single_sample.segments`) with the
  same time limit, called directly on the same input beside the command, so that the
  command's own certificate (the figures before the segment bound) and the best bound stand
  side by side from one run, each with its gap to the command's answer;
* optionally the authors' own tools, built from their public sources, when given
  (``--authors-greedy BINARY``, ``--authors-dp BINARY``): their splits, scored by our evaluator.
  Only the latencies are recorded; without the binaries the last run's figures are kept (their
  tools are deterministic), with the date of the run that measured them (``..._from``).

Writes ``results.json`` (one record per input) and the tables of ``README.md`` (between the
markers). Benchmarks measure and never assert. Run (about 25 minutes):
``python -m benchmarks.latency.run [--limits 10 60] [--only bert24]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from devplace_lite import methods
from devplace_lite.devices import Cluster
from devplace_lite.io import load_graph, write_json_atomic
from devplace_lite.single_sample.model import evaluate_latency
from devplace_lite.single_sample.segments import best_latency_bound
from devplace_lite.single_sample.search import greedy_latency

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT.parent / "shared" / "reference" / "msr-dnn-partitioning" / "latency-inputs"
METHODS = ("ip", "local-search")
DP_SECONDS = 30.0
AUTHORS_SECONDS = 120.0


def run_cli(path: Path, method: str, limit: float) -> dict:
    """``devplace latency`` as a user runs it: the JSON answer, wall seconds and load."""
    cmd = [sys.executable, "-m", "devplace_lite.cli", "latency", str(path), "--method", method,
           "--time-limit", str(limit), "--json"]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        return {"error": proc.stderr.strip()[-300:], "wall": wall}
    out = json.loads(proc.stdout)
    g = load_graph(path)
    c = Cluster.for_graph(g)
    a = np.array([c.device_index(out["placement"][v.id]) for v in g.nodes])
    check = evaluate_latency(g, c, a, out["pieces"]).latency  # the answer, scored again
    return {"objective": out["objective"], "bound": out["bound"], "gap": out["gap"], "status": out["status"],
            "seconds": out["seconds"], "wall": round(wall, 2), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "warm_start": out.get("warm_start"),
            "warm_start_beaten": out.get("warm_start_beaten", False), "rescored": check,
            "starts": out.get("starts", {})}


def authors_split(binary: str, path: Path, g, c) -> float | None:
    """Latency of the split an authors' tool writes (JSON with ``fpgas`` and ``cpus`` node lists);
    ``None`` when it writes none within `AUTHORS_SECONDS` (their DP on Inception-v3 runs for
    many minutes and gigabytes: REFERENCES.md)."""
    with open(path) as f:
        try:
            proc = subprocess.run([binary], stdin=f, capture_output=True, text=True, timeout=AUTHORS_SECONDS)
        except subprocess.TimeoutExpired:
            return None
    try:
        out, _ = json.JSONDecoder().raw_decode(proc.stdout.lstrip())
    except ValueError:
        return None
    a = np.full(g.n, -1, dtype=np.int64)
    for i, part in enumerate(out["fpgas"]):
        a[[g.index[str(v)] for v in part["nodes"]]] = i
    for part in out["cpus"]:
        a[[g.index[str(v)] for v in part["nodes"]]] = c.k
    if (a < 0).any() or len(out["fpgas"]) > c.k:
        return None
    return float(evaluate_latency(g, c, a).latency)


def measure(path: Path, limits: list[float], args, previous: dict, previous_date: str) -> dict:
    g = load_graph(path)
    c = Cluster.for_graph(g)
    name = f"{path.parent.name}/{path.stem}"
    rec: dict = {"graph": name, "nodes": g.n, "edges": g.m, "accelerators": c.k, "cpus": c.l,
                 "memory": c.memory, "total_memory_share": round(float(g.memory.sum()) / c.memory, 2)}
    rec["greedy"] = greedy_latency(g, c).objective
    t0 = time.perf_counter()
    dp = methods.resolve(methods.PARTITION, "dp")(g, c, time_limit=DP_SECONDS, seed=0)
    rec["dp_status"], rec["dp_seconds"] = dp.status, round(time.perf_counter() - t0, 2)
    rec["dp_split"] = float(evaluate_latency(g, c, dp.assignment).latency) if dp.assignment is not None else None
    if args.authors_greedy:
        rec["authors_greedy"] = authors_split(args.authors_greedy, path, g, c)
    if args.authors_dp:
        rec["authors_dp_split"] = authors_split(args.authors_dp, path, g, c)
    for key in ("authors_greedy", "authors_dp_split"):  # their tools are deterministic: keep the last figures
        if key not in rec and previous.get(name, {}).get(key) is not None:
            rec[key] = previous[name][key]
            rec[key + "_from"] = previous[name].get(key + "_from") or previous_date
    for method in args.methods:
        for limit in limits:
            key = f"{method}@{limit:g}"
            rec[key] = run_cli(path, method, limit)
            r = rec[key]
            print(f"  {name} {key}: {r.get('objective')} bound {r.get('bound')} {r.get('status')} "
                  f"wall {r['wall']:.1f}s load {r.get('load_before')}", flush=True)
    for limit in limits:
        rec[f"best_bound@{limit:g}"] = r = best_bound_record(g, c, limit, rec)
        print(f"  {name} best bound @{limit:g}: {r['bound']} ({r['method']}) gap {r['gap']} "
              f"cpu {r['cpu_seconds']}s load {r['load_before']}", flush=True)
    return rec


def best_bound_record(g, c, limit: float, rec: dict) -> dict:
    """`best_latency_bound` with ``limit`` seconds, its gap to the best latency the commands
    found at that limit, and its CPU and wall seconds with the load."""
    answers = [rec[f"{m}@{limit:g}"].get("objective") for m in METHODS if f"{m}@{limit:g}" in rec]
    upper = min((x for x in answers if x is not None), default=None)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    b = best_latency_bound(g, c, 1, time_limit=limit, upper=upper)
    bound = b.bound if math.isfinite(b.bound) else None
    return {"bound": bound, "method": b.method, "status": b.status, "upper": upper,
            "gap": None if upper is None or bound is None else max(0.0, (upper - bound) / upper),
            "wall": round(time.perf_counter() - t0, 2), "cpu_seconds": round(time.process_time() - c0, 2),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "components": b.extra.get("components", {})}


def fmt(x, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def tables(records: list[dict], limits: list[float], meta: dict) -> str:
    lo, hi = f"{limits[0]:g}", f"{limits[-1]:g}"
    lines = [f"Machine: {meta['machine']}; load average (1 min) {meta['load_min']:.1f} to {meta['load_max']:.1f} "
             f"while the commands ran; {meta['date']}. Command: `{meta['command']}`.", "",
             f"| input | nodes | k | greedy | DP split | ip {lo} s | bound | gap | ip {hi} s | bound | gap | status "
             f"{hi} s | at or below both |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in records:
        a, b = r.get(f"ip@{lo}", {}), r.get(f"ip@{hi}", {})
        ok = all(x.get("objective") is not None and x["objective"] <= min(r["greedy"], r["dp_split"] or math.inf) + 1e-9
                 for x in (a, b))
        lines.append(f"| {r['graph']} | {r['nodes']} | {r['accelerators']} | {fmt(r['greedy'])} | {fmt(r['dp_split'])} | "
                     f"{fmt(a.get('objective'))} | {fmt(a.get('bound'))} | {fmt(100 * a['gap'] if a.get('gap') is not None else None)} % | "
                     f"{fmt(b.get('objective'))} | {fmt(b.get('bound'))} | {fmt(100 * b['gap'] if b.get('gap') is not None else None)} % | "
                     f"{b.get('status', '-')} | {'yes' if ok else 'NO'} |")
    lines += ["", f"The best bound (`best_latency_bound`, {hi} s, called directly) beside the command's own "
              f"certificate from the same run; `gap` against the best latency the commands found at {hi} s:", "",
              f"| input | best latency {hi} s | command's bound | gap | best bound | by | gap | CPU s | within 5 % |",
              "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for r in records:
        bb = r.get(f"best_bound@{hi}", {})
        cmd = [r.get(f"{m}@{hi}", {}) for m in METHODS]
        cmd_bound = max((x["bound"] for x in cmd if x.get("bound") is not None), default=None)
        up = bb.get("upper")
        old_gap = None if up is None or cmd_bound is None else max(0.0, (up - cmd_bound) / up)
        gap = bb.get("gap")
        lines.append(f"| {r['graph']} | {fmt(up)} | {fmt(cmd_bound)} | "
                     f"{fmt(100 * old_gap if old_gap is not None else None)} % | {fmt(bb.get('bound'))} | "
                     f"{bb.get('method', '-')} | {fmt(100 * gap if gap is not None else None)} % | "
                     f"{fmt(bb.get('cpu_seconds'))} | {'yes' if gap is not None and gap <= 0.05 else 'NO'} |")
    carried = sorted({r[k] for r in records for k in ("authors_greedy_from", "authors_dp_split_from") if r.get(k)})
    note = f" (measured in the run of {', '.join(carried)}: their tools were not given to this one)" if carried else ""
    lines += ["", "Latencies in ms. The local search alone, the whole command's wall time, the best start "
              f"and, when their tools were given, the authors' greedy and DP splits scored by our evaluator{note}:", "",
              f"| input | local search {lo} s | {hi} s | wall ip {lo} / {hi} s | wall local search {lo} / {hi} s | "
              f"best start ({hi} s) | IP beat it | authors' greedy | authors' DP split | DP status |",
              "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |"]
    for r in records:
        la, lb = r.get(f"local-search@{lo}", {}), r.get(f"local-search@{hi}", {})
        a, b = r.get(f"ip@{lo}", {}), r.get(f"ip@{hi}", {})
        lines.append(f"| {r['graph']} | {fmt(la.get('objective'))} | {fmt(lb.get('objective'))} | "
                     f"{fmt(a.get('wall'))} / {fmt(b.get('wall'))} | {fmt(la.get('wall'))} / {fmt(lb.get('wall'))} | "
                     f"{b.get('warm_start', '-')} | {'yes' if b.get('warm_start_beaten') else 'no'} | "
                     f"{fmt(r.get('authors_greedy'))} | {fmt(r.get('authors_dp_split'))} | "
                     f"{r['dp_status']} ({r['dp_seconds']:.0f} s) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[10.0, 60.0])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--only", help="run only the inputs whose name contains this")
    ap.add_argument("--authors-greedy", help="the authors' latency greedy, built from their sources")
    ap.add_argument("--authors-dp", help="the authors' throughput DP, built from their sources")
    args = ap.parse_args()
    if not REFERENCE.is_dir():
        print(f"benchmarks/latency: the authors' inputs are not at {REFERENCE}; nothing to do", file=sys.stderr)
        return
    files = [p for p in sorted(REFERENCE.glob("*/*.json")) if not args.only or args.only in str(p)]
    loads = [os.getloadavg()[0]]
    records = []
    try:
        old = json.loads((HERE / "results.json").read_text())
        previous, previous_date = {r["graph"]: r for r in old["records"]}, old["meta"]["date"]
    except (OSError, ValueError, KeyError):
        previous, previous_date = {}, ""
    for path in files:
        records.append(measure(path, args.limits, args, previous, previous_date))
        for key, r in records[-1].items():
            if isinstance(r, dict) and "load_before" in r:
                loads += [r["load_before"], r["load_after"]]
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "load_min": min(loads), "load_max": max(loads), "date": time.strftime("%Y-%m-%d"),
            "command": "python -m benchmarks.latency.run " + " ".join(
                a if not a.startswith("/") else "<path>" for a in sys.argv[1:])}
    write_json_atomic(HERE / "results.json", {"meta": meta, "limits": args.limits, "records": records})
    readme = HERE / "README.md"
    text = readme.read_text()
    start, end = "<!-- table -->", "<!-- /table -->"
    new = text[:text.index(start) + len(start)] + "\n" + tables(records, args.limits, meta) + "\n" + text[text.index(end):]
    readme.write_text(new)
    print(tables(records, args.limits, meta))


if __name__ == "__main__":
    main()
