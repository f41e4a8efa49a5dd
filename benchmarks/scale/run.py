"""Scale: wall time and peak memory of every command on layered graphs of 10^4, 10^5 and 10^6
nodes, with the growth exponent. Writes results.json and the table in README.md.

    python -m benchmarks.scale.run [--sizes 10000 100000 1000000] [--only info,evaluate,...]
                                   [--timeout 300] [--workdir DIR]

Each command runs as its own ``devplace`` process (the way a user runs it); its peak memory is
the child's ``ru_maxrss`` (from ``os.wait4``), its time the wall clock around it. The machine's
load average is recorded before and after each run: on a shared machine wall times move 3-5x,
so read them next to the load. The growth exponent of a command is the slope of log(time)
against log(nodes) between consecutive sizes (1: linear). Benchmarks measure; they never assert.
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

HERE = Path(__file__).parent
SIZES = (10_000, 100_000, 1_000_000)
K = 4
#: Every command a user runs on a graph, as ``devplace`` arguments after the graph path.
COMMANDS: dict[str, list[str]] = {
    "info": ["info", "{g}"],
    "convert": ["convert", "{g}", "{tmp}/out.json"],
    "evaluate": ["evaluate", "{g}", "{p}", "-k", str(K)],
    **{f"partition {m}": ["partition", "{g}", "--method", m, "-k", str(K)]
       for m in ("single", "uniform", "parameters", "time", "greedy", "random", "kl", "etf", "heft",
                 "topo-fill", "local-search", "linear", "pipedream", "brkga")},
    **{f"partition {m} --time-limit 30": ["partition", "{g}", "--method", m, "-k", str(K), "--time-limit", "30"]
       for m in ("dp", "exhaustive", "ip", "ip-contig", "ip-noncontig")},
    "bound combinatorial": ["bound", "{g}", "-k", str(K), "--method", "combinatorial"],
    "bound best --time-limit 30": ["bound", "{g}", "-k", str(K), "--time-limit", "30"],
    **{f"latency {m} --time-limit 30": ["latency", "{g}", "--method", m, "-k", str(K), "--time-limit", "30"]
       for m in ("greedy", "local-search", "ip")},
}


def devplace() -> str:
    return str(Path(sys.executable).with_name("devplace"))


def run(args: list[str], timeout: float) -> dict:
    """One command: wall seconds, peak RSS (MB) of the child, exit status, last stderr line."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([devplace(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    wall = time.perf_counter() - t0
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN as a running maximum, so
    # each command runs from a fresh interpreter below (see main) to read its own peak.
    return {"seconds": round(wall, 3), "status": None if timed_out else proc.returncode, "timed_out": timed_out,
            "answer": (out.strip().splitlines() or [""])[0][:200] if not timed_out else "",
            "stderr": (err.strip().splitlines() or [""])[-1][:300], "load_before": round(load0, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def measure(args: list[str], timeout: float) -> dict:
    """`run` in a fresh child interpreter, so that RUSAGE_CHILDREN holds only this command."""
    code = ("import json, resource, sys; from benchmarks.scale.run import run; "
            "r = run(json.loads(sys.argv[1]), float(sys.argv[2])); "
            "r['peak_mb'] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1); "
            "print(json.dumps(r))")
    res = subprocess.run([sys.executable, "-c", code, json.dumps(args), str(timeout)], capture_output=True,
                         text=True, cwd=HERE.parent.parent)
    return json.loads(res.stdout)


def graph_file(n: int, workdir: Path) -> Path:
    """The layered graph of ``n`` nodes (seed 0), generated once into ``workdir``."""
    from devplace_lite.generators import generate
    from devplace_lite.io import save_graph

    path = workdir / f"layered-{n}.json"
    if not path.exists():
        save_graph(generate("layered", n, seed=0), path)
    return path


def placement_file(g: Path, workdir: Path) -> Path:
    """A placement for ``evaluate``: the ``time`` baseline's answer."""
    path = workdir / f"{g.stem}-placement.json"
    if not path.exists():
        subprocess.run([devplace(), "partition", str(g), "--method", "time", "-k", str(K), "--bound-time", "0",
                        "--out", str(path)], check=True, capture_output=True)
    return path


def exponents(rows: list[dict]) -> dict[str, list[float | None]]:
    """Slope of log(seconds) over log(nodes) between consecutive sizes, per command (answers only)."""
    out: dict[str, list[float | None]] = {}
    for cmd in dict.fromkeys(r["command"] for r in rows):
        pts = sorted((r["nodes"], r["seconds"]) for r in rows if r["command"] == cmd and r["status"] == 0)
        out[cmd] = [round(math.log(t2 / t1) / math.log(n2 / n1), 2) if t1 > 0 and t2 > 0 else None
                    for (n1, t1), (n2, t2) in zip(pts, pts[1:])]
    return out


def verdict(r: dict) -> str:
    if r["timed_out"]:
        return "timeout"
    if r["status"] == 0:
        return "answered"
    return "refused" if r["status"] == 2 else f"exit {r['status']}"


def table(rows: list[dict], sizes: list[int], slopes: dict) -> list[str]:
    head = "| command | " + " | ".join(f"{n:,} nodes: s / MB / result" for n in sizes) + " | growth exponent |"
    lines = [head, "|" + " --- |" * (len(sizes) + 2)]
    for cmd in dict.fromkeys(r["command"] for r in rows):
        cells = []
        for n in sizes:
            r = next((r for r in rows if r["command"] == cmd and r["nodes"] == n), None)
            cells.append("-" if r is None else f"{r['seconds']:.1f} / {r['peak_mb']:.0f} / {verdict(r)}")
        slope = ", ".join("-" if s is None else f"{s:.2f}" for s in slopes.get(cmd, [])) or "-"
        lines.append(f"| {cmd} | " + " | ".join(cells) + f" | {slope} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--only", help="comma-separated command names (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per command before it is killed")
    ap.add_argument("--workdir", default="/tmp/devplace-scale", help="where the graphs are generated")
    ap.add_argument("--append", action="store_true", help="keep the rows of results.json (other sizes or commands)")
    args = ap.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    wanted = list(COMMANDS) if not args.only else [c.strip() for c in args.only.split(",")]
    rows = json.loads((HERE / "results.json").read_text())["rows"] if args.append else []
    args.commands = [" ".join(sys.argv[1:])]
    if args.append:
        args.commands = json.loads((HERE / "results.json").read_text())["commands"] + args.commands
    for n in args.sizes:
        g = graph_file(n, workdir)
        p = placement_file(g, workdir)
        for cmd in wanted:
            argv = [a.format(g=g, tmp=workdir, p=p) for a in COMMANDS[cmd]]
            r = {"command": cmd, "nodes": n, **measure(argv, args.timeout)}
            rows = [old for old in rows if (old["command"], old["nodes"]) != (cmd, n)] + [r]  # a rerun replaces
            print(json.dumps(r), flush=True)
            write(rows, args)  # after every command: a long run that is stopped keeps what it measured


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """results.json and the README table of the rows so far."""
    slopes = exponents(rows)
    out = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "graph": "generate('layered', n, seed=0)", "accelerators": K,
           "commands": args.commands, "timeout_s": args.timeout,
           "rows": rows, "growth_exponent": slopes}
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    readme = HERE / "README.md"
    head = readme.read_text().split("<!-- table -->")[0] if readme.exists() else ""
    note = (f"\nMachine: {out['machine']}, {out['cpus']} cores, shared; load averages per run are in "
            f"results.json (from {min(r['load_before'] for r in rows):.1f} to "
            f"{max(r['load_after'] for r in rows):.1f} during these runs). Commands: "
            + "; ".join(f"`python -m benchmarks.scale.run {c}`" for c in args.commands) + ".\n")
    sizes = sorted({r["nodes"] for r in rows})
    readme.write_text(head + "<!-- table -->\n" + "\n".join(table(rows, sizes, slopes)) + "\n" + note)


if __name__ == "__main__":
    main()
