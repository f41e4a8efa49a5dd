"""``devplace evaluate GRAPH PLACEMENT [--compare METHOD]``: score any placement under the one cost
model; with ``--compare``, whose split it is and a method's answer on the same cluster beside it."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from .. import options
from ..cost import Evaluation, evaluate
from ..devices import Cluster
from ..graph import Graph
from ..io import load_graph, load_placement, read_json
from . import fmt, print_json, say

HELP = "score a placement under the cost model"


def placement_owner(path: str | os.PathLike) -> str:
    """Whose split a placement file holds, in words: a human expert's (the authors' format with
    ``fpgas``/``cpus`` lists), a method's ``--json`` answer, or a plain node -> device mapping.

    Examples
    --------
    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix="_expert.json", delete=False) as f:
    ...     json.dump({"fpgas": [{"nodes": [1]}], "cpus": []}, f)
    >>> placement_owner(f.name).startswith("a human expert's split")
    True
    """
    obj = read_json(path)
    name = Path(path).name
    if isinstance(obj, dict) and isinstance(obj.get("placement"), dict):
        method = obj.get("method")
        return f"the answer of method {method} ({name})" if isinstance(method, str) else f"a --json answer ({name})"
    if isinstance(obj, dict) and ("fpgas" in obj or "cpus" in obj):
        return f"a human expert's split ({name}, the format of Tarnawski et al. 2020)"
    return f"a node -> device mapping ({name})"


def compare_with(graph: Graph, cluster: Cluster, evaluation: Evaluation, method: str = "dp", *,
                 time_limit: float | None = None) -> dict[str, Any]:
    """Run ``method`` on ``graph`` and ``cluster`` and set its answer beside a scored placement
    (what ``devplace evaluate GRAPH SPLIT --compare METHOD`` prints).

    Returns
    -------
    dict with ``method``, ``objective`` (the evaluator's max load of the method's split, ``None``
    when it found none), ``status``, ``bound``, ``ratio`` (the placement's max load over it:
    above 1, the method's pipeline runs that many times as fast) and ``summary`` (one line).

    Raises
    ------
    UsageError for an unknown method.

    Examples
    --------
    >>> from devplace_lite.generators import layered
    >>> g, c = layered(10, seed=2), Cluster(accelerators=2)
    >>> out = compare_with(g, c, evaluate(g, c, {v.id: "acc0" for v in g.nodes}))
    >>> out["status"], out["ratio"] > 1
    ('optimal', True)
    """
    from ..solve import partition  # only with --compare: plain scoring runs no method

    r = partition(graph, cluster, method, time_limit=time_limit)
    theirs = r.check().max_load if r.assignment is not None else None
    mine = evaluation.max_load
    ratio = mine / theirs if theirs and math.isfinite(theirs) and math.isfinite(mine) else None
    head = f"{method}: max load {'-' if theirs is None else f'{theirs:.6g}'} ({r.status})"
    if ratio is None:
        tail = "no ratio (one of the two has no finite max load)"
    elif ratio > 1:
        tail = f"this split's max load is {ratio:.4f}x that: the {method} split's pipeline runs {ratio:.2f}x as fast"
    else:
        tail = f"this split's max load is {ratio:.4f}x that: it is at least as good as {method}'s"
    return {"method": method, "objective": theirs, "status": r.status, "bound": r.bound, "ratio": ratio,
            "summary": f"{head}; {tail}"}


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
