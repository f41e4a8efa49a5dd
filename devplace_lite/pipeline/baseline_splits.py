"""The splits practitioners use, scored and replayed as the plan is.

Problem: set a plan's split beside the ones people use: an even split of the blocks (what torch
users write by hand), torchgpipe's balance by time, DeepSpeed's by parameters or uniform, a
compute-only balance (PiPPy's proposed ``auto_partition``), each scored by the same cost model
and replayed under the same schedule, so that the comparison is the split alone.

Exactness: each split is its method's (`devplace_lite.methods.PARTITION`); the scoring is exact
under the cost model. Complexity: the method's, plus one replay.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ..cost import as_assignment, chain_order
from ..errors import GraphError
from ..graph import Graph
from .pipeline_plan import PipelinePlan, scored
from .planner import partition


def with_stages(p: PipelinePlan, stage_of: Sequence[int], method: str) -> PipelinePlan:
    """``p`` with another split (segment -> stage, in order), scored by the same cost model: to
    run the splits practitioners use (`even_split`, a compute-only balance) beside the plan's."""
    q = dataclasses.replace(p, stage_of=list(stage_of), method=method, method_reason=f"given split ({method})",
                            search=None, recompute=None, stopped=[], auto=None)
    q.result = scored(q, stage_of, method)
    return q


def method_split(p: PipelinePlan, method: str, graph: Graph | None = None, *, time_limit: float | None = None,
                 seed: int = 0) -> list[int]:
    """Stage of each segment in the least-bottleneck split of ``method`` (a name of
    `devplace_lite.methods.PARTITION`: ``dp``, ``time``, ``parameters``, ``uniform``...) over the
    plan's stages, on the plan's chain graph or on ``graph`` (the same nodes, other costs).

    Raises
    ------
    GraphError
        The method finds no split.
    """
    g = p.chain if graph is None else graph
    res = partition(g, p.cluster, method, time_limit=time_limit, seed=seed)
    if res.assignment is None or res.status == "infeasible":
        raise GraphError(f"method {method} found no split of {len(p.names)} segments into {p.num_stages} stages")
    a = as_assignment(g, p.cluster, res.assignment)
    pos = {d: s for s, d in enumerate(chain_order(g, p.cluster, a))}
    return [pos[int(a[g.index[f"{i}:{nm}"]])] for i, nm in enumerate(p.names)]


def with_method(p: PipelinePlan, method: str, *, time_limit: float | None = None, seed: int = 0) -> PipelinePlan:
    """``p`` with the split ``method`` picks (`method_split`), scored by the same cost model and
    replayed under the same schedule: the splits of the DP, of torchgpipe's balance by time
    (``time``) and of DeepSpeed's ``parameters`` and ``uniform`` side by side."""
    return with_stages(p, method_split(p, method, time_limit=time_limit, seed=seed), method)


def compute_only(p: PipelinePlan) -> list[int]:
    """The split an equal-compute partitioner picks (PiPPy's proposed ``auto_partition`` balances
    compute alone): the exact DP on the profile with every transfer set to zero."""
    return method_split(p, "dp", p.chain.with_nodes([dataclasses.replace(v, comm=0.0) for v in p.chain.nodes]))


def even_split(graph: Graph, k: int) -> list[int]:
    """Stage of each segment when ``k`` stages begin at evenly spaced split points (what torch
    users write by hand: every ``n / k``-th block)."""
    n = len(graph.meta["segments"]["names"])
    k = min(k, n)
    return [min(k - 1, i * k // n) for i in range(n)]
