"""Single-sample latency of a split (inference): when does the last operator finish?

The model (Tarnawski et al., 2020, the latency setting), for one sample and a placement:

* **CPU work is unbounded in parallelism.** With at least one CPU core in the cluster, a node
  ``v`` placed on any core starts when all its inputs are ready and finishes ``p_cpu(v)`` later:
  ``F(v) = p_cpu(v) + max(0, max over predecessors u of F(u))``. CPU cores pay no transfers.
* **An accelerator runs its nodes as calls (pieces).** Each accelerator's nodes are cut into
  pieces ``P_1, P_2, ...`` run one after another in that order. A call starts once every input
  it reads from outside the piece is ready and the previous piece of the same accelerator has
  finished; it then receives its inputs, computes, and sends its outputs, with no overlap::

      start(P)  = max(finish(previous piece), max over u not in P feeding P of F(u), 0)
      finish(P) = start(P) + sum p_acc(P) + sum c(u) over u not in P feeding P
                                          + sum c(u) over u in P feeding a node outside P

  and every node of ``P`` is ready at ``finish(P)`` (``F(v) = finish(P)``). Transfers between
  two pieces are paid by both (one sends, one receives), also on the same accelerator.
* The **latency** is ``max over v of F(v)``: the least solution of these rules. When the pieces
  wait on each other in a cycle (possible for a bad cut: two convex parts ``{a, d}``,
  ``{b, c}`` of ``a -> b``, ``c -> d``) and some time on the cycle is positive, no schedule
  exists and the latency is ``inf`` (``deadlock``).

The pieces are given (``pieces``: slot index per accelerator node, run in increasing order;
the latency IP returns them), or cut by the rule of the authors' evaluator: a node's piece is
the largest number of times a path into it leaves its accelerator and comes back, so each
piece is convex and the pieces of one device are ordered. If that cut deadlocks across
devices, each node's piece becomes its level: the largest number of device changes on a path
into it (always schedulable; ``cut`` says which rule was used).

The latency integer program of `devplace_lite.mip.latency` optimises exactly this quantity,
with at most ``q`` convex pieces per accelerator. `exhaustive_latency` is its ground truth on
tiny graphs.

Complexity: ``O((n + m) k)`` for the cut and ``O(n + m)`` for the schedule.

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> from devplace_lite.devices import Cluster
>>> g = Graph([Node("a", p_acc=1, p_cpu=5, comm=0.5), Node("b", p_acc=2, p_cpu=8)], [("a", "b")])
>>> evaluate_latency(g, Cluster(accelerators=2, cpus=1), {"a": "acc0", "b": "acc1"}).latency
4.0
>>> evaluate_latency(g, Cluster(accelerators=2, cpus=1), {"a": "acc0", "b": "acc0"}).latency
3.0
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from .cost import Placement, as_assignment, violations
from .devices import Cluster
from .graph import Graph, GraphError
from .result import Result


@dataclass
class Call:
    """One piece run on an accelerator: its nodes, start and finish (ms) and its transfers."""

    device: int
    slot: int
    nodes: list[int]
    start: float
    finish: float
    compute: float
    transfers: float


@dataclass
class LatencyEvaluation:
    """Everything the latency model says of one placement (see the module docstring)."""

    latency: float
    finish: np.ndarray
    pieces: np.ndarray
    calls: list[Call]
    cut: str
    deadlock: bool
    violations: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return not self.violations and math.isfinite(self.latency)

    def tasks(self, graph: Graph, cluster: Cluster) -> list[tuple[str, float, float, str, str]]:
        """Boxes for `devplace_lite.plot.gantt`: one lane per accelerator, and CPU nodes packed
        into as many ``cpu·i`` lanes as run at once (the model's unbounded parallelism)."""
        from .devices import device_color

        out = [(cluster.names[c.device], c.start, c.finish - c.start, "+".join(graph.nodes[v].id for v in c.nodes)
                if len(c.nodes) <= 3 else f"{len(c.nodes)} ops", device_color(cluster, c.device)) for c in self.calls]
        cpu = [v for v in range(graph.n) if self.pieces[v] < 0]
        lanes: list[float] = []
        p_cpu = np.nan_to_num(graph.p_cpu)
        for v in sorted(cpu, key=lambda v: self.finish[v] - p_cpu[v]):
            start = self.finish[v] - p_cpu[v]
            lane = next((i for i, free in enumerate(lanes) if free <= start + 1e-12), len(lanes))
            if lane == len(lanes):
                lanes.append(0.0)
            lanes[lane] = self.finish[v]
            out.append((f"cpu·{lane}", float(start), float(p_cpu[v]), graph.nodes[v].id,
                        device_color(cluster, cluster.k)))
        return out


def reentry_pieces(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """Slot of each accelerator node (-1 on CPU): how often a path into it left its device and
    came back. Each piece is convex; the pieces of a device follow each other in slot order."""
    a = np.asarray(assignment)
    k = cluster.k
    if k == 0:
        return np.full(graph.n, -1, dtype=np.int64)
    dp = np.zeros((graph.n, k), dtype=np.int64)  # dp[v, d]: pieces of d seen on paths ending at v
    out = np.full(graph.n, -1, dtype=np.int64)
    for v in graph.topological_order().tolist():
        d = int(a[v])
        best = np.zeros(k, dtype=np.int64)
        for u in graph.pred[v]:
            np.maximum(best, dp[u], out=best)
            if d < k and a[u] != d and dp[u, d] + 1 > best[d]:
                best[d] = dp[u, d] + 1
        if d < k:
            best[d] = max(best[d], 1)
            out[v] = best[d] - 1
        dp[v] = best
    return out


def level_pieces(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """Slot of each accelerator node (-1 on CPU): the most device changes on a path into it
    (CPU cores count as one device). Never deadlocks: every dependency between two different
    calls, or a call and a CPU node, raises the level."""
    a = np.asarray(assignment)
    k = cluster.k
    dev = np.where(a < k, a, k)
    lvl = np.zeros(graph.n, dtype=np.int64)
    for v in graph.topological_order().tolist():
        for u in graph.pred[v]:
            lvl[v] = max(lvl[v], lvl[u] + int(dev[u] != dev[v]))
    return np.where(a < k, lvl, -1)


def _as_pieces(graph: Graph, cluster: Cluster, a: np.ndarray, pieces) -> np.ndarray:
    if isinstance(pieces, Mapping):
        out = np.zeros(graph.n, dtype=np.int64)
        for nid, s in pieces.items():
            if str(nid) not in graph.index:
                raise GraphError(f"pieces name unknown node {nid}")
            out[graph.index[str(nid)]] = int(s)
    else:
        out = np.asarray(pieces, dtype=np.int64).copy()
        if out.shape != (graph.n,):
            raise GraphError(f"pieces array has shape {out.shape}, expected ({graph.n},)")
    if np.any(out[a < cluster.k] < 0):
        raise GraphError("pieces: every accelerator node needs a slot >= 0")
    out[a >= cluster.k] = -1
    return out


def _schedule(graph: Graph, cluster: Cluster, a: np.ndarray, pieces: np.ndarray):
    """Least finish times of the events (CPU nodes and calls) and whether a cycle blocks them."""
    k = cluster.k
    on_acc = a < k
    # events: one per CPU node, one per (device, slot) call
    keys = sorted({(int(a[v]), int(pieces[v])) for v in np.flatnonzero(on_acc)})
    call_id = {key: i for i, key in enumerate(keys)}
    cpu_nodes = np.flatnonzero(~on_acc)
    ev = np.empty(graph.n, dtype=np.int64)
    ev[cpu_nodes] = len(keys) + np.arange(len(cpu_nodes))
    for v in np.flatnonzero(on_acc).tolist():
        ev[v] = call_id[(int(a[v]), int(pieces[v]))]
    E = len(keys) + len(cpu_nodes)
    weight = np.zeros(E)
    p_cpu = np.where(np.isnan(graph.p_cpu), np.inf, graph.p_cpu)
    weight[len(keys):] = p_cpu[cpu_nodes]
    compute = np.bincount(ev[on_acc], weights=graph.p_acc[on_acc], minlength=E)[:len(keys)]
    weight[:len(keys)] += compute
    es, ed = ev[graph.src], ev[graph.dst]
    cross = es != ed
    src, dst = graph.src[cross], graph.dst[cross]
    # (call, producer) pairs: received (consumer on an accelerator) or sent (producer on one)
    pairs = set()
    for u, w in zip(src.tolist(), dst.tolist()):
        if on_acc[w]:
            pairs.add((int(ev[w]), u))
        if on_acc[u]:
            pairs.add((int(ev[u]), u))
    transfers = np.zeros(len(keys))
    for e, u in pairs:
        transfers[e] += graph.comm[u]
    weight[:len(keys)] += transfers
    arcs = set(zip(es[cross].tolist(), ed[cross].tolist()))
    for (d0, _), (d1, _), i in zip(keys, keys[1:], range(len(keys) - 1)):
        if d0 == d1:  # the next call of the same device
            arcs.add((i, i + 1))
    finish, blocked = _longest(E, weight, arcs)
    return keys, ev, finish, blocked, compute, transfers


def _longest(E: int, weight: np.ndarray, arcs: set[tuple[int, int]]) -> tuple[np.ndarray, bool]:
    """F(e) = weight(e) + max(0, max over arcs p -> e of F(p)); a cycle through positive weight
    makes its events (and what follows) infinite."""
    arcs_l = sorted(arcs)
    srcs = np.array([p for p, _ in arcs_l], dtype=np.int64)
    dsts = np.array([q for _, q in arcs_l], dtype=np.int64)
    n_comp, comp = connected_components(csr_matrix((np.ones(len(arcs_l)), (srcs, dsts)), shape=(E, E)),
                                        directed=True, connection="strong")
    size = np.bincount(comp, minlength=n_comp)
    positive = np.zeros(n_comp, dtype=bool)
    np.logical_or.at(positive, comp, weight > 0)
    blocked = bool(np.any((size > 1) & positive))
    # component weight: its single event's weight, or 0 / inf for a cycle
    cw = np.where(size > 1, np.where(positive, np.inf, 0.0), 0.0)
    single = size[comp] == 1
    cw[comp[single]] = weight[single]
    succ: list[set[int]] = [set() for _ in range(n_comp)]
    indeg = np.zeros(n_comp, dtype=np.int64)
    for p, q in arcs_l:
        cp, cq = comp[p], comp[q]
        if cp != cq and cq not in succ[cp]:
            succ[cp].add(cq)
            indeg[cq] += 1
    ready = [c for c in range(n_comp) if indeg[c] == 0]
    start = np.zeros(n_comp)
    cf = np.zeros(n_comp)
    while ready:
        c = ready.pop()
        cf[c] = start[c] + cw[c]
        for q in succ[c]:
            start[q] = max(start[q], cf[c])
            indeg[q] -= 1
            if indeg[q] == 0:
                ready.append(q)
    return cf[comp], blocked


def evaluate_latency(graph: Graph, cluster: Cluster, placement: Placement,
                     pieces: Mapping[str, int] | Sequence[int] | np.ndarray | None = None) -> LatencyEvaluation:
    """The single-sample latency of a placement (see the module docstring for the model).

    ``pieces``: slot of each accelerator node (a node-id mapping or an array in node order;
    CPU nodes ignored); pieces of one accelerator run in increasing slot order. ``None`` cuts
    them by the re-entry rule (falling back to levels if that deadlocks).
    """
    a = as_assignment(graph, cluster, placement)
    if pieces is None:
        cut, p = "reentry", reentry_pieces(graph, cluster, a)
    else:
        cut, p = "given", _as_pieces(graph, cluster, a, pieces)
    keys, ev, finish, blocked, compute, transfers = _schedule(graph, cluster, a, p)
    if blocked and pieces is None:
        cut, p = "levels", level_pieces(graph, cluster, a)
        keys, ev, finish, blocked, compute, transfers = _schedule(graph, cluster, a, p)
    node_finish = finish[ev]
    calls = []
    for i, (d, s) in enumerate(keys):
        members = np.flatnonzero(ev == i).tolist()
        dur = compute[i] + transfers[i]
        calls.append(Call(d, s, members, float(finish[i] - dur), float(finish[i]), float(compute[i]),
                          float(transfers[i])))
    latency = float(node_finish.max()) if graph.n else 0.0
    return LatencyEvaluation(latency, node_finish, p, calls, cut, blocked, violations(graph, cluster, a))


def latency_of(result: Result) -> float:
    """The evaluator's latency of a latency method's `Result` (its ``pieces`` in ``extra``)."""
    return evaluate_latency(result.graph, result.cluster, result.assignment, result.extra.get("pieces")).latency


def reachability(graph: Graph) -> np.ndarray:
    """``R[u, w]``: whether a path leads from ``u`` to ``w`` (an ``n x n`` boolean matrix)."""
    R = np.zeros((graph.n, graph.n), dtype=bool)
    for v in graph.topological_order()[::-1].tolist():
        for w in graph.succ[v]:
            R[v, w] = True
            R[v] |= R[w]
    return R


def exhaustive_latency(graph: Graph, cluster: Cluster, q: int = 1, limit: int = 200_000) -> Result:
    """The least latency over every placement with at most ``q`` convex pieces per accelerator,
    by trying every assignment of nodes to (accelerator, slot) or the CPU. Tiny graphs only
    (``(k q + 1)^n`` labels, cut by relabelling identical accelerators); raises `GraphError`
    past ``limit`` labels."""
    t0 = time.perf_counter()
    k, n = cluster.k, graph.n
    q = int(q)
    if q < 1:
        raise GraphError(f"q (pieces per accelerator) must be at least 1, got {q}")
    L = k * q + (1 if cluster.l else 0)
    if L ** n > limit:
        raise GraphError(f"exhaustive latency search needs {L}^{n} labellings, over the limit of {limit}")
    R = reachability(graph)
    best_val, best = math.inf, None
    for labels in itertools.product(range(L), repeat=n):
        lab = np.array(labels, dtype=np.int64)
        dev = np.where(lab < k * q, lab // q, k)
        seen = -1
        canonical = True
        for d in dev.tolist():  # accelerators first used in order 0, 1, ...
            if d < k:
                if d > seen + 1:
                    canonical = False
                    break
                seen = max(seen, d)
        if not canonical or violations(graph, cluster, dev):  # memory, support, colocation
            continue
        ok = True
        for s in set(lab[dev < k].tolist()):
            inside = lab == s
            if np.any(R[inside].any(axis=0) & R[:, inside].any(axis=1) & ~inside):
                ok = False
                break
        if not ok:
            continue
        pieces = np.where(dev < k, lab % q, -1)
        val = evaluate_latency(graph, cluster, dev, pieces).latency
        if val < best_val:
            best_val, best = val, (dev, pieces)
    seconds = time.perf_counter() - t0
    if best is None or not math.isfinite(best_val):
        return Result("exhaustive-latency", graph, cluster, None, None, "infeasible", seconds, extra={"q": q})
    return Result("exhaustive-latency", graph, cluster, best[0], best_val, "optimal", seconds, bound=best_val,
                  extra={"q": q, "objective_kind": "latency", "pieces": pieces_dict(graph, cluster, *best)})


def pieces_dict(graph: Graph, cluster: Cluster, assignment: np.ndarray, pieces: np.ndarray) -> dict[str, int]:
    """Node id -> slot for accelerator nodes (what a latency `Result` carries in ``extra``)."""
    return {graph.nodes[v].id: int(pieces[v]) for v in range(graph.n) if assignment[v] < cluster.k}
