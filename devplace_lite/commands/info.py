"""``devplace info GRAPH``: sizes, total work, ideal count and width of a graph (sizes and times
with their units in text; numbers alone with ``--json``)."""

from __future__ import annotations

import argparse

import numpy as np

from .. import options
from ..io import load_graph
from . import print_json, size

HELP = "sizes, total work, ideal count and width of a graph"
#: Largest graph whose width ``info`` computes (a max-flow: 33 s of 66 at 10^6 nodes).
WIDTH_NODES = 250_000


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("graph")
    s.add_argument("--limit", type=options.IDEAL_LIMIT, default=100_000,
                   help="stop counting ideals past this many (1..10^8, default 100000)")
    s.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ..throughput.ideals import count_ideals, width

    g = load_graph(args.graph)
    ideals = count_ideals(g, limit=args.limit)
    info = {
        "name": g.name, "nodes": g.n, "edges": g.m,
        "forward_nodes": int((~g.backward).sum()), "backward_nodes": int(g.backward.sum()),
        "units": int(g.units.max()) + 1 if g.n else 0,
        "total_acc_work": float(g.p_acc.sum()), "total_cpu_work": float(np.nansum(g.p_cpu)),
        "memory": float(g.memory.sum()), "unsupported": int((~g.supported).sum()),
        "defaults": g.defaults, "ideals": ideals, "ideal_limit": args.limit,
        # the max-flow behind the width took half of info's minute at 10^6 nodes, and a width
        # matters for the exact methods, which stop long before that size
        "width": width(g) if g.n <= WIDTH_NODES else None,
    }
    if args.json:
        print_json(info)
        return 0
    for key, value in info.items():
        if key == "ideals" and value is None:
            value = f"> {args.limit}"
        if key == "width" and value is None:
            value = f"not computed past {WIDTH_NODES:,} nodes"
        if key in ("total_acc_work", "total_cpu_work"):
            value = f"{value:,.3f} ms"
        if key == "memory":
            value = size(value)
        if key == "defaults":  # the file's cluster, with its memory cap in bytes as a size
            value = ", ".join(f"{k} {size(v) if k == 'memory' else v}" for k, v in value.items()) or "none"
        if key != "ideal_limit":
            print(f"{key:16s} {value}")
    return 0
