"""Latency heuristics: the greedy of Tarnawski et al., the best cut of a topological order into
calls, and a local search over calls (``devplace latency --method greedy | local-search``).

The problem is that of `devplace_lite.single_sample.model` with one call per accelerator (``q = 1``): place
every node on an accelerator or the CPU so that each accelerator's nodes are convex, memory
caps hold, and the single-sample latency is least. It is NP-hard; these methods find good
splits fast and prove nothing (a `Result`'s ``bound`` is `devplace_lite.single_sample.bounds`').

* `greedy_latency`: walk the inseparable blocks (colocation classes, fused where they form a
  cycle) in topological order and pack consecutive ones onto the current accelerator while its
  memory lasts; what fits nowhere goes to the CPU (the paper's baseline). ``O(n + m)``.
* `order_split`: for one topological order of the blocks, the cut into consecutive runs, each
  either one call on its own accelerator or blocks on the CPU, that minimises the sum of the
  run times (a call: its compute, the inputs it receives and the outputs it sends; a CPU block:
  its CPU time). Running the runs one after another is a schedule, so the split's latency is at
  most that sum; on a chain it is exactly the latency, and the cut is optimal. A dynamic
  program over (blocks done, accelerators used), ``O(k B^2)`` for ``B`` blocks.
* `start_splits`: every split the library makes cheaply, scored for latency: the greedy, the
  partition methods of `devplace_lite.methods` (the throughput DP's split and the baselines)
  with pieces that come back to an accelerator moved to a free one, all on the CPU, and
  `order_split` on several orders (the blocks' order, depth first, as late as possible, and
  along the articulation chain of `devplace_lite.single_sample.segments.articulation_units`).
* `improve`: local search from a split. Moves: a block at the border of a call to a
  neighbour's device, to the CPU or to a free accelerator; a chain of CPU blocks (a branch the
  CPU runs) to a free accelerator, where it runs beside the other calls (on Inception-v3 single
  blocks never pay their two transfers back, whole branches do); a whole call merged into
  another or sent to the CPU; unfolding at a local optimum (a call sent to the CPU, then its
  branches one by one to idle accelerators while that helps: `_unfold`); and re-sequencing:
  `order_split` on the order in which the current split's schedule starts the blocks, kept
  when it is better. Every move is scored by
  `devplace_lite.single_sample.model.call_latency` (``O(n + m)``); the first improving one is taken, in a
  seeded random order, until none improves. Then kicks (re-sequencing with noise on the start
  times, or a few random moves) followed by the same descent, keeping the best, until the time
  is up (an iterated local search).
* `latency_local_search`: the best start, improved (the registry's ``local-search``); ``optimal`` when
  the bound of `devplace_lite.single_sample.bounds` meets it.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> g, c = generate("layered", 30, seed=1), Cluster(4, 1, memory=1.5e9)
>>> ls, gr = latency_local_search(g, c, seed=0), greedy_latency(g, c)
>>> ls.status, ls.objective <= gr.objective, ls.bound <= ls.objective
('feasible', True, True)
"""

from __future__ import annotations

import math
import time
from functools import cached_property
from typing import Callable

import networkx as nx
import numpy as np

from .. import methods
from ..devices import Cluster
from ..errors import LimitError
from ..graph import Graph
from .model import call_latency, evaluate_latency, pieces_dict, reentry_pieces
from .bounds import latency_bound
from ..result import Result, no_feasible_status
from ..units import UnitCosts, order_edges, unit_graph

#: Kicks of the local search when it has no deadline.
ROUNDS = 20
#: Longest chain of CPU blocks one move takes to an idle accelerator.
RUN_BLOCKS = 12
#: Seconds the throughput DP may take for a start when no deadline is given.
DP_SECONDS = 10.0


def unit_blocks(graph: Graph) -> list[np.ndarray]:
    """Inseparable blocks in a topological order: colocation units, with the units that form a
    cycle once contracted fused into one block (`devplace_lite.units.unit_graph`). Returns
    the node indices of each block."""
    return unit_graph(graph).members


# -- the greedy baseline -----------------------------------------------------------------------------
def greedy_latency(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """The greedy of Tarnawski et al.: walk the inseparable blocks in topological order and pack
    consecutive ones onto the current accelerator while its memory lasts; a block that fits on
    no accelerator (or that no accelerator supports) goes to the CPU and closes the current
    accelerator; once all ``k`` are used, the rest goes to the CPU. Each accelerator gets one
    convex call. ``time_limit`` and ``seed`` are accepted for the registry and unused."""
    t0 = time.perf_counter()
    k = cluster.k
    a = np.full(graph.n, -1, dtype=np.int64)
    cur, used = -1, 0.0  # current accelerator (-1: none open) and its memory
    for nodes in unit_blocks(graph):
        mem = float(graph.memory[nodes].sum())
        fits_alone = bool(graph.supported[nodes].all()) and mem <= cluster.memory
        if fits_alone and cur >= 0 and used + mem <= cluster.memory:
            used += mem
        elif fits_alone and cur + 1 < k:
            cur, used = cur + 1, mem
        elif cluster.l:
            a[nodes] = k  # the CPU; the next block opens a fresh accelerator
            if cur >= 0:
                used = math.inf
            continue
        else:  # no CPU to fall back on: stay on the last accelerator, over its cap
            cur = max(cur, 0)
        a[nodes] = cur
    return _latency_result("greedy", graph, cluster, a, t0)


def _latency_result(name: str, graph: Graph, cluster: Cluster, a: np.ndarray, t0: float,
                    bound: float | None = None, **extra) -> Result:
    """A one-call-per-accelerator split scored by the evaluator."""
    ev = evaluate_latency(graph, cluster, a, np.where(a < cluster.k, 0, -1))
    status = "feasible" if ev.feasible else no_feasible_status(graph, cluster)
    extra = {"objective_kind": "latency", "q": 1, **extra, "pieces": pieces_dict(graph, cluster, a, ev.pieces)}
    if ev.violations:
        extra["violations"] = ev.violations
    if bound is not None and ev.feasible:
        bound = min(bound, ev.latency)
    return Result(name, graph, cluster, a, ev.latency, status, time.perf_counter() - t0,
                  bound=bound if ev.feasible else None, extra=extra)


# -- blocks and their orders ---------------------------------------------------------------------------
class UnitOrders(UnitCosts):
    """The units of a graph on a cluster (`devplace_lite.units.UnitCosts`: what each may run on
    and what it costs) with the orders the latency search walks them in; ``unit_orders(graph,
    cluster)`` builds one. A unit's nodes share a device (``first``: one node of each)."""

    @property
    def nodes(self) -> list[np.ndarray]:
        return self.units.members

    @cached_property
    def first(self) -> np.ndarray:
        """One node of each unit (a unit's nodes share a device)."""
        return np.array([nodes[0] for nodes in self.nodes], dtype=np.int64)

    @cached_property
    def dag(self) -> nx.DiGraph:
        """The graph of the blocks (a DAG: blocks that would form a cycle are fused). Its arcs
        are the pairs a chain split keeps in order (`devplace_lite.units.order_edges`), of which
        the blocks are built: a training graph's own edges, backward ones included, made cycles
        between blocks (networkx refused to order them)."""
        s, t = (self.unit[x] for x in order_edges(self.graph))
        d = nx.DiGraph()
        d.add_nodes_from(range(len(self.nodes)))
        d.add_edges_from(zip(s[s != t].tolist(), t[s != t].tolist()))
        return d

    @cached_property
    def arcs(self) -> tuple[list[list[int]], list[list[int]]]:
        """Successor and predecessor lists of the blocks."""
        d = self.dag
        return [list(d.successors(b)) for b in d], [list(d.predecessors(b)) for b in d]

    def order(self, key) -> np.ndarray:
        """A topological order of the blocks, taking among the ready ones the least ``key(b)``."""
        return np.fromiter(nx.lexicographical_topological_sort(self.dag, key=key), dtype=np.int64)

    def orders(self) -> dict[str, np.ndarray]:
        """Three orders: the blocks' own (topological), depth first (a block's successors as soon
        as they are ready, as the authors' greedy walks), and as late as possible (each block
        just before the first block that needs it: weights next to their layer)."""
        succ, _ = self.arcs
        B = len(self.nodes)
        tail = np.zeros(B)  # longest accelerator-time path from a block to the end
        for b in range(B - 1, -1, -1):  # unit_blocks is topological
            tail[b] = self.pa[b] + max((tail[y] for y in succ[b]), default=0.0)
        stamp = iter(range(10 ** 9))
        ready_at = {}

        def depth_first(b: int) -> tuple[int, int]:
            ready_at.setdefault(b, -next(stamp))
            return ready_at[b], b

        return {"topological": np.arange(B), "depth-first": self.order(depth_first),
                "late": self.order(lambda b: (-tail[b], b))}


def unit_orders(graph: Graph, cluster: Cluster) -> UnitOrders:
    """The units of ``graph`` (`devplace_lite.units.unit_graph`: classes, forward cycles fused,
    numbered topologically) on ``cluster``, with their orders."""
    return UnitOrders(unit_graph(graph), cluster)


def order_split(blocks: UnitOrders, order: np.ndarray) -> tuple[np.ndarray, float]:
    """The best cut of ``order`` (a topological order of the blocks) into runs, each one call on
    its own accelerator or CPU blocks; see the module docstring. Returns the device of each node
    (accelerators numbered by run, the CPU as device ``k``) and the sum of the run times, an
    upper bound on the split's latency; when no cut fits, the value is ``inf`` and the
    placement meaningless."""
    g, c = blocks.graph, blocks.cluster
    B, k = len(order), c.k
    pos_of_block = np.empty(B, dtype=np.int64)
    pos_of_block[order] = np.arange(B)
    P = pos_of_block[blocks.unit]  # position of each node
    cost = _run_costs(g, blocks, order, P)
    # D[t, j]: least time for the first j blocks with at most t calls
    D = np.full((k + 1, B + 1), np.inf)
    choice = np.zeros((k + 1, B + 1), dtype=np.int64)  # -2: fewer calls, -1: CPU block, i >= 0: call i..j
    cpu = np.where(blocks.cpu_ok, blocks.pc, np.inf)[order]  # a run on the CPU only where this cluster has one
    D[0, 0] = 0.0
    for j in range(1, B + 1):
        D[0, j], choice[0, j] = D[0, j - 1] + cpu[j - 1], -1
    for t in range(1, k + 1):
        via = D[t - 1][:, None] + cost  # [i, j]: calls i..j after t - 1 calls
        best_i = np.argmin(via, axis=0)
        best = via[best_i, np.arange(B + 1)]
        row, ch = D[t], choice[t]
        prev = D[t - 1]
        for j in range(B + 1):
            v, ch_j = prev[j], -2
            if best[j] < v:
                v, ch_j = best[j], int(best_i[j])
            if j and row[j - 1] + cpu[j - 1] < v:
                v, ch_j = row[j - 1] + cpu[j - 1], -1
            row[j], ch[j] = v, ch_j
    value = float(D[k, B])
    dev_of_pos = np.full(B, k, dtype=np.int64)
    t, j, used = k, B, 0
    while j > 0 and math.isfinite(value):
        ch = int(choice[t, j])
        if ch == -2:
            t -= 1
        elif ch == -1:
            j -= 1
        else:
            dev_of_pos[ch:j] = used
            used, t, j = used + 1, t - 1, ch
    a = dev_of_pos[P]
    return a, value


def _run_costs(g: Graph, blocks: UnitOrders, order: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``cost[i, j]``: the time of blocks ``order[i:j]`` as one call (compute, inputs received,
    outputs sent); ``inf`` where they break the memory cap or hold a block no accelerator runs.
    Each producer adds its transfer to rectangles of (i, j), summed by a 2-D prefix sum."""
    B = len(order)
    rects: list[tuple[int, int, int, int, float]] = []  # i from..to, j from..to, value
    src, dst = g.src, g.dst
    cross = P[src] != P[dst]
    succ_pos: dict[int, set[int]] = {}
    for u, w in zip(src[cross].tolist(), dst[cross].tolist()):
        succ_pos.setdefault(u, set()).add(int(P[w]))
    for u, positions in succ_pos.items():
        c = float(g.comm[u])
        if c <= 0:
            continue
        pu, ps = int(P[u]), sorted(positions)
        rects.append((0, pu, pu + 1, ps[-1], c))  # u inside, a consumer after the run: sent
        lo = pu + 1
        for p in ps:  # u before the run, its first consumer inside at p: received
            rects.append((lo, p, p + 1, B, c))
            lo = p + 1
    D = np.zeros((B + 2, B + 2))
    if rects:
        r = np.array(rects)
        i0, i1, j0, j1, val = r[:, 0].astype(int), r[:, 1].astype(int), r[:, 2].astype(int), r[:, 3].astype(int), r[:, 4]
        np.add.at(D, (i0, j0), val)
        np.add.at(D, (i0, j1 + 1), -val)
        np.add.at(D, (i1 + 1, j0), -val)
        np.add.at(D, (i1 + 1, j1 + 1), val)
    comm = np.cumsum(np.cumsum(D, axis=0), axis=1)[:B + 1, :B + 1]
    pa = np.concatenate([[0.0], np.cumsum(blocks.pa[order])])
    pm = np.concatenate([[0.0], np.cumsum(blocks.mem[order])])
    bad = np.concatenate([[0], np.cumsum(~blocks.acc_ok[order])])
    cost = pa[None, :] - pa[:, None] + comm
    ok = (np.triu(np.ones((B + 1, B + 1), dtype=bool), 1) & (pm[None, :] - pm[:, None] <= blocks.cluster.memory)
          & (bad[None, :] == bad[:, None]))
    return np.where(ok, cost, np.inf)


# -- starting splits ---------------------------------------------------------------------------------------
def fit_calls(graph: Graph, cluster: Cluster, a: np.ndarray, q: int = 1) -> np.ndarray | None:
    """A placement whose accelerators run at most ``q`` calls, from any placement: cut by the
    re-entry rule (`devplace_lite.single_sample.model.reentry_pieces`), then the pieces past ``q`` of an
    accelerator moved, whole, to accelerators nothing runs on. ``None`` if there are too few."""
    before = np.asarray(a, dtype=np.int64)
    a = before.copy()
    k = cluster.k
    p = reentry_pieces(graph, cluster, before)
    free = [d for d in range(k) if not np.any(before == d)]
    for d in range(k):
        for s in range(q, int(p[before == d].max(initial=-1)) + 1):
            if not free:
                return None
            a[(before == d) & (p == s)] = free.pop(0)
    return a


def start_splits(graph: Graph, cluster: Cluster, *, deadline: float | None = None, seed: int = 0,
                 blocks: UnitOrders | None = None, target: float = -math.inf) -> list[tuple[str, np.ndarray, float]]:
    """Every cheap split of the module docstring as ``(name, assignment, latency)``, each with
    one convex call per accelerator and no violation: the greedy and the order splits first,
    then the partition methods, each given the time left before ``deadline`` (a
    `time.perf_counter` value; once it has passed, the rest are skipped; ``None``: the
    throughput DP gets `DP_SECONDS`). Once a split reaches ``target`` (a lower bound), the
    rest are skipped: none can be better."""
    from ..cost import violations

    blocks = blocks or unit_orders(graph, cluster)
    out = []

    def add(name: str, a: np.ndarray | None) -> None:
        if a is None:
            return
        a = fit_calls(graph, cluster, a)
        if a is None or violations(graph, cluster, a):
            return
        val = call_latency(graph, cluster, a)
        if math.isfinite(val):
            out.append((name, a, val))

    add("greedy", greedy_latency(graph, cluster).assignment)
    orders = blocks.orders()
    try:
        from .segments import articulation_split, articulation_units

        units = articulation_units(graph, cluster)
        place = np.full(len(blocks.nodes), units.max(initial=0))
        np.minimum.at(place, blocks.unit, units)  # a block (colocation class) goes where its first node goes
        orders["articulation"] = blocks.order(lambda b: (int(place[b]), b))
        # a colocation class over two or three places keeps them in one call; one spread wider runs on the CPU
        last = np.zeros(len(blocks.nodes), dtype=np.int64)
        np.maximum.at(last, blocks.unit, units)
        far = last - place > 2
        keep = np.zeros(int(units.max(initial=0)) + 1, dtype=bool)
        for b in np.flatnonzero(~far & (last > place)).tolist():
            keep[place[b]:last[b]] = True
        add("articulation cut", articulation_split(graph, cluster, units, far[blocks.unit], keep))
    except LimitError:  # past the reachability table's size: the other orders stand
        pass
    for name, order in orders.items():
        a, value = order_split(blocks, order)
        add(f"{name} order", a if math.isfinite(value) else None)
    if cluster.l and not np.isnan(graph.p_cpu).any():
        add("cpu", np.full(graph.n, cluster.k, dtype=np.int64))
    for name in methods.latency_starts():
        left = DP_SECONDS if deadline is None else deadline - time.perf_counter()
        if left <= 0 or _reached(min((v for _, _, v in out), default=math.inf), target):
            break
        try:
            r = methods.resolve(methods.PARTITION, name)(graph, cluster, time_limit=left, seed=seed)
        except Exception:  # noqa: BLE001 - a start is optional: one method failing on an odd instance
            continue       # (too large, no feasible split, a bug) must not sink the latency search
        add(f"{name} split", r.assignment)
    return out


# -- local search --------------------------------------------------------------------------------------
def improve(graph: Graph, cluster: Cluster, a: np.ndarray, *, deadline: float | None = None, seed: int = 0,
            blocks: UnitOrders | None = None, rounds: int = ROUNDS,
            target: float = -math.inf) -> tuple[np.ndarray, float, int]:
    """The local search of the module docstring from ``a`` (one convex call per accelerator, no
    violation): descend to a local optimum, then kick and descend again, keeping the best, until
    ``deadline`` (a `time.perf_counter` value) or, without one, for ``rounds`` kicks, or until
    the latency reaches ``target`` (a lower bound). Returns the best split, its latency and the
    number of improving moves taken."""
    blocks = blocks or unit_orders(graph, cluster)
    rng = np.random.default_rng(seed)
    a = np.array(a, dtype=np.int64)
    if _reached(call_latency(graph, cluster, a), target):
        return a, call_latency(graph, cluster, a), 0
    a, best, taken = _descend(blocks, a, rng, deadline)
    done = 0
    while not _reached(best, target) and (
            (time.perf_counter() < deadline) if deadline is not None else done < rounds):
        done += 1
        b, val, moves = _descend(blocks, _kick(blocks, a, best, rng), rng, deadline)
        if val < best - 1e-9 * max(1.0, best):
            a, best, taken = b, val, taken + moves + 1
    return a, best, taken


def _reached(value: float, target: float) -> bool:
    """Whether ``value`` meets the lower bound ``target`` (to rounding): nothing can beat it."""
    return value <= target + 1e-9 * max(1.0, abs(target))


def _descend(blocks: UnitOrders, a: np.ndarray, rng: np.random.Generator,
             deadline: float | None) -> tuple[np.ndarray, float, int]:
    """First-improvement descent over `_moves`, then re-sequencing, until neither helps."""
    g, c = blocks.graph, blocks.cluster
    best = call_latency(g, c, a)
    taken = 0

    def out_of_time() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    while not out_of_time():
        found = False
        for move in _moves(blocks, a, rng):
            if out_of_time():
                break
            b = _apply(blocks, a, move)
            if b is None:
                continue
            val = call_latency(g, c, b)
            if val < best - 1e-9 * max(1.0, best):
                a, best, found = b, val, True
                taken += 1
        if not found and not out_of_time():  # re-sequence: cut the order the schedule runs in
            b, value = order_split(blocks, _schedule_order(blocks, a))
            val = call_latency(g, c, b) if math.isfinite(value) else math.inf
            if val < best - 1e-9 * max(1.0, best):
                a, best, found = b, val, True
                taken += 1
        if not found and not out_of_time():  # unfold a call: a block's branches apart
            b = _unfold(blocks, a, best, rng, out_of_time)
            if b is not None:
                a, best, found = b, call_latency(g, c, b), True
                taken += 1
        if not found:
            break
    return a, best, taken


def _unfold(blocks: UnitOrders, a: np.ndarray, latency: float, rng: np.random.Generator,
            out_of_time: Callable[[], bool]) -> np.ndarray | None:
    """A compound move, tried at a local optimum: one call (in random order) goes to the CPU,
    then the best chain move (``run``) onto an idle accelerator is taken while it helps; the
    first result below ``latency``, or None. Each step alone makes things worse where a call
    holds a whole Inception block: the block on the CPU is slow until its longest branch gets
    an accelerator of its own, and the next (on Inception-v3, from 1260.3 to 1250.6 ms)."""
    g, c, k = blocks.graph, blocks.cluster, blocks.cluster.k
    if not c.l:
        return None
    used = sorted(set(a[a < k].tolist()))
    for d in rng.permutation(used).tolist():
        b = _apply(blocks, a, ("call", d, k))
        if b is None:
            continue
        cur = call_latency(g, c, b)
        while not out_of_time():
            step = (cur, None)
            for move in _moves(blocks, b, rng):
                if move[0] != "run":
                    continue
                x = _apply(blocks, b, move)
                val = math.inf if x is None else call_latency(g, c, x)
                if val < step[0]:
                    step = (val, x)
            if step[1] is None:
                break
            cur, b = step
        if cur < latency - 1e-9 * max(1.0, latency):
            return b
        if out_of_time():
            break
    return None


def _kick(blocks: UnitOrders, a: np.ndarray, latency: float, rng: np.random.Generator) -> np.ndarray:
    """A nearby split: the best cut of the order the schedule runs in with noise on the start
    times (a random share of the latency), or a few random moves, whichever the coin picks."""
    g, c = blocks.graph, blocks.cluster
    if rng.random() < 0.5:
        noise = rng.normal(0.0, float(rng.choice([0.02, 0.05, 0.1, 0.3])) * latency, len(blocks.nodes))
        b, value = order_split(blocks, _schedule_order(blocks, a, noise))
        if math.isfinite(value):
            return b
    b = a
    for move in _moves(blocks, a, rng)[:int(rng.integers(1, 4)) * 4]:
        nxt = _apply(blocks, b, move)
        if nxt is not None and math.isfinite(call_latency(g, c, nxt)):
            b = nxt
    return b


def _moves(blocks: UnitOrders, a: np.ndarray, rng: np.random.Generator) -> list[tuple]:
    """Candidate moves, shuffled: ``("block", b, d)`` moves block ``b`` to device ``d``;
    ``("call", d, e)`` moves every node of accelerator ``d`` to device ``e``; ``("run", bs, d)``
    moves a chain ``bs`` of CPU blocks (each the only CPU successor of the one before, at most
    `RUN_BLOCKS`) to the idle accelerator ``d``."""
    k = blocks.cluster.k
    succ, pred = blocks.arcs
    dev = a[blocks.first]
    used = sorted(set(dev[dev < k].tolist()))
    free = [d for d in range(k) if d not in used][:1]
    cpu = [k] if blocks.cluster.l else []
    moves = []
    for b in range(len(dev)):
        here = int(dev[b])
        near = {int(dev[x]) for x in succ[b] + pred[b]}
        border = here >= k or not succ[b] or not pred[b] or any(d != here for d in near)
        if not border:
            continue
        for d in sorted((near | set(free) | set(cpu)) - {here}):
            moves.append(("block", b, d))
    for d in used:
        for e in used + cpu:
            if e != d:
                moves.append(("call", d, e))
    if free:  # a branch the CPU runs, moved whole onto an idle accelerator (it then runs beside the others)
        on_cpu = dev >= k
        for b in np.flatnonzero(on_cpu).tolist():
            run = [b]
            while len(run) < RUN_BLOCKS:
                nxt = [y for y in succ[run[-1]] if on_cpu[y]]
                if len(nxt) != 1:
                    break
                run.append(nxt[0])
                moves.append(("run", tuple(run), free[0]))
    order = rng.permutation(len(moves))
    return [moves[i] for i in order]


def _apply(blocks: UnitOrders, a: np.ndarray, move: tuple) -> np.ndarray | None:
    """The placement after ``move``, or ``None`` when a target may not run it or memory overflows."""
    k, cap = blocks.cluster.k, blocks.cluster.memory
    kind, x, d = move
    if kind in ("block", "run"):
        moved = np.zeros(len(blocks.nodes), dtype=bool)
        moved[list(x) if kind == "run" else x] = True
        if np.all(a[blocks.first[moved]] == d):
            return None
    else:
        moved = a[blocks.first] == x
    if d < k:
        if not blocks.acc_ok[moved].all():
            return None
        stay = a != d
        mem = blocks.graph.memory[~stay].sum() + blocks.mem[moved].sum()
        if mem > cap:
            return None
    elif not blocks.cpu_ok[moved].all():
        return None
    b = a.copy()
    b[moved[blocks.unit]] = d
    return b


def _schedule_order(blocks: UnitOrders, a: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
    """The blocks in the order the split's schedule starts them (calls kept together), with
    ``noise`` added to each block's start time."""
    graph, cluster = blocks.graph, blocks.cluster
    ev = evaluate_latency(graph, cluster, a, np.where(a < cluster.k, 0, -1))
    start = np.empty(graph.n)
    on_acc = a < cluster.k
    start[~on_acc] = ev.finish[~on_acc] - np.nan_to_num(graph.p_cpu[~on_acc])
    for call in ev.calls:
        start[call.nodes] = call.start
    first = np.array([start[nodes].min() for nodes in blocks.nodes])
    if noise is not None:
        first = first + noise
    dev = a[blocks.first]
    return blocks.order(lambda b: (first[b], int(dev[b]), b))


# -- the method ----------------------------------------------------------------------------------------------
def latency_local_search(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """The best of `start_splits`, improved by `improve` until ``time_limit`` seconds (all of
    it: starts, search and bound) have passed, or for `ROUNDS` kicks without one. Status
    ``feasible``, or ``optimal`` when `devplace_lite.single_sample.bounds.latency_bound` meets the
    answer; ``bound`` is that bound. ``extra`` names the start (``warm_start``) and has the
    latency of every start tried (``starts``)."""
    t0 = time.perf_counter()
    end = None if time_limit is None else t0 + finish_share(time_limit)
    blocks = unit_orders(graph, cluster)
    bound, bound_name = latency_bound(graph, cluster)
    starts = start_splits(graph, cluster, deadline=None if end is None else t0 + 0.15 * time_limit, seed=seed,
                          blocks=blocks, target=bound)
    if not starts:
        return Result("local-search", graph, cluster, None, None, no_feasible_status(graph, cluster),
                      time.perf_counter() - t0,
                      bound=bound if math.isfinite(bound) else None,
                      extra={"objective_kind": "latency", "q": 1, "reason": "no start split fits"})
    name, a, val = min(starts, key=lambda s: s[2])
    a, _, taken = improve(graph, cluster, a, deadline=end, seed=seed, blocks=blocks, target=bound)
    r = _latency_result("local-search", graph, cluster, a, t0, bound=bound, warm_start=name, start_objective=val,
                        moves=taken, bound_method=bound_name, starts={n: v for n, _, v in starts})
    if r.bound is not None and r.bound >= r.objective * (1 - 1e-9):
        r.status, r.bound = "optimal", r.objective
    return r


def finish_share(time_limit: float) -> float:
    """The seconds of a ``time_limit`` a method works before it wraps up its answer: a margin
    for scoring, writing the answer and a loaded machine."""
    return max(0.5 * time_limit, 0.95 * time_limit - 0.25)

