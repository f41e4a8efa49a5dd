"""How close do the lower bounds come to the best split found? (chapter 05, issue 6)

For every testbed graph and k in {2, 4, 8, 16, 32, 64}, on k accelerators without CPU cores or
memory caps (the inference-style model of Archer et al., 2024):

* best-found: the least max-load of the BRKGA order search (`devplace_lite.throughput.brkga`, 10 s), the
  exact ideal DP (`devplace_lite.throughput.dp`, when the graph has at most 50,000 ideals, 30 s), the
  exact MIP's incumbent and the upper bound `best_bound` saw;
* every lower bound of `devplace_lite.throughput.bounds`, each with its own time limit: ``classic``
  (``max(sum p / k, max p)``), ``combinatorial``, ``stage-relax`` (20 s), ``pinned`` (10 s),
  ``reach`` (30 s), ``exact-mip`` (20 s), ``best-nodp`` (`best_bound` without the DP, 60 s)
  and ``best`` (60 s). When the combinatorial bound already meets the best split found,
  every stronger bound equals it: those are recorded (status ``tight``, 0 s) without running.

Writes ``results.json`` (one record per instance, resumable), the table of ``README.md``
(geometric mean of bound / best-found per method and k, between markers) and ``ratio.png``.
Target (issue 19): geometric mean of ``best`` at k = 16 of at least 0.98, no bound over 60 s.

Run: ``python benchmarks/bounds/run.py`` (full testbed, about 2 hours on one core; resumes
where it stopped unless ``--fresh``), ``--quick`` (generated graphs only), ``--workers N``,
``--rerun best,best-nodp [--k 16] [--graph NAME]`` (those methods again over the stored
records, the other rows kept; each record notes when and at what load; the README says which
columns were rerun).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from devplace_lite import generators
from devplace_lite.throughput.bounds import best_bound, classic_bound, combinatorial_bound, exact_mip, pinned, reach, stage_relax
from devplace_lite.throughput.brkga import brkga
from devplace_lite.devices import Cluster
from devplace_lite.io import load_graph, read_json, write_json_atomic
from devplace_course.reference import reference_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = reference_dir("throughput-inputs")  # None when the authors' workloads are not here
KS = [2, 4, 8, 16, 32, 64]
METHODS = ["classic", "combinatorial", "stage-relax", "pinned", "reach", "exact-mip", "best-nodp", "best"]
LIMITS = {"stage-relax": 20.0, "pinned": 10.0, "reach": 30.0, "exact-mip": 20.0, "best-nodp": 60.0, "best": 60.0}

#: Generated graphs of the testbed: (label, family function, n, keyword arguments); wide ones
#: (many ideals) are where the DP cannot go and the bounds have to do the work.
GENERATED = [
    ("layered-300", generators.layered, 300, {}),
    ("layered-wide-150", generators.layered, 150, {"width": 6, "density": 0.4}),
    ("series_parallel-300", generators.series_parallel, 300, {}),
    ("skip_chain-300", generators.skip_chain, 300, {}),
    ("cells-200", generators.cells, 200, {}),
    ("random-sparse-100", generators.random_dag, 100, {"p": 0.04}),
]
QUICK = [
    ("layered-60", generators.layered, 60, {}),
    ("layered-wide-60", generators.layered, 60, {"width": 6, "density": 0.4}),
    ("cells-60", generators.cells, 60, {}),
    ("random-sparse-50", generators.random_dag, 50, {"p": 0.06}),
]


def testbed(quick: bool) -> list[tuple[str, str, object]]:
    """(group, name, source): source is a path or a generator spec."""
    out: list[tuple[str, str, object]] = [("generated", label, (label, n, kw)) for label, _, n, kw in
                                          (QUICK if quick else GENERATED)]
    if quick:
        return out
    # the zoo's generated graphs repeat ours, and its ResNet-50 has the same nodes at both granularities
    for path in sorted((ROOT / "data" / "graphs").glob("*_inference.json")):
        if not path.name.startswith("gen_") and path.name != "resnet50_op_inference.json":
            out.append(("zoo", path.stem, str(path)))
    if REFERENCE is not None:
        for path in sorted(REFERENCE.glob("*/*_inference.json")):
            out.append(("reference", f"msr/{path.parent.name}/{path.stem}", str(path)))
    return out


def load(source) -> "generators.Graph":
    if isinstance(source, str):
        return load_graph(source)
    label, n, kw = source
    fn = {lab: f for lab, f, _, _ in GENERATED + QUICK}[label]
    return fn(n, seed=0, **kw)


def run_instance(group: str, name: str, source, k: int) -> dict:
    """Every bound and the best split found for one graph and k."""
    g = load(source)
    c = Cluster(accelerators=k)
    rec: dict = {"group": group, "graph": name, "n": g.n, "k": k, "bounds": {}, "uppers": {}}
    t = time.perf_counter()
    r = brkga(g, c, time_limit=10.0, seed=0)
    rec["uppers"]["brkga"] = {"value": r.objective, "seconds": round(time.perf_counter() - t, 3)}
    from devplace_lite.throughput.dp import dp
    from devplace_lite.throughput.ideals import count_ideals

    ideals = count_ideals(g, 50_000)
    rec["ideals"] = ideals
    rec["dp_exact"] = False
    if ideals is not None:
        t = time.perf_counter()
        d = dp(g, c, time_limit=30.0, limit=50_000)
        rec["uppers"]["dp"] = {"value": d.objective, "seconds": round(time.perf_counter() - t, 3),
                               "status": d.status}
        rec["dp_exact"] = d.status == "optimal"
    calls = bound_calls(g, c)
    for method in METHODS:
        measure(rec, method, calls[method])
    rec["best_found"] = min(u["value"] for u in rec["uppers"].values() if u.get("value") is not None)
    return rec


def bound_calls(g, c: Cluster) -> dict:
    """Each method of the table as a call with its time limit."""
    return {
        "classic": lambda: classic_bound(g, c),
        "combinatorial": lambda: combinatorial_bound(g, c),
        "stage-relax": lambda: stage_relax(g, c, time_limit=LIMITS["stage-relax"]),
        "pinned": lambda: pinned(g, c, time_limit=LIMITS["pinned"]),
        "reach": lambda: reach(g, c, time_limit=LIMITS["reach"]),
        "exact-mip": lambda: exact_mip(g, c, time_limit=LIMITS["exact-mip"]),
        "best-nodp": lambda: best_bound(g, c, time_limit=LIMITS["best-nodp"], use_dp=False),
        "best": lambda: best_bound(g, c, time_limit=LIMITS["best"]),
    }


def measure(rec: dict, method: str, call) -> None:
    """Run one method into ``rec`` (its bound, and the split it found, if any, as an upper)."""
    rec["uppers"].pop(method, None)  # a rerun replaces what the method found before
    found = [u["value"] for u in rec["uppers"].values() if u.get("value") is not None]
    tight = bool(found) and rec["bounds"].get("combinatorial", {}).get("value", -1) >= min(found) * (1 - 1e-9)
    if tight and method not in ("classic", "combinatorial"):
        # a bound between a tight bound and the optimum equals both: record, do not run
        rec["bounds"][method] = {**rec["bounds"]["combinatorial"], "seconds": 0.0, "status": "tight"}
        return
    t = time.perf_counter()
    b = call()
    rec["bounds"][method] = {"value": b.bound, "seconds": round(time.perf_counter() - t, 3), "status": b.status}
    if method == "exact-mip" and b.extra.get("objective") is not None:
        rec["uppers"]["exact-mip"] = {"value": b.extra["objective"]}
    if method.startswith("best") and b.extra.get("upper") is not None:
        rec["uppers"][method] = {"value": b.extra["upper"]}


def rerun_instance(rec: dict, source, methods: list[str]) -> dict:
    """``rec`` with ``methods`` run again (in the table's order); the other rows are kept."""
    g = load(source)
    calls = bound_calls(g, Cluster(accelerators=rec["k"]))
    for method in (m for m in METHODS if m in methods):
        measure(rec, method, calls[method])
    rec["best_found"] = min(u["value"] for u in rec["uppers"].values() if u.get("value") is not None)
    when = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": round(os.getloadavg()[0], 1)}
    rec.setdefault("reruns", {}).update({m: when for m in methods})
    return rec


def geomean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.exp(np.mean(np.log(xs)))) if xs else math.nan


def summarize(records: list[dict]) -> dict:
    """Per method and k: geometric mean of bound / best-found, the worst ratio, the slowest run."""
    out: dict = {}
    for method in METHODS:
        row = {}
        for k in KS:
            recs = [r for r in records if r["k"] == k]
            ratios = [min(r["bounds"][method]["value"], r["best_found"]) / r["best_found"] for r in recs]
            row[str(k)] = {"geomean": geomean(ratios), "min": min(ratios) if ratios else math.nan,
                           "max_seconds": max((r["bounds"][method]["seconds"] for r in recs), default=math.nan),
                           "instances": len(recs)}
        out[method] = row
    over = [(r["graph"], r["k"], m) for r in records for m in METHODS
            if r["bounds"][m]["value"] > r["best_found"] * (1 + 1e-6)]
    return {"table": out, "bound_above_best_found": over}


def readme_table(summary: dict, records: list[dict]) -> str:
    t = summary["table"]
    lines = ["| method | " + " | ".join(f"k={k}" for k in KS) + " | slowest (s) |",
             "| --- | " + " | ".join("---:" for _ in KS) + " | ---: |"]
    for m in METHODS:
        cells = [f"{t[m][str(k)]['geomean']:.4f}" for k in KS]
        slow = max(t[m][str(k)]["max_seconds"] for k in KS)
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {slow:.1f} |")
    lines.append("| worst instance, best | " + " | ".join(f"{t['best'][str(k)]['min']:.4f}" for k in KS) + " | |")
    lines.append("| worst instance, best-nodp | "
                 + " | ".join(f"{t['best-nodp'][str(k)]['min']:.4f}" for k in KS) + " | |")
    n = {k: sum(r["k"] == k for r in records) for k in KS}
    exact = {k: sum(r["k"] == k and r["dp_exact"] for r in records) for k in KS}
    lines.append("| instances (DP exact) | " + " | ".join(f"{n[k]} ({exact[k]})" for k in KS) + " | |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from devplace_lite.plot import use_style

    use_style()
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in METHODS:
        ax.plot(KS, [summary["table"][m][str(k)]["geomean"] for k in KS], marker="o", label=m)
    ax.set_xscale("log", base=2)
    ax.set_xticks(KS, [str(k) for k in KS])
    ax.set_xlabel("k (accelerators)")
    ax.set_ylabel("geometric mean of bound / best found")
    ax.axhline(0.95, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rerun_note(records: list[dict]) -> str:
    """Which methods were rerun over the stored records, when, and at what load."""
    runs: dict[str, list[dict]] = {}
    for r in records:
        for m, when in r.get("reruns", {}).items():
            runs.setdefault(m, []).append(when)
    notes = []
    for m in (m for m in METHODS if m in runs):
        w = runs[m]
        loads = [x["load"] for x in w]
        notes.append(f"`{m}` rerun on {len(w)} instances ({min(x['at'] for x in w)} to {max(x['at'] for x in w)}, "
                     f"one-minute load {min(loads):.1f} to {max(loads):.1f})")
    return (" Reruns on the code of that date (`--rerun`), the other rows kept: " + "; ".join(notes) + ".") if notes else ""


def write_readme(summary: dict, records: list[dict], seconds: float, quick: bool) -> None:
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else "# Lower bounds: bound / best-found\n\n<!-- table -->\n<!-- /table -->\n"
    graphs = sorted({r["graph"] for r in records})
    block = (f"<!-- table -->\n{readme_table(summary, records)}\n\n"
             f"{len(graphs)} graphs x {len(KS)} values of k{' (--quick)' if quick else ''}; "
             f"{seconds / 60:.0f} min wall on {platform.machine()} ({platform.python_version()}), one-minute load "
             f"average {os.getloadavg()[0]:.1f} at the end (the time limits are wall time: a busy machine proves less). "
             f"Bounds above best-found (bugs if any): {len(summary['bound_above_best_found'])}."
             f"{rerun_note(records)}\n<!-- /table -->")
    text = re.sub(r"<!-- table -->.*<!-- /table -->", lambda _: block, text, flags=re.S)
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small generated testbed only")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--fresh", action="store_true", help="ignore results.json and start over")
    ap.add_argument("--rerun", type=lambda v: v.split(","), metavar="METHOD[,METHOD]",
                    help="run these methods again over the stored records, keeping the other rows")
    ap.add_argument("--k", type=lambda v: [int(x) for x in v.split(",")], metavar="K[,K]",
                    help="with --rerun: only the records of these k")
    ap.add_argument("--graph", type=lambda v: v.split(","), metavar="NAME[,NAME]",
                    help="with --rerun: only the records of these graphs")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.rerun or []) - set(METHODS))
    if unknown or ((args.k or args.graph) and not args.rerun):
        ap.error(f"unknown method {unknown[0]!r} (expected one of {', '.join(METHODS)})" if unknown
                 else "--k and --graph apply to --rerun")
    out = HERE / ("results-quick.json" if args.quick else "results.json")
    records: list[dict] = [] if args.fresh or not out.exists() else read_json(out)["records"]
    sources = {name: (grp, src) for grp, name, src in testbed(args.quick)}
    if args.rerun:
        # slowest first: the long ones overlap the short ones when there are workers to spare
        jobs = sorted((r for r in records if r["graph"] in sources and (not args.k or r["k"] in args.k)
                       and (not args.graph or r["graph"] in args.graph)),
                      key=lambda r: -sum(r["bounds"][m]["seconds"] for m in args.rerun))
        records = [r for r in records if r not in jobs]
        todo = [(rerun_instance, (r, sources[r["graph"]][1], args.rerun)) for r in jobs]
    else:
        done = {(r["graph"], r["k"]) for r in records}
        todo = [(run_instance, (grp, name, src, k)) for name, (grp, src) in sources.items() for k in KS
                if (name, k) not in done]
    t0 = time.perf_counter()

    def save() -> None:
        records.sort(key=lambda r: (r["group"], r["graph"], r["k"]))
        write_json_atomic(out, {"ks": KS, "methods": METHODS, "limits": LIMITS, "records": records,
                                "summary": summarize(records)})

    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {pool.submit(fn, *a): (fn, a) for fn, a in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            rec = fut.result()
            records.append(rec)
            if args.rerun:  # until every rerun is in, the saved records are the new ones plus the rest
                waiting = [a[0] for f, (_, a) in futures.items() if not f.done()]
                write_json_atomic(out, {"ks": KS, "methods": METHODS, "limits": LIMITS,
                                        "records": sorted(records + waiting, key=lambda r: (r["group"], r["graph"], r["k"])),
                                        "summary": summarize(records + waiting)})
            else:
                save()
            best = rec["bounds"]["best"]["value"] / rec["best_found"]
            print(f"[{i}/{len(todo)}] {rec['graph']} k={rec['k']}: best {best:.4f} "
                  f"nodp {rec['bounds']['best-nodp']['value'] / rec['best_found']:.4f} "
                  f"({', '.join(m + ' ' + str(rec['bounds'][m]['seconds']) + ' s' for m in args.rerun or ['best'])})",
                  flush=True)
    save()
    summary = summarize(records)
    if not args.quick:
        write_readme(summary, records, time.perf_counter() - t0, args.quick)
        plot(summary, HERE / "ratio.png")
    print(readme_table(summary, records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
