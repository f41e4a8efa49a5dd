"""What practitioners use today, and the ground truth: the baselines every method is compared with.

* `single_device`: everything on one accelerator (unsupported ops on a CPU core).
* `uniform`: equal numbers of units per stage along a topological order (DeepSpeed ``uniform``).
* `balance_by_parameters`: stages of balanced memory along the order (DeepSpeed ``parameters``,
  its default).
* `balance_by_time`: stages of balanced compute time along the order, blind to communication
  (what torchgpipe's ``balance_by_time`` aims at; here its best case, the exact min-max split).
* `greedy_fill`: walk the order and fill each accelerator up to an equal share of the work or
  its memory cap, the rest on CPU (the greedy baseline of Tarnawski et al.).
* `random_best_of`: the best of N random placements (Placeto's sanity baseline).
* `exhaustive_chain`: the exact optimum over chain splits on tiny graphs.

All but the last two cut one order into contiguous blocks: the units of
`devplace_lite.units.unit_graph` (colocation classes, stand-ins for backward-only classes, fused
where the order ties them in a cycle) in their topological numbering, so they give
chain-of-ideals splits that can run as a pipeline. Each returns a `Result` scored by the evaluator; a split that breaks
a memory cap or places an op where it cannot run comes back with status ``unknown`` (``infeasible``
only when no placement at all fits, `devplace_lite.result.no_feasible_status`).
"""

from __future__ import annotations

import time

import numpy as np

from ..cost import device_loads, evaluate
from ..devices import Cluster
from .exhaustive import batch_loads, exhaustive
from ..errors import UsageError
from ..graph import Graph
from ..result import Result, no_feasible_status
from .slicing import _greedy_cut
from ..units import UnitGraph, unit_graph


#: `random_best_of` draws at most this many node placements in all, and this many per batch.
RANDOM_DRAWS, RANDOM_BATCH = 5_000_000, 1_000_000
#: Graphs up to this many nodes are scored a batch at a time (`devplace_lite.throughput.exhaustive.batch_loads`).
SMALL = 5_000


def _assign_blocks(units: UnitGraph, cluster: Cluster, block_of_unit: np.ndarray) -> np.ndarray:
    """Device per node from a block index per unit (units in their topological numbering);
    units no accelerator may run go to cpu0."""
    dev_of_unit = np.asarray(block_of_unit, dtype=np.int64).copy()
    if cluster.l:
        dev_of_unit[units.bad_acc] = cluster.k
    return dev_of_unit[units.unit]


def _result(name: str, graph: Graph, cluster: Cluster, a: np.ndarray, t0: float, **extra) -> Result:
    ev = evaluate(graph, cluster, a)
    status = "feasible" if ev.feasible else no_feasible_status(graph, cluster)
    if not ev.feasible:
        extra["violations"] = ev.violations
    return Result(name, graph, cluster, a, ev.max_load, status, time.perf_counter() - t0, extra=extra)


def min_max_blocks(weights: np.ndarray, blocks: int) -> np.ndarray:
    """Cut a sequence into at most ``blocks`` contiguous blocks minimising the largest block sum.

    Bisection on the bottleneck with a greedy feasibility test (60 halvings: exact to float
    precision), then the greedy cut at the found value; the test is a compiled loop
    (`slicing._greedy_cut`: a million items took 20 s in Python). Returns the block index of
    each item.
    """
    w = np.ascontiguousarray(weights, dtype=float)
    if len(w) == 0:
        return np.zeros(0, dtype=np.int64)
    blocks = max(1, min(blocks, len(w)))
    out = np.empty(len(w), dtype=np.int64)
    # the running sums of the cut may round a hair above w.sum(): start from a limit they cannot reach
    lo, hi = float(w.max()), float(w.sum()) * (1 + 1e-9) + 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        if _greedy_cut(w, mid, blocks, out):
            hi = mid
        else:
            lo = mid
    _greedy_cut(w, hi, blocks, out)
    return out


def _balanced(name: str, graph: Graph, cluster: Cluster, values: np.ndarray) -> Result:
    t0 = time.perf_counter()
    if cluster.k == 0:
        raise UsageError(f"method {name} splits over accelerators: the cluster has none")
    units = unit_graph(graph)
    return _result(name, graph, cluster, _assign_blocks(units, cluster, min_max_blocks(units.sums(values), cluster.k)), t0)


def single_device(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Everything on ``acc0`` (ops no accelerator runs on ``cpu0``)."""
    t0 = time.perf_counter()
    if cluster.k == 0:
        return _result("single", graph, cluster, np.zeros(graph.n, dtype=np.int64), t0)
    units = unit_graph(graph)
    return _result("single", graph, cluster, _assign_blocks(units, cluster, np.zeros(units.size, dtype=np.int64)), t0)


def uniform(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """``k`` stages with equal numbers of units along a topological order."""
    t0 = time.perf_counter()
    if cluster.k == 0:
        raise UsageError("method uniform splits over accelerators: the cluster has none")
    units = unit_graph(graph)
    blocks = (np.arange(units.size) * cluster.k) // max(units.size, 1)
    return _result("uniform", graph, cluster, _assign_blocks(units, cluster, blocks), t0)


def balance_by_parameters(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """``k`` stages of balanced memory (parameters and activations) along a topological order."""
    return _balanced("parameters", graph, cluster, graph.memory)


def balance_by_time(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """``k`` stages of balanced accelerator compute time, ignoring communication."""
    return _balanced("time", graph, cluster, graph.p_acc)


def greedy_fill(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Fill accelerators in topological order up to ``total work / k`` or the memory cap each;
    what is left (and what no accelerator runs) goes to CPU core 0 when there is one."""
    t0 = time.perf_counter()
    units = unit_graph(graph)
    work, mem = units.pa, units.mem
    share = work.sum() / max(cluster.k, 1)
    blocks = np.empty(units.size, dtype=np.int64)
    b, load, used = 0, 0.0, 0.0
    for i in range(units.size):
        if b < cluster.k and load > 0 and ((load + work[i] > share and b + 1 < cluster.k)
                                           or used + mem[i] > cluster.memory):
            b, load, used = b + 1, 0.0, 0.0
        if b < cluster.k and mem[i] > cluster.memory:
            b = cluster.k  # fits on no accelerator: from here on, the CPU
        # past the last accelerator: cpu0 when there is one, else the last accelerator (over its cap)
        blocks[i] = min(b, cluster.k) if cluster.l or b < cluster.k else cluster.k - 1
        load, used = load + work[i], used + mem[i]
    return _result("greedy", graph, cluster, _assign_blocks(units, cluster, blocks), t0)


def random_best_of(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
                   samples: int = 2000) -> Result:
    """The best of ``samples`` random unit placements (any split kind) that respect memory and
    where each op may run; scored in batches by the model. Large graphs draw fewer: at most
    `RANDOM_DRAWS` node placements in all (``samples * n``), and batches of at most
    `RANDOM_BATCH` node placements, so time and memory stay linear in the graph."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    classes = unit_graph(graph, chain=False)
    units, U, k, D = classes.unit, classes.size, cluster.k, cluster.size
    unsup, nocpu = classes.bad_acc, classes.bad_cpu
    samples = max(1, min(samples, RANDOM_DRAWS // max(graph.n, 1)))
    batch = max(1, min(256, RANDOM_BATCH // max(graph.n, 1)))
    best, best_val, tried = None, np.inf, 0
    while tried < samples and (time_limit is None or time.perf_counter() - t0 < time_limit):
        B = min(batch, samples - tried)
        AU = rng.integers(0, D, size=(B, U))
        if cluster.l:
            AU[:, unsup] = k + rng.integers(0, cluster.l, size=(B, int(unsup.sum())))
        if k:
            AU[:, nocpu & ~unsup] = rng.integers(0, k, size=(B, int((nocpu & ~unsup).sum())))
        A = AU[:, units]
        tried += B
        if np.isfinite(cluster.memory) and k:
            mem = np.stack([np.where(A == d, graph.memory[None, :], 0.0).sum(axis=1) for d in range(k)], axis=1)
            A = A[np.all(mem <= cluster.memory, axis=1)]
        if not len(A):
            continue
        if graph.n <= SMALL:  # a node loop over a batch: fast on small graphs only
            worst = batch_loads(graph, cluster, A).max(axis=1)
        else:
            worst = np.array([(lambda c, m: (c + m).max())(*device_loads(graph, cluster, a)) for a in A])
        i = int(np.argmin(worst))
        if worst[i] < best_val:
            best_val, best = float(worst[i]), A[i].copy()
    if best is None:
        return Result("random", graph, cluster, None, None, no_feasible_status(graph, cluster), time.perf_counter() - t0,
                      extra={"samples": tried})
    return _result("random", graph, cluster, best, t0, samples=tried)


def exhaustive_chain(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """The optimal chain-of-ideals split by exhaustive search (tiny graphs only); with
    ``time_limit``, the best split tried so far when the time runs out (status ``time_limit``)."""
    r = exhaustive(graph, cluster, kind="chain", time_limit=time_limit)
    r.method = "exhaustive"
    return r
