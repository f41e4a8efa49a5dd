"""Numeric command-line options, checked once for every command.

Each option's ``type=`` is one of the checkers below: it refuses what is not a finite number in
the option's range, and its message states the range, so a typo (``--time-limit nan``,
``--seed -1``, ``--lr inf``) is one line and exit 2 before any work starts instead of a traceback
or a silently wrong answer. Plugins use the same checkers::

    p.add_argument("--time-limit", type=options.SECONDS)

Device counts have no upper bound here: a cluster larger than the graph can use is clamped by
`cluster_from_args` (a graph of n nodes keeps at most n devices of a kind busy), and the answer
says so, so ``-k 1000000000`` never sizes an array.

Examples
--------
>>> SEED("7")
7
>>> SEED("-1")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected an integer in [0, 4294967295], got '-1'
>>> SECONDS("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a finite number in (0, 1e+09], got 'nan'
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

from .devices import Cluster
from .errors import LimitError
from .graph import Graph

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Int:
    """An argparse type: a decimal integer in ``[lo, hi]``."""

    lo: int = 0
    hi: int = INT64_MAX

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return "integer"

    def __call__(self, text: str) -> int:
        try:
            x = int(text)
        except ValueError:  # not an integer, or more digits than Python converts
            x = None
        if x is None or not self.lo <= x <= self.hi:
            raise argparse.ArgumentTypeError(f"expected an integer {self.range}, got {text[:40]!r}")
        return x

    @property
    def range(self) -> str:
        return f">= {self.lo}" if self.hi == INT64_MAX else f"in [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class Real:
    """An argparse type: a finite number between ``lo`` and ``hi``; ``lo`` itself is excluded
    when ``open_lo`` (a time limit of 0 is no time)."""

    lo: float = 0.0
    hi: float = sys.float_info.max
    open_lo: bool = False

    @property
    def __name__(self) -> str:
        return "number"

    def __call__(self, text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        low_ok = x > self.lo if self.open_lo else x >= self.lo
        if not (math.isfinite(x) and low_ok and x <= self.hi):
            raise argparse.ArgumentTypeError(f"expected a finite number {self.range}, got {text[:40]!r}")
        return x

    @property
    def range(self) -> str:
        if self.hi == sys.float_info.max:
            return f"{'>' if self.open_lo else '>='} {self.lo:g}"
        return f"in {'(' if self.open_lo else '['}{self.lo:g}, {self.hi:g}]"


#: Accelerators or CPU cores: zero or more (a graph's node count bounds what is used).
DEVICES = Int(0)
#: Bytes of memory per accelerator.
MEMORY = Real(0.0, open_lo=True)
#: Seconds of a time limit (a billion seconds is 31 years: past it a solver's own limit breaks).
SECONDS = Real(0.0, 1e9, open_lo=True)
#: Seconds where 0 means "skip this step".
SECONDS_OR_ZERO = Real(0.0, 1e9)
#: Seeds: what numpy, torch and the solvers all take.
SEED = Int(0, 2**32 - 1)
#: A count of things done (episodes, repeats, steps), at least one.
POSITIVE = Int(1)
#: A count that may be zero (warm-up runs, extra samples).
NON_NEGATIVE = Int(0)
#: A size that allocates memory (a batch, micro-batches).
SIZE = Int(1, 1 << 16)
#: Processes or threads started at once.
WORKERS = Int(1, 1024)
#: Learning rates.
RATE = Real(0.0, 10.0, open_lo=True)
#: Weights of a loss term (entropy bonus).
WEIGHT = Real(0.0, 1e6)
#: Ideals counted before `devplace info` gives up (each is kept in memory while counting).
IDEAL_LIMIT = Int(1, 10**8)


#: The rule every command's option names follow, shown at the end of its ``--help``.
NAMES_RULE = """\
Option names mean one thing in every devplace command: -k/--accelerators is the number of
accelerators (in plan, one pipeline rank, a torchrun process, each; stages per rank is
--stages-per-rank), --cpus the CPU cores, --memory bytes per accelerator, --time-limit the
seconds a search may take, --timeout the seconds a started process may run, --spec what prices
the work (a named GPU's roofline, or measured here), --device where torch work runs, --seed the
seed, --json one JSON object on stdout, --out where the command writes what it makes."""


def add_cluster_args(p: argparse.ArgumentParser, k_required: bool = False, k_default: str = "the file's value, else 1",
                     l_default: str = "the file's value, else 0") -> None:
    """``-k``, ``--cpus`` and ``--memory``, checked by the types above."""
    p.add_argument("-k", "--accelerators", type=DEVICES, required=k_required,
                   help=f"number of accelerators (default: {k_default})")
    p.add_argument("--cpus", type=DEVICES, help=f"number of CPU cores (default: {l_default})")
    p.add_argument("--memory", type=MEMORY,
                   help="memory per accelerator in bytes (default: the file's value, else no cap)")


#: The most devices of a kind kept for the names a placement uses (`clamp_cluster`'s ``keep``):
#: an evaluation sizes its per-device arrays and answer by it.
KEEP_DEVICES = 65536


def clamp_cluster(cluster: Cluster, nodes: int, keep: tuple[int, int] = (0, 0)) -> tuple[Cluster, dict[str, Any] | None]:
    """``cluster`` with at most ``max(nodes, 1)`` accelerators and as many CPU cores, and a note
    of what was clamped (``None`` when nothing was).

    A placement of n nodes keeps at most n devices of a kind busy and devices of a kind are
    identical, so every objective and bound is the same on the smaller cluster; only arrays
    sized by the device count shrink. ``keep``: (accelerators, CPU cores) to keep at least, so
    that a given placement's device names exist (``acc7`` on a 4-node graph with ``-k 8``),
    at most `KEEP_DEVICES` each.

    >>> small, note = clamp_cluster(Cluster(accelerators=10**9, cpus=2), 5)
    >>> small.k, small.l, note["accelerators"]
    (5, 2, [1000000000, 5])
    >>> clamp_cluster(Cluster(accelerators=10**9), 5, keep=(8, 0))[0].k
    8

    Raises
    ------
    LimitError
        ``keep`` asks for more than `KEEP_DEVICES` devices of a kind.
    """
    for count, kind in zip(keep, ("acc", "cpu")):
        if count > max(KEEP_DEVICES, nodes):
            raise LimitError(f"the placement names {kind}{count - 1}: evaluating keeps at most {KEEP_DEVICES} devices "
                             f"of a kind past the graph's {nodes} node(s); number the devices from {kind}0")
    cap_k, cap_l = max(nodes, 1, keep[0]), max(nodes, 1, keep[1])
    if cluster.k <= cap_k and cluster.l <= cap_l:
        return cluster, None
    note: dict[str, Any] = {}
    if cluster.k > cap_k:
        note["accelerators"] = [cluster.k, cap_k]
    if cluster.l > cap_l:
        note["cpus"] = [cluster.l, cap_l]
    note["reason"] = f"the graph has {nodes} node(s); more devices of a kind cannot be used"
    if keep != (0, 0):
        note["reason"] += ", past those the placement names"
    return Cluster(accelerators=min(cluster.k, cap_k), cpus=min(cluster.l, cap_l), memory=cluster.memory), note


def cluster_from_args(graph: Graph, args: argparse.Namespace) -> tuple[Cluster, dict[str, Any] | None]:
    """The cluster of ``-k/--cpus/--memory`` (the graph file's defaults where an option is not
    given), clamped to the graph (`clamp_cluster`)."""
    return clamp_cluster(Cluster.for_graph(graph, args.accelerators, args.cpus, args.memory), graph.n)


def clamp_message(note: dict[str, Any] | None) -> str | None:
    """The clamp note as one line for a text answer."""
    if not note:
        return None
    parts = [f"{key} {note[key][0]} -> {note[key][1]}" for key in ("accelerators", "cpus") if key in note]
    return f"devplace: note: {', '.join(parts)} ({note['reason']})"
