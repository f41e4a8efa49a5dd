"""Speed of the exact throughput DP (`devplace_lite.throughput.dp`) on the authors' workloads and on the
project's own graphs, and the authors' C++ program on theirs, measured in the same run. Writes
results.json and the table in README.md.

    python -m benchmarks.dp.run                            # every workload, one fresh process each
    python -m benchmarks.dp.run --quick                    # skip the Inception-v3 graphs
    python -m benchmarks.dp.run --authors BINARY           # and their DP on their files, interleaved
    python -m benchmarks.dp.run --baseline DIR             # and another checkout's DP, interleaved

``--baseline`` names a checkout of an earlier commit (``git worktree add --detach DIR main``,
with its compiled kernels: ``python -m devplace_lite.compiled`` there, or a copy of its
``_aot*.so``): each workload is also solved by that checkout's library, in its own fresh
process right after ours, and the table puts its figures beside ours.

Each workload runs in its own process so that its peak resident memory (``ru_maxrss``) is its
own; the process first solves a tiny graph so the compiled kernel is loaded (compile time is not
counted, as the C++ build time is not). Times are CPU seconds of the one thread that runs the
DP (``time.process_time``) and wall seconds, with the load average before each workload; the
authors' program (built as `benchmarks.cold_start.run` says) runs right after ours on the same
file, and the ratio is our DP's CPU time over their whole process's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.library import module

reference_dir = module("course.reference").reference_dir

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
REFERENCE = (reference_dir() or ROOT.parent / "shared/reference/msr-dnn-partitioning") / "throughput-inputs"
ZOO = ROOT / "data/graphs"

# The authors' C++ DP on a 2-vCPU machine as published (REFERENCES.md [T20]): seconds, peak GB;
# None = did not finish in 900 s (10.8 GB and growing). Issue 4's targets derive from them.
CPP = {
    "LayerGraphs/gnmt_inference": (15.0, 0.55), "LayerGraphs/gnmt_training": (31.8, 0.55),
    "LayerGraphs/inceptionv3_inference": (None, 10.8), "LayerGraphs/inceptionv3_training": (None, 10.8),
    "OperatorGraphs/bert_l-12_inference": (16.1, 0.13), "OperatorGraphs/bert_L-12_training": (36.7, 0.14),
    "OperatorGraphs/bert_l-6_training": (21.0, 0.16),
    "LayerGraphs/resnet50_inference": (0.3, None), "LayerGraphs/resnet50_training": (0.3, None),
}
# Targets of the project (issue 4): seconds and GB for proven optimality on 2 cores.
TARGET = {name: (sec, 2.0) for name, (sec, _) in CPP.items() if sec is not None}
TARGET["LayerGraphs/inceptionv3_inference"] = (120.0, 4.0)
TARGET["LayerGraphs/inceptionv3_training"] = (120.0, 4.0)
# Issue 19: CPU seconds of the DP (what a quiet machine's wall time approaches).
TARGET_CPU = {"LayerGraphs/inceptionv3_training": 4.0, "LayerGraphs/inceptionv3_inference": 2.0}
# Issue 29: visited pairs per CPU second on Inception-v3, one thread (millions).
TARGET_RATE = 50.0
AUTHORS_TIMEOUT = 60.0
ZOO_CLUSTER = {"accelerators": 6, "cpus": 1}  # zoo files carry only a memory cap


def workloads(quick: bool) -> list[tuple[str, Path]]:
    out = []
    if REFERENCE.is_dir():
        for p in sorted(REFERENCE.glob("*/*.json")):
            name = f"{p.parent.name}/{p.stem}"
            if not (quick and "inception" in name):
                out.append((name, p))
    if ZOO.is_dir():
        for p in sorted(ZOO.glob("*.json")):
            if not (quick and "inception" in p.stem):
                out.append((f"zoo/{p.stem}", p))
    return out


def measure(path: Path, zoo: bool) -> dict:
    """Run in a fresh process: solve one workload and report sizes, times and peak memory.

    Also the CPU time inside ``devplace_lite.throughput.dp._solve`` (the kernel's calls, the table
    allocation and the back-pointer walk; not the unit graph, the ideals or the upper bound).
    """
    from devplace_lite.devices import Cluster
    from devplace_lite.generators import generate
    from devplace_lite.io import load_graph
    from devplace_lite.units import unit_graph

    dp_module, ideals_module = module("throughput.dp"), module("throughput.ideals")
    _kernel, dp, linear, nested_pairs, pipedream = (getattr(dp_module, n) for n in
                                                    ("_kernel", "dp", "linear", "nested_pairs", "pipedream"))
    enumerate_ideals, width = ideals_module.enumerate_ideals, ideals_module.width

    dp(generate("layered", 8, seed=0), Cluster(2, 1))  # load the compiled kernel
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GB (ru_maxrss is KiB)
    g = load_graph(path)
    c = Cluster.for_graph(g, **(ZOO_CLUSTER if zoo else {}))
    solve, kernel_cpu = dp_module._solve, [0.0]

    def timed(*args, **kwargs):
        t = time.process_time()
        try:
            return solve(*args, **kwargs)
        finally:
            kernel_cpu[0] += time.process_time() - t

    dp_module._solve = timed
    load = os.getloadavg()[0]
    t0, cpu0 = time.perf_counter(), time.process_time()
    r = dp(g, c)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    dp_module._solve = solve
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t0 = time.perf_counter()
    lin = linear(g, c)
    lin_s = time.perf_counter() - t0
    pd = pipedream(g, c)
    poset = unit_graph(g, fold=True)
    ideals = enumerate_ideals(poset)
    return {
        "nodes": g.n, "training": g.is_training, "k": c.k, "l": c.l,
        "memory_cap": c.memory if c.memory != float("inf") else None,
        "units": poset.size, "width": width(poset), "ideals": len(ideals), "nested_pairs": nested_pairs(ideals),
        "pairs_visited": r.extra["pairs"], "seconds": seconds, "cpu_seconds": cpu, "load": load,
        "pairs_per_cpu_second": r.extra["pairs"] / max(cpu, 1e-9), "kernel": _kernel.mode,
        "kernel_cpu_seconds": kernel_cpu[0], "pairs_per_kernel_cpu_second": r.extra["pairs"] / max(kernel_cpu[0], 1e-9),
        "peak_gb": peak, "base_gb": rss_before,
        "objective": r.objective, "status": r.status, "check": r.check().max_load,
        "linear": lin.objective, "linear_seconds": lin_s, "pipedream": pd.objective,
    }


def table(rows: list[dict]) -> str:
    prev = any("previous" in r for r in rows)
    head = ["workload", "k, l", "units", "width", "ideals", "nested pairs", "pairs visited", "DP s", "DP CPU s",
            "M pairs / CPU s", "kernel CPU s", "M pairs / kernel CPU s"]
    if prev:
        head += ["previous M pairs / CPU s", "previous M pairs / kernel CPU s", "**CPU speed-up**",
                 "**kernel speed-up**"]
    head += ["peak GB", "authors CPU s", "**DP CPU / authors**", "load", "objective", "status", "linear / DP",
             "PipeDream / DP"]
    right = {"workload", "k, l", "status"}
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" if h in right else "---:" for h in head) + " |"]
    for r in rows:
        a = r.get("authors")
        if a is None:
            their, ratio = "-", "-"
        elif a["status"] == "ok":
            their, ratio = f"{a['cpu']:.2f}", f"{r['cpu_seconds'] / max(a['cpu'], 1e-3):.3f}"
        else:
            their, ratio = f"> {a['cpu']:.0f} ({a['status']})", f"< {r['cpu_seconds'] / max(a['cpu'], 1e-3):.3f}"
        lin = r["linear"] / r["objective"] if r["linear"] else float("nan")
        pd = r["pipedream"] / r["objective"] if r["pipedream"] else float("nan")
        cells = [r["name"], f"{r['k']}, {r['l']}", f"{r['units']}", f"{r['width']}", f"{r['ideals']:,}",
                 f"{r['nested_pairs']:,}", f"{r['pairs_visited']:,}", f"{r['seconds']:.2f}", f"{r['cpu_seconds']:.2f}",
                 f"{r['pairs_per_cpu_second'] / 1e6:.1f}", f"{r['kernel_cpu_seconds']:.2f}",
                 f"{r['pairs_per_kernel_cpu_second'] / 1e6:.1f}"]
        if prev:
            p = r.get("previous")
            if p is None:
                cells += ["-"] * 4
            else:
                cells += [f"{p['pairs_per_cpu_second'] / 1e6:.1f}", f"{p['pairs_per_kernel_cpu_second'] / 1e6:.1f}",
                          f"{p['cpu_seconds'] / max(r['cpu_seconds'], 1e-9):.2f}",
                          f"{p['kernel_cpu_seconds'] / max(r['kernel_cpu_seconds'], 1e-9):.2f}"]
        cells += [f"{r['peak_gb']:.2f}", their, ratio, f"{r['load']:.1f}", f"{r['objective']:.4f}", r["status"],
                  f"{lin:.3f}", f"{pd:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> str:
    by = {r["name"]: r for r in rows}
    out = []
    for name, (sec, gb) in TARGET.items():
        r = by.get(name)
        if r is None:
            out.append(f"- {name}: not measured in this run")
            continue
        ok = r["status"] == "optimal" and r["seconds"] <= sec and r["peak_gb"] <= gb
        out.append(f"- {name}: {'met' if ok else 'MISSED'} ({r['status']} in {r['seconds']:.2f} s, "
                   f"peak {r['peak_gb']:.2f} GB; target {sec:g} s, {gb:g} GB)")
    for name, sec in TARGET_CPU.items():
        r = by.get(name)
        if r is not None:
            ok = r["status"] == "optimal" and r["cpu_seconds"] <= sec
            out.append(f"- {name} (issue 19): {'met' if ok else 'MISSED'} ({r['status']} in {r['cpu_seconds']:.2f} s "
                       f"of CPU; target {sec:g} s on a quiet machine)")
    for name in ("LayerGraphs/inceptionv3_inference", "LayerGraphs/inceptionv3_training"):
        r = by.get(name)
        if r is not None:  # issue 29: the kernel's memory traffic
            rate, kernel = r["pairs_per_cpu_second"] / 1e6, r["pairs_per_kernel_cpu_second"] / 1e6
            out.append(f"- {name} (issue 29): {'met' if rate >= TARGET_RATE else 'MISSED'} ({rate:.1f} M visited "
                       f"pairs per CPU second of the whole DP, {kernel:.1f} M per CPU second of the kernel; "
                       f"target {TARGET_RATE:g} M on one thread)")
            p = r.get("previous")
            if p is not None and p["objective"] != r["objective"]:
                out.append(f"- {name}: the previous checkout's optimum differs ({p['objective']!r} against "
                           f"{r['objective']!r})")
    return "\n".join(out)


def _describe(checkout: Path) -> str:
    """The commit a checkout is at (for the record of a baseline run)."""
    out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return out.stdout.strip()[:120] or str(checkout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the Inception-v3 graphs")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--zoo", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--authors", help="the authors' compiled DP: run it on their files in the same run")
    ap.add_argument("--baseline", help="a checkout of an earlier commit: run its DP on every workload in the same run")
    ap.add_argument("--only", help="run only the workloads whose name contains this text")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(Path(args.one), args.zoo)))
        return
    rows = []
    load_before = os.getloadavg()
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline is not None and not (baseline / "devplace_lite" / "__init__.py").is_file():
        ap.error(f"--baseline {args.baseline}: not a checkout of devplace_lite")
    for name, path in workloads(args.quick):
        if args.only and args.only not in name:
            continue
        flags = ["--one", str(path)] + (["--zoo"] if name.startswith("zoo/") else [])
        out = subprocess.run([sys.executable, "-m", "benchmarks.dp.run", *flags], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        row = {"name": name, **json.loads(out.stdout.strip().splitlines()[-1])}
        if baseline is not None:  # this file's measure, that checkout's library (first on the path)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(baseline), str(ROOT)])}  # its library, our script
            out = subprocess.run([sys.executable, "-m", "benchmarks.dp.run", *flags], cwd=baseline, env=env,
                                 capture_output=True, text=True, check=True)
            row["previous"] = json.loads(out.stdout.strip().splitlines()[-1])
        if args.authors and not name.startswith("zoo/"):
            from benchmarks.cold_start.run import theirs

            row["authors"] = theirs(Path(args.authors), path, AUTHORS_TIMEOUT)
        rows.append(row)
        print(f"{name}: {row['ideals']:,} ideals, {row['seconds']:.2f} s, {row['cpu_seconds']:.2f} s CPU, "
              f"{row['peak_gb']:.2f} GB, {row['objective']:.4f} {row['status']}"
              + (f"; authors {row['authors']['cpu']:.2f} s CPU ({row['authors']['status']})" if "authors" in row else "")
              + (f"; previous {row['previous']['cpu_seconds']:.2f} s CPU, {row['previous']['objective']:.4f}"
                 if "previous" in row else ""),
              flush=True)
    result = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "python": platform.python_version(), "command": "python -m benchmarks.dp.run " + " ".join(argv if argv is not None else sys.argv[1:]),
              "load_average_before_after": [load_before[0], os.getloadavg()[0]],
              "baseline": None if baseline is None else _describe(baseline),
              "date": time.strftime("%Y-%m-%d"), "rows": rows}
    from devplace_lite.io import write_json_atomic

    write_json_atomic(HERE / "results.json", result)
    readme = HERE / "README.md"
    head = readme.read_text().split("<!-- table -->")[0] if readme.exists() else ""
    from devplace_lite.files import write_text_atomic

    base = "" if baseline is None else (f"*previous* columns: the checkout at `{result['baseline']}`, each workload "
                                        f"solved right after ours in this run. ")
    write_text_atomic(readme, head + "<!-- table -->\n" + table(rows) + "\n\nTargets (issues 4, 19, 29), from this run:\n\n"
                      + verdicts(rows) + f"\n\n{base}Command: `{result['command']}`. Load average (1 min) before "
                      f"and after the run: {load_before[0]:.1f}, {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.\n")


if __name__ == "__main__":
    main()
