"""Data, tensor and pipeline parallelism planned together: Piper's model and an exact planner.

`parallelize` reads (or takes) a model in Piper's JSON format, optionally overrides the
cluster values, and returns a `Result`: the time per sample (Piper's objective), a status and
the stages. Methods: ``exact`` (the DP over ideals with an exact knapsack per stage, proven
optimal), ``piper`` (the same DP with Piper's greedy knapsack rule, what its program computes),
and the baselines ``pipeline`` (pipeline only: d = t = 1), ``data`` (data parallelism only: one
stage, t = 1) and ``equal`` (equal stages with one d and t, recomputation everywhere or nowhere,
in the style of PipeDream-2BW). Reference: Tarnawski, Narayanan, Phanishayee, "Piper:
Multidimensional Planner for DNN Parallelization", NeurIPS 2021.

Example
-------
>>> from devplace_lite.multidim import parallelize
>>> from devplace_lite.multidim.generate import random_model
>>> r = parallelize(random_model(1, layers=4), devices=4)
>>> r.status, r.objective is not None
('optimal', True)
"""

from __future__ import annotations

import os
import time

from ..errors import UsageError
from .model import Model, read_model, repeat_layer
from .plan import Result, Stage, evaluate

METHODS = ("exact", "piper", "pipeline", "data", "equal")

__all__ = ["METHODS", "Model", "Result", "Stage", "evaluate", "parallelize", "read_model", "repeat_layer"]


def parallelize(model: Model | str | os.PathLike, devices: int | None = None, memory: float | None = None,
                microbatches: int | None = None, bandwidth: float | None = None, method: str = "exact",
                time_limit: float | None = None, progress=None) -> Result:
    """Plan data, tensor and pipeline parallelism for ``model`` under Piper's model.

    Parameters
    ----------
    model : Model or path
        A `Model` or the path of Piper's JSON input file.
    devices, memory, microbatches, bandwidth : optional
        Cluster values replacing the model's (devices ``k``, bytes per device, micro-batches per
        batch ``N``, bytes per second).
    method : str
        One of `METHODS` (module docstring).
    time_limit : float, optional
        Wall seconds for the whole call; past it the status is ``time_limit`` and the best
        baseline plan is returned as the incumbent.
    progress : callable, optional
        Called with the fraction done.

    Returns
    -------
    Result
        ``objective`` (time per sample, None when no plan fits), ``status`` (``optimal``,
        ``infeasible`` with ``reason``, ``time_limit``, or ``feasible`` for a baseline), stages.

    Raises
    ------
    UsageError, GraphError, LimitError
        On an unknown method, a bad model or cluster value, or too many ideals.
    """
    start = time.monotonic()
    if method not in METHODS:
        raise UsageError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if time_limit is not None and not time_limit > 0:
        raise UsageError(f"time limit must be positive, got {time_limit}")
    if not isinstance(model, Model):
        model = read_model(model)
    model = model.with_cluster(devices, memory, bandwidth, microbatches)
    if method in ("exact", "piper"):
        from .planner import plan_exact

        r = plan_exact(model, time_limit, "greedy" if method == "piper" else "exact", progress)
        r.method = method
        if method == "piper" and r.status == "optimal":
            r.status = "feasible"  # optimal for Piper's greedy knapsack, not proven for the model
            r.bound = None
        if r.status == "time_limit":
            from .baselines import best_baseline

            inc = best_baseline(model)
            if inc is not None:
                r.objective, r.stages = inc.objective, inc.stages
                r.reason = (r.reason or "") + f"; incumbent from the {inc.method} baseline"
    else:
        from . import baselines

        r = baselines.BASELINES[method](model)
    r.seconds = time.monotonic() - start
    return r

