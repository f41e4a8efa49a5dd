"""Data, tensor and pipeline parallelism planned together: Piper's model and an exact planner.

`load_model` reads a model in Piper's JSON format, or a placement graph that
`convert.from_graph` turns into one; `devplace_lite.solve.parallelize` (the front door: the
whole call's budget, the certificate, the status) plans it with a method of the registry and
answers with a `Result`: the time per sample (Piper's objective), a status and the stages.
Methods (the registry `devplace_lite.methods.PARALLELIZE`): ``exact`` (the DP over ideals
with an exact knapsack per stage, proven optimal: `plan_optimal`), ``piper`` (the same DP with
Piper's greedy knapsack rule, what its program computes: `plan_piper`), and the baselines
``pipeline`` (pipeline only: d = t = 1), ``data`` (data parallelism only: one stage, t = 1) and
``equal`` (equal stages with one d and t, recomputation everywhere or nowhere, in the style of
PipeDream-2BW). Reference: Tarnawski, Narayanan, Phanishayee, "Piper:
Multidimensional Planner for DNN Parallelization", NeurIPS 2021.

Example
-------
>>> from devplace_lite.multidim.generate import random_model
>>> r = plan_optimal(random_model(1, layers=4).with_cluster(devices=4))
>>> r.status, r.objective is not None
('optimal', True)
"""

from __future__ import annotations

import os

from ..errors import GraphError, UsageError
from .model import Model, read_model, repeat_layer
from .plan import Result, Stage, evaluate

__all__ = ["Model", "Result", "Stage", "evaluate", "load_model", "plan_optimal", "plan_piper",
           "read_model", "repeat_layer"]

#: Where Piper's input format is shown by example (``devplace convert GRAPH OUT --to piper`` made it).
EXAMPLE = "data/parallelize/bert_layer_training.json"


def load_model(path: str | os.PathLike, *, spec: str | None = None, devices: int | None = None) -> Model:
    """The model of a file, told apart by its content: Piper's input format (top-level
    ``maxDevices``, or nodes with ``TMPCs``), or a placement graph (the native format or the
    authors' msr JSON, `devplace_lite.io`) converted by `convert.from_graph` for ``spec``'s GPUs
    (their memory and links; ``devices`` decides whether data parallelism crosses nodes).

    Raises
    ------
    GraphError
        One line naming the file: not JSON, neither format (both named), or a bad field.
    UsageError
        ``spec`` given with a file of Piper's format, which carries its own cluster.

    Examples
    --------
    >>> m = load_model("data/graphs/bert_layer_training.json", spec="H100", devices=64)
    >>> m.devices, m.bandwidth == 50e9, m.extra["spec"]
    (64, True, 'H100')
    """
    from ..io import detect_format, graph_from_msr, graph_from_native, read_json
    from .model import model_from_dict

    obj = read_json(path)
    nodes = obj.get("nodes") if isinstance(obj, dict) else None
    if isinstance(obj, dict) and ("maxDevices" in obj or isinstance(nodes, list) and nodes
                                  and isinstance(nodes[0], dict) and "TMPCs" in nodes[0]):
        if spec is not None:
            raise UsageError(f"{path} is in Piper's format, which carries its own cluster: leave out --spec (give -k, "
                             "--memory, --bandwidth)")
        try:
            return model_from_dict(obj)
        except GraphError as e:
            raise GraphError(f"{path}: Piper's input format: {e}") from None
    try:
        fmt = detect_format(obj)
    except GraphError:
        raise GraphError(f"{path}: neither Piper's input format (maxDevices, maxMemoryPerDevice, bandwidth, "
                         f"mbsInBatch, nodes with TMPCs, edges; an example: {EXAMPLE}) nor a placement graph "
                         "(docs/graph-format.md)") from None
    from .convert import from_graph

    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        graph = graph_from_native(obj, stem, consume=True) if fmt == "native" else graph_from_msr(obj, stem)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None
    return from_graph(graph, spec=spec, **({} if devices is None else {"devices": devices}))


def plan_optimal(model: Model, *, time_limit: float | None = None, progress=None, knapsack: str = "exact") -> Result:
    """Registry entry ``exact``: the plan of least time per sample (`planner.plan_exact`); past
    ``time_limit`` the status is ``time_limit`` and the best baseline plan is the incumbent."""
    from .planner import plan_exact

    r = plan_exact(model, time_limit, knapsack, progress)
    if r.status == "time_limit":
        from .baselines import best_baseline

        inc = best_baseline(model)
        if inc is not None:
            r.objective, r.stages = inc.objective, inc.stages
            r.reason = (r.reason or "") + f"; incumbent from the {inc.method} baseline"
    return r


def plan_piper(model: Model, *, time_limit: float | None = None, progress=None) -> Result:
    """Registry entry ``piper``: `plan_optimal` with Piper's greedy knapsack rule, what its
    program computes; status ``feasible`` where the DP finished (optimal for the greedy rule,
    not proven for the model)."""
    r = plan_optimal(model, time_limit=time_limit, progress=progress, knapsack="greedy")
    r.method = "piper"
    if r.status == "optimal":
        r.status = "feasible"
        r.bound = None
    return r

