"""A latency lower bound that follows the graph's articulation chain and cuts each segment exactly.

Problem: bound below the single-sample latency of `devplace_lite.single_sample.model` (convex calls, one after
another per accelerator, CPU work in parallel, memory per call) on graphs built of blocks: a
stem, then Inception or residual blocks, each between two nodes that every path passes.

The bounds of `devplace_lite.single_sample.bounds` follow one path at a time, so where a call ends
inside a block they see the transfer of one branch, and where a branch runs on the CPU they see
no call waiting for it. This one looks at whole blocks. Add a zero-time source ``σ`` before the
sources and a zero-time sink ``τ`` after the sinks (both on the CPU, moving nothing). An
*articulation node* ``s`` is comparable with every node and no edge jumps over it (none from an
ancestor of ``s`` to a descendant). They form a chain ``σ = a_0 < a_1 < ... < a_r = τ``; the
*segment* ``X_i`` is the set of nodes strictly between ``a_i`` and ``a_{i+1}``.

Three facts make the segments independent. (1) A call that holds a node of ``X_i`` and a node
outside ``X_i ∪ {a_i, a_{i+1}}`` holds ``a_i`` or ``a_{i+1}`` (convexity). (2) So the call ``C``
of ``a_i`` meets ``X_i`` in a down-set ``D``, the call ``C'`` of ``a_{i+1}`` meets it in an up-set
``U``, either ``C = C'`` and then ``X_i ⊆ C``, or the rest ``M = X_i \\ (D ∪ U)`` runs in calls
inside the segment and on the CPU. (3) ``C`` receives only from ancestors of ``a_i`` and, when it
ends in ``X_i``, sends exactly from ``{a_i} ∪ D`` (no edge jumps over ``a_i``), and ``C'``
receives only from ``X_i ∪ {a_i}``. The dynamic program keeps, per articulation node, the least
ready time ``T`` if it runs on the CPU and, if it runs on an accelerator, the least
``G[m] = start(C) + receives(C) + compute of C's nodes up to it`` for each memory ``m`` (in
levels, rounded down) of those nodes; through a segment it tries every pair ``(D, U)``::

    finish(C) >= G[S - mem(D)] + p_acc(D) + sends({a_i} ∪ D)
    G'[mem(U ∪ a_{i+1})] >= finish(C) + max(0, max over M-nodes y feeding C' of off(y))
                            + receives(U ∪ a_{i+1}) + p_acc(U ∪ a_{i+1})

where ``off(y)`` is the path dynamic program of `latency_bounds.path_bound` run inside ``M``
from ``finish(C)`` (each node on the CPU or in a call of its own path, receiving and sending).
The segment's branches (connected components of ``X_i``) are enumerated one by one and combined,
keeping per memory pair only the pairs of (time, wait) no other beats. The latency is at least
``T`` of ``τ``.

Relaxed, so a lower bound: the number of calls and which device runs which call (so it holds for
any ``q``), calls of one device waiting for each other, and memory (rounded down to ``S``
levels) of calls other than those of articulation nodes. On a chain with as many accelerators
as nodes and memory in multiples of ``M / S`` it is exact.

Operator graphs hang weights, constants and dead-end outputs off the side, which hides the
articulation nodes: the program also runs on `main_core` (the nodes on paths from the main input
to the main output), each core node charged what its call must pay for the off-core nodes that
only it reads (`side_inputs`). With one call per accelerator (``q = 1``, what the searches and
the IP return), a colocation class on an accelerator is one call, and `one_call_relaxation`
first makes that a graph: an operator with its weights and dead-end outputs becomes one node
(their memory then counts), a class whose hull fits no call runs on the CPU (a tied embedding
read by the first and the last layer). On ResNet-50's operator graph this is the difference
between 465.9 ms (the weights' memory left out, so a call could hold more than fits) and
651.1 ms, the latency of the best split found: proven optimal. ``count_calls`` adds the number
of calls to the state (at most ``k q``; a segment whose middle runs on an accelerator holds at
least one call of its own).

Complexity: per segment, the product over its branches of the (down-set, up-set) pairs of each,
after pruning (twice that with ``count_calls``, times ``k q`` counts); `segment_bound` gives up
(``None``) when that exceeds ``max_rows`` or a branch has more than 62 nodes. ``O(n^2)`` for the
reachability table and the hulls of the colocation classes.

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> from devplace_lite.devices import Cluster
>>> g = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5, memory=1.0) for x in "abcd"],
...           [("a", "b"), ("b", "c"), ("c", "d")])
>>> segment_bound(g, Cluster(4, 1, memory=2.0))  # two calls: 2 + 0.5 sent, 0.5 received + 2
5.0
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..cost import allowed_kinds
from ..devices import Cluster
from ..graph import Graph
from ..result import Bound
from .bounds import critical_path_bound, ready_bounds, work_bound

#: Memory levels of a call (memory is rounded down to multiples of ``M / LEVELS``).
LEVELS = 4096
#: Most (down-set, up-set) combinations a segment may hold after pruning.
MAX_ROWS = 3_000_000
#: Most down-sets (or up-sets) of one branch.
MAX_SETS = 20_000
#: The 0/1 columns of a branch's rows, or-ed when branches combine.
FLAGS = ("eS", "fS", "mid")


@dataclass
class _Aug:
    """The graph with ``σ`` (index n) and ``τ`` (index n + 1) added."""

    n: int
    pred: list[list[int]]
    succ: list[list[int]]
    p_acc: np.ndarray
    p_cpu: np.ndarray  # inf where no CPU may run it
    comm: np.ndarray
    mem: np.ndarray  # in levels, exact (a set's memory is rounded down once, by `_floor`)
    acc: np.ndarray
    topo: list[int]


def _augment(graph: Graph, cluster: Cluster, levels: int) -> _Aug:
    n = graph.n
    acc, cpu = allowed_kinds(graph, cluster)
    sigma, tau = n, n + 1
    pred = [list(p) for p in graph.pred] + [[], []]
    succ = [list(s) for s in graph.succ] + [[], []]
    for v in range(n):
        if not graph.pred[v]:
            pred[v].append(sigma)
            succ[sigma].append(v)
        if not graph.succ[v]:
            succ[v].append(tau)
            pred[tau].append(v)
    if math.isfinite(cluster.memory) and cluster.memory > 0:
        mem = graph.memory / cluster.memory * levels
    else:
        mem = np.zeros(n)
    return _Aug(n=n + 2, pred=pred, succ=succ,
                p_acc=np.append(graph.p_acc, [0.0, 0.0]),
                p_cpu=np.append(np.where(cpu, graph.p_cpu, np.inf), [0.0, 0.0]),
                comm=np.append(graph.comm, [0.0, 0.0]),
                mem=np.append(np.minimum(mem, levels + 1.0), [0.0, 0.0]),
                acc=np.append(acc, [False, False]),
                topo=[sigma] + graph.topological_order().tolist() + [tau])


def _chain(a: _Aug) -> tuple[list[int], np.ndarray]:
    """The articulation nodes in order, and the reachability table (``R[u, w]``: a path u -> w).
    Raises `LimitError` past `model.reach_nodes` nodes, before allocating it."""
    from ..errors import LimitError
    from .model import reach_nodes

    if a.n - 2 > reach_nodes():
        raise LimitError(f"{a.n - 2:,} nodes: the segment bound keeps an n x n reachability table and takes "
                         f"at most {reach_nodes():,}")
    R = np.zeros((a.n, a.n), dtype=bool)
    for v in reversed(a.topo):
        for w in a.succ[v]:
            R[v, w] = True
            R[v] |= R[w]
    comparable = R | R.T
    np.fill_diagonal(comparable, True)
    cand = comparable.all(axis=1)
    src = np.array([u for u in range(a.n) for _ in a.succ[u]], dtype=np.int64)
    dst = np.array([w for u in range(a.n) for w in a.succ[u]], dtype=np.int64)
    out = []
    for v in a.topo:
        if cand[v] and not np.any(R[src, v] & R[v, dst]):
            out.append(v)
    return out, R


def _closed_sets(nodes: list[int], pred_in: dict[int, list[int]], limit: int) -> list[int] | None:
    """Every down-set of ``nodes`` under ``pred_in`` as bitmasks over the list, or None past ``limit``."""
    idx = {x: i for i, x in enumerate(nodes)}
    need = [sum(1 << idx[u] for u in pred_in[x]) for x in nodes]
    seen = {0}
    stack = [0]
    while stack:
        cur = stack.pop()
        for i in range(len(nodes)):
            if not cur >> i & 1 and need[i] & cur == need[i]:
                nxt = cur | 1 << i
                if nxt not in seen:
                    if len(seen) >= limit:
                        return None
                    seen.add(nxt)
                    stack.append(nxt)
    return sorted(seen)


class _Late(Exception):
    """The deadline passed midway through a segment (what was finished before it stands)."""


def _on_time(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise _Late()


def _branch_rows(a: _Aug, comp: list[int], s: int, t: int, tau: int, count: bool = False,
                 deadline: float | None = None) -> dict[str, np.ndarray] | None:
    """The (D, U) pairs of one branch ``comp`` (topologically sorted) of the segment between
    ``s`` and ``t``, as columns: ``memD``, ``A`` (compute and sends of D), ``memU``, ``R``
    (compute and receives of U and of ``t`` from this branch), ``B`` (the latest M-node feeding
    U or t, after finish(C)), ``Bc`` (the latest predecessor of ``t`` when ``t`` runs on the
    CPU, for U empty), ``eS`` (``s`` feeds a node of the branch outside D), ``fS`` (``s`` feeds
    a node of U), ``mid`` (some node of ``M`` runs on an accelerator: the segment has a call
    that holds neither ``s`` nor ``t``; with ``count`` each (D, U) comes once with ``M`` on the
    CPU and, when ``M`` has a node an accelerator may run, once with ``mid``; without, once with
    ``M`` free and ``mid`` false), ``Dempty``, ``Uempty``."""
    inset = set(comp)
    pred_in = {x: [u for u in a.pred[x] if u in inset] for x in comp}
    succ_in = {x: [w for w in a.succ[x] if w in inset] for x in comp}
    downs = _closed_sets(comp, pred_in, MAX_SETS)
    ups = _closed_sets(comp, succ_in, MAX_SETS)
    if downs is None or ups is None:
        return None
    bit = {x: 1 << i for i, x in enumerate(comp)}
    accmask = sum(bit[x] for x in comp if a.acc[x])
    downs = [d for d in downs if d & ~accmask == 0]
    ups = [u for u in ups if u & ~accmask == 0]
    fed_by_s = sum(bit[x] for x in comp if s in a.pred[x])
    feeds_t = sum(bit[x] for x in comp if t in a.succ[x])
    # producers feeding x from inside the branch, as a bitmask
    into = {x: sum(bit[u] for u in pred_in[x]) for x in comp}
    # for an up-set U: the branch nodes outside U feeding U or t
    cols: dict[str, list] = {k: [] for k in ("memD", "A", "memU", "R", "B", "Bc", "eS", "fS", "mid", "Dempty",
                                             "Uempty")}
    for D in downs:
        _on_time(deadline)
        # the path program inside M, from finish(C) = 0, twice: M's nodes free to run in calls
        # of their own (`mid`: the segment has a middle call), and M held to the CPU
        off, rd = _middle_paths(a, comp, D, bit, s, free=True)
        off0, rd0 = _middle_paths(a, comp, D, bit, s, free=False) if count else (off, rd)
        memD = float(sum(a.mem[x] for x in comp if D & bit[x]))
        A = 0.0
        for x in comp:
            if D & bit[x]:
                A += a.p_acc[x]
                if any(w != tau and not (w in bit and D & bit[w]) for w in a.succ[x]):
                    A += a.comm[x]
        eS = bool(fed_by_s & ~D)
        last = [x for x in comp if feeds_t & bit[x] and not D & bit[x]]
        Bc = max([rd[x] if t == tau else off[x] for x in last], default=0.0)
        Bc0 = max([rd0[x] if t == tau else off0[x] for x in last], default=0.0)
        for U in ups:
            if U & D:
                continue
            feeders = 0
            for x in comp:
                if U & bit[x]:
                    feeders |= into[x]
            feeders = (feeders | feeds_t) & ~U
            R = 0.0
            B = B0 = 0.0
            for x in comp:
                if feeders & bit[x]:
                    R += a.comm[x]
                    if not D & bit[x]:
                        B, B0 = max(B, off[x]), max(B0, off0[x])
                if U & bit[x]:
                    R += a.p_acc[x]
            memU = float(sum(a.mem[x] for x in comp if U & bit[x]))
            # a row with M on the CPU, and one with a middle call when M has a node for one
            variants = ((False, B0, Bc0), (True, B, Bc))[:2 if accmask & ~(D | U) else 1] if count else \
                ((False, B, Bc),)
            for mid, b, bc in variants:
                for key, val in (("memD", memD), ("A", A), ("memU", memU), ("R", R), ("B", b), ("Bc", bc),
                                 ("eS", eS), ("fS", bool(fed_by_s & U)), ("mid", mid), ("Dempty", D == 0),
                                 ("Uempty", U == 0)):
                    cols[key].append(val)
    return {k: np.array(v) for k, v in cols.items()}


def _middle_paths(a: _Aug, comp: list[int], D: int, bit: dict[int, int], s: int,
                  free: bool) -> tuple[dict[int, float], dict[int, float]]:
    """The path program inside ``M`` (the branch less ``D``; ``U``'s nodes are computed too and
    not read) from ``finish(C) = 0``: per node the least time its output is ready for a call
    other than its own (``off``) and for ``τ`` (``rd``, nothing sent). Each node runs on the CPU
    or, when ``free``, in a call of its own path that receives each input it does not hold."""
    off: dict[int, float] = {}
    rd: dict[int, float] = {}
    inc: dict[int, float] = {}  # least in-call time of a node on an accelerator
    for x in comp:
        if D & bit[x]:
            continue
        inside = [u == s or bool(D & bit[u]) for u in a.pred[x]]
        cpu = a.p_cpu[x] + max((0.0 if i else off[u] for u, i in zip(a.pred[x], inside)), default=0.0)
        h = math.inf
        if free and a.acc[x]:
            h = a.p_acc[x] + max((a.comm[u] if i else min(inc[u], off[u] + a.comm[u])
                                  for u, i in zip(a.pred[x], inside)), default=0.0)
        inc[x] = h
        off[x] = min(cpu, h + a.comm[x])
        rd[x] = min(cpu, h)
    return off, rd


def _floor(x):
    """Memory in whole levels, rounded down (a hair further, so float error never rounds up)."""
    return np.floor(np.asarray(x) * (1 - 1e-12)).astype(np.int64)


def _combine(tables: list[dict[str, np.ndarray]], keys: tuple[str, ...], cost: tuple[str, ...], wait: str,
             levels: int, max_rows: int, deadline: float | None = None) -> dict[str, np.ndarray] | None:
    """Every choice of one row per branch: memory (``keys`` starting ``mem``) and ``cost``
    summed, ``wait`` maxed, flags (`FLAGS`) or-ed; per key only the rows whose
    (cost, wait) no other row of that key beats. Memory is counted in steps of ``2^i`` levels,
    each branch's rounded down, with the least ``i`` that keeps at most ``max_rows`` rows (the
    coarser, the weaker, never invalid); it comes back in levels. None if even one level per
    call is too many."""
    step = 1
    while step <= levels:
        rows = _combine_at(tables, keys, cost, wait, levels // step, step, max_rows, deadline)
        if rows is not None:
            for k in keys:
                if k.startswith("mem"):
                    rows[k] = rows[k] * step
            return rows
        step *= 2
    return None


def _combine_at(tables, keys, cost, wait, top: int, step: int, max_rows: int, deadline: float | None = None):
    acc = {k: np.zeros(1, dtype=bool if k in FLAGS else np.int64) for k in keys}
    acc["W"], acc["B"] = np.zeros(1), np.zeros(1)
    for tab in tables:
        _on_time(deadline)
        r1, r2 = len(acc["W"]), len(tab[wait])
        if r1 * r2 > max_rows:
            return None
        i, j = np.repeat(np.arange(r1), r2), np.tile(np.arange(r2), r1)
        new = {}
        for k in keys:
            if k in FLAGS:
                new[k] = acc[k][i] | tab[k][j]
            else:
                new[k] = acc[k][i] + _floor(tab[k] / step)[j]
        new["W"] = acc["W"][i] + sum(tab[c][j] for c in cost)
        new["B"] = np.maximum(acc["B"][i], tab[wait][j])
        ok = np.isfinite(new["W"]) & np.isfinite(new["B"])
        for k in keys:
            if k.startswith("mem"):
                ok &= new[k] <= top
        new = {k: v[ok] for k, v in new.items()}
        acc = _prune(new, keys, top)
    return acc


def _prune(rows: dict[str, np.ndarray], keys: tuple[str, ...], levels: int) -> dict[str, np.ndarray]:
    if not len(rows["W"]):
        return rows
    key = np.zeros(len(rows["W"]), dtype=np.int64)
    for k in keys:
        key = key * (levels + 2 if k.startswith("mem") else 2) + rows[k].astype(np.int64)
    order = np.lexsort((rows["B"], rows["W"], key))
    ks, B = key[order], rows["B"][order]
    start = np.ones(len(ks), dtype=bool)
    start[1:] = ks[1:] != ks[:-1]
    gid = np.cumsum(start) - 1
    big = 2.0 * (float(B.max() - B.min()) + 1.0)
    run = np.minimum.accumulate(B - gid * big) + gid * big  # running least wait within each key
    prev = np.empty_like(run)
    prev[0] = np.inf
    prev[1:] = run[:-1]
    prev[start] = np.inf
    keep = order[B < prev - 1e-12]
    return {k: v[keep] for k, v in rows.items()}


def _components(a: _Aug, X: list[int]) -> list[list[int]]:
    """The branches of a segment: connected components of ``X`` (edges either way), each in
    topological order."""
    inset = set(X)
    rank = {v: i for i, v in enumerate(a.topo)}
    seen: set[int] = set()
    out = []
    for x in sorted(X, key=rank.__getitem__):
        if x in seen:
            continue
        comp, stack = [], [x]
        seen.add(x)
        while stack:
            y = stack.pop()
            comp.append(y)
            for z in a.pred[y] + a.succ[y]:
                if z in inset and z not in seen:
                    seen.add(z)
                    stack.append(z)
        out.append(sorted(comp, key=rank.__getitem__))
    return out


def segment_bound(graph: Graph, cluster: Cluster, *, levels: int = LEVELS, max_rows: int = MAX_ROWS,
                  deadline: float | None = None, q: int | None = None, count_calls: bool = False) -> float | None:
    """The lower bound of the module docstring on the latency of any split with at most ``q``
    calls per accelerator (None: any number), or None when a segment is too large to enumerate
    (see `MAX_ROWS`, `MAX_SETS`) or the ``deadline`` (a `time.perf_counter` value) passes first.
    ``inf`` when some node may run nowhere.

    Parameters
    ----------
    graph, cluster : the instance.
    levels : memory levels of a call; more is tighter and slower.
    max_rows : most combinations of branch choices one segment may keep.
    deadline : stop (None) once `time.perf_counter` passes it.
    q : calls per accelerator of the splits bounded; with ``q = 1`` the program first applies
        `one_call_relaxation` (a colocation class on an accelerator is one call). None: any
        number of calls.
    count_calls : with ``q``, also count the calls (at most ``k q``: each articulation node's,
        and one for a segment whose middle runs on an accelerator). Valid and tested; on the
        authors' eight latency inputs it raised no bound and cost about a third more time (each
        branch's rows come twice), so the certifier leaves it off.

    Returns
    -------
    float or None

    Raises
    ------
    LimitError
        Past `devplace_lite.single_sample.model.reach_nodes` nodes (an ``n x n`` table).

    The bound is that of the whole graph, or of `main_core` with `side_inputs` if higher: leaving
    nodes out is a relaxation (a split of the graph, restricted to the rest, is a split of it,
    no slower), and the side inputs only charge what a call of the rest pays for them.
    """
    if graph.n == 0:
        return 0.0
    calls = cluster.k * max(1, int(q)) if q is not None and count_calls else None
    if q == 1:
        relaxed = one_call_relaxation(graph, cluster)
        if relaxed is None:
            return math.inf
        graph = relaxed
    try:
        best = _chain_bound(graph, cluster, levels, max_rows, deadline, calls)
    except _Late:
        return None
    core = main_core(graph)
    if core is not None and (best is None or math.isfinite(best)):
        try:
            sub = _chain_bound(side_inputs(graph, cluster, core, one_call=q == 1), cluster, levels, max_rows,
                               deadline, calls)
        except _Late:
            sub = None
        if sub is not None and (best is None or sub > best):
            best = sub
    return best


def one_call_relaxation(graph: Graph, cluster: Cluster) -> Graph | None:
    """A graph whose optimal latency is at most that of ``graph`` over the splits with one call
    per accelerator (``q = 1``), where each colocation class shares one device and so, on an
    accelerator, one call:

    * a class whose hull (its nodes and every node on a path between two of them: one convex
      call holds them all) exceeds the memory cap or holds a node no accelerator runs may run
      only on the CPU (its nodes become unsupported);
    * a class that is its own hull, whose inputs from outside all enter one node ``e`` from which
      every node of it that feeds the outside is reached (an operator with its weights, its
      dead-end outputs and its epilogue), becomes one node: on an accelerator the class is one
      call (accelerator times and memory add, inputs arrive once), on the CPU each of its nodes
      that feeds the outside is ready no earlier than ``e``; its output costs the least ``c`` of
      those nodes and its CPU time is ``e``'s (both at most what any split pays);
    * a source ``w`` whose one successor ``v`` is of its class (a weight read by one operator) is
      merged into ``v``: on an accelerator they share a call (accelerator times and memory add,
      ``w``'s output never moves), on the CPU ``v`` waits for ``w`` (dropped: a relaxation).

    Nodes keep their ids (a merged node takes that of ``e``, or of ``v``); None when a class may
    run nowhere (no split with one call per accelerator exists). ``O(n^2)`` for the hulls."""
    from .model import reachability

    acc, _ = allowed_kinds(graph, cluster)
    classes: dict[str, list[int]] = {}
    for i, v in enumerate(graph.nodes):
        if v.color is not None:
            classes.setdefault(v.color, []).append(i)
    multi = [K for K in classes.values() if len(K) > 1]
    if not multi:
        return graph
    nodes = list(graph.nodes)
    R = reachability(graph)
    group = np.arange(graph.n)  # the node each node becomes
    for K in multi:
        hull = np.zeros(graph.n, dtype=bool)
        hull[K] = True
        inner = hull.copy()
        hull |= R[K].any(axis=0) & R[:, K].any(axis=1)
        if acc[K].any() and (graph.memory[hull].sum() > cluster.memory or not acc[hull].all()):
            for i in K:
                nodes[i] = replace(nodes[i], supported=False)
        if (hull != inner).any():
            continue
        entries = [i for i in K if any(not inner[u] for u in graph.pred[i])]
        exits = [i for i in K if any(not inner[w] for w in graph.succ[i])]
        if len(entries) > 1 or not exits:
            continue
        e = entries[0] if entries else None
        if e is not None and not all(x == e or R[e, x] for x in exits):
            continue
        head = e if e is not None else exits[0]
        if e is None and len(exits) > 1:
            continue
        cpu_ok = all(nodes[i].p_cpu is not None for i in K)
        nodes[head] = replace(nodes[head], p_acc=float(graph.p_acc[K].sum()), memory=float(graph.memory[K].sum()),
                              comm=float(graph.comm[exits].min()), supported=all(nodes[i].supported for i in K),
                              p_cpu=nodes[head].p_cpu if cpu_ok else None)
        group[K] = head
    for w in range(graph.n):  # weights read by one operator of their class
        if group[w] == w and not graph.pred[w] and len(graph.succ[w]) == 1:
            v = graph.succ[w][0]
            if group[v] == v and graph.nodes[w].color is not None and graph.nodes[w].color == graph.nodes[v].color:
                nv, nw = nodes[v], nodes[w]
                nodes[v] = replace(nv, p_acc=nv.p_acc + nw.p_acc, memory=nv.memory + nw.memory,
                                   supported=nv.supported and nw.supported,
                                   p_cpu=None if nw.p_cpu is None else nv.p_cpu)
                group[w] = v
    keep = np.flatnonzero(group == np.arange(graph.n)).tolist()
    if any(not nodes[i].supported and nodes[i].p_cpu is None for i in keep):
        return None
    if len(keep) == graph.n:
        return graph.with_nodes(nodes)
    edges = list(dict.fromkeys((graph.nodes[group[u]].id, graph.nodes[group[w]].id)
                               for u, w in zip(graph.src.tolist(), graph.dst.tolist()) if group[u] != group[w]))
    return Graph([nodes[i] for i in keep], edges, name=graph.name, defaults=dict(graph.defaults),
                 meta=dict(graph.meta))


def side_inputs(graph: Graph, cluster: Cluster, core: np.ndarray, one_call: bool = False) -> Graph:
    """The subgraph on ``core`` with what its calls pay for the nodes left out: a node ``u`` off
    the core whose one successor ``v`` is on it adds to ``v``'s accelerator time the least of
    ``p_acc(u)`` (``u`` in ``v``'s call, when that may be) and ``c(u)`` (``v``'s call receives
    ``u``'s output, once: no other node reads it). On the CPU ``v`` pays nothing.

    ``u`` may share ``v``'s call when an accelerator may run it and, with ``one_call`` (one call
    per accelerator, a colocation class in one call), when the hull of ``u``'s class and ``v``
    fits in memory and holds no node that no accelerator runs (a tied embedding read by the
    first and the last layer never shares the last layer's call)."""
    from .model import reachability

    acc, _ = allowed_kinds(graph, cluster)
    on = np.zeros(graph.n, dtype=bool)
    on[core] = True
    classes: dict[str, list[int]] = {}
    for i, x in enumerate(graph.nodes):
        if x.color is not None:
            classes.setdefault(x.color, []).append(i)
    R = reachability(graph) if one_call and classes else None
    extra = np.zeros(graph.n)
    for u in np.flatnonzero(~on).tolist():
        if len(graph.succ[u]) != 1 or not on[graph.succ[u][0]]:
            continue
        v = graph.succ[u][0]
        share = bool(acc[u])
        if share and R is not None and graph.nodes[u].color is not None:
            K = classes[graph.nodes[u].color] + [v]
            hull = np.zeros(graph.n, dtype=bool)
            hull[K] = True
            hull |= R[K].any(axis=0) & R[:, K].any(axis=1)
            share = bool(acc[hull].all()) and graph.memory[hull].sum() <= cluster.memory
        extra[v] += min(graph.p_acc[u], graph.comm[u]) if share else graph.comm[u]
    if not extra.any():
        return graph.subgraph(core)
    nodes = [replace(x, p_acc=x.p_acc + extra[i]) if extra[i] else x for i, x in enumerate(graph.nodes)]
    return graph.with_nodes(nodes).subgraph(core)


def main_core(graph: Graph) -> np.ndarray | None:
    """The nodes on paths from the source with the most descendants to the sink with the most
    ancestors (operator graphs hang weights and constants off the side of that core, and they
    hide its articulation nodes), or None when the graph has one source and one sink."""
    from .model import reachability

    sources = [v for v in range(graph.n) if not graph.pred[v]]
    sinks = [v for v in range(graph.n) if not graph.succ[v]]
    if not sources or (len(sources) == 1 and len(sinks) == 1):  # an empty graph has no core
        return None
    R = reachability(graph)
    np.fill_diagonal(R, True)
    s = max(sources, key=lambda v: int(R[v].sum()))
    t = max(sinks, key=lambda v: int(R[:, v].sum()))
    return np.flatnonzero(R[s] & R[:, t])


def _chain_bound(graph: Graph, cluster: Cluster, levels: int, max_rows: int, deadline: float | None,
                 calls: int | None = None) -> float | None:
    """The dynamic program along the articulation chain. ``calls``: the most calls of the splits
    bounded (None: any number); then each state also counts the calls started so far (the
    articulation nodes' calls, and one for a segment whose ``M`` runs on an accelerator), and a
    state with fewer calls stands for every larger count (``at most``)."""
    a = _augment(graph, cluster, levels)
    if np.any(~a.acc & ~np.isfinite(a.p_cpu)):
        return math.inf
    chain, R = _chain(a)
    tau = a.n - 1
    S = levels
    J = 0 if calls is None else max(int(calls), 0)
    inc = 0 if calls is None else 1  # calls a new call adds to the count
    T = np.full(J + 1, np.inf)  # per count of calls: the articulation node on the CPU, ready at T
    T[0] = 0.0  # sigma: on the CPU, at time 0
    G = np.full((J + 1, S + 1), np.inf)
    for s, t in zip(chain, chain[1:]):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        X = np.flatnonzero(R[s] & R[:, t]).tolist()
        comps = _components(a, X)
        if any(len(c) > 62 for c in comps):
            return None
        tables = []
        for comp in comps:
            tab = _branch_rows(a, comp, s, t, tau, count=calls is not None, deadline=deadline)
            if tab is None:
                return None
            tables.append(tab)
        direct = t in a.succ[s] and t != tau  # an edge into tau moves nothing
        cs = a.comm[s]
        Gpre = np.minimum.accumulate(np.minimum.accumulate(G, axis=1), axis=0)
        Tpre = np.minimum.accumulate(T)
        G2 = np.full((J + 1, S + 1), np.inf)
        T2 = np.full(J + 1, np.inf)
        live = [j for j in range(J + 1) if np.isfinite(Gpre[j, S])]  # counts with s on an accelerator
        if a.acc[t]:
            mt = _floor(a.mem[t])
            # s in the same call as t: the whole segment with them
            if a.acc[X].all() if X else True:
                mX = _floor(a.mem[X].sum() + a.mem[t])
                if mX <= S:
                    G2[:, mX:] = np.minimum(G2[:, mX:], G[:, :S + 1 - mX] + float(a.p_acc[X].sum()) + a.p_acc[t])
            if live:  # s on an accelerator, its call ends in the segment
                rows = _combine(tables, ("memD", "memU", "eS", "fS", "mid"), ("A", "R"), "B", S, max_rows,
                                deadline)
                if rows is None:
                    return None
                val = (rows["W"] + cs * ((rows["eS"] | direct).astype(float) + (rows["fS"] | direct).astype(float))
                       + rows["B"] + a.p_acc[t])
                _new_call(G2, [(j, Gpre[j, S - rows["memD"]]) for j in live], val, rows["memU"] + mt,
                          (1 + rows["mid"]) * inc)
            if np.isfinite(Tpre).any():  # s on the CPU
                rows = _combine([{k: v[tab["Dempty"]] for k, v in tab.items()} for tab in tables],
                                ("memU", "fS", "mid"), ("R",), "B", S, max_rows, deadline)
                if rows is None:
                    return None
                val = rows["W"] + cs * (rows["fS"] | direct).astype(float) + rows["B"] + a.p_acc[t]
                _new_call(G2, [(j, Tpre[j]) for j in range(J + 1) if np.isfinite(Tpre[j])], val,
                          rows["memU"] + mt, (1 + rows["mid"]) * inc)
        if math.isfinite(a.p_cpu[t]):
            only = [{k: v[tab["Uempty"]] for k, v in tab.items()} for tab in tables]
            if live:
                rows = _combine(only, ("memD", "eS", "mid"), ("A",), "Bc", S, max_rows, deadline)
                if rows is None:
                    return None
                val = rows["W"] + cs * (rows["eS"] | direct).astype(float) + rows["B"] + a.p_cpu[t]
                for j in live:
                    v = Gpre[j, S - rows["memD"]] + val
                    for mid in (False, True):
                        sel = rows["mid"] == mid
                        jj = j + int(mid) * inc
                        if sel.any() and jj <= J:
                            T2[jj] = min(T2[jj], float(v[sel].min()))
            if np.isfinite(Tpre).any():
                # per branch, its wait with M on the CPU, and its least wait
                both = [tab["Bc"][tab["Dempty"] & tab["Uempty"]] for tab in tables]
                waits = [[float(w[0]) for w in both], [float(w.min()) for w in both]]
                for mid, wait in enumerate(waits):
                    if mid * inc + 0 <= J:
                        T2[mid * inc:] = np.minimum(T2[mid * inc:], Tpre[:J + 1 - mid * inc] + max(wait, default=0.0)
                                                    + a.p_cpu[t])
        G = G2
        T = T2
    return float(T.min())


def _new_call(G2: np.ndarray, starts: list[tuple[int, np.ndarray | float]], val: np.ndarray, idx: np.ndarray,
              extra: np.ndarray) -> None:
    """``G2[j + extra, idx] <- min(start + val)`` for each ``(j, start)`` (a count and the time the
    rows start from), rows whose memory or count falls outside the table left out."""
    J, S = G2.shape[0] - 1, G2.shape[1] - 1
    for j, start in starts:
        jj = j + extra
        ok = (idx <= S) & (jj <= J)
        if ok.any():
            v = (start + val)[ok] if np.ndim(start) else start + val[ok]
            np.minimum.at(G2, (jj[ok], idx[ok]), v)


def articulation_units(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Each node's place along the articulation chain of `main_core` (the whole graph when it has
    one source and one sink): ``j`` for the ``j``-th articulation node and the nodes of the
    segment before it; a node off the core takes the least place of the core nodes it reaches,
    else the largest of those that reach it. An order of the graph by place (the latency search's
    articulation order) keeps every block together with the weights it reads, so that a cut of
    it into consecutive calls can cut where one tensor crosses."""
    from .model import reachability

    if graph.n == 0:
        return np.zeros(0, dtype=np.int64)
    core = main_core(graph)
    # no core (one source and one sink), or an empty one (the chosen source reaches no chosen
    # sink: disconnected pieces): the chain runs through the whole graph
    core = np.arange(graph.n) if core is None or not len(core) else core
    a = _augment(graph.subgraph(core), cluster, LEVELS)
    chain, R = _chain(a)
    m = len(core)
    at = R[:m][:, chain]
    at[np.arange(m)[:, None] == np.array(chain)[None, :]] = True
    place = np.zeros(graph.n, dtype=np.int64)
    on_core = np.zeros(graph.n, dtype=bool)
    on_core[core] = True
    place[core] = np.argmax(at, axis=1)
    if on_core.all():
        return place
    full = reachability(graph)
    for v in np.flatnonzero(~on_core).tolist():
        ahead, behind = full[v] & on_core, full[:, v] & on_core
        place[v] = place[ahead].min() if ahead.any() else (place[behind].max() if behind.any() else 0)
    return place


def articulation_split(graph: Graph, cluster: Cluster, place: np.ndarray | None = None,
                       cpu: np.ndarray | None = None, keep: np.ndarray | None = None) -> np.ndarray | None:
    """A split into calls along the articulation chain: the places of `articulation_units` cut
    into consecutive runs, each one call on its own accelerator, so that the sum of the calls'
    times (compute, receives, sends: a schedule's length, the calls running one after another)
    is least among runs that fit in memory, at most ``k`` of them; a dynamic program over
    (places done, calls used), each run's cost exact. The nodes ``cpu`` (a mask) go to the CPU
    (a colocation class spread far); ``keep[j]``: no cut between places ``j`` and ``j + 1`` (a
    class across them). None when no such cut fits."""
    k = cluster.k
    if k == 0 or graph.n == 0:
        return None
    acc, ok_cpu = allowed_kinds(graph, cluster)
    cpu = np.zeros(graph.n, dtype=bool) if cpu is None else cpu
    if not (acc | cpu).all() or not ok_cpu[cpu].all():
        return None
    place = articulation_units(graph, cluster) if place is None else place
    place = np.where(cpu, -1, place)
    J = int(place.max()) + 1
    mem = np.bincount(place[~cpu], weights=graph.memory[~cpu], minlength=J)
    work = np.bincount(place[~cpu], weights=graph.p_acc[~cpu], minlength=J)
    src, dst, comm = graph.src, graph.dst, graph.comm
    cost = np.full((J, J), np.inf)  # cost[i, j]: one call holding places i..j
    for i in range(J):
        for j in range(i, J):
            if mem[i:j + 1].sum() > cluster.memory:
                break
            inside = (place >= i) & (place <= j)
            cut = inside[src] != inside[dst]
            recv = np.unique(src[cut & inside[dst]])
            send = np.unique(src[cut & inside[src]])
            cost[i, j] = work[i:j + 1].sum() + comm[recv].sum() + comm[send].sum()
    f = np.full((J + 1, k + 1), np.inf)
    f[0, 0] = 0.0
    back = np.zeros((J + 1, k + 1), dtype=np.int64)
    for j in range(1, J + 1):
        for r in range(1, k + 1):
            if keep is not None and j < J and keep[j - 1]:
                continue
            vals = f[:j, r - 1] + cost[:j, j - 1]
            i = int(np.argmin(vals))
            f[j, r], back[j, r] = vals[i], i
    r = int(np.argmin(f[J]))
    if not math.isfinite(f[J, r]):
        return None
    a = np.full(graph.n, k, dtype=np.int64)
    j = J
    while r:
        i = int(back[j, r])
        a[(place >= i) & (place < j)] = r - 1
        j, r = i, r - 1
    return a


def best_latency_bound(graph: Graph, cluster: Cluster, q: int = 1, *, time_limit: float | None = None,
                       upper: float | None = None,
                       on_progress: Callable[[Bound], None] | None = None) -> Bound:
    """The strongest latency lower bound the library proves within ``time_limit`` seconds,
    cheapest step first, each raised bound reported through ``on_progress``:

    1. `critical_path_bound` and `work_bound` (closed form);
    2. `ready_bounds`: the path and interval programs (``q`` calls per accelerator);
    3. `devplace_lite.single_sample.segments.segment_bound`: the articulation chain with each block
       cut exactly, for ``q`` calls per accelerator (with ``q = 1`` colocation classes are calls:
       `one_call_relaxation`; ``None``, so skipped, on graphs it cannot split).

    Steps 2 and 3 keep ``n x n`` tables and are skipped past `devplace_lite.single_sample.model.reach_nodes` nodes. It stops
    once the bound meets ``upper`` (a known split's latency) or the time is up; a step stopped
    midway proves nothing and the finished ones stand.

    Parameters
    ----------
    graph, cluster : the instance.
    q : calls per accelerator of the splits bounded.
    time_limit : seconds for the whole call (None: no limit).
    upper : the latency of a known split, if any.
    on_progress : called with the `Bound` proven so far each time a step raises it (a caller that
        may stop this call midway keeps the last one).

    Returns
    -------
    Bound
        ``method`` names the step that gave it (``critical-path``, ``work``, ``path``,
        ``segments``); status ``optimal`` when it meets ``upper``, ``infeasible`` when some node
        may run nowhere (``inf``), ``time_limit`` otherwise; ``extra["components"]`` each step's
        bound and seconds.

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node(x, p_acc=1.0, p_cpu=10.0, comm=0.5, memory=1.0) for x in "abcd"],
    ...           [("a", "b"), ("b", "c"), ("c", "d")])
    >>> b = best_latency_bound(g, Cluster(4, 1, memory=2.0), upper=5.0)
    >>> b.bound, b.status
    (5.0, 'optimal')
    """
    from ..errors import LimitError
    from .model import reach_nodes

    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + float(time_limit)
    parts: dict[str, dict] = {}
    best = (-math.inf, "none")

    def status() -> str:
        if math.isinf(best[0]) and best[0] > 0:
            return "infeasible"
        if upper is not None and best[0] >= upper * (1 - 1e-9):
            return "optimal"
        return "time_limit"

    def bound() -> Bound:
        return Bound(best[0], best[1], time.perf_counter() - t0, status(), kind="any",
                     extra={"components": {k: dict(v) for k, v in parts.items()},
                            "tight": status() == "optimal"})

    def step(name: str, value: float | None, started: float) -> bool:
        """Record a finished step; True when the caller should stop (tight or out of time)."""
        nonlocal best
        parts[name] = {"bound": value, "seconds": round(time.perf_counter() - started, 4)}
        if value is not None and value > best[0]:
            best = (value, name)
            if on_progress is not None:
                on_progress(bound())
        return status() != "time_limit" or (deadline is not None and time.perf_counter() >= deadline)

    started = time.perf_counter()
    cheap = max((critical_path_bound(graph, cluster), "critical-path"), (work_bound(graph, cluster), "work"))
    if step(cheap[1], cheap[0], started) or graph.n > reach_nodes():
        return bound()
    started = time.perf_counter()
    try:
        path = ready_bounds(graph, cluster, q).bound
    except LimitError:
        path = None
    if step("path", path, started):
        return bound()
    started = time.perf_counter()
    step("segments", segment_bound(graph, cluster, deadline=deadline, q=q), started)
    return bound()
