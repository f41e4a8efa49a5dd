"""``devplace bound GRAPH -k K [--method M]``: a proven lower bound on the optimal max-load, through
the library's front door (`devplace_lite.solve.bound`)."""

from __future__ import annotations

import argparse

from .. import methods, options, solve
from ..io import load_graph
from . import add_quiet, fmt, print_json, say

HELP = "a proven lower bound on the optimal max-load"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("graph")
    options.add_cluster_args(s, k_required=True)
    s.add_argument("--method", default="best", help=f"one of: {', '.join(sorted(methods.BOUND))}")
    s.add_argument("--time-limit", type=options.SECONDS, metavar="S",
                   help="wall seconds for the whole command (default: the method's own; 10 for best)")
    s.add_argument("--json", action="store_true")
    add_quiet(s)


def run(args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    c, note = options.cluster_from_args(g, args)
    out = solve.bound(g, c, args.method, time_limit=args.time_limit, started=args.started).to_json()
    if note:
        out["clamped"] = note
    if args.json:
        print_json(out)
        return 0
    print(f"{out['method']}: bound {fmt(out['bound'])}  status {out['status']}  {out['seconds']:.3f}s")
    say(note)
    return 0
