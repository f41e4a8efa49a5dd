"""Evaluator speed: how long one placement takes to score, on the largest published workload
and on a 10,000-node generated graph. Writes results.json and the table in README.md.

    python -m benchmarks.evaluator.run
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np

from devplace_lite.throughput.baselines import balance_by_time
from devplace_lite.cost import device_loads, evaluate
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.io import load_graph
from devplace_course.reference import reference_dir

HERE = Path(__file__).parent
REFERENCE = (reference_dir() or HERE.parent.parent.parent / "shared/reference/msr-dnn-partitioning") / "throughput-inputs"


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def cases():
    big = REFERENCE / "OperatorGraphs/bert_L-12_training.json"
    if big.exists():
        yield "bert_L-12_training (authors', largest)", load_graph(big), Cluster(accelerators=6, cpus=1)
    for fam in ("layered", "cells"):
        yield f"{fam} 10,000 nodes (generated)", generate(fam, 10_000, seed=0), Cluster(accelerators=8, cpus=1)
        yield (f"{fam} 10,000 + backward (generated)", generate(fam, 5_000, seed=0, training=True),
               Cluster(accelerators=8, cpus=1))


def main() -> None:
    rows = []
    for name, g, c in cases():
        chain = balance_by_time(g, c).assignment
        rand = np.random.default_rng(0).integers(0, c.size, g.n)
        rows.append({
            "graph": name, "nodes": g.n, "edges": g.m, "devices": c.size,
            "loads_ms": 1e3 * timed(lambda: device_loads(g, c, chain), 20),
            "evaluate_chain_ms": 1e3 * timed(lambda: evaluate(g, c, chain), 5),
            "evaluate_random_ms": 1e3 * timed(lambda: evaluate(g, c, rand), 5),
        })
        print(rows[-1])
    out = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
           "command": "python -m benchmarks.evaluator.run", "rows": rows}
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    table = ["| graph | nodes | edges | devices | loads (ms) | evaluate, chain split (ms) | evaluate, random split (ms) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    table += [f"| {r['graph']} | {r['nodes']:,} | {r['edges']:,} | {r['devices']} | {r['loads_ms']:.2f} | "
              f"{r['evaluate_chain_ms']:.2f} | {r['evaluate_random_ms']:.2f} |" for r in rows]
    readme = HERE / "README.md"
    head = readme.read_text().split("<!-- table -->")[0] if readme.exists() else ""
    readme.write_text(head + "<!-- table -->\n" + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
