"""The ``devplace`` command line: the contract that scripts, exercises and graders rely on.

Core commands live here (``info``, ``convert``, ``evaluate``, ``partition``, ``latency``,
``bound``); further commands are plugins in `devplace_lite.commands` (a module with ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``), imported only for their own command so
that the non-torch commands never import torch.

Errors: one line on stderr naming the problem, exit status 2, no traceback. Ctrl-C ends with
``devplace: interrupted`` and status 130, SIGTERM with ``devplace: terminated`` and 143, both
after removing what was half-written. While a command runs, file descriptor 1 points at
/dev/null and only the command's own answer reaches stdout (`_stdout_for_answers`): a solver's
console output cannot break a ``--json`` answer. ``--time-limit`` is the wall time of the whole
command, from the start of `main` (`devplace_lite.solve`). A run that lasts more than two seconds shows a
progress bar on stderr (`devplace_lite.progress`), unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import threading
import time
import warnings
from typing import Iterator, Sequence

import numpy as np

from . import methods, options, progress, solve
from .commands import emit, print_json
from .cost import evaluate
from .devices import Cluster
from .errors import DevplaceError, UsageError
from .files import check_apart, check_output
from .io import load_graph, load_placement, save_graph

#: Largest graph whose width ``info`` computes (a max-flow: 33 s of 66 at 10^6 nodes).
WIDTH_NODES = 250_000


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UsageError(message if self.prog == "devplace" else f"{self.prog}: {message}")


def _say(note: dict | None) -> None:
    """A text answer's line on what was clamped (stderr: stdout keeps the answer)."""
    if note:
        print(options.clamp_message(note), file=sys.stderr)


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
            value = _size(value)
        if key == "defaults":  # the file's cluster, with its memory cap in bytes as a size
            value = ", ".join(f"{k} {_size(v) if k == 'memory' else v}" for k, v in value.items()) or "none"
        if key != "ideal_limit":
            print(f"{key:16s} {value}")
    return 0


def _size(nbytes: float) -> str:
    """Bytes as a reader reads them: B, kB, MB or GB (powers of 1000), exact bytes beside."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit} ({nbytes:,.0f} bytes)"
    return f"{nbytes:,.0f} bytes"


# -- convert --------------------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    g = load_graph(args.input)
    save_graph(g, args.output, to=args.to)
    print(f"wrote {args.output} ({args.to}, {g.n} nodes, {g.m} edges)", file=sys.stderr)
    return 0


# -- evaluate -------------------------------------------------------------------------------
def cmd_evaluate(args: argparse.Namespace) -> int:
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
        from .experts import compare_with, placement_owner

        out["split_of"] = placement_owner(args.placement)
        out["compare"] = compare_with(g, c, ev, args.compare)
    if args.json:
        print_json(out)
        return 0
    if args.compare:
        print(f"placement: {out['split_of']}")
    print(f"max load {_fmt(out['objective'])} on {ev.bottleneck}; split: {ev.split}; "
          f"{'feasible' if ev.feasible else 'INFEASIBLE'}")
    for d, rec in out["devices"].items():
        print(f"  {d:6s} load {_fmt(rec['load'])}  compute {_fmt(rec['compute'])}  comm {_fmt(rec['comm'])}  memory {rec['memory']:.0f}")
    for v in ev.violations:
        print(f"  violation: {v}")
    if args.compare:
        print(out["compare"]["summary"])
    _say(note)
    return 0


# -- partition / latency / bound: the library's front door (`devplace_lite.solve`) ------------------
def _solve(registry: dict[str, methods.Method], args: argparse.Namespace) -> int:
    """Run a partition or latency method through `solve` (budget, certificate, status); print."""
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
    print(f"{res.method}: objective {_fmt(out['objective'])}  status {res.status}  bound {_fmt(res.bound)}  "
          f"gap {_fmt(res.gap)}  {res.seconds:.3f}s  split {out.get('split', '-')}")
    for d, x in out.get("loads", {}).items():
        print(f"  {d:6s} {x:.6g}")
    if out.get("reason"):
        print(f"  infeasible: {out['reason']}")
    _say(note)
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    return _solve(methods.PARTITION, args)


def cmd_latency(args: argparse.Namespace) -> int:
    return _solve(methods.LATENCY, args)


def cmd_bound(args: argparse.Namespace) -> int:
    g = load_graph(args.graph)
    c, note = options.cluster_from_args(g, args)
    out = solve.bound(g, c, args.method, time_limit=args.time_limit, started=args.started).to_json()
    if note:
        out["clamped"] = note
    if args.json:
        print_json(out)
        return 0
    print(f"{out['method']}: bound {_fmt(out['bound'])}  status {out['status']}  {out['seconds']:.3f}s")
    _say(note)
    return 0


def _plugins() -> list[str]:
    from . import commands

    return sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))


def _quiet(s: argparse.ArgumentParser) -> None:
    s.add_argument("-q", "--quiet", action="store_true",
                   help=f"no progress bar (otherwise one appears on stderr once a run lasts {progress.DELAY:g} s)")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog="devplace", description="Place the operators of a DNN graph on devices.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("info", help="sizes, total work, ideal count and width of a graph")
    s.add_argument("graph")
    s.add_argument("--limit", type=options.IDEAL_LIMIT, default=100_000,
                   help="stop counting ideals past this many (1..10^8, default 100000)")
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
    options.add_cluster_args(s)
    s.add_argument("--compare", metavar="METHOD", help="also run this partition method (e.g. dp, the proven optimum) "
                   "on the same cluster and print the placement's max load against it")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_evaluate)

    for name, func, registry, help_ in (
            ("partition", cmd_partition, methods.PARTITION, "minimise the largest device load (throughput)"),
            ("latency", cmd_latency, methods.LATENCY, "minimise single-sample latency (inference)")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("graph")
        s.add_argument("--method", required=True, help=f"one of: {', '.join(sorted(registry)) or '(none yet)'}")
        options.add_cluster_args(s)
        s.add_argument("--time-limit", type=options.SECONDS, metavar="S",
                       help="wall seconds for the whole command: loading, the method and the certifying bound "
                            "(a solver stopped by it returns its incumbent, bound and status time_limit)")
        s.add_argument("--seed", type=options.SEED, default=0, help="seed of randomised methods (0..2^32-1, default 0)")
        s.add_argument("--out", help="also write the JSON answer to this file (atomically; not an input)")
        s.add_argument("--json", action="store_true")
        _quiet(s)
        s.add_argument("--bound-time", type=options.SECONDS_OR_ZERO, default=solve.BOUND_TIME, metavar="S",
                       help=f"seconds for the library's best lower bound behind the gap field, run after a "
                            f"method that did not prove optimality (default {solve.BOUND_TIME:g}; 0: skip). With "
                            f"--time-limit it fits inside that limit: at most {solve.BOUND_SHARE * 100:.0f}%% of it is kept "
                            "for the bound, and the bound gets what the method left")
        s.set_defaults(func=func)

    s = sub.add_parser("bound", help="a proven lower bound on the optimal max-load")
    s.add_argument("graph")
    options.add_cluster_args(s, k_required=True)
    s.add_argument("--method", default="best", help=f"one of: {', '.join(sorted(methods.BOUND)) or '(none yet)'}")
    s.add_argument("--time-limit", type=options.SECONDS, metavar="S",
                   help="wall seconds for the whole command (default: the method's own; 10 for best)")
    s.add_argument("--json", action="store_true")
    _quiet(s)
    s.set_defaults(func=cmd_bound)

    # plugins: only the one named on the command line is imported (with its heavy dependencies);
    # all of them when none is named, for the help's list of commands
    wanted = next((a for a in (argv or []) if not a.startswith("-")), None)
    for name in _plugins():
        cmd = name.replace("_", "-")
        if wanted not in (cmd, None):
            sub.add_parser(cmd).add_argument("rest", nargs=argparse.REMAINDER)
            continue
        mod = importlib.import_module(f"devplace_lite.commands.{name}")
        s = sub.add_parser(cmd, help=mod.HELP)
        mod.add_arguments(s)
        s.set_defaults(func=mod.run)
    return p


class _Terminated(BaseException):
    """SIGTERM, raised where the program is so that cleanups run (a BaseException like Ctrl-C:
    ``except Exception`` in library code does not swallow it)."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into `_Terminated` while the command runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _stdout_for_answers() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null and ``sys.stdout`` at a copy of the real stdout.

    The answer is printed through ``sys.stdout`` as before; what native code writes to fd 1
    goes nowhere. SCIP, for one, prints its Ctrl-C notice on fd 1 whatever its verbosity, which
    broke ``--json``. Where ``sys.stdout`` is not fd 1 (a test's capture), only fd 1 moves.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no usable fd 1: nothing to protect
        yield
        return
    try:
        ours = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        ours = False
    old = sys.stdout
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    if ours:
        # backslashreplace: a name read from a file may hold a lone surrogate, which UTF-8 cannot encode
        sys.stdout = open(saved, "w", buffering=1 if old.line_buffering else -1, encoding=old.encoding,
                          errors="backslashreplace", closefd=False)
    try:
        yield
    finally:
        try:
            sys.stdout.flush()
        finally:
            if ours:
                sys.stdout = old
            os.dup2(saved, 1)
            os.close(saved)


_INPUTS = ("graph", "input", "placement", "checkpoint", "submissions", "seed_file", "course")
_OUTPUTS = ("out", "output", "csv")


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that names no file, exists and is not a regular file,
    or is one of the command's inputs (the same file through any link) or inside an input folder.
    (``grade --results-json``, a file or a folder, is checked by ``grade`` itself.)"""
    inputs = []
    for name in _INPUTS:
        value = getattr(args, name, None)
        inputs.extend(value if isinstance(value, list) else [value] if isinstance(value, str) else [])
    for name in _OUTPUTS:
        out = getattr(args, name, None)
        if not isinstance(out, str):
            continue
        check_output(out)  # before any work: a folder, a device, a missing folder, no file name
        check_apart(out, inputs)


def _one_line(message: str) -> str:
    """A message as one line: ids and paths may hold newlines or control characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return text if len(text) <= 1000 else text[:997] + "..."


def _os_message(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename is not None else ""
    return f"{where}{e.strerror or e}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is 0 (answered), 2 (refused: one line on stderr), 130
    (Ctrl-C), 141 (the reader of stdout went away, silently) or 143 (SIGTERM)."""
    started = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    status = 2
    with _sigterm_raises():
        try:
            args = build_parser(argv).parse_args(argv)
            args.started = started
            _check_outputs(args)
            with _stdout_for_answers(), progress.shown(not getattr(args, "quiet", False)), \
                    warnings.catch_warnings():
                # numpy's notes on inf - inf and empty slices are not part of any answer
                warnings.simplefilter("ignore", RuntimeWarning)
                return int(args.func(args) or 0)
        except DevplaceError as e:
            message = f"error: {e}"
        except KeyboardInterrupt:
            message = "interrupted"
            status = 130
        except _Terminated:
            message = "terminated"
            status = 143
        except MemoryError:
            message = "error: out of memory"
        except BrokenPipeError:  # the reader left (`devplace ... | head`): not an error of the input
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
            return 141  # as a shell reports a process ended by SIGPIPE
        except OSError as e:
            message = f"error: {_os_message(e)}"
        print(f"devplace: {_one_line(message)}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
