"""The ``devplace`` command line: the contract that scripts, exercises and graders rely on.

Core commands live here (``info``, ``convert``, ``evaluate``, ``partition``, ``latency``,
``bound``); further commands are plugins in `devplace_lite.commands` (a module with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``), imported only for their own command so
that the non-torch commands never import torch.

Errors: one line on stderr naming the problem, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
import sys
from typing import Sequence

import numpy as np

from . import methods
from .commands import emit, print_json
from .cost import evaluate
from .devices import Cluster
from .errors import DevplaceError, UsageError
from .graph import Graph
from .io import load_graph, load_placement, save_graph


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UsageError(message if self.prog == "devplace" else f"{self.prog}: {message}")


def _cluster_args(p: argparse.ArgumentParser, k_required: bool = False) -> None:
    p.add_argument("-k", "--accelerators", type=int, required=k_required,
                   help="number of accelerators (default: the file's value, else 1)")
    p.add_argument("--cpus", type=int, help="number of CPU cores (default: the file's value, else 0)")
    p.add_argument("--memory", type=float, help="memory per accelerator in bytes (default: the file's value, else no cap)")


def _cluster(graph: Graph, args: argparse.Namespace) -> Cluster:
    return Cluster.for_graph(graph, args.accelerators, args.cpus, args.memory)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


# -- info -----------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    from .ideals import count_ideals, width

    g = load_graph(args.graph)
    ideals = count_ideals(g, limit=args.limit)
    info = {
        "name": g.name, "nodes": g.n, "edges": g.m,
        "forward_nodes": int((~g.backward).sum()), "backward_nodes": int(g.backward.sum()),
        "units": int(g.units.max()) + 1 if g.n else 0,
        "total_acc_work": float(g.p_acc.sum()), "total_cpu_work": float(np.nansum(g.p_cpu)),
        "memory": float(g.memory.sum()), "unsupported": int((~g.supported).sum()),
        "defaults": g.defaults, "ideals": ideals, "ideal_limit": args.limit,
        "width": width(g),
    }
    if args.json:
        print_json(info)
        return 0
    for key, value in info.items():
        if key == "ideals" and value is None:
            value = f"> {args.limit}"
        if key != "ideal_limit":
            print(f"{key:16s} {value}")
    return 0


# -- convert --------------------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    g = load_graph(args.input)
    save_graph(g, args.output, to=args.to)
    print(f"wrote {args.output} ({args.to}, {g.n} nodes, {g.m} edges)", file=sys.stderr)
    return 0


# -- evaluate -------------------------------------------------------------------------------
def cmd_evaluate(args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    c = _cluster(g, args)
    ev = evaluate(g, c, load_placement(args.placement, g, c))
    out = ev.to_dict()
    if args.json:
        print_json(out)
        return 0
    print(f"max load {_fmt(out['objective'])} on {ev.bottleneck}; split: {ev.split}; "
          f"{'feasible' if ev.feasible else 'INFEASIBLE'}")
    for d, rec in out["devices"].items():
        print(f"  {d:6s} load {_fmt(rec['load'])}  compute {_fmt(rec['compute'])}  comm {_fmt(rec['comm'])}  memory {rec['memory']:.0f}")
    for v in ev.violations:
        print(f"  violation: {v}")
    return 0


# -- partition / latency ----------------------------------------------------------------------
def _solve(registry: dict[str, str], what: str, args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    c = _cluster(g, args)
    fn = methods.resolve(registry, args.method, what)
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError(f"--time-limit must be positive, got {args.time_limit}")
    res = fn(g, c, time_limit=args.time_limit, seed=args.seed)
    if registry is methods.PARTITION:
        _certify(res, args.bound_time)
    out = res.to_json()
    if emit(out, args):
        return 0
    print(f"{res.method}: objective {_fmt(res.objective)}  status {res.status}  bound {_fmt(res.bound)}  "
          f"gap {_fmt(res.gap)}  {res.seconds:.3f}s  split {out.get('split', '-')}")
    for d, x in out.get("loads", {}).items():
        print(f"  {d:6s} {x:.6g}")
    return 0


def _certify(res, seconds: float) -> None:
    """Raise ``res.bound`` to the best bound the library proves in ``seconds``, so that the
    answer's ``gap`` says how far from optimal it can be. Skipped when the method proved
    optimality itself (no solver runs twice). A chain split is measured against the chain
    optimum, any other split against the optimum over all placements."""
    if res.status == "optimal" or res.assignment is None or seconds <= 0:
        return
    from .bounds.best import best_bound

    kind = "chain" if res.check().split == "chain" else "any"
    b = best_bound(res.graph, res.cluster, time_limit=seconds, kind=kind, upper=res.objective)
    if math.isfinite(b.bound) and (res.bound is None or b.bound > res.bound):
        res.bound = b.bound
        res.extra["bound_method"] = b.method
    res.extra["bound_kind"] = kind


def cmd_partition(args: argparse.Namespace) -> int:
    return _solve(methods.PARTITION, "method", args)


def cmd_latency(args: argparse.Namespace) -> int:
    return _solve(methods.LATENCY, "latency method", args)


# -- bound ----------------------------------------------------------------------------------
def cmd_bound(args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    c = _cluster(g, args)
    fn = methods.resolve(methods.BOUND, args.method, "bound method")
    b = fn(g, c, time_limit=args.time_limit)
    out = b.to_json() if hasattr(b, "to_json") else dict(b)
    if args.json:
        print_json(out)
        return 0
    print(f"{out['method']}: bound {_fmt(out['bound'])}  status {out['status']}  {out['seconds']:.3f}s")
    return 0


def _plugins() -> list[str]:
    from . import commands

    return sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog="devplace", description="Place the operators of a DNN graph on devices.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("info", help="sizes, total work, ideal count and width of a graph")
    s.add_argument("graph")
    s.add_argument("--limit", type=int, default=100_000, help="stop counting ideals past this many")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("convert", help="convert between the native and the authors' (msr) JSON")
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--to", choices=["native", "msr"], default="native")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("evaluate", help="score a placement under the cost model")
    s.add_argument("graph")
    s.add_argument("placement")
    _cluster_args(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_evaluate)

    for name, func, registry, help_ in (
            ("partition", cmd_partition, methods.PARTITION, "minimise the largest device load (throughput)"),
            ("latency", cmd_latency, methods.LATENCY, "minimise single-sample latency (inference)")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("graph")
        s.add_argument("--method", required=True, help=f"one of: {', '.join(sorted(registry)) or '(none yet)'}")
        _cluster_args(s)
        s.add_argument("--time-limit", type=float, help="seconds; a solver returns its incumbent and bound")
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--out", help="also write the JSON answer to this file")
        s.add_argument("--json", action="store_true")
        if name == "partition":
            s.add_argument("--bound-time", type=float, default=5.0,
                           help="seconds for the library's best lower bound behind the gap field (0: skip)")
        s.set_defaults(func=func)

    s = sub.add_parser("bound", help="a proven lower bound on the optimal max-load")
    s.add_argument("graph")
    _cluster_args(s, k_required=True)
    s.add_argument("--method", default="best", help=f"one of: {', '.join(sorted(methods.BOUND)) or '(none yet)'}")
    s.add_argument("--time-limit", type=float)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_bound)

    # plugins: only the one named on the command line is imported with its heavy dependencies
    wanted = next((a for a in (argv or []) if not a.startswith("-")), None)
    for name in _plugins():
        mod = importlib.import_module(f"devplace_lite.commands.{name}")
        cmd = name.replace("_", "-")
        s = sub.add_parser(cmd, help=mod.HELP)
        if wanted == cmd or wanted is None:
            mod.add_arguments(s)
        else:
            s.add_argument("rest", nargs=argparse.REMAINDER)
        s.set_defaults(func=mod.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
        return int(args.func(args) or 0)
    except DevplaceError as e:
        print(f"devplace: error: {e}", file=sys.stderr)
        return 2
    except (OSError, KeyboardInterrupt) as e:
        print(f"devplace: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
