"""Registries of the library's methods, by the name the CLI and the chapters use.

Each entry maps a method name to ``"module:function"`` inside `devplace_lite`; the module is
imported only when the method is asked for, so ``devplace partition`` loads no more than it
needs (and never torch).

* ``PARTITION``: ``f(graph, cluster, *, time_limit=None, seed=0) -> Result`` minimising the
  largest device load (throughput).
* ``LATENCY``: ``f(graph, cluster, *, time_limit=None, seed=0) -> Result`` minimising the
  single-sample latency (inference).
* ``BOUND``: ``f(graph, cluster, *, time_limit=None) -> Bound`` a proven lower bound.
"""

from __future__ import annotations

import importlib
from typing import Callable

from .errors import UsageError

PARTITION: dict[str, str] = {
    "single": "baselines:single_device",
    "uniform": "baselines:uniform",
    "parameters": "baselines:balance_by_parameters",
    "time": "baselines:balance_by_time",
    "greedy": "baselines:greedy_fill",
    "random": "baselines:random_best_of",
    "exhaustive": "baselines:exhaustive_chain",
    "dp": "dp:dp", "linear": "dp:linear", "pipedream": "dp:pipedream",
    "kl": "heuristics.bisection:kl",
    "etf": "heuristics.list_scheduling:etf",
    "heft": "heuristics.list_scheduling:heft",
    "topo-fill": "heuristics.topo_fill:topo_fill",
    "local-search": "heuristics.local_search:local_search_method",
    "brkga": "brkga:brkga",
    "ip": "mip.throughput:ip_chain", "ip-contig": "mip.throughput:ip_contiguous", "ip-noncontig": "mip.throughput:ip_noncontiguous",
}

LATENCY: dict[str, str] = {"ip": "mip.latency:ip", "greedy": "latency_search:greedy_latency",
                           "local-search": "latency_search:local_search"}

BOUND: dict[str, str] = {
    "combinatorial": "bounds.combinatorial:combinatorial_bound", "stage-relax": "bounds:stage_relax",
    "pinned": "bounds:pinned", "reach": "bounds:reach", "exact-mip": "bounds:exact_mip", "best": "bounds.best:best_bound",
}


def resolve(registry: dict[str, str], name: str, what: str = "method") -> Callable:
    """The function registered under ``name``; a one-line error lists the known names."""
    if name not in registry:
        raise UsageError(f"unknown {what} {name!r}; known: {', '.join(sorted(registry))}")
    module, func = registry[name].split(":")
    return getattr(importlib.import_module(f"devplace_lite.{module}"), func)
