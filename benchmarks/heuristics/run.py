"""Quality and speed of the chapter-06 heuristics on every testbed graph.

For each graph: every heuristic (``kl``, ``local-search``, ``topo-fill``, ``etf``, ``heft``)
with its objective, CPU time (``time.process_time``, one thread: what the speed target is
measured in, as a shared machine's wall time depends on its load) and wall time (each the best
of three runs on graphs of 1,000+ nodes), the exact DP optimum (`devplace_lite.throughput.dp.dp`, under a time
limit; when the limit hits, its incumbent is only an upper bound) and the best lower bound
the library offers (`devplace_lite.throughput.bounds.best_bound` when it exists, else the closed-form
`combinatorial_bound`); the DP's and the bound's limits are wall time, so a busy machine proves
fewer optima (the load average is recorded per graph). Targets (issue 7): on graphs of 1,000+
nodes each heuristic runs in under 1 s of CPU, and the best of them lands within 10 % of the DP optimum where the DP proves it,
else of the bound. Writes ``results.json`` and the table of ``README.md`` (between markers).

Run: ``python benchmarks/heuristics/run.py`` (about 5 minutes on 2 cores; ``--quick``: the
generated graphs up to 1,000 nodes only).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import sys
import time
from pathlib import Path


from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.io import load_graph, write_json_atomic
from devplace_lite.methods import PARTITION, resolve
from devplace_course.reference import reference_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = (reference_dir() or ROOT.parent / "shared" / "reference" / "msr-dnn-partitioning") / "throughput-inputs"
METHODS = ["kl", "local-search", "topo-fill", "etf", "heft"]
FAMILIES = ["layered", "series_parallel", "skip_chain", "cells"]


def testbed(quick: bool):
    """(group, graph, cluster) for every testbed graph."""
    sizes = [100, 1000] if quick else [100, 1000, 3000]
    for n in sizes:
        for fam in FAMILIES:  # training graphs: n/2 forward nodes and their gradients
            yield "generated", generate(fam, n // 2, seed=0, training=True), Cluster(accelerators=4, cpus=1)
    # dense Erdos-Renyi DAGs (p = 0.3: ~n^2/7 edges, nothing like a DNN) only at 100 nodes
    yield "generated", generate("random", 50, seed=0, training=True), Cluster(accelerators=4, cpus=1)
    if quick:
        return
    for path in sorted((ROOT / "data" / "graphs").glob("*.json")):
        g = load_graph(path)
        yield "zoo", g, Cluster.for_graph(g, accelerators=g.defaults.get("accelerators", 4),
                                          cpus=g.defaults.get("cpus", 1))
    if REFERENCE.is_dir():
        for path in sorted(REFERENCE.glob("*/*.json")):
            g = load_graph(path)
            g.name = f"{path.parent.name}/{g.name}"
            yield "reference", g, Cluster.for_graph(g)


def lower_bound(graph, cluster, time_limit: float) -> tuple[float, str]:
    try:
        from devplace_lite.throughput.bounds import best_bound
    except ImportError:
        from devplace_lite.throughput.bounds.combinatorial import combinatorial_bound

        return float(combinatorial_bound(graph, cluster).bound), "combinatorial_bound"
    b = best_bound(graph, cluster, time_limit=time_limit)
    return float(b.bound), f"best_bound ({b.method})"


def timed(fn, graph, cluster, repeats: int):
    """``(result, best wall seconds, best CPU seconds)`` over ``repeats`` runs."""
    wall = cpu = math.inf
    res = None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        res = fn(graph, cluster)
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return res, wall, cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dp-time-limit", type=float, default=30.0)
    p.add_argument("--bound-time-limit", type=float, default=10.0)
    p.add_argument("--out", default=str(HERE / "results.json"))
    p.add_argument("--readme", default=str(HERE / "README.md"))
    args = p.parse_args(argv)
    from devplace_lite.throughput.dp import dp

    timed(resolve(PARTITION, "kl"), generate("layered", 20), Cluster(accelerators=2), 1)  # imports, caches
    rows = []
    for group, g, c in testbed(args.quick):
        row = {"group": group, "graph": g.name, "nodes": g.n, "edges": g.m, "accelerators": c.k, "cpus": c.l,
               "load": round(os.getloadavg()[0], 2), "methods": {}}
        for m in METHODS:
            r, sec, cpu = timed(resolve(PARTITION, m), g, c, 3 if g.n >= 1000 else 1)
            assert r.objective == r.check().max_load
            row["methods"][m] = {"objective": r.objective, "seconds": sec, "cpu_seconds": cpu, "status": r.status,
                                 "split": r.check().split}
        t, cpu = time.perf_counter(), time.process_time()
        d = dp(g, c, time_limit=args.dp_time_limit)
        row["dp"] = {"objective": d.objective, "status": d.status, "seconds": time.perf_counter() - t,
                     "cpu_seconds": time.process_time() - cpu}
        t = time.perf_counter()
        row["bound"], row["bound_method"] = lower_bound(g, c, args.bound_time_limit)
        row["bound_seconds"] = time.perf_counter() - t
        best_m = min(METHODS, key=lambda m: row["methods"][m]["objective"])
        best = row["methods"][best_m]["objective"]
        ref, ref_kind = ((d.objective, "dp optimum") if d.status == "optimal" else (row["bound"], "bound"))
        row.update(best_method=best_m, best=best, reference=ref, reference_kind=ref_kind,
                   ratio_to_reference=best / ref if ref > 0 else 1.0,
                   ratio_to_bound=best / row["bound"] if row["bound"] > 0 else 1.0,
                   within_10pct=best <= 1.10 * ref * (1 + 1e-12),
                   all_under_1s=all(row["methods"][m]["cpu_seconds"] < 1.0 for m in METHODS))
        rows.append(row)
        print(f"{g.name[:40]:40s} n={g.n:5d} best {best_m:12s} {best:10.3f}  "
              f"ratio {row['ratio_to_reference']:.3f} to {ref_kind}  "
              f"slowest {max(row['methods'][m]['cpu_seconds'] for m in METHODS):.2f}s CPU", flush=True)
    big = [r for r in rows if r["nodes"] >= 1000]
    summary = {
        "graphs": len(rows), "graphs_1000_plus": len(big),
        "under_1s_1000_plus": sum(r["all_under_1s"] for r in big),
        "within_10pct": sum(r["within_10pct"] for r in rows),
        "missed_speed": [(r["graph"], m, round(r["methods"][m]["cpu_seconds"], 3)) for r in big for m in METHODS
                         if r["methods"][m]["cpu_seconds"] >= 1.0],
        "missed_quality": [(r["graph"], round(r["ratio_to_reference"], 4), r["reference_kind"]) for r in rows
                           if not r["within_10pct"]],
        "bound_method": sorted({r["bound_method"] for r in rows}),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": sys.version.split()[0], "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python benchmarks/heuristics/run.py" + (" --quick" if args.quick else ""),
    }
    write_json_atomic(args.out, {"summary": summary, "rows": rows})
    print(summary)
    if not args.quick:
        _write_table(Path(args.readme), rows)
    return 0


def _write_table(readme: Path, rows: list[dict]) -> None:
    """Markdown table: each heuristic's max load over the DP's value (its optimum, or its
    incumbent when the time limit hit), then the best heuristic over the lower bound."""
    head = ("| group | graph | nodes | k+l | " + " | ".join(METHODS)
            + " | DP | DP s | best / bound | within 10 % | slowest heuristic CPU s | load |\n|" + "---|" * (len(METHODS) + 10) + "\n")
    lines = []
    for r in rows:
        dpv = r["dp"]["objective"]
        cells = [f"{r['methods'][m]['objective'] / dpv:.3f}" for m in METHODS]
        slow = max(r["methods"][m]["cpu_seconds"] for m in METHODS)
        status = "optimal" if r["dp"]["status"] == "optimal" else "time limit"
        lines.append(f"| {r['group']} | {r['graph']} | {r['nodes']} | {r['accelerators']}+{r['cpus']} | "
                     + " | ".join(cells)
                     + f" | {status} | {r['dp']['seconds']:.1f} | {r['ratio_to_bound']:.3f}"
                     + f" | {'yes' if r['within_10pct'] else 'no'} | {slow:.2f} | {r['load']} |")
    table = head + "\n".join(lines) + "\n"
    text = readme.read_text() if readme.exists() else "<!-- table:start -->\n<!-- table:end -->\n"
    text = re.sub(r"<!-- table:start -->.*<!-- table:end -->",
                  lambda _: f"<!-- table:start -->\n{table}<!-- table:end -->", text, flags=re.S)
    readme.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
