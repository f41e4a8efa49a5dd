"""Exercises of chapter 05 (lower bounds, and slicing one topological order)."""

from __future__ import annotations

import math

import numpy as np

from devplace_lite.throughput.baselines import min_max_blocks
from devplace_lite.throughput.brkga import slice_order
from devplace_lite.cost import device_loads
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import batch_loads
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from .core import Case, close, random_topological_order, register

# -- 05.3  the best slicing of one topological order -------------------------------------------


def _slicing_cases(rng: np.random.Generator, i: int) -> Case:
    family = str(rng.choice(["cells", "layered", "series_parallel", "skip_chain"]))
    n, seed = (8, 3) if i == 0 else (int(rng.integers(5, 21)), int(rng.integers(0, 1000)))
    k = 3 if i == 0 else int(rng.integers(2, 7))
    graph = generate(family, n, seed=seed)
    text = f"graph = generate({family!r}, {n}, seed={seed})"
    alpha = 1.0 if i == 0 else float(rng.choice([1.0, 3.0, 10.0]))
    if alpha != 1.0:  # dearer transfers: fewer blocks than accelerators may be best
        graph = graph.with_nodes([Node(**{**v.__dict__, "comm": v.comm * alpha}) for v in graph.nodes])
        text += (f"; graph = graph.with_nodes([Node(**{{**v.__dict__, 'comm': v.comm * {alpha}}}) "
                 f"for v in graph.nodes])")
    order = random_topological_order(graph.succ, rng)
    return Case((graph, Cluster(accelerators=k), order),
                text=f"{text}; cluster = Cluster(accelerators={k}); order = {order}")


def _blocks_value(graph: Graph, cluster: Cluster, order, blocks) -> float:
    a = np.empty(graph.n, dtype=np.int64)
    a[np.asarray(order)] = blocks
    compute, comm = device_loads(graph, Cluster(accelerators=max(int(blocks.max()) + 1, 1)), a)
    return float((compute + comm).max())


def _exactly_k(graph: Graph, cluster: Cluster, order) -> float:
    """The slicing DP that forces exactly k non-empty blocks (``inf`` when k exceeds the nodes)."""
    n = len(order)
    spans = [(i, j) for j in range(1, n + 1) for i in range(j)]
    sides = np.ones((len(spans), graph.n), dtype=np.int64)
    for row, (i, j) in enumerate(spans):  # block order[i:j] on accelerator 0, the rest on accelerator 1
        sides[row, np.asarray(order[i:j], dtype=np.int64)] = 0
    cost = dict(zip(spans, batch_loads(graph, Cluster(accelerators=2), sides)[:, 0].tolist()))
    F = [0.0] + [math.inf] * n
    for _ in range(cluster.k):
        F = [math.inf] + [min(max(F[i], cost[i, j]) for i in range(j)) for j in range(1, n + 1)]
    return F[n]


def _slicing_slips(case: Case) -> list:
    graph, cluster, order = case.args
    # balancing the compute alone, then paying the transfers of that split
    blocks = min_max_blocks(graph.p_acc[np.asarray(order)], cluster.k)
    return [(max(float(graph.p_acc[np.asarray(order)][blocks == b].sum()) for b in range(int(blocks.max()) + 1)),
              "that is the best split of the compute alone: a block also pays c(u) for every producer whose "
              "edges cross its boundary"),
             (_blocks_value(graph, cluster, order, blocks),
              "that is the compute-balanced split scored with its transfers: the best slicing may cut "
              "elsewhere, where transfers are cheaper"),
             (_exactly_k(graph, cluster, order), "that uses exactly k blocks; fewer blocks (some accelerators idle) can "
                                                 "be better when transfers are dear: let a block be empty")]


register(id="05.3", name="my_best_slicing", title="the best slicing of one topological order",
         reference=lambda graph, cluster, order: slice_order(graph, cluster, order)[0],
         cases=_slicing_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_slicing_slips, fixed=1, n=12,
         forbidden=("devplace_lite.throughput.brkga", "devplace_lite.throughput.dp:linear", "devplace_lite.throughput.slicing"),
         hint="F[a][j] = min over i < j of max(F[a-1][i], load of the block order[i:j] on one accelerator), "
              "F[0][0] = 0; allow fewer than k blocks, and score a block with its transfers")
