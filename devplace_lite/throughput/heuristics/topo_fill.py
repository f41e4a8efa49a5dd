"""Topological fill under memory caps (method ``topo-fill``): the placement a simple compiler
pass would make.

Problem: give each accelerator a consecutive run of a topological order, with about equal
compute and within its memory cap, in one pass and without looking at communication.

Method (the m-TOPO baseline of the placement literature, e.g. Addanki et al. 2019): walk the
blocks (`.blocks`) in topological order, filling the current accelerator towards its share
of the work still to place (the remaining work over the remaining accelerators); close it
before a block when that lands nearer the share than taking the block would, or when the
block would break the memory cap. Past the last accelerator the rest goes to CPU core 0
when there is one (still a pipeline: the CPU is the last stage), otherwise it stays on the
last accelerator, over its cap, and the answer is reported infeasible. Blocks no
accelerator may run are pinned to a CPU core. ``O(n + m log m)``.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> r = topo_fill(generate("skip_chain", 60, seed=4, training=True), Cluster(accelerators=3))
>>> r.check().split, r.objective == r.check().max_load
('chain', True)
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...devices import Cluster
from ...graph import Graph
from ...result import Result
from .blocks import block_structure
from .common import finish


def topo_fill(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Fill devices in topological order towards equal work under the memory cap."""
    t0 = time.perf_counter()
    blocks = block_structure(graph)
    costs = blocks.units.on(cluster)
    label = costs.pinned.copy()
    on_acc = cluster.k > 0
    devs = list(range(cluster.k)) if on_acc else list(range(cluster.size))
    cap = cluster.memory if on_acc else math.inf
    work = costs.acc_time if on_acc else costs.cpu_time
    work = np.where(np.isfinite(work), work, 0.0)
    mem = costs.mem
    free = blocks.order[label[blocks.order] < 0].tolist()
    left = float(work[free].sum())
    j, load, used = 0, 0.0, 0.0
    share = left / len(devs)
    spill = on_acc and cluster.l > 0
    for x in free:
        if j < len(devs) and (load > 0 or used > 0):
            nearer = load + work[x] - share > share - load
            if used + mem[x] > cap or (j < len(devs) - 1 and nearer):
                j += 1
                load, used = 0.0, 0.0
                share = left / max(len(devs) - j, 1)
            if j == len(devs) and not spill:
                j = len(devs) - 1  # no CPU core: the last accelerator takes the rest, over its cap
        label[x] = devs[j] if j < len(devs) else cluster.k
        load, used, left = load + work[x], used + mem[x], left - work[x]
    return finish("topo-fill", graph, cluster, label[blocks.of_node], t0)
