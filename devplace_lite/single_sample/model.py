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

The latency integer program of `devplace_lite.single_sample.ip` optimises exactly this quantity,
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

from ..cost import Placement, as_assignment, violations
from ..devices import Cluster
from ..errors import LimitError
from ..graph import Graph, GraphError
from ..result import Result
from ..methods import LATENCY_BOUND


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
        from ..devices import device_color

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
    k, n = cluster.k, graph.n
    on_acc = a < k
    # events: one per (device, slot) call, in (device, slot) order, then one per CPU node
    acc_nodes, cpu_nodes = np.flatnonzero(on_acc), np.flatnonzero(~on_acc)
    span = int(pieces.max(initial=0)) + 1
    codes, call_of = np.unique(a[acc_nodes] * span + pieces[acc_nodes], return_inverse=True)
    keys = [(int(x) // span, int(x) % span) for x in codes]
    C = len(keys)
    ev = np.empty(n, dtype=np.int64)
    ev[acc_nodes] = call_of.reshape(-1)
    ev[cpu_nodes] = C + np.arange(len(cpu_nodes))
    E = C + len(cpu_nodes)
    weight = np.zeros(E)
    weight[C:] = np.where(np.isnan(graph.p_cpu[cpu_nodes]), np.inf, graph.p_cpu[cpu_nodes])
    compute = np.bincount(ev[acc_nodes], weights=graph.p_acc[acc_nodes], minlength=C)[:C]
    es, ed = ev[graph.src], ev[graph.dst]
    cross = es != ed
    src, dst = graph.src[cross], graph.dst[cross]
    # (call, producer) pairs: received (consumer on an accelerator) or sent (producer on one)
    recv, send = on_acc[dst], on_acc[src]
    pair = np.unique(np.concatenate([ev[dst[recv]] * n + src[recv], ev[src[send]] * n + src[send]]))
    transfers = np.bincount(pair // n, weights=graph.comm[pair % n], minlength=C)[:C]
    weight[:C] = compute + transfers
    code = np.unique(es[cross] * E + ed[cross])
    arc_src, arc_dst = code // E, code % E
    same = np.flatnonzero(codes[1:] // span == codes[:-1] // span)  # the next call of the same device
    if len(same):
        arc_src, arc_dst = np.concatenate([arc_src, same]), np.concatenate([arc_dst, same + 1])
    finish, blocked, cyclic = _longest(E, weight, arc_src, arc_dst)
    return keys, ev, finish, blocked, cyclic, compute, transfers


def _longest(E: int, weight: np.ndarray, srcs: np.ndarray, dsts: np.ndarray) -> tuple[np.ndarray, bool, bool]:
    """F(e) = weight(e) + max(0, max over arcs p -> e of F(p)); a cycle through positive weight
    makes its events (and what follows) infinite. Returns the finish times, whether such a
    cycle exists, and whether any cycle does."""
    finish = _kahn_longest(E, weight, srcs, dsts)
    if finish is not None:
        return finish, False, False
    n_comp, comp = connected_components(csr_matrix((np.ones(len(srcs)), (srcs, dsts)), shape=(E, E)),
                                        directed=True, connection="strong")
    size = np.bincount(comp, minlength=n_comp)
    positive = np.zeros(n_comp, dtype=bool)
    np.logical_or.at(positive, comp, weight > 0)
    blocked = bool(np.any((size > 1) & positive))
    # component weight: its single event's weight, or 0 / inf for a cycle
    cw = np.where(size > 1, np.where(positive, np.inf, 0.0), 0.0)
    single = size[comp] == 1
    cw[comp[single]] = weight[single]
    cs, cd = comp[srcs], comp[dsts]
    keep = cs != cd
    code = np.unique(cs[keep] * n_comp + cd[keep])
    return _kahn_longest(n_comp, cw, code // n_comp, code % n_comp)[comp], blocked, True


def _kahn_longest(E: int, weight: np.ndarray, srcs: np.ndarray, dsts: np.ndarray) -> np.ndarray | None:
    """Longest finish times over a DAG of events by Kahn's algorithm; ``None`` on a cycle."""
    order = np.argsort(srcs, kind="stable")
    heads = np.searchsorted(srcs[order], np.arange(E + 1)).tolist()
    succ = dsts[order].tolist()
    indeg = np.bincount(dsts, minlength=E).tolist()
    ready = [e for e in range(E) if indeg[e] == 0]
    start = [0.0] * E
    finish = weight.tolist()
    done = 0
    while ready:
        e = ready.pop()
        done += 1
        f = finish[e] = start[e] + finish[e]
        for q in succ[heads[e]:heads[e + 1]]:
            if f > start[q]:
                start[q] = f
            indeg[q] -= 1
            if indeg[q] == 0:
                ready.append(q)
    return np.array(finish) if done == E else None


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
    keys, ev, finish, blocked, _, compute, transfers = _schedule(graph, cluster, a, p)
    if blocked and pieces is None:
        cut, p = "levels", level_pieces(graph, cluster, a)
        keys, ev, finish, blocked, _, compute, transfers = _schedule(graph, cluster, a, p)
    node_finish = finish[ev]
    calls = []
    for i, (d, s) in enumerate(keys):
        members = np.flatnonzero(ev == i).tolist()
        dur = compute[i] + transfers[i]
        calls.append(Call(d, s, members, float(finish[i] - dur), float(finish[i]), float(compute[i]),
                          float(transfers[i])))
    latency = float(node_finish.max()) if graph.n else 0.0
    return LatencyEvaluation(latency, node_finish, p, calls, cut, blocked, violations(graph, cluster, a))


def call_latency(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> float:
    """The latency of a placement whose accelerators each run all their nodes as one call, or
    ``inf`` when that is no split of the model: some accelerator's nodes are not convex (a path
    leaves them and comes back), or the calls wait on each other in a cycle. Memory, support
    and colocation are not checked (`evaluate_latency` does); local searches that only make
    allowed moves call this one, in ``O(n + m)``."""
    a = np.asarray(assignment, dtype=np.int64)
    _, _, finish, _, cyclic, _, _ = _schedule(graph, cluster, a, np.where(a < cluster.k, 0, -1))
    if cyclic:
        return math.inf
    return float(finish.max()) if graph.n else 0.0


def latency_of(result: Result) -> float:
    """The evaluator's latency of a latency method's `Result` (its ``pieces`` in ``extra``)."""
    return evaluate_latency(result.graph, result.cluster, result.assignment, result.extra.get("pieces")).latency


def reach_nodes() -> int:
    """Most nodes `reachability` takes: the reach of the latency methods and bounds that keep its
    ``n x n`` table (`devplace_lite.methods.LATENCY_BOUND` ``best``, the latency ``ip``)."""
    return LATENCY_BOUND["best"].reach.limit


def reachability(graph: Graph) -> np.ndarray:
    """``R[u, w]``: whether a path leads from ``u`` to ``w`` (an ``n x n`` boolean matrix).
    Raises `LimitError` past `reach_nodes` nodes, before allocating."""
    if graph.n > reach_nodes():
        raise LimitError(f"graph {graph.name}: {graph.n:,} nodes; {LATENCY_BOUND['best'].reach.past} "
                         f"and take at most {reach_nodes():,}")
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
