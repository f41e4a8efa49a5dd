"""Exercises of chapter 05 (lower bounds, and slicing one topological order)."""

from __future__ import annotations

import numpy as np

from ..baselines import min_max_blocks
from ..brkga import slice_order
from ..cost import device_loads
from ..devices import Cluster
from ..generators import generate
from ..graph import Graph
from .core import Case, close, first_slip, random_topological_order, register

# -- 05.3  the best slicing of one topological order -------------------------------------------


def _slicing_cases(rng: np.random.Generator, i: int) -> Case:
    family = str(rng.choice(["cells", "layered", "series_parallel", "skip_chain"]))
    n, seed = (8, 3) if i == 0 else (int(rng.integers(5, 21)), int(rng.integers(0, 1000)))
    k = 3 if i == 0 else int(rng.integers(1, 6))
    graph = generate(family, n, seed=seed)
    order = random_topological_order(graph.succ, rng)
    return Case((graph, Cluster(accelerators=k), order),
                text=f"graph = generate({family!r}, {n}, seed={seed}); cluster = Cluster(accelerators={k}); "
                     f"order = {order}")


def _blocks_value(graph: Graph, cluster: Cluster, order, blocks) -> float:
    a = np.empty(graph.n, dtype=np.int64)
    a[np.asarray(order)] = blocks
    compute, comm = device_loads(graph, Cluster(accelerators=max(int(blocks.max()) + 1, 1)), a)
    return float((compute + comm).max())


def _slicing_diagnose(case: Case, expected: float, got) -> str | None:
    graph, cluster, order = case.args
    got = float(got)
    # balancing the compute alone, then paying the transfers of that split
    blocks = min_max_blocks(graph.p_acc[np.asarray(order)], cluster.k)
    slips = [(max(float(graph.p_acc[np.asarray(order)][blocks == b].sum()) for b in range(int(blocks.max()) + 1)),
              "that is the best split of the compute alone: a block also pays c(u) for every producer whose "
              "edges cross its boundary"),
             (_blocks_value(graph, cluster, order, blocks),
              "that is the compute-balanced split scored with its transfers: the best slicing may cut "
              "elsewhere, where transfers are cheaper")]
    return first_slip(slips, expected, got)


register(id="05.3", name="my_best_slicing", title="the best slicing of one topological order",
         reference=lambda graph, cluster, order: slice_order(graph, cluster, order)[0],
         cases=_slicing_cases, compare=close(rtol=1e-9, atol=1e-9), diagnose=_slicing_diagnose, n=12,
         hint="F[a][j] = min over i < j of max(F[a-1][i], load of the block order[i:j] on one accelerator), "
              "F[0][0] = 0; allow fewer than k blocks, and score a block with its transfers")
