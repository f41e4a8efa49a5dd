"""``devplace evaluate GRAPH PLACEMENT [--compare METHOD]``: score any placement under the one cost
model; with ``--compare``, whose split it is and a method's answer on the same cluster beside it."""

from __future__ import annotations

import argparse

from .. import options
from ..cost import evaluate
from ..devices import Cluster
from ..io import load_graph, load_placement
from . import fmt, print_json, say

HELP = "score a placement under the cost model"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("graph")
    s.add_argument("placement")
    options.add_cluster_args(s)
    s.add_argument("--compare", metavar="METHOD", help="also run this partition method (e.g. dp, the proven optimum) "
                   "on the same cluster and print the placement's max load against it")
    s.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    asked = Cluster.for_graph(g, args.accelerators, args.cpus, args.memory)
    placement = load_placement(args.placement, g, asked)
    # the names are checked against the cluster asked for; clamping keeps every one of them
    used = [asked.device_index(dev) for dev in dict.fromkeys(placement.values())]  # each name once, in file order
    keep = (max((d + 1 for d in used if d < asked.k), default=0),
            max((d - asked.k + 1 for d in used if d >= asked.k), default=0))
    c, note = options.clamp_cluster(asked, g.n, keep)
    ev = evaluate(g, c, placement)
    out = ev.to_dict()
    if note:
        out["clamped"] = note
    if args.compare:  # whose split it is, and the same cluster's answer of another method beside it
        from ..course.experts import compare_with, placement_owner

        out["split_of"] = placement_owner(args.placement)
        out["compare"] = compare_with(g, c, ev, args.compare)
    if args.json:
        print_json(out)
        return 0
    if args.compare:
        print(f"placement: {out['split_of']}")
    print(f"max load {fmt(out['objective'])} on {ev.bottleneck}; split: {ev.split}; "
          f"{'feasible' if ev.feasible else 'INFEASIBLE'}")
    for d, rec in out["devices"].items():
        print(f"  {d:6s} load {fmt(rec['load'])}  compute {fmt(rec['compute'])}  comm {fmt(rec['comm'])}  memory {rec['memory']:.0f}")
    for v in ev.violations:
        print(f"  violation: {v}")
    if args.compare:
        print(out["compare"]["summary"])
    say(note)
    return 0
