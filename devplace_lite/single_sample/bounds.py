"""Lower bounds on the single-sample latency of `devplace_lite.single_sample.model`.

Each bound holds for every split the latency model admits: any placement that respects
support, CPU times and memory caps, each accelerator running its nodes as convex calls (pieces)
one after another. None of them looks at how many calls an accelerator runs except to count
calls along a path (at most ``k q``), so each is valid for the latency IP with ``q`` calls per
accelerator and for any larger ``q``. Two facts carry the strong ones: a call waits for all its
inputs, then receives, computes and sends, so its end is at least the time any input is ready
plus everything the call pays; and a call is convex, so a path that leaves it never comes back,
and a call holding ``a`` and ``v`` holds every node on a path between them.

* `critical_path_bound`: the longest path with every node at its fastest allowed time. Cheap,
  and weak where transfers and memory decide the answer.
* `work_bound`: an accelerator runs its calls one after another, so the latency is at least its
  busy time; the nodes no CPU may run share the ``k`` accelerators.
* `path_bound`: a dynamic program that follows paths through calls and CPU nodes. Along a path
  a call costs at least the accelerator time of its nodes there (with all the nodes between
  two of them), the input it receives where the path enters and the output it sends where the
  path leaves; those nodes fit in one accelerator's memory, and a path visits at most ``k q``
  calls. A node's state is its device type and, on an accelerator, (calls on paths into it,
  memory of its call's nodes among its ancestors, in levels rounded down).
* `interval_bound`: a dynamic program whose state for a node ``v`` on an accelerator is the
  first node ``a`` of its call among its ancestors (first in a fixed order): the call holds the
  whole interval ``I(a, v)``, which must fit in memory exactly, and where the path leaves the
  call at ``v -> w`` every node of ``I(a, v)`` that feeds ``w`` or anything after it sends its
  output (a residual connection cut with its block).
* `ready_bounds`, `latency_bound`: the best of them, per node and for the latency.
* `devplace_lite.single_sample.segments.best_latency_bound`, the certifier's entry point: these, then
  the segment bound (whole blocks cut exactly), cheapest first, within a time limit.
* `latency_caps`: upper bounds on each node's ready time in any split of latency at most a
  given ``UB`` (chapter 04's exercise 2), which shrink the big-M rows of the latency IP.

In both programs each predecessor chooses its own state (a relaxation): the value at a node is
a lower bound on its ready time on each device type (`ReadyBounds`), and the largest over the
nodes a lower bound on the latency. The ready-time bounds also lift the LP relaxation of the
latency IP, which on its own proves no more than the critical path (chapter 04). On the
authors' latency workloads they close most of the gap the critical path leaves
(``benchmarks/latency``); what they miss is a call's cost that no single path sees.

Complexity: ``path_bound`` is ``O((n + m) k q S)`` time for ``S`` memory levels and keeps the
states of the nodes with successors still to do; ``interval_bound`` is ``O(n^3)`` (three
matrix products) plus ``O(n (n + m))``.

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> from devplace_lite.devices import Cluster
>>> g = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5, memory=1.0) for x in "abcd"],
...           [("a", "b"), ("b", "c"), ("c", "d")])
>>> critical_path_bound(g, Cluster(2, 1, memory=2.0))  # 4 nodes at 1 ms
4.0
>>> path_bound(g, Cluster(2, 1, memory=2.0)).bound  # two calls: 2 + 0.5 sent, 0.5 received + 2
5.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..cost import allowed_kinds
from ..devices import Cluster
from ..graph import Graph

#: Memory levels times calls per path: the size of a node's state in `path_bound`.
STATE_CELLS = 16384
#: Largest graph `interval_bound` takes on (it holds a few ``n x n`` matrices).
INTERVAL_NODES = 3000


def earliest_finish(graph: Graph, cluster: Cluster) -> np.ndarray:
    """A lower bound on each node's ready time in any split: the longest path into it (itself
    included) with every node at its fastest allowed time. Valid because the nodes of a path
    that share a call all compute inside it, after the inputs the call waits for."""
    acc, cpu = allowed_kinds(graph, cluster)
    t = np.minimum(np.where(acc, graph.p_acc, np.inf), np.where(cpu, graph.p_cpu, np.inf))
    t = np.where(np.isfinite(t), t, 0.0)
    f = np.zeros(graph.n)
    for v in graph.topological_order().tolist():
        f[v] = t[v] + max((f[u] for u in graph.pred[v]), default=0.0)
    return f


def critical_path_bound(graph: Graph, cluster: Cluster) -> float:
    """A lower bound on any latency: the largest `earliest_finish`."""
    return float(earliest_finish(graph, cluster).max()) if graph.n else 0.0


def work_bound(graph: Graph, cluster: Cluster) -> float:
    """The accelerator time of the nodes that no CPU may run, shared by the ``k`` accelerators:
    one of them is busy at least that long, and the latency is at least its busy time."""
    acc, cpu = allowed_kinds(graph, cluster)
    forced = ~cpu
    if cluster.k == 0 or not forced.any():
        return 0.0
    return float(graph.p_acc[forced].sum()) / cluster.k


def latency_caps(graph: Graph, cluster: Cluster, ub: float) -> np.ndarray:
    """``ub - tail(u)`` per node: ``tail(u)`` is the least time that must pass, in every schedule of
    the latency model, between ``u``'s output being ready and the end; so a split of latency at
    most ``ub`` has ``L[u] <= ub - tail(u)`` (chapter 04, exercise 2).

    ``tail(u) = max over successors w of (delta(u, w) + tail(w))``, 0 at a sink, where
    ``delta(u, w)`` is the least of: 0 when both may run on an accelerator (one call: ``u`` and
    ``w`` are ready together); ``p_cpu(w)`` when ``w`` may run on the CPU; ``p_acc(w) + c(u)``
    when ``w`` may run on an accelerator (a call that receives ``u``'s output after it is ready).
    """
    acc, cpu = allowed_kinds(graph, cluster)
    tail = np.zeros(graph.n)
    for u in graph.topological_order()[::-1].tolist():
        for w in graph.succ[u]:
            options = []
            if acc[u] and acc[w]:
                options.append(0.0)
            if cpu[w]:
                options.append(float(graph.p_cpu[w]))
            if acc[w]:
                options.append(float(graph.p_acc[w] + graph.comm[u]))
            tail[u] = max(tail[u], min(options, default=0.0) + tail[w])
    return float(ub) - tail


@dataclass
class ReadyBounds:
    """Lower bounds on each node's ready time from `path_bound`, in node order: ``cpu[v]`` if
    ``v`` runs on the CPU, ``acc[v]`` if on an accelerator (``inf`` where it may not), and the
    latency ``bound`` they imply (the largest over nodes of the smaller of the two)."""

    cpu: np.ndarray
    acc: np.ndarray
    bound: float
    levels: int

    @property
    def ready(self) -> np.ndarray:
        """A lower bound on each node's ready time, whatever its device."""
        return np.minimum(self.cpu, self.acc)


def memory_levels(graph: Graph, cluster: Cluster, calls: int, cells: int = STATE_CELLS) -> tuple[int, np.ndarray]:
    """``(S, units)``: the memory cap cut into ``S`` levels and each node's memory in levels,
    rounded down (so a call that fits in memory fits in ``S`` levels). ``S = 0`` when memory
    cannot bind: no cap, or all nodes an accelerator may run fit on one."""
    acc, _ = allowed_kinds(graph, cluster)
    if not math.isfinite(cluster.memory) or graph.memory[acc].sum() <= cluster.memory:
        return 0, np.zeros(graph.n, dtype=np.int64)
    S = max(8, cells // max(1, calls))
    # round down, and a hair further so float error never rounds a level up
    units = np.floor(graph.memory / cluster.memory * S * (1 - 1e-12)).astype(np.int64)
    return S, np.minimum(units, S + 1)


def path_bound(graph: Graph, cluster: Cluster, q: int = 1, cells: int = STATE_CELLS) -> ReadyBounds:
    """The path dynamic program of the module docstring.

    Parameters
    ----------
    graph, cluster : the instance.
    q : calls per accelerator (a path visits at most ``k q`` calls).
    cells : the size of a node's state (memory levels times calls); more is tighter and slower.

    Returns
    -------
    ReadyBounds
        Per-node lower bounds on the ready time by device type and the latency bound; the bound
        is ``inf`` when some node may run nowhere.
    """
    n, k = graph.n, cluster.k
    acc_ok, cpu_ok = allowed_kinds(graph, cluster)
    J = min(k * max(1, int(q)), n) if k else 0
    S, mem = memory_levels(graph, cluster, J, cells)
    p_cpu = np.where(cpu_ok, graph.p_cpu, np.inf)
    comm = graph.comm
    inf = np.inf
    # out[v, j]: earliest time v's output is ready for a consumer outside v's call, when at
    # most j calls lie on any path into v; g[v]: prefix minimum (over fewer calls and less
    # memory) of the in-call time of v: when its call has received an input and computed the
    # path into v. Only the g of nodes with successors still to process is kept.
    out = np.full((n, J + 1), inf)
    g: dict[int, np.ndarray] = {}
    left = np.array([len(s) for s in graph.succ])
    lb_cpu, lb_acc = np.full(n, inf), np.full(n, inf)
    between = _intervals(graph, acc_ok, mem)
    for v in graph.topological_order().tolist():
        preds = graph.pred[v]
        if cpu_ok[v]:
            ready = np.zeros(J + 1)
            for u in preds:
                np.maximum(ready, out[u], out=ready)
            c = p_cpu[v] + ready
            lb_cpu[v] = c[J]
            out[v] = c
        if acc_ok[v] and J:
            mv = int(mem[v])
            t = np.full((J + 1, S + 1), graph.p_acc[v])  # v alone, or first of its call
            for u in preds:
                term = np.empty((J + 1, S + 1))
                term[0] = inf
                term[1:] = (out[u, :J] + comm[u] + graph.p_acc[v])[:, None]  # u elsewhere: its output arrives
                gu = g.get(u)
                mi, ti = between.get((u, v), (S + 1, 0.0))
                if gu is not None and mi <= S:  # u in the same call, and all nodes between them
                    np.minimum(term[:, mi:], gu[:, :S + 1 - mi] + ti, out=term[:, mi:])
                np.maximum(t, term, out=t)
            t[0] = inf
            t[:, :mv] = inf
            np.minimum.accumulate(t, axis=0, out=t)
            np.minimum.accumulate(t, axis=1, out=t)
            lb_acc[v] = t[J, S]
            if left[v]:
                g[v] = t
            np.minimum(out[v], t[:, S] + comm[v], out=out[v])
        for u in preds:
            left[u] -= 1
            if not left[u]:
                g.pop(u, None)
    ready = np.minimum(lb_cpu, lb_acc)
    bound = float(ready.max()) if n else 0.0
    return ReadyBounds(lb_cpu, lb_acc, bound, S)


def _intervals(graph: Graph, acc_ok: np.ndarray, mem: np.ndarray) -> dict[tuple[int, int], tuple[int, float]]:
    """For each edge ``u -> v`` both ends of which may share a call: the memory levels and the
    accelerator time of the nodes a call holding both must also hold, ``v`` and every node on a
    path from ``u`` to ``v`` (calls are convex). Edges whose interval holds a node no
    accelerator runs are left out: their ends never share a call."""
    from .model import reachability

    R = reachability(graph)
    out = {}
    for u, v in zip(graph.src.tolist(), graph.dst.tolist()):
        if not (acc_ok[u] and acc_ok[v]):
            continue
        inside = R[u] & R[:, v]
        inside[v] = True
        if acc_ok[inside].all():
            out[u, v] = (int(mem[inside].sum()), float(graph.p_acc[inside].sum()))
    return out


def _late_order(graph: Graph) -> np.ndarray:
    """A topological order that puts every node as late as it can go: by the most edges on a
    path from it to a sink, longest first (a weight read by one layer sits next to it)."""
    topo = graph.topological_order()
    tail = np.zeros(graph.n, dtype=np.int64)
    for v in topo[::-1].tolist():
        tail[v] = max((tail[w] + 1 for w in graph.succ[v]), default=0)
    rank = np.empty(graph.n, dtype=np.int64)
    rank[topo] = np.arange(graph.n)
    return np.lexsort((rank, -tail))


def interval_bound(graph: Graph, cluster: Cluster, late: bool = True,
                   max_nodes: int = INTERVAL_NODES) -> ReadyBounds | None:
    """The interval dynamic program of the module docstring (``None`` past ``max_nodes``).

    The state of a node ``v`` on an accelerator is the first node ``a`` (in topological order)
    of its call among its ancestors; the call then holds the interval ``I(a, v)`` of nodes on
    paths from ``a`` to ``v`` (convexity), which must fit in memory. Bounded is
    ``Q(v) = start + receives + accelerator time of the call's ancestors of v``::

        Q(v, a) >= max( p_acc(I(a, v)),  max over predecessors u of the least of
                        out(u -> v) + c(u) + p_acc(I(a, v))                (u elsewhere)
                        min over a' not before a of Q(u, a') + p_acc(I(u, v) - u) )  (u in it)

    and the call ends no earlier than ``Q(v, a)`` plus what it sends: every node of ``I(a, v)``
    with a successor among ``w`` and the nodes after ``w`` sends, when ``v`` feeds ``w`` outside
    the call (none of those can be in the call, again by convexity). ``out(v -> w)`` is the
    least of that and ``v``'s CPU finish. ``O(n^3)`` for the interval sums (matrix products),
    ``O(n (n + m))`` for the rest.
    """
    from .model import reachability

    n = graph.n
    if n > max_nodes:
        return None
    acc_ok, cpu_ok = allowed_kinds(graph, cluster)
    inf = np.inf
    R = reachability(graph)
    R[np.arange(n), np.arange(n)] = True  # R[a, v]: a = v or a path a -> v
    Rf = R.astype(float)
    # sums over I(a, v) = {x : a -> x -> v} of memory, accelerator time, nodes no accelerator runs
    mem_i = (Rf * graph.memory) @ Rf
    acc_i = (Rf * graph.p_acc) @ Rf
    bad_i = (Rf * ~acc_ok) @ Rf
    valid = R & (mem_i <= cluster.memory * (1 + 1e-12)) & (bad_i == 0) & acc_ok[None, :] & (cluster.k > 0)
    adj = np.zeros((n, n))
    adj[graph.src, graph.dst] = 1.0
    after = (adj @ Rf.T) > 0  # after[x, w]: x feeds w or a node after w
    topo = _late_order(graph) if late else graph.topological_order()
    pos = np.empty(n, dtype=np.int64)
    pos[topo] = np.arange(n)
    p_cpu = np.where(cpu_ok, graph.p_cpu, inf)
    comm = graph.comm
    out: dict[tuple[int, int], float] = {}
    states: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # v -> (its first nodes a by position, Q(v, a))
    left = np.array([len(x) for x in graph.succ])
    lb_cpu, lb_acc = np.full(n, inf), np.full(n, inf)
    for v in topo.tolist():
        preds = graph.pred[v]
        if cpu_ok[v]:
            lb_cpu[v] = p_cpu[v] + max((out[u, v] for u in preds), default=0.0)
        A = np.flatnonzero(valid[:, v])
        A = A[np.argsort(pos[A])]
        # per predecessor, per state a of v: the value if it shares v's call (inf if it cannot)
        inside = {}
        for u in preds:
            term = np.full(len(A), inf)
            if u in states and valid[u, v]:
                Au, qu = states[u]  # u's first node a' also shares v's call: I(a', v) must fit
                qu = np.where(valid[Au, v], qu, inf)
                suffix = np.concatenate([np.minimum.accumulate(qu[::-1])[::-1], [inf]])
                term = suffix[np.searchsorted(pos[Au], pos[A])] + acc_i[u, v] - graph.p_acc[u]
            inside[u] = term
        # the call receives from every predecessor that cannot share it, all of them
        forced = sum((np.isinf(inside[u]) * comm[u] for u in preds), np.zeros(len(A)))
        q = acc_i[A, v] + forced
        for u in preds:
            outside = out[u, v] + acc_i[A, v] + forced + np.where(np.isinf(inside[u]), 0.0, comm[u])
            np.maximum(q, np.minimum(inside[u], outside), out=q)
        if len(A):
            lb_acc[v] = q.min()
            if left[v]:
                states[v] = (A, q)
        for w in graph.succ[v]:
            best = lb_cpu[v]
            if len(A):
                sends = (R[A] & (R[:, v] & after[:, w])) @ comm  # I(a, v) nodes feeding w or later
                best = min(best, float((q + sends).min()))
            out[v, w] = best
        for u in preds:
            left[u] -= 1
            if not left[u]:
                states.pop(u, None)
    ready = np.minimum(lb_cpu, lb_acc)
    return ReadyBounds(lb_cpu, lb_acc, float(ready.max()) if n else 0.0, 0)


def ready_bounds(graph: Graph, cluster: Cluster, q: int = 1) -> ReadyBounds:
    """The larger, node by node, of `path_bound` and `interval_bound` (both are lower bounds on
    every node's ready time on each device type)."""
    p = path_bound(graph, cluster, q)
    i = interval_bound(graph, cluster)
    if i is None:
        return p
    cpu, acc = np.maximum(p.cpu, i.cpu), np.maximum(p.acc, i.acc)
    return ReadyBounds(cpu, acc, float(np.minimum(cpu, acc).max()) if graph.n else 0.0, p.levels)


def latency_bound(graph: Graph, cluster: Cluster, q: int = 1) -> tuple[float, str]:
    """The best of the bounds above: ``(bound, name of the bound that gave it)``."""
    ready = ready_bounds(graph, cluster, q)
    cands = [(critical_path_bound(graph, cluster), "critical-path"), (work_bound(graph, cluster), "work"),
             (ready.bound, "path")]
    return max(cands, key=lambda t: t[0])
