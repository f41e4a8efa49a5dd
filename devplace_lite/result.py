"""What every method returns: a partitioning method's placement, objective, status and bound
(`Result`), a lower-bound method's proven bound (`Bound`), and what every plan answers
(`PlanAnswer`: a model's `devplace_lite.pipeline.pipeline_plan.PipelinePlan` and a Piper-format
`devplace_lite.multidim.plan.Result` alike).

`Result.to_json` is the ``--json`` contract of DESIGN.md: ``objective``, ``status``
(``optimal``, ``feasible``, ``infeasible``, ``unknown``, ``time_limit``), ``bound``, ``gap``,
``seconds``, ``placement`` (node id -> device name) and ``method``.

``infeasible`` is a proof that no placement of the method's kind fits; a method that found no
feasible placement without such a proof (a heuristic whose split breaks a memory cap) says
``unknown`` (`no_feasible_status`), and its answer has no gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cost import evaluate, placement_names
from .devices import Cluster
from .graph import Graph

STATUSES = ("optimal", "feasible", "infeasible", "unknown", "time_limit")


def unplaceable(graph: Graph, cluster: Cluster) -> str | None:
    """Why no placement at all fits, when one node's colocation class fits on no device of the
    cluster (no accelerator may run it or hold its memory, and no core may run it); else None.
    ``O(n)``.

    >>> from devplace_lite.graph import Node
    >>> g = Graph([Node("a", p_acc=1, p_cpu=4, memory=10)], [])
    >>> unplaceable(g, Cluster(accelerators=1, memory=5))
    'node a fits on no device (its class needs 10 bytes, over the cap of 5; the cluster has no CPU core)'
    >>> unplaceable(g, Cluster(accelerators=1, cpus=1, memory=5)) is None
    True
    """
    cls = graph.units
    size = int(cls.max()) + 1 if graph.n else 0
    mem = np.bincount(cls, weights=graph.memory, minlength=size)
    acc = np.ones(size, dtype=bool) if cluster.k else np.zeros(size, dtype=bool)
    np.logical_and.at(acc, cls, graph.supported)
    acc &= mem <= cluster.memory
    cpu = np.ones(size, dtype=bool) if cluster.l else np.zeros(size, dtype=bool)
    np.logical_and.at(cpu, cls, ~np.isnan(graph.p_cpu))
    bad = np.flatnonzero(~(acc | cpu)[cls])
    if not len(bad):
        return None
    v = int(bad[0])
    why_acc = ("the cluster has no accelerator" if not cluster.k else
               "not supported on accelerators" if not graph.supported[cls == cls[v]].all() else
               f"its class needs {mem[cls[v]]:.0f} bytes, over the cap of {cluster.memory:.0f}")
    why_cpu = "the cluster has no CPU core" if not cluster.l else "no CPU time"
    return f"node {graph.nodes[v].id} fits on no device ({why_acc}; {why_cpu})"


def no_feasible_status(graph: Graph, cluster: Cluster) -> str:
    """The status of a method that found no feasible placement: ``infeasible`` when
    `unplaceable` proves that none exists, ``unknown`` otherwise (a heuristic proves nothing)."""
    return "infeasible" if unplaceable(graph, cluster) is not None else "unknown"


@dataclass
class Result:
    """A placement found by ``method`` with its proven facts.

    ``objective`` is the value the method reports; `check` re-scores the placement with the
    evaluator so callers (and tests) can confirm the two agree. ``bound`` is a proven lower
    bound on the optimum of the problem the method solves, or ``None``.
    """

    method: str
    graph: Graph
    cluster: Cluster
    assignment: np.ndarray | None
    objective: float | None
    status: str
    seconds: float
    bound: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def placement(self) -> dict[str, str] | None:
        if self.assignment is None:
            return None
        return placement_names(self.graph, self.cluster, self.assignment)

    @property
    def gap(self) -> float | None:
        """Relative gap ``(objective - bound) / objective``: at most this far from optimal."""
        if self.status in ("infeasible", "unknown"):  # no feasible placement: no gap to state
            return None
        return relative_gap(self.objective, self.bound)

    def check(self):
        """The evaluator's verdict on the placement (`devplace_lite.cost.Evaluation`)."""
        return evaluate(self.graph, self.cluster, self.assignment)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "graph": self.graph.name,
            "accelerators": self.cluster.k,
            "cpus": self.cluster.l,
            "memory": self.cluster.memory if math.isfinite(self.cluster.memory) else None,
            # infeasible is a proof that nothing fits: a placement a heuristic tried breaks a cap and
            # has no objective to state (dp and the IPs answer null); the reason says which node
            "objective": None if self.status == "infeasible" else self.objective,
            "status": self.status,
            "bound": self.bound,
            "gap": self.gap,
            "seconds": round(self.seconds, 6),
        }
        if self.assignment is not None:
            ev = self.check()
            out["split"] = ev.split
            out["loads"] = {d: float(x) for d, x in zip(ev.devices, ev.loads)}
        out.update(self.extra)
        why = unplaceable(self.graph, self.cluster) if self.status == "infeasible" and "reason" not in out else None
        if why:
            out["reason"] = why
        out["placement"] = self.placement
        return out


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """``(objective - bound) / objective``, at least 0 (0 for an objective of 0); None without
    a finite objective and bound: how far from optimal an answer is at most.

    >>> relative_gap(10.0, 8.0), relative_gap(10.0, None), relative_gap(0.0, 0.0)
    (0.2, None, 0.0)
    """
    if objective is None or bound is None or not (math.isfinite(objective) and math.isfinite(bound)):
        return None
    return 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)


class PlanAnswer:
    """What every plan answers, whichever door made it (``devplace plan``, ``devplace
    parallelize``): ``method``, ``status`` (``optimal`` only when ``bound`` meets ``objective``;
    ``feasible``, ``time_limit`` with the incumbent, ``infeasible``), ``objective`` (in
    ``unit``; None without a plan), ``bound`` (a proven lower bound on the optimum, or None),
    `gap`, and `answer`: those keys as the ``--json`` answers of both commands begin.
    `devplace_lite.solve.plan` and `devplace_lite.solve.parallelize` make them."""

    #: What ``objective`` and ``bound`` measure.
    unit: str = ""
    method: str
    status: str
    objective: float | None
    bound: float | None

    @property
    def gap(self) -> float | None:
        """`relative_gap` of the objective and the bound (None without a plan)."""
        return relative_gap(self.objective, self.bound)

    def answer(self) -> dict[str, Any]:
        """The keys every plan's JSON shares: method, status, objective, bound, gap, unit."""
        return {"method": self.method, "status": self.status, "objective": self.objective, "bound": self.bound,
                "gap": self.gap, "unit": self.unit}


BOUND_STATUSES = ("optimal", "time_limit", "infeasible", "trivial")


@dataclass
class Bound:
    """A proven lower bound on the optimal largest device load (ms).

    ``status``: ``"optimal"`` when the bounding problem was solved to optimality (for a
    relaxation: its optimum was reached, so this bound cannot be raised by more solver time;
    for the exact MIP: the bound *is* the optimum), ``"time_limit"`` when the solver stopped at
    its time limit and ``bound`` is its best proven dual bound so far, ``"infeasible"`` when no
    placement of the asked kind exists (``bound`` is ``inf``), ``"trivial"`` for closed-form
    bounds that involve no solver. ``kind`` says which optimum is bounded: ``"any"`` (valid for
    every split, hence also for chains) or ``"chain"`` (valid for chain-of-ideals splits only).
    ``extra`` holds method details (per-stage bounds, incumbent of a MIP, components).
    """

    bound: float
    method: str
    seconds: float
    status: str
    kind: str = "any"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in BOUND_STATUSES:
            raise ValueError(f"unknown bound status {self.status!r}")
        if self.kind not in ("any", "chain"):
            raise ValueError(f"unknown split kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        """The ``devplace bound --json`` answer: ``bound`` (null when infinite), ``method``,
        ``seconds``, ``status``, ``kind`` and the method's extra fields."""
        out: dict[str, Any] = {
            "bound": self.bound if math.isfinite(self.bound) else None,
            "method": self.method,
            "seconds": round(self.seconds, 6),
            "status": self.status,
            "kind": self.kind,
        }
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out
