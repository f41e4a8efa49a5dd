"""What the heuristics share: turning a block labelling into a scored `Result`."""

from __future__ import annotations

import time

import numpy as np

from ..cost import evaluate
from ..devices import Cluster
from ..graph import Graph
from ..result import Result


def finish(method: str, graph: Graph, cluster: Cluster, assignment: np.ndarray, t0: float, **extra) -> Result:
    """Score ``assignment`` with the evaluator (so ``objective == check().max_load``); status
    ``feasible``, or ``infeasible`` with the violations when a cap or a device rule breaks."""
    ev = evaluate(graph, cluster, assignment)
    status = "feasible" if ev.feasible else "infeasible"
    if not ev.feasible:
        extra["violations"] = ev.violations
    return Result(method, graph, cluster, np.asarray(assignment, dtype=np.int64), ev.max_load, status,
                  time.perf_counter() - t0, extra=extra)
