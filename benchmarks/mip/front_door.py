"""The contiguous IP through the front door: ``devplace partition FILE --method ip-contig -k K
--time-limit 60`` on every published layer graph of the authors, as a user runs it.

Each run is its own process (the command line, loading and the certificate included), one at a
time; recorded per run: status, objective, bound, gap, the wall seconds of the whole command,
the CPU seconds it used (`resource.getrusage` of the child and its children: on a busy machine
a wall-time limit buys fewer of them), the one-minute load average before and after, and what
the column-generation stage reported (its bound, seconds, whether it enumerated every convex
set). The target (issue 42): within 1 % in 60 s at k = 2, 4, 8. Writes ``front_door.json`` and
the table of ``README.md`` between its ``front-door`` markers; never asserts on time.

    python -m benchmarks.mip.front_door [--time-limit 60] [--only bert24_inference,gnmt_training] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from devplace_course.reference import reference_dir
from devplace_lite.io import read_json, write_json_atomic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LAYERS = (reference_dir() or ROOT.parent / "shared/reference/msr-dnn-partitioning") / "throughput-inputs/LayerGraphs"
KS = (2, 4, 8)
TARGET = 0.01
#: What the column stage reports in the answer (`devplace_lite.throughput.ip.throughput_ip`).
FACTS = ("warm_start", "columns_bound", "columns_seconds", "columns_exact", "columns_guesses", "cut",
         "solve_seconds", "bound_method")


def run_one(path: Path, k: int, limit: float) -> dict:
    """One command, in its own process; what it answered and what it cost."""
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    cp = subprocess.run([sys.executable, "-m", "devplace_lite.cli", "partition", str(path), "--method", "ip-contig",
                         "-k", str(k), "--time-limit", f"{limit:g}", "--json", "--quiet"],
                        capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"graph": path.stem, "k": k, "wall": round(wall, 2), "cpu": round(cpu, 2), "load_before": round(load0, 2),
           "load_after": round(os.getloadavg()[0], 2), "rc": cp.returncode}
    if cp.returncode != 0:
        return {**row, "error": cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else "no output"}
    out = json.loads(cp.stdout)
    row.update({f: out.get(f) for f in ("status", "objective", "bound", "gap")})
    row.update({f: out[f] for f in FACTS if f in out})
    row["within_target"] = out.get("gap") is not None and out["gap"] <= TARGET + 1e-12
    return row


def _gap(r: dict) -> str:
    return "error" if "error" in r else "no bound" if r.get("gap") is None else f"gap {100 * r['gap']:.2f} %"


def table(res: dict) -> str:
    rows = res["rows"]
    loads = [x for r in rows for x in (r["load_before"], r["load_after"])]
    met = [r for r in rows if r.get("within_target")]
    lines = [f"Command per row: `devplace partition LayerGraphs/GRAPH.json --method ip-contig -k K --time-limit "
             f"{res['time_limit']:g} --json`, one at a time (`{res['command']}`); {res['machine']}; {res['date']}; "
             f"one-minute load average {min(loads):.1f}-{max(loads):.1f} during the run (other jobs shared the "
             "machine: the limit is wall time, the CPU column is what it bought).", "",
             f"Within {100 * TARGET:g} % on {len(met)} of {len(rows)} (graph, k) pairs; wall time at most "
             f"{max(r['wall'] for r in rows):.1f} s (the limit is {res['time_limit']:g} s), over the limit on "
             f"{sum(r['wall'] > res['time_limit'] for r in rows)}.", "",
             "Missed: " + ("; ".join(f"{r['graph']} k = {r['k']} ({_gap(r)} with {r['cpu']:.1f} s of CPU at load "
                                     f"{r['load_before']:.0f}-{r['load_after']:.0f})"
                                     for r in rows if not r.get("within_target")) or "none") + ".", "",
             "| graph | k | status | objective | bound | gap | within 1 % | wall s | CPU s | load | columns bound | "
             "columns s | enumerated |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['graph']} | {r['k']} | error: {r['error']} | | | | no | {r['wall']:.1f} | "
                         f"{r['cpu']:.1f} | {r['load_before']:.1f} | | | |")
            continue
        gap = "-" if r["gap"] is None else f"{100 * r['gap']:.2f} %"
        cb = r.get("columns_bound")
        lines.append(f"| {r['graph']} | {r['k']} | {r['status']} | {r['objective']:.4g} | "
                     f"{'-' if r['bound'] is None else format(r['bound'], '.4g')} | {gap} | "
                     f"{'yes' if r['within_target'] else 'no'} | {r['wall']:.1f} | {r['cpu']:.1f} | "
                     f"{r['load_before']:.1f}-{r['load_after']:.1f} | {'-' if cb is None else format(cb, '.4g')} | "
                     f"{r.get('columns_seconds', '-')} | {r.get('columns_exact', '-')} |")
    return "\n".join(lines)


def render(res: dict) -> None:
    readme = HERE / "README.md"
    text = readme.read_text()
    block = f"<!-- front-door -->\n{table(res)}\n<!-- /front-door -->"
    if "<!-- front-door -->" in text:
        text = re.sub(r"<!-- front-door -->.*<!-- /front-door -->", lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n## ip-contig from the command line (issue 42)\n\n" + block + "\n"
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--only", help="graph names (comma-separated); the other rows of front_door.json stay")
    p.add_argument("--render", action="store_true", help="only rewrite README.md from front_door.json")
    args = p.parse_args(argv)
    out = HERE / "front_door.json"
    if args.render:
        render(read_json(out))
        return 0
    if not LAYERS.is_dir():
        print(f"the authors' layer graphs are not on this machine ({LAYERS})", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    old = read_json(out) if out.exists() and only else {"rows": []}
    rows = [r for r in old["rows"] if r["graph"] not in only] if only else []
    command = ("python -m benchmarks.mip.front_door" + (f" --only {args.only}" if only else "")
               + (f" --time-limit {args.time_limit:g}" if args.time_limit != 60 else ""))
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res = {"command": f"{old['command']}; then {command}" if old["rows"] else command,  # the runs the rows come from
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
           "date": f"{old['date']}; then {date}" if old["rows"] else date, "time_limit": args.time_limit, "rows": rows}
    for path in sorted(LAYERS.glob("*.json")):
        if only is not None and path.stem not in only:
            continue
        for k in KS:
            row = run_one(path, k, args.time_limit)
            print(json.dumps(row), flush=True)
            rows.append(row)
            rows.sort(key=lambda r: (r["graph"], r["k"]))
            write_json_atomic(out, res)  # after every row: a stopped run keeps what it measured
    render(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
