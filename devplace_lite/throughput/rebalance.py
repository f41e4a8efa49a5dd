"""A runtime re-balancer: fix a pipeline split from measured stage times, round by round.

The compiler split the graph with the cost model; the hardware disagrees (kernels run
faster or slower than profiled, caches, clocks). What the runtime sees is one number per
stage: its measured time per sample. Tavarageri et al. (2019) call the piece that reacts to
it a "scheduling assistant"; here is one.

Each round:

1. measure the stages (``measure(assignment) -> time per device``);
2. estimate how far the model is off on each stage, as the ratio of measured to modelled
   compute (communication is taken as modelled);
3. take the slowest stage ``s`` and plan a shift of boundary blocks from it to a lighter
   neighbouring stage of the pipeline (blocks whose successors, or predecessors, all lie
   outside ``s``, so the split stays a chain of ideals), greedily, while the predicted
   slower of the two falls; a moved block is predicted to cost its modelled compute times
   the ratio of the stage it leaves. When the slowest stage has no such plan, the next
   slowest is tried (making room next to the bottleneck for a later round);
4. apply the plan and measure; keep it only if the measured bottleneck fell, or stayed
   while the stage times grew more even (smaller sum of squares), otherwise undo it and
   halve the number of blocks the next plan may move (a plan of one block that fails is
   not tried again; a plan that works doubles it back).

So the measured bottleneck never increases, whatever the measurements are. The search
stops when no plan is predicted to help or the round budget is spent.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.throughput.heuristics import kl
>>> g, c = generate("layered", 120, seed=5, training=True), Cluster(accelerators=4)
>>> start = kl(g, c).assignment
>>> truth = perturbed(g, sigma=0.3, seed=1, window=30)
>>> out = rebalance(g, c, start, measure_with(truth, c), rounds=20)
>>> out.history[-1] <= out.history[0]
True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..cost import as_assignment, chain_order, device_loads
from ..devices import Cluster
from ..errors import GraphError, UsageError
from ..graph import Graph
from .heuristics.blocks import block_structure
from .heuristics.incremental import LoadState

Measure = Callable[[np.ndarray], np.ndarray]


def perturbed(graph: Graph, sigma: float = 0.25, seed: int = 0, window: int = 1) -> Graph:
    """The "true" graph: node times (accelerator and CPU) multiplied by log-normal factors of
    median 1 and log-spread ``sigma``; communication unchanged.

    With ``window > 1`` the log-factors are a moving average over ``window`` consecutive
    nodes of a topological order (rescaled to spread ``sigma``): whole regions of the model
    run faster or slower than profiled, as when a profile taken on one machine is used on
    another, instead of independent errors that cancel within a stage.
    """
    if sigma < 0:
        raise UsageError(f"perturbation sigma must be non-negative, got {sigma}")
    if window < 1:
        raise UsageError(f"perturbation window must be at least 1, got {window}")
    z = np.random.default_rng(seed).standard_normal(graph.n + window - 1)
    z = np.convolve(z, np.ones(window) / np.sqrt(window), mode="valid")  # unit variance again
    f = np.empty(graph.n)
    f[graph.topological_order()] = np.exp(sigma * z)
    nodes = [replace(v, p_acc=v.p_acc * float(x), p_cpu=None if v.p_cpu is None else v.p_cpu * float(x))
             for v, x in zip(graph.nodes, f)]
    return graph.with_nodes(nodes, name=f"{graph.name}-perturbed")


def measure_with(truth: Graph, cluster: Cluster) -> Measure:
    """A simulated measurement: the load of every device under the true costs."""
    def measure(assignment: np.ndarray) -> np.ndarray:
        compute, comm = device_loads(truth, cluster, assignment)
        return compute + comm
    return measure


@dataclass
class Round:
    """One measurement: the stage times of the placement in force after the round."""

    index: int
    measured: np.ndarray
    moved: int
    accepted: bool

    @property
    def bottleneck(self) -> float:
        return float(self.measured.max())


@dataclass
class Rebalanced:
    """The placement after re-balancing and the record of every round (round 0: the start)."""

    assignment: np.ndarray
    rounds: list[Round] = field(default_factory=list)
    converged: bool = False

    @property
    def history(self) -> list[float]:
        """Measured bottleneck of the placement in force after each round (never increasing)."""
        return [r.bottleneck for r in self.rounds]

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds[1:])


def rebalance(graph: Graph, cluster: Cluster, assignment, measure: Measure, *, rounds: int = 30,
              max_moves: int | None = None) -> Rebalanced:
    """Re-balance the chain split ``assignment`` from measurements (see the module docstring).

    ``graph`` is the cost model the runtime knows; ``measure`` returns the measured time of
    every device for a placement; ``rounds`` bounds the number of measurements after the
    first; ``max_moves`` bounds the blocks one plan may move (default: no bound).
    """
    a = as_assignment(graph, cluster, assignment)
    if chain_order(graph, cluster, a) is None:
        raise GraphError("rebalance: the placement is not a chain of stages (a pipeline)")
    blocks = block_structure(graph)
    labels = a[np.array([x[0] for x in blocks.nodes], dtype=np.int64)]
    if not np.array_equal(labels[blocks.of_node], a):
        raise GraphError("rebalance: the placement splits a colocation block across devices")
    st = LoadState(graph, cluster, blocks, labels)
    m = np.asarray(measure(st.assignment), dtype=float)
    out = Rebalanced(st.assignment, [Round(0, m, 0, True)])
    cap = max_moves if max_moves is not None else blocks.count
    limit = cap
    tabu: set[tuple[int, int]] = set()
    for r in range(1, rounds + 1):
        plan = _plan(st, blocks, cluster, m, limit, tabu)
        if not plan:
            out.converged = True
            break
        before = {x: int(st.block_device[x]) for x, _ in plan}
        for x, t in plan:
            st.move(x, t)
        new = np.asarray(measure(st.assignment), dtype=float)
        # never a higher bottleneck; and progress (a lower one, or evener stages) so rounds cannot cycle
        ok = new.max() < m.max() or (new.max() == m.max() and float(new @ new) < float(m @ m))
        if ok:
            m = new
            limit = min(cap, 2 * limit)
        else:
            for x, _ in reversed(plan):
                st.move(x, before[x])
            if len(plan) == 1:
                tabu.add(plan[0])
            limit = max(1, len(plan) // 2)
        out.rounds.append(Round(r, m, len(plan), bool(ok)))
    out.assignment = st.assignment
    return out


def _plan(st: LoadState, blocks, cluster: Cluster, m: np.ndarray, limit: int,
          tabu: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The most promising shift of blocks out of the slowest stage that has one (a lighter
    neighbour predicted to end below the stage's time); empty when there is none."""
    order = chain_order(st.graph, cluster, st.a)
    if order is None:
        return []
    comm, compute = st.comm, st.compute
    # measured / modelled compute of each stage; communication taken as modelled
    ratio = np.where(compute > 0, (m - comm) / np.where(compute > 0, compute, 1.0), 1.0)
    for s in sorted(order, key=lambda d: -m[d]):
        i = order.index(s)
        best: tuple[float, list[tuple[int, int]]] | None = None
        for t in [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]:
            if m[t] >= m[s]:
                continue
            plan, peak = _shift(st, blocks, s, t, after=order.index(t) > i, m=m, ratio=ratio[s], limit=limit,
                                tabu=tabu)
            if plan and (best is None or peak < best[0]):
                best = (peak, plan)
        if best:
            return best[1]
    return []


def _shift(st: LoadState, blocks, s: int, t: int, after: bool, m: np.ndarray, ratio: float, limit: int,
           tabu: set[tuple[int, int]], lookahead: int = 8) -> tuple[list[tuple[int, int]], float]:
    """Plan moving frontier blocks of ``s`` to its neighbour ``t``: greedily take the block
    whose move leaves the lower predicted pair maximum, going on ``lookahead`` moves past the
    last improvement (a block that opens a new transfer may pay off with the next one), and
    keep the best prefix. Moves are made on ``st`` and undone; returns (plan, predicted peak)."""
    ps, pt = float(m[s]), float(m[t])
    best_peak, best_len = max(ps, pt), 0
    seq: list[tuple[int, int]] = []
    lab = st.block_device
    while len(seq) < limit and len(seq) - best_len <= lookahead:
        members = np.flatnonzero(lab == s)
        if len(members) <= 1:
            break
        pick = None
        for x in members.tolist():
            nb = blocks.succ[x] if after else blocks.pred[x]
            if (x, t) in tabu or not st.allowed(x, t) or (len(nb) and (lab[nb] == s).any()):
                continue
            if st.is_acc[t] and st.memory[t] + st.mem[x] > st.cluster.memory:
                continue
            new_s, new_t = st.delta(x, t)
            loads = st.loads
            d_comm_s = new_s - loads[s] + st.block_work(x, s)
            d_comm_t = new_t - loads[t] - st.block_work(x, t)
            qs = ps - ratio * st.block_work(x, s) + d_comm_s
            qt = pt + ratio * st.block_work(x, t) + d_comm_t
            if pick is None or max(qs, qt) < pick[0]:
                pick = (max(qs, qt), x, qs, qt)
        if pick is None:
            break
        peak, x, ps, pt = pick
        st.move(x, t)
        seq.append((x, t))
        if peak < best_peak * (1 - 1e-9):
            best_peak, best_len = peak, len(seq)
    for x, _ in reversed(seq):
        st.move(x, s)
    return seq[:best_len], best_peak
