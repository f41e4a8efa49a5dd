"""Local search from any start: move or swap boundary blocks while the placement improves.

Problem: given a placement, find a nearby one with a smaller largest device load, keeping
the split kind of the start (a pipeline stays a pipeline).

Method: first-improvement hill climbing on the key (memory overflow, max load, sum of squared
loads), compared lexicographically: a move must first respect the memory caps, then lower the
bottleneck, or keep it and spread the loads (so that work can cascade along a pipeline:
stage 2 hands work to stage 3 before stage 1 can hand work to stage 2). While a cap is
broken, the second entry is the pressure on accelerators near their cap instead (the squared
excess over 95 % of it), so that memory can cascade towards a CPU core too, but only as much
as must move. Devices are visited from the most loaded down; the first improving move is
taken. Neighbourhoods:

* ``chain`` starts: re-cut two neighbouring stages at the best point of their blocks'
  topological order (all cuts scored at once by `.intervals`), also with an unused device
  opened as a new stage beside a stage; move a block to any stage between its predecessors'
  last stage and its successors' first stage (the boundary blocks of a stage), or to a new
  stage right before or after its own; swap two boundary blocks of neighbouring stages;
* ``contiguous`` starts: any move or swap that keeps both touched parts convex;
* other starts (``any``): moves of a block to a device holding one of its neighbours, to a
  CPU core or to an unused accelerator, and swaps.

Loads are updated incrementally (`.incremental`), so a move costs ``O(block degree)``; a
re-cut costs ``O(m log m)``. The search stops at a local optimum, after ``max_moves``
accepted moves, or at ``time_limit``.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.throughput.baselines import uniform
>>> g, c = generate("cells", 120, seed=3, training=True), Cluster(accelerators=3)
>>> start = uniform(g, c)
>>> r = local_search(g, c, start.assignment)
>>> r.objective <= start.objective, r.check().split
(True, 'chain')

Reference: the local-search baseline of Tarnawski et al. (NeurIPS 2020) moves single nodes;
this one moves colocation blocks and keeps the split kind.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...cost import as_assignment, chain_order, evaluate, split_kind
from ...devices import Cluster
from ...errors import GraphError, UsageError
from ...graph import Graph
from ...result import Result
from .blocks import Blocks, block_structure
from .common import finish
from .incremental import LoadState
from .intervals import IntervalLoads

KINDS = ("chain", "contiguous", "any")
_REL = 1e-12
#: Smallest relative gain a move must bring in some entry of the key: smaller ones are float
#: noise or a diffusion that would creep on for thousands of moves.
_GAIN = 1e-6
#: Seconds a search may take when the caller gives no limit (a compiler cannot wait).
DEFAULT_TIME_LIMIT = 5.0
_NEAR = 0.95
#: Loads past this are divided by a power of two before squaring (`_unit`): their squares would
#: overflow (a graph's times may reach 1e300); a power of two keeps every comparison as it was.
_SQUARE_SAFE = 1e100


def _unit(total: float) -> float:
    """1, or the power of two nearest ``total`` when squares of loads that large would overflow."""
    return float(np.exp2(np.round(np.log2(total)))) if math.isfinite(total) and total > _SQUARE_SAFE else 1.0


def _keys(loads: np.ndarray, memory: np.ndarray, cap: float, k: int, unit: float = 1.0) -> np.ndarray:
    """Search keys of candidate placements (rows of ``loads`` and ``memory``), shape (rows, 3).

    Within the caps: (0, max load, sum of squared loads). Over a cap: (total overflow, sum of
    squared accelerator memory, max load), so that memory can cascade towards a CPU core even
    when the core is the bottleneck; reaching the caps lowers the first entry, so the order
    stays strict and the search cannot cycle. The squared loads are in ``unit`` (`_unit`).
    """
    loads, memory = np.atleast_2d(loads), np.atleast_2d(memory)
    acc = memory[:, :k]
    over = np.maximum(0.0, acc - cap).sum(axis=1) if math.isfinite(cap) else np.zeros(len(loads))
    finite = np.where(np.isfinite(loads), loads, 0.0)
    peak, spread = loads.max(axis=1), ((finite / unit) ** 2).sum(axis=1)
    # pressure of the accelerators near their cap: zero below _NEAR of it, so that making room
    # moves only what must move (and a core is not handed memory that fits elsewhere)
    mem_spread = (np.maximum(0.0, acc / cap - _NEAR) ** 2).sum(axis=1) if math.isfinite(cap) else np.zeros(len(loads))
    over = np.where(over > _REL * cap, over, 0.0) if math.isfinite(cap) else over  # float dust is no overflow
    repair = over > 0
    return np.stack([over, np.where(repair, mem_spread, peak), np.where(repair, peak, spread)], axis=1)


def _key(loads: np.ndarray, memory: np.ndarray, cap: float, k: int, unit: float = 1.0) -> tuple[float, float, float]:
    return tuple(float(x) for x in _keys(loads, memory, cap, k, unit)[0])


def _better(new: tuple[float, float, float], old: tuple[float, float, float]) -> bool:
    for x, y in zip(new, old):
        tol = _GAIN * abs(y) + 1e-15 if math.isfinite(y) else 0.0
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


class _Search:
    """The state of one search: loads, stage order (chain kind) and the move rules."""

    def __init__(self, graph: Graph, cluster: Cluster, blocks: Blocks, labels: np.ndarray, kind: str,
                 rng: np.random.Generator) -> None:
        self.g, self.c, self.b, self.kind, self.rng = graph, cluster, blocks, kind, rng
        self.st = LoadState(graph, cluster, blocks, labels)
        self.pinned = blocks.units.on(cluster).pinned >= 0
        self.cap = cluster.memory
        self.unit = _unit(float(np.sum(self.st.loads[np.isfinite(self.st.loads)])))
        self.members: list[set[int]] = [set() for _ in range(cluster.size)]
        for x, d in enumerate(self.st.block_device.tolist()):
            self.members[d].add(x)
        if kind == "chain":
            order = chain_order(graph, cluster, self.st.a)
            if order is None:
                raise GraphError("local search: the start is not a chain split once colocation is enforced")
            self.order = list(order)
        self._sums()
        self.key = self.current_key()

    # -- bookkeeping -------------------------------------------------------------------
    def current_key(self) -> tuple[float, float, float]:
        return _key(self.st.loads, self.st.memory, self.cap, self.c.k, self.unit)

    def _sums(self) -> None:
        """The sums `key_after` updates, for the current placement (after every move)."""
        st = self.st
        finite = np.where(np.isfinite(st.loads), st.loads, 0.0)
        self.spread = float((finite / self.unit) @ (finite / self.unit))
        acc = st.memory[: self.c.k]
        if math.isfinite(self.cap):
            self.over = float(np.maximum(0.0, acc - self.cap).sum())
            self.pressure = float((np.maximum(0.0, acc / self.cap - _NEAR) ** 2).sum())

    def key_after(self, x: int, t: int) -> tuple[float, float, float]:
        """The key if block ``x`` moved to ``t`` (only two devices change: scalar updates)."""
        st = self.st
        s = int(st.block_device[x])
        new_s, new_t = st.delta(x, t)
        loads = st.loads
        others = max((float(v) for d, v in enumerate(loads) if d != s and d != t), default=0.0)
        peak = max(others, new_s, new_t)
        fin = lambda v: v / self.unit if math.isfinite(v) else 0.0  # noqa: E731
        spread = self.spread - fin(loads[s]) ** 2 - fin(loads[t]) ** 2 + fin(new_s) ** 2 + fin(new_t) ** 2
        if not math.isfinite(self.cap):
            return 0.0, peak, spread
        mem = st.memory
        over, pressure = self.over, self.pressure
        for d, m_new in ((s, mem[s] - st.mem[x]), (t, mem[t] + st.mem[x])):
            if st.is_acc[d]:
                over += max(0.0, m_new - self.cap) - max(0.0, mem[d] - self.cap)
                pressure += max(0.0, m_new / self.cap - _NEAR) ** 2 - max(0.0, mem[d] / self.cap - _NEAR) ** 2
        if over > _REL * self.cap:
            return over, pressure, peak
        return 0.0, peak, spread

    def apply(self, x: int, t: int, where: int | None = None) -> None:
        """Move ``x`` to ``t``; ``where`` is the stage position when ``t`` opens a new stage."""
        s = int(self.st.block_device[x])
        self.st.move(x, t)
        self.members[s].discard(x)
        self.members[t].add(x)
        self._sums()
        if self.kind == "chain":
            if where is not None:
                self.order.insert(where, t)
            if not self.members[s]:
                self.order.remove(s)

    # -- neighbourhoods ------------------------------------------------------------------
    def targets(self, x: int) -> list[tuple[int, int | None]]:
        """Devices block ``x`` may move to, with the stage position of a new stage (chain)."""
        st, lab = self.st, self.st.block_device
        s = int(lab[x])
        if self.pinned[x]:
            return []
        if self.kind != "chain":
            # where its neighbours are, and one device of each type that is empty or a CPU core
            # (devices of a type are alike: trying every one of them finds nothing new)
            near = set(lab[self.b.pred[x]].tolist()) | set(lab[self.b.succ[x]].tolist())
            spare = {bool(st.is_acc[d]): d for d in range(self.c.size - 1, -1, -1)
                     if not self.members[d] or not st.is_acc[d]}
            return [(t, None) for t in sorted(near | set(spare.values())) if t != s and st.allowed(x, t)]
        rank = {d: i for i, d in enumerate(self.order)}
        pr, sc = self.b.pred[x], self.b.succ[x]
        lo = max((rank[int(d)] for d in lab[pr]), default=-1)
        hi = min((rank[int(d)] for d in lab[sc]), default=len(self.order))
        out: list[tuple[int, int | None]] = [(d, None) for d in self.order[max(lo, 0): hi + 1]
                                             if d != s and st.allowed(x, d)]
        if len(self.members[s]) > 1:
            # devices of a type are identical: one unused accelerator and one unused core suffice
            fresh = {bool(st.is_acc[d]): d for d in range(self.c.size - 1, -1, -1)
                     if not self.members[d] and st.allowed(x, d)}
            r = rank[s]
            for d in fresh.values():
                if lo < r:
                    out.append((d, r))
                if hi > r:
                    out.append((d, r + 1))
        return out

    def keeps_convex(self, x: int, s: int, t: int) -> bool:
        """After moving ``x`` from ``s`` to ``t``, are both parts convex in the block DAG?"""
        lab = self.st.block_device
        return all(self._convex(np.flatnonzero(lab == d).tolist()) for d in (s, t))

    def _convex(self, part: list[int]) -> bool:
        inside = set(part)

        def reach(adj: list[np.ndarray]) -> set[int]:
            seen: set[int] = set()
            stack = [int(y) for x in part for y in adj[x] if int(y) not in inside]
            while stack:
                y = stack.pop()
                if y not in seen:
                    seen.add(y)
                    stack.extend(int(z) for z in adj[y] if int(z) not in seen)
            return seen
        return not (reach(self.b.succ) & reach(self.b.pred))

    def try_move(self, x: int) -> bool:
        s = int(self.st.block_device[x])
        for t, where in self.targets(x):
            new = self.key_after(x, t)
            if not _better(new, self.key):
                continue
            self.apply(x, t, where)
            if self.kind == "contiguous" and not self.keeps_convex(x, s, t):
                self.apply(x, s)
                continue
            self.key = self.current_key()
            return True
        return False

    def try_swap(self, x: int, budget: int) -> tuple[bool, int]:
        """Swap ``x`` with a boundary block of a device it may move to; (improved, pairs tried)."""
        st = self.st
        s = int(st.block_device[x])
        tried = 0
        if len(self.members[s]) == 1:  # moving it out would close its stage: no swap
            return False, 0
        for t, where in self.targets(x):
            if where is not None:
                continue
            self.apply(x, t)
            for y in self.boundary(t):
                if tried >= budget:
                    break
                if y == x or not any(d == s and w is None for d, w in self.targets(y)):
                    continue
                tried += 1
                new = self.key_after(y, s)
                if _better(new, self.key):
                    self.apply(y, s)
                    if self.kind == "contiguous" and not self.keeps_convex(y, t, s):
                        self.apply(y, t)
                        continue
                    self.key = self.current_key()
                    return True, tried
            self.apply(x, s)
        return False, tried

    def boundary(self, d: int, inner: bool = False) -> list[int]:
        """Blocks of ``d`` that touch another device or an end of the DAG, in random order;
        with ``inner``, the others (candidates too for the ``any`` kind)."""
        lab = self.st.block_device
        out = []
        for x in self.members[d]:
            pr, sc = self.b.pred[x], self.b.succ[x]
            touches = not len(pr) or not len(sc) or bool((lab[pr] != d).any() or (lab[sc] != d).any())
            if touches != inner:
                out.append(x)
        self.rng.shuffle(out)
        return out

    def recut(self, left: int, right: int) -> bool:
        """Re-cut two neighbouring stages (``left`` before ``right``; either may be an unused
        device, opened as a new stage) at the best point of their blocks' topological order."""
        st, b = self.st, self.b
        blks = self.members[left] | self.members[right]
        if not blks or any(self.pinned[x] for x in blks):
            return False
        order = np.array(sorted(blks, key=lambda x: b.position[x]), dtype=np.int64)
        G = len(order)
        side_loads = []
        for d, seq in ((left, order), (right, order[::-1])):
            col = int(st.is_acc[d])
            work = np.where(st.forbidden[:, col], np.inf, st.work[:, col])
            r = IntervalLoads(self.g, b, seq, work, comm=bool(st.is_acc[d])).row(0)
            side_loads.append(r if d == left else r[G - np.arange(G + 1)])
        ls, lt = side_loads
        mem = np.concatenate([[0.0], np.cumsum(st.mem[order])])
        loads = np.repeat(st.loads[None, :], G + 1, axis=0)
        memory = np.repeat(st.memory[None, :], G + 1, axis=0)
        loads[:, left], loads[:, right] = ls, lt
        memory[:, left], memory[:, right] = mem, mem[-1] - mem
        keys = _keys(loads, memory, self.cap, self.c.k, self.unit)
        # among cuts of equal standing, the one that balances the pair best
        i = int(np.lexsort((keys[:, 2], np.maximum(ls, lt), keys[:, 1], keys[:, 0]))[0])
        new = tuple(float(x) for x in keys[i])
        if not _better(new, self.key):
            return False
        lab = st.block_device
        # into the left stage first, so that no stage empties (and leaves the order) midway
        for x in order[:i][lab[order[:i]] != left].tolist():
            self.apply(x, left)
        for x in order[i:][lab[order[i:]] != right].tolist():
            self.apply(x, right)
        self.key = self.current_key()
        return True

    def recut_pass(self) -> int:
        """Re-cut every pair of neighbouring stages, then try to open each kind of unused
        device (accelerator, CPU core) beside a stage, most loaded first; returns the number
        of improvements."""
        done = 0
        loads = self.st.loads
        pairs = sorted(zip(self.order, self.order[1:]), key=lambda p: -max(loads[p[0]], loads[p[1]]))
        for left, right in pairs:
            if left in self.order and right in self.order and \
                    self.order.index(right) == self.order.index(left) + 1 and self.recut(left, right):
                done += 1
        unused = {bool(self.st.is_acc[d]): d for d in range(self.c.size - 1, -1, -1) if not self.members[d]}
        for e in unused.values():
            for s in sorted(self.order, key=lambda d: -self.st.loads[d]):
                if self._open(e, s):
                    done += 1
                    break
        return done

    def _open(self, e: int, s: int) -> bool:
        """Open the unused device ``e`` as a new stage right before or after stage ``s``."""
        for before in (True, False):
            r = self.order.index(s)
            self.order.insert(r if before else r + 1, e)
            if self.recut(e, s) if before else self.recut(s, e):
                return True
            self.order.remove(e)
        return False

    def move_pass(self, budget: int, deadline: float) -> int:
        """First-improvement sweep over the boundary blocks, devices from the most loaded down
        (for the ``any`` kind, then over the interior blocks if none moved); returns the number
        of moves made."""
        done = 0
        # interior blocks (any kind only) are tried when no boundary block moved
        for inner in (False, True) if self.kind == "any" else (False,):
            for d in np.argsort(-self.st.loads, kind="stable").tolist():
                for x in self.boundary(d, inner):
                    if done >= budget or time.perf_counter() > deadline:
                        return done
                    if int(self.st.block_device[x]) == d and self.try_move(x):
                        done += 1
            if done:
                break
        return done

    def swap_step(self, swap_limit: int) -> int:
        """Try swaps out of the bottleneck; 1 if one improved."""
        budget = swap_limit
        for x in self.boundary(int(np.argmax(self.st.loads))):
            ok, tried = self.try_swap(x, budget)
            if ok:
                return 1
            budget -= tried
            if budget <= 0:
                break
        return 0


def local_search(graph: Graph, cluster: Cluster, start, *, kind: str | None = None, time_limit: float | None = None,
                 max_moves: int | None = None, seed: int = 0, swaps: bool = True, swap_limit: int = 2000,
                 method: str = "local-search") -> Result:
    """Improve the placement ``start`` (an assignment array or a node -> device mapping).

    ``kind`` defaults to the split kind of the start (``"none"`` maps to ``"any"``). The search
    stops at a local optimum, after ``max_moves`` moves (default 50 per block) or after
    ``time_limit`` seconds (default `DEFAULT_TIME_LIMIT`; pipelines of a few thousand nodes
    reach a local optimum well before it, scattered starts of the ``any`` kind may not). Blocks
    (colocation classes, fused when a cycle of forward edges joins them) move as one: each
    takes the device of its first node in the start. Returns the better of the result and the
    start itself, so the answer is never worse than the start.
    """
    t0 = time.perf_counter()
    a0 = as_assignment(graph, cluster, start)
    if kind is None:
        k0 = split_kind(graph, cluster, a0)
        kind = "any" if k0 == "none" else k0
    if kind not in KINDS:
        raise UsageError(f"unknown split kind {kind!r} (expected one of {', '.join(KINDS)})")
    blocks = block_structure(graph)
    labels = a0[np.array([x[0] for x in blocks.nodes], dtype=np.int64)] if blocks.count else np.zeros(0, np.int64)
    pinned = blocks.units.on(cluster).pinned
    labels = np.where(pinned >= 0, pinned, labels)
    search = _Search(graph, cluster, blocks, labels, kind, np.random.default_rng(seed))
    limit = max_moves if max_moves is not None else 50 * max(blocks.count, 1)
    deadline = t0 + (DEFAULT_TIME_LIMIT if time_limit is None else time_limit)
    moves, stopped = 0, "local optimum"
    while True:
        if moves >= limit or time.perf_counter() > deadline:
            stopped = "move budget" if moves >= limit else "time limit"
            break
        made = search.recut_pass() if kind == "chain" else 0
        made += search.move_pass(limit - moves - made, deadline)
        if not made and swaps:
            made = search.swap_step(swap_limit)
        if not made:
            break
        moves += made
    found = search.st.assignment
    ev0, ev1 = evaluate(graph, cluster, a0), evaluate(graph, cluster, found)

    def rank(ev) -> tuple[float, bool, float]:  # overflow first, as in the search, then feasibility
        return _key(ev.loads, ev.memory, cluster.memory, cluster.k)[0], not ev.feasible, ev.max_load

    start_wins = rank(ev0) < rank(ev1)
    return finish(method, graph, cluster, a0 if start_wins else found, t0, kind=kind, moves=moves,
                  stopped=stopped, start_objective=ev0.max_load)


def local_search_method(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Method ``local-search``: from the `balance_by_time` cut (stages of balanced compute
    along a topological order, blind to communication), keeping a chain split.

    The cut is taken over blocks rather than colocation units, so that the start is a chain
    even when colour classes tie units into cycles (where `balance_by_time` itself is not).
    Ops no accelerator may run sit on a CPU core; when they lie between stages the start
    is no chain, and the search keeps the kind it has.
    """
    from ..baselines import min_max_blocks

    blocks = block_structure(graph)
    devices = cluster.k if cluster.k else cluster.size
    on_acc = cluster.k > 0
    costs = blocks.units.on(cluster)
    work = costs.acc_time if on_acc else costs.cpu_time
    labels = costs.pinned.copy()
    free = blocks.order[labels[blocks.order] < 0]
    # one device needs no cut (and min_max_blocks can trip on float rounding when asked for one)
    labels[free] = min_max_blocks(np.where(np.isfinite(work[free]), work[free], 0.0), devices) if devices > 1 else 0
    return local_search(graph, cluster, labels[blocks.of_node], time_limit=time_limit, seed=seed)
