"""What ``devplace partition`` and ``devplace latency`` share: their options and their answer, both
through the library's front door (`devplace_lite.solve`: budget, certificate, status)."""

from __future__ import annotations

import argparse

from .. import methods, options, solve
from ..io import load_graph
from . import add_quiet, emit, fmt, say


def add_arguments(s: argparse.ArgumentParser, registry: dict[str, methods.Method]) -> None:
    s.add_argument("graph")
    s.add_argument("--method", required=True, help=f"one of: {', '.join(sorted(registry)) or '(none yet)'}")
    options.add_cluster_args(s)
    s.add_argument("--time-limit", type=options.SECONDS, metavar="S",
                   help="wall seconds for the whole command: loading, the method and the certifying bound "
                        "(a solver stopped by it returns its incumbent, bound and status time_limit)")
    s.add_argument("--seed", type=options.SEED, default=0, help="seed of randomised methods (0..2^32-1, default 0)")
    s.add_argument("--out", help="also write the JSON answer to this file (atomically; not an input)")
    s.add_argument("--json", action="store_true")
    add_quiet(s)
    latency = registry is methods.LATENCY
    seconds = solve.LATENCY_BOUND_TIME if latency else solve.BOUND_TIME
    share = solve.LATENCY_BOUND_SHARE if latency else solve.BOUND_SHARE
    s.add_argument("--bound-time", type=options.SECONDS_OR_ZERO, default=seconds, metavar="S",
                   help=f"seconds for the library's best lower bound behind the gap field, run after a "
                        f"method that did not prove optimality (default {seconds:g}; 0: skip). With "
                        f"--time-limit it fits inside that limit: at most {share * 100:.0f}%% of it is kept "
                        "for the bound, and the bound gets what the method left")


def answer(registry: dict[str, methods.Method], args: argparse.Namespace) -> int:
    """Run the method through `solve` and print its answer (JSON, or text)."""
    g = load_graph(args.graph)
    c, note = options.cluster_from_args(g, args)
    run = solve.partition if registry is methods.PARTITION else solve.latency
    res = run(g, c, args.method, time_limit=args.time_limit, bound_time=args.bound_time, seed=args.seed,
              started=args.started)
    if note:
        res.extra["clamped"] = note
    out = res.to_json()
    if emit(out, args):
        return 0
    print(f"{res.method}: objective {fmt(out['objective'])}  status {res.status}  bound {fmt(res.bound)}  "
          f"gap {fmt(res.gap)}  {res.seconds:.3f}s  split {out.get('split', '-')}")
    for d, x in out.get("loads", {}).items():
        print(f"  {d:6s} {x:.6g}")
    if out.get("reason"):
        print(f"  infeasible: {out['reason']}")
    say(note)
    return 0
