"""What the heuristics share: turning a block labelling into a scored `Result`."""

from __future__ import annotations

import time

import numpy as np

from ...cost import evaluate
from ...devices import Cluster
from ...graph import Graph
from ...result import Result, no_feasible_status, unplaceable


def finish(method: str, graph: Graph, cluster: Cluster, assignment: np.ndarray, t0: float, **extra) -> Result:
    """Score ``assignment`` with the evaluator (so ``objective == check().max_load``); status
    ``feasible``, or with the violations when a cap or a device rule breaks `unknown` (or
    `infeasible` when no placement at all fits: `devplace_lite.result.no_feasible_status`)."""
    ev = evaluate(graph, cluster, assignment)
    status = "feasible" if ev.feasible else no_feasible_status(graph, cluster)
    if not ev.feasible:
        extra["violations"] = ev.violations
    if status == "infeasible":
        extra["reason"] = unplaceable(graph, cluster)
    return Result(method, graph, cluster, np.asarray(assignment, dtype=np.int64), ev.max_load, status,
                  time.perf_counter() - t0, extra=extra)
