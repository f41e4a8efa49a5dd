"""Registries of the library's methods, by the name the CLI and the chapters use, with what
each method is.

Each entry is a `Method`: where the function lives (``"module:function"`` inside
`devplace_lite`, imported only when the method is asked for, so ``devplace partition`` loads no
more than it needs and never torch) and the contract it keeps:

* ``problem``: ``throughput`` (minimise the largest device load), ``latency`` (one sample's
  finish time, inference) or ``bound`` (a proven lower bound on the throughput optimum);
* ``split``: the splits it searches (for a bound: the optimum it bounds): ``chain`` (a chain of
  ideals of the forward graph with stand-ins, `devplace_lite.units`), ``contiguous`` (every
  part convex there) or ``any``;
* ``exact``: it says ``optimal`` only with a proof, and finds the optimum over its splits when
  given the time (for a bound: its value is then that optimum); a heuristic never says
  ``optimal``;
* ``limit``: how it treats ``time_limit``: ``anytime`` (watches the clock throughout and, when
  the time is up, returns its incumbent, its bound and status ``time_limit``) or ``polynomial``
  (finishes within the polynomial time its docstring states without watching the clock; a
  method with an improvement phase gives that phase what time is left).

* ``certificate`` (methods that place): the bound family that certifies an answer
  (`BOUND_FAMILIES`): ``chain`` (the best bound on the chain optimum), ``any`` (on the optimum
  over every placement, which also bounds the contiguous one) or ``latency``;
* ``scales``: it answers on a million-node graph within a minute or two (measured in
  ``benchmarks/scale``); a `LimitError` for a size names these (`scalable`);
* ``seeds_latency``: its split is one of the starts of the latency search
  (`devplace_lite.single_sample.search`);
* ``progress`` (bounds): it reports each bound it raises through ``on_progress`` as it goes, so
  that a call stopped midway keeps what its finished steps proved;
* ``yardstick``: the learned placers of `devplace_lite.rl.compare` are measured against it;
* ``reach`` (`Reach`): the largest input it takes (``limit`` units, nodes, ideals or binaries)
  and what a caller does past it; the code that enforces a reach reads it from the entry, so the
  entry is the one place the number lives.

The functions: ``PARTITION`` and ``LATENCY``: ``f(graph, cluster, *, time_limit=None, seed=0)
-> Result``; ``BOUND``: ``f(graph, cluster, *, time_limit=None, on_progress=None) -> Bound``;
``LATENCY_BOUND``: the same with ``q`` (calls per accelerator) and ``upper`` (a known latency);
``PARALLELIZE`` (Piper's model, `devplace_lite.multidim`): ``f(model, *, time_limit=None,
progress=None) -> multidim.Result`` for an anytime method, ``f(model)`` for a polynomial one.
`devplace_lite.solve` runs them under a budget, certifies and settles the status: that is the
front door the library, the CLI and the chapters use.

Example
-------
>>> PARTITION["dp"].exact, PARTITION["dp"].split, PARTITION["brkga"].exact
(True, 'chain', False)
>>> resolve(PARTITION, "dp").__name__
'dp'
>>> PARTITION["kl"].certificate, PARTITION["heft"].certificate, LATENCY["greedy"].certificate
('chain', 'any', 'latency')
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError

PROBLEMS = ("throughput", "latency", "bound", "parallelize")
SPLITS = ("chain", "contiguous", "any")
LIMITS = ("anytime", "polynomial")


@dataclass(frozen=True)
class Reach:
    """The largest input a method takes: at most ``limit`` of ``what`` (``units``, ``nodes``,
    ``ideals``, ``binaries``: unit-device pairs), and ``past``: what the method does, or what a
    caller should do, past it (the end of its `LimitError` message; ``{scalable}`` stands for
    `scalable`)."""

    what: str
    limit: int
    past: str

    def advice(self) -> str:
        """``past`` with the scalable methods named."""
        return self.past.replace("{scalable}", scalable())


@dataclass(frozen=True)
class Method:
    """One registry entry (module docstring)."""

    target: str
    problem: str
    split: str
    exact: bool
    limit: str
    summary: str
    scales: bool = False
    seeds_latency: bool = False
    progress: bool = False
    yardstick: bool = False
    reach: Reach | None = None

    def __post_init__(self) -> None:
        if self.problem not in PROBLEMS or self.split not in SPLITS or self.limit not in LIMITS:
            raise ValueError(f"bad registry entry {self}")

    @property
    def certificate(self) -> str | None:
        """The bound family behind an answer (`BOUND_FAMILIES`); None for a bound."""
        if self.problem in ("bound", "parallelize"):
            return None
        if self.problem == "latency":
            return "latency"
        return "chain" if self.split == "chain" else "any"

    def load(self) -> Callable:
        """The function itself (imports its module)."""
        module, func = self.target.split(":")
        return getattr(importlib.import_module(f"devplace_lite.{module}"), func)


def _throughput(target: str, split: str, exact: bool, limit: str, summary: str, **facts: Any) -> Method:
    return Method(target, "throughput", split, exact, limit, summary, **facts)


#: The DP's states: ideals past this many are refused (memory grows about ``U/8 + 150`` bytes each).
_IDEALS = Reach("ideals", 1_000_000, "raise the limit or use a method that needs no ideals ({scalable})")
#: The integer programs: unit-device binaries past which the model would take minutes and GBs to
#: build (the published workloads need at most about 7,000; 20,000 nodes on 5 devices took minutes).
_BINARIES = Reach("binaries", 20_000, "give --time-limit to get the best warm start with a bound, or use a "
                                      "method that scales ({scalable})")
#: The MIP bounds build models of ``2U`` binaries and more before any time limit acts, and the
#: reach bound keeps a ``U x U`` ancestor table.
_MIP_BOUNDS = Reach("nodes", 5_000, "use --method combinatorial or best (which falls back to it)")
#: The latency methods and bounds keep an ``n x n`` reachability table, and the latency bounds
#: dense ``n x n`` float products behind it (3.4 GB at 10,000 nodes).
_REACH_TABLE = Reach("nodes", 3_000, "the latency methods and bounds keep an n x n reachability table")


PARTITION: dict[str, Method] = {
    "single": _throughput("throughput.baselines:single_device", "chain", False, "polynomial", "everything on one accelerator",
                          seeds_latency=True, yardstick=True),
    "uniform": _throughput("throughput.baselines:uniform", "chain", False, "polynomial", "equal numbers of units per stage",
                           seeds_latency=True),
    "parameters": _throughput("throughput.baselines:balance_by_parameters", "chain", False, "polynomial",
                              "stages of balanced memory (DeepSpeed's default)",
                              seeds_latency=True),
    "time": _throughput("throughput.baselines:balance_by_time", "chain", False, "polynomial",
                        "stages of balanced compute, blind to transfers",
                        scales=True, seeds_latency=True),
    "greedy": _throughput("throughput.baselines:greedy_fill", "chain", False, "polynomial",
                          "fill accelerators in order up to a share of the work",
                          scales=True, seeds_latency=True),
    "random": _throughput("throughput.baselines:random_best_of", "any", False, "anytime", "best of random placements"),
    "exhaustive": _throughput("throughput.baselines:exhaustive_chain", "chain", True, "anytime",
                              "every placement of the units (tiny graphs)"),
    "dp": _throughput("throughput.dp:dp", "chain", True, "anytime", "the exact DP over ideals",
                      seeds_latency=True, yardstick=True, reach=_IDEALS),
    "linear": _throughput("throughput.dp:linear", "chain", False, "polynomial", "the best slicing of one topological order",
                          seeds_latency=True),
    "pipedream": _throughput("throughput.dp:pipedream", "chain", False, "polynomial", "PipeDream's planner on one order",
                             seeds_latency=True),
    "kl": _throughput("throughput.heuristics.bisection:kl", "chain", False, "polynomial",
                      "recursive bisection with FM refinement, then local search",
                      scales=True),
    "etf": _throughput("throughput.heuristics.list_scheduling:etf", "any", False, "polynomial",
                       "earliest-task-first list scheduling",
                       scales=True, yardstick=True),
    "heft": _throughput("throughput.heuristics.list_scheduling:heft", "any", False, "polynomial", "HEFT list scheduling",
                        scales=True, seeds_latency=True, yardstick=True),
    "topo-fill": _throughput("throughput.heuristics.topo_fill:topo_fill", "chain", False, "polynomial",
                             "one pass in topological order towards equal shares",
                             scales=True, seeds_latency=True, yardstick=True),
    "local-search": _throughput("throughput.heuristics.local_search:local_search_method", "chain", False, "anytime",
                                "moves and swaps of boundary blocks from the balanced cut",
                                scales=True),
    "brkga": _throughput("throughput.brkga:brkga", "chain", False, "anytime", "genetic search over orders, each sliced"),
    "ip": _throughput("throughput.ip:ip_chain", "chain", True, "anytime", "the chain integer program", reach=_BINARIES),
    "ip-contig": _throughput("throughput.ip:ip_contiguous", "contiguous", True, "anytime",
                             "the contiguous integer program", reach=_BINARIES),
    "ip-noncontig": _throughput("throughput.ip:ip_noncontiguous", "any", True, "anytime",
                                "the integer program over every placement", reach=_BINARIES),
}

LATENCY: dict[str, Method] = {
    "ip": Method("single_sample.ip:ip", "latency", "contiguous", True, "anytime",
                 "the latency integer program, warm-started from every split we know", reach=_REACH_TABLE),
    "greedy": Method("single_sample.search:greedy_latency", "latency", "contiguous", False, "polynomial",
                     "the authors' greedy: pack consecutive blocks while memory lasts"),
    "local-search": Method("single_sample.search:latency_local_search", "latency", "contiguous", False, "anytime",
                           "moves of stage boundaries from the best split known"),
}

BOUND: dict[str, Method] = {
    "combinatorial": Method("throughput.bounds.combinatorial:combinatorial_bound", "bound", "any", False, "polynomial",
                            "neighbourhood and knapsack bounds"),
    "stage-relax": Method("throughput.bounds:stage_relax", "bound", "chain", False, "anytime",
                          "one stage modelled exactly, maximised over the stage", reach=_MIP_BOUNDS),
    "pinned": Method("throughput.bounds:pinned", "bound", "chain", False, "anytime", "the least load of a stage holding a unit",
                     reach=_MIP_BOUNDS),
    "reach": Method("throughput.bounds:reach", "bound", "chain", False, "anytime", "how much work s stages of load T cover",
                    reach=_MIP_BOUNDS),
    "exact-mip": Method("throughput.bounds:exact_mip", "bound", "chain", True, "anytime",
                        "the dual bound of the exact ordered-stage MIP", reach=_MIP_BOUNDS),
    "best": Method("throughput.bounds.best:best_bound", "bound", "chain", True, "anytime",
                   "the above and the exact DP within a budget", progress=True,
                   reach=Reach(_MIP_BOUNDS.what, _MIP_BOUNDS.limit, "the MIP steps (2, 3, 5-7) are skipped: "
                                                                    "the DP has the whole budget")),
}

LATENCY_BOUND: dict[str, Method] = {
    "best": Method("single_sample.segments:best_latency_bound", "bound", "any", False, "anytime",
                   "critical path and work, the path and interval programs, then the segment bound",
                   progress=True, reach=_REACH_TABLE),
}

PARALLELIZE: dict[str, Method] = {
    "exact": Method("multidim:plan_optimal", "parallelize", "chain", True, "anytime",
                    "the DP over ideals with an exact knapsack per stage"),
    "piper": Method("multidim:plan_piper", "parallelize", "chain", False, "anytime",
                    "the same DP with Piper's greedy knapsack rule (what its program computes)"),
    "pipeline": Method("multidim.baselines:pipeline_only", "parallelize", "chain", False, "polynomial",
                       "pipeline parallelism only (d = t = 1)"),
    "data": Method("multidim.baselines:data_only", "parallelize", "chain", False, "polynomial",
                   "data parallelism only (one stage, t = 1)"),
    "equal": Method("multidim.baselines:equal_stages", "parallelize", "chain", False, "polynomial",
                    "equal stages with one d and t (PipeDream-2BW's style)"),
}


@dataclass(frozen=True)
class Family:
    """A bound family that certifies answers: its bound method and the keywords an answer adds."""

    method: Method
    kwargs: Callable[[dict[str, Any]], dict[str, Any]]  # from the answer's ``extra``
    #: Whether the bound is closed-form (milliseconds whatever its time limit): the caller need
    #: not keep the seconds of a search for it (`devplace_lite.solve`).
    closed_form: bool = False


#: The certificates of `Method.certificate`: a throughput answer is certified by the best bound on
#: the optimum of its split kind, a latency answer by the latency bounds for its ``q`` calls.
BOUND_FAMILIES: dict[str, Family] = {
    "chain": Family(BOUND["best"], lambda extra: {"kind": "chain"}),
    # ``best`` with kind "any" is its first step only, the combinatorial bound
    "any": Family(BOUND["best"], lambda extra: {"kind": "any"}, closed_form=True),
    # the calls the answer runs per accelerator: its ``q``, or more if its pieces say so (the
    # one-call bound holds only for splits with one call per accelerator)
    "latency": Family(LATENCY_BOUND["best"], lambda extra: {
        "q": max(int(extra.get("q", 1)), 1 + max(extra.get("pieces", {}).values(), default=0))}),
}


def entry(registry: dict[str, Method], name: str, what: str = "method") -> Method:
    """The entry registered under ``name``; a one-line `UsageError` lists the known names."""
    if name not in registry:
        raise UsageError(f"unknown {what} {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]


def resolve(registry: dict[str, Method], name: str, what: str = "method") -> Callable:
    """The function registered under ``name`` (`entry`, then its function)."""
    return entry(registry, name, what).load()


def scalable() -> str:
    """The partition methods that answer on a million-node graph, for a `LimitError` to name."""
    return ", ".join(name for name, m in PARTITION.items() if m.scales)


def yardsticks() -> list[str]:
    """The partition methods a learned placer is measured against (`devplace_lite.rl.compare`)."""
    return [name for name, m in PARTITION.items() if m.yardstick]


def latency_starts() -> list[str]:
    """The partition methods whose splits seed the latency search: exact ones first (the best
    start, and the search stops once a start meets its target), then the cheap ones."""
    return sorted((name for name, m in PARTITION.items() if m.seeds_latency), key=lambda n: not PARTITION[n].exact)
