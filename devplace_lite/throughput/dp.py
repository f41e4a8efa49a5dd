"""The exact throughput DP over ideals, its linearised variant and a PipeDream-style baseline.

Problem: split the graph into a chain of ideals ``∅ = I_0 ⊆ I_1 ⊆ ... ⊆ I_r = V`` of the
unit graph (`devplace_lite.units`), one part ``I_s \\ I_{s-1}`` per device, on at most ``k``
accelerators (memory cap ``M`` each) and ``l`` CPU cores, minimising the largest device load
of `devplace_lite.cost` (compute plus, on accelerators, each crossing producer's ``comm``
once). A unit carries every node of its colour classes, forward and backward, and all count
in the load. Tarnawski et al. (2020) solve it with::

    D[c][f][I] = min over ideals J ⊆ I of min( max(D[c][f-1][J], acc(I \\ J)),
                                               max(D[c-1][f][J], cpu(I \\ J)) )

``D[.][.][∅] = 0``, ``J = I`` meaning an empty device; the answer is ``D[l][k][V]``.

What it is exact over: every chain split of the authors' model (`devplace_lite.units`:
classes colocated, a zero-cost stand-in for each backward-only class ordered by the mirror
image of its backward edges, all loads counted). The reductions of the unit graph lose no
such split; folding zero-time leaves is certified during the run (folded nodes may carry
memory, and if any memory test ever turned on it, the DP reruns folding only memory-free
leaves). On the authors' 16 published throughput workloads the optimum equals their program's
(``tests/test_published_optima.py``).

How it is fast (every cut keeps the optimum):

* **An upper bound first.** `linear` slices one topological order optimally
  (`devplace_lite.throughput.slicing`); its value ``T`` bounds the optimum, so a part whose load
  exceeds ``T`` is in no optimal split, and neither is a state ``(c, f, I)`` whose ideal's work
  cannot fit ``f`` accelerators and ``c`` cores at ``T``, or whose remaining work cannot fit the
  other devices (CPU cores are credited with the most accelerator work they could absorb).
* **Sub-ideals by depth-first search.** For each ideal ``I`` the sub-ideals ``J`` are reached
  by removing maximal units in decreasing order of their number, each exactly once. The part
  ``S = I \\ J`` only grows down the search, and so do its compute, its memory and the
  communication it can no longer shed: hyperedges of ``S`` with a member outside ``I`` or a
  member numbered above the last removed unit (only lower-numbered units can join ``S``
  deeper down). The first ``S`` over the bound cuts its whole subtree.
* **Incremental scoring.** Each producer's hyperedge (its unit and its consumers' units)
  keeps a count of members in ``S``; adding a unit updates the communication term in time
  proportional to its degree, never ``O(n)`` per pair.
* **Reads that cannot matter skipped.** A state of ``J`` whose work cannot fit within ``T``
  holds ``inf``; the kernel tests ``J``'s work (in the row the search step reads anyway) before
  it reads ``J``'s row of ``D`` (a large table). Per ideal ``I`` it also keeps the largest such threshold over the
  states of ``I`` still in play, so a pair whose ``J`` is too heavy for all of them costs one
  comparison, not ``(k+1)(l+1)``: on Inception-v3 fewer than 1 % of the visited pairs update
  anything, and the search itself (the hyperedge counts) is what remains of the time.
* **A table laid out for the cache.** The search jumps from ideal to sub-ideal; the ideals
  are stored in colexicographic order (by bit set read as an integer), where the sub-ideals one
  search reaches lie close together, one row per ideal holds its work and its packed maximal
  units (one read per step), and the per-ideal hyperedge counts move from one ideal to the next
  by the few units in which they differ (`_Table`). On Inception-v3 this halves the kernel's
  time against rows in order of size spread over three arrays (``benchmarks/dp``).
* **A compiled kernel.** The search and the ``(k+1)(l+1)`` updates per pair run in numba,
  compiled ahead of time at install (`devplace_lite.compiled`). The indices the search reads
  through (hyperedge, incidence, table position) are unsigned 32-bit integers: numba then
  drops its test for a negative (wrap-around) index from each of those dependent reads, 1.2x
  less kernel time on Inception-v3.

Complexity: ``O(P (d + kl))`` for ``P`` visited pairs (at most the nested pairs of ideals) and
average unit degree ``d``; memory ``O(N k l)`` for ``N`` ideals.

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> r = dp(layered(12, seed=3), Cluster(accelerators=3))
>>> r.status, r.objective == r.check().max_load, r.check().split
('optimal', True, 'chain')

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020;
D. Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training", SOSP 2019.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..compiled import kernel
from ..cost import evaluate
from ..devices import Cluster
from ..errors import LimitError
from ..graph import Graph
from .ideals import Ideals, enumerate_ideals
from ..methods import scalable
from ..progress import Progress
from ..result import Result, no_feasible_status
from .slicing import Slicer
from ..units import UnitGraph, unit_graph

# Relative slack on the pruning bound: sums of the same floats in another order may differ in
# the last bits, and a part exactly at the bound must survive.
_SLACK = 1e-9
# Pairs handled per kernel call between two looks at the clock (and updates of the progress bar).
_CHUNK_PAIRS = 1_000_000



@dataclass
class _KernelArrays:
    """The unit graph's sums and hypergraph in the kernel's array types."""

    pa: np.ndarray       # accelerator time
    pc: np.ndarray       # CPU time (0 where not allowed)
    mem: np.ndarray      # memory, all nodes
    mem_core: np.ndarray  # memory without folded nodes
    bad_acc: np.ndarray  # holds a node no accelerator may run (int8)
    bad_cpu: np.ndarray  # holds a node without a CPU time (int8)
    he_w: np.ndarray     # weight of each hyperedge
    he_size: np.ndarray  # number of units in it
    inc_ptr: np.ndarray  # CSR: hyperedges incident to each unit
    inc_he: np.ndarray
    inc_hi: np.ndarray   # for each incidence (x, e): members of e numbered above x


def _kernel_arrays(poset: UnitGraph) -> _KernelArrays:
    hp, _, hw = poset.hyperedges
    inc_ptr, inc_he, inc_hi = poset.incidence
    c = np.ascontiguousarray  # the exact types of the kernel's signature
    return _KernelArrays(c(poset.pa, np.float64), c(poset.pc, np.float64), c(poset.mem, np.float64),
                  c(poset.mem_core, np.float64), c(poset.bad_acc, np.int8), c(poset.bad_cpu, np.int8),
                  c(hw, np.float64), c(np.diff(hp), np.int32), c(inc_ptr, np.int64), c(inc_he, np.int32),
                  c(inc_hi, np.int32))


_V, _I, _B = "f8[::1]", "i8[::1]", "i1[::1]"  # the kernels' array types
_LOW = (1 << 32) - 1  # a packed table entry: unit in the low 32 bits, ideal above (_Table)
_SENTINEL = _LOW  # closes each row: a unit above every unit
# the position of a set bit of a 32-bit word: (bit * _DEBRUIJN_MUL) mod 2^32 >> 27 differs per bit
# (a de Bruijn sequence; the product stays below 2^63, so no overflow in int64 or in Python)
_DEBRUIJN_MUL = 0x077CB531
_DEBRUIJN = np.zeros(32, dtype=np.int64)
_DEBRUIJN[[((1 << i) * _DEBRUIJN_MUL) % 2**32 >> 27 for i in range(32)]] = np.arange(32)


@kernel(f"i8(i8, i8, i8, {_I}, {_I}, i8[:, ::1], {_V}, {_V}, {_V}, {_V}, {_B}, {_B}, {_V}, i4[::1], {_I}, i4[::1], "
        f"i4[::1], i8, i8, f8, f8, {_V}, f8[:, :, ::1], i4[:, :, ::1], i1[:, :, ::1], {_I})")
def _kernel(i0, i1, budget, row, mx, words, pa, pc, mem, mem_core, bad_acc, bad_cpu,
            he_w, he_size, inc_ptr, inc_he, inc_hi, k, l, M, cap, absorb, D, BJ, BT,
            stats):  # pragma: no cover
    """Fill ``D[I]`` for ideals ``i0 <= I < i1`` (stops after ``budget`` pairs at an ideal's end).

    ``BT`` codes: 1 = accelerator left empty, 2 = CPU core left empty, 3 = accelerator part
    ``I \\ BJ``, 4 = CPU part. ``stats``: [pairs visited, memory certificate broken (0/1),
    pairs whose accelerator load is within ``cap``].
    ``absorb[c]`` bounds the accelerator work ``c`` CPU cores can take within ``cap``. Each
    ideal's accelerator work goes into its row's header (`_Table`). Returns the next ideal to
    process; ideal ``i0 - 1``'s bit set must be ``words[i0 - 1]`` (the counts of members in I are
    updated from one ideal's bits to the next).
    """
    U = pa.shape[0]
    total = pa.sum()
    tol = 1e-9 * (total + 1.0)  # the same sums in another order may differ in the last bits
    rel = np.zeros((l + 1, k + 1), dtype=np.bool_)
    # what a step reads and writes of a hyperedge e, in one row: members in the part S, depth
    # from which it stays cut (-1: not yet), its size, members in the ideal I; and of an
    # incidence q: its hyperedge and the members numbered above the unit. Indices the search
    # reads through are unsigned 32-bit (module docstring: numba indexes with them without
    # its negative-index test)
    E = he_w.shape[0]
    he = np.empty((E, 4), dtype=np.int32)
    for e in range(E):
        he[e, 0] = 0
        he[e, 1] = -1
        he[e, 2] = he_size[e]
        he[e, 3] = 0
    inc = np.empty((inc_he.shape[0], 2), dtype=np.uint32)
    for q in range(inc_he.shape[0]):
        inc[q, 0] = inc_he[q]
        inc[q, 1] = inc_hi[q]
    iptr = np.empty(U + 1, dtype=np.uint32)
    for x in range(U + 1):
        iptr[x] = inc_ptr[x]
    # a unit's sums in one row, and the search's stack one row per depth
    ux = np.empty((U, 4))
    for x in range(U):
        ux[x, 0] = pa[x]
        ux[x, 1] = pc[x]
        ux[x, 2] = mem[x]
        ux[x, 3] = mem_core[x]
    sf = np.empty((U + 1, 6))  # accelerator and CPU work, memory, core memory, comm, fixed comm
    # units no accelerator / no core may run, bound, row position (the table has < 2^31 words)
    si = np.empty((U + 1, 4), dtype=np.uint32)
    mxf = mx.view(np.float64)  # the headers' work of each ideal (_Table)
    # members in I of each hyperedge, moved from ideal to ideal by the bits that differ
    if i0 > 0:
        for w in range(words.shape[1]):
            d = words[i0 - 1, w]
            while d != 0:
                x = 32 * w + _DEBRUIJN[((d & -d) * _DEBRUIJN_MUL) >> 27 & 31]
                d &= d - 1
                for q in range(inc_ptr[x], inc_ptr[x + 1]):
                    he[inc[q, 0], 3] += 1
    inf = np.inf
    pairs = 0
    within = 0  # pairs whose accelerator load is within cap
    I = i0
    while I < i1:
        wI = 0.0
        if I > 0:
            e = mx[row[I]]
            wI = mxf[(e >> 32) - 1] + pa[e & _LOW]
            mxf[row[I] - 1] = wI
            for w in range(words.shape[1]):
                d = words[I, w] ^ words[I - 1, w]
                while d != 0:
                    bit = d & -d
                    x = 32 * w + _DEBRUIJN[(bit * _DEBRUIJN_MUL) >> 27 & 31]
                    d ^= bit
                    up = 1 if words[I, w] & bit else -1
                    for q in range(inc_ptr[x], inc_ptr[x + 1]):
                        he[inc[q, 0], 3] += up
        # state (c, f, I) can lie on a split within cap only if I's work fits c cores and f
        # accelerators and the rest fits the others (CPU cores absorb at most absorb[c])
        any_rel = False
        w_hi = inf if cap == inf else -inf  # the most work a sub-ideal J may carry and update I
        for c in range(l + 1):
            for f in range(k + 1):
                D[I, c, f] = inf if I > 0 else 0.0
                BJ[I, c, f] = -1
                BT[I, c, f] = 0
                rel[c, f] = cap == inf or (wI <= f * cap + absorb[c] + tol
                                           and total - wI <= (k - f) * cap + absorb[l - c] + tol)
                any_rel = any_rel or rel[c, f]
                if rel[c, f] and f > 0 and cap < inf:  # the thresholds of the update loops below
                    w_hi = max(w_hi, (f - 1) * cap + absorb[c] + tol)
                if rel[c, f] and c > 0 and cap < inf:
                    w_hi = max(w_hi, f * cap + absorb[c - 1] + tol)
        depth = 0 if any_rel and I > 0 else -1
        for j in range(6):
            sf[0, j] = 0.0
        si[0, 0] = 0
        si[0, 1] = 0
        si[0, 2] = U
        si[0, 3] = row[I]
        while depth >= 0:
            p = si[depth, 3]
            e = mx[p]
            x = e & _LOW
            if x < si[depth, 2]:  # a row ends with a sentinel above every unit
                si[depth, 3] = p + 1
                R = e >> 32  # the row of J = the ideal below minus x
                npa = sf[depth, 0] + ux[x, 0]
                npc = sf[depth, 1] + ux[x, 1]
                nmem = sf[depth, 2] + ux[x, 2]
                nmc = sf[depth, 3] + ux[x, 3]
                nba = si[depth, 0] + bad_acc[x]
                nbc = si[depth, 1] + bad_cpu[x]
                cpu_ok = l > 0 and nbc == 0 and npc <= cap
                if not cpu_ok and not (k > 0 and nba == 0 and npa <= cap and nmc <= M):
                    continue  # over the bound before any communication: so is every larger part
                # the communication of S, and the part of it that no larger S in this subtree
                # can undo: hyperedges of S with a member outside I, or with a member numbered
                # above x outside S (deeper steps only add units numbered below x)
                delta = 0.0
                delta_fixed = 0.0
                for q in range(iptr[x], iptr[x + 1]):
                    e = inc[q, 0]
                    cc = he[e, 0]
                    if cc == 0:
                        delta += he_w[e]
                    elif cc + 1 == he[e, 2]:
                        delta -= he_w[e]
                    if he[e, 1] < 0 and (inc[q, 1] > cc or he[e, 3] < he[e, 2]):
                        he[e, 1] = depth + 1
                        delta_fixed += he_w[e]
                    he[e, 0] = cc + 1
                ncm = sf[depth, 4] + delta
                nco = sf[depth, 5] + delta_fixed
                acc_ok = k > 0 and nba == 0 and npa + nco <= cap and nmem <= M
                if k > 0 and nba == 0 and npa + nco <= cap and nmc <= M and nmem > M:
                    stats[1] = 1  # the relaxed run (folded memory ignored) would go on here
                if not acc_ok and not cpu_ok:  # every larger part is over the bound too
                    for q in range(iptr[x], iptr[x + 1]):
                        e = inc[q, 0]
                        he[e, 0] -= 1
                        if he[e, 1] == depth + 1:
                            he[e, 1] = -1
                    continue
                pairs += 1
                # D[J, c, f] is inf where J's work cannot fit f accelerators and c cores within
                # cap (the first test of rel, the same float expression): testing J's work (in
                # the row just read) spares reading D[J] (large, mostly not cached) for updates
                # that cannot take
                wJ = mxf[R - 1]
                J = -1
                if acc_ok:
                    load = npa + ncm
                    if load <= cap:
                        within += 1
                    if load <= cap and wJ <= w_hi:  # one test instead of the loop's first, per (c, f)
                        for c in range(l + 1):
                            for f in range(1, k + 1):
                                if not rel[c, f] or wJ > (f - 1) * cap + absorb[c] + tol:
                                    continue
                                if J < 0:
                                    J = mx[R - 2]
                                v = D[J, c, f - 1]
                                if v < load:
                                    v = load
                                if v < D[I, c, f]:
                                    D[I, c, f] = v
                                    BJ[I, c, f] = J
                                    BT[I, c, f] = 3
                if cpu_ok and wJ <= w_hi:
                    load = npc
                    for c in range(1, l + 1):
                        for f in range(k + 1):
                            if not rel[c, f] or wJ > f * cap + absorb[c - 1] + tol:
                                continue
                            if J < 0:
                                J = mx[R - 2]
                            v = D[J, c - 1, f]
                            if v < load:
                                v = load
                            if v < D[I, c, f]:
                                D[I, c, f] = v
                                BJ[I, c, f] = J
                                BT[I, c, f] = 4
                depth += 1
                sf[depth, 0] = npa
                sf[depth, 1] = npc
                sf[depth, 2] = nmem
                sf[depth, 3] = nmc
                sf[depth, 4] = ncm
                sf[depth, 5] = nco
                si[depth, 0] = nba
                si[depth, 1] = nbc
                si[depth, 2] = x
                si[depth, 3] = R
            else:
                if depth > 0:
                    x = si[depth, 2]
                    for q in range(iptr[x], iptr[x + 1]):
                        e = inc[q, 0]
                        he[e, 0] -= 1
                        if he[e, 1] == depth:
                            he[e, 1] = -1
                depth -= 1
        # J = I: a device may stay empty
        for c in range(l + 1):
            for f in range(k + 1):
                if not rel[c, f]:
                    continue
                if f > 0 and D[I, c, f - 1] < D[I, c, f]:
                    D[I, c, f] = D[I, c, f - 1]
                    BJ[I, c, f] = I
                    BT[I, c, f] = 1
                if c > 0 and D[I, c - 1, f] < D[I, c, f]:
                    D[I, c, f] = D[I, c - 1, f]
                    BJ[I, c, f] = I
                    BT[I, c, f] = 2
        I += 1
        if pairs >= budget:
            break
    stats[0] += pairs
    stats[2] += within
    return I


@kernel(f"i8({_I}, {_I}, i8)")
def _count_pairs(row, mx, U):  # pragma: no cover
    """Number of pairs J ⊊ I of ideals, by the same depth-first search as `_kernel`."""
    N = row.shape[0]
    stB = np.empty(U + 1, dtype=np.int64)
    stP = np.empty(U + 1, dtype=np.int64)
    total = 0
    for I in range(N):
        depth = 0
        stB[0] = U
        stP[0] = row[I]
        while depth >= 0:
            p = stP[depth]
            e = mx[p]
            x = e & _LOW
            if x < stB[depth]:
                stP[depth] = p + 1
                total += 1
                depth += 1
                stB[depth] = x
                stP[depth] = e >> 32
            else:
                depth -= 1
    return total


def nested_pairs(ideals: Ideals) -> int:
    """How many pairs ``J ⊊ I`` of ideals there are: the work of the plain recurrence.

    ``O(pairs)`` time, ``O(U)`` extra memory (a compiled depth-first search).
    """
    t = _Table.of(ideals)
    return int(_count_pairs(t.row, t.mx, ideals.units.size))


@dataclass
class _Table:
    """Ideals in the kernel's order and layout.

    *Order*: ideals sorted by their bit set read as an integer (colexicographic order). It
    lists every sub-ideal before the ideal, as the recurrence needs, and it keeps the search
    local: the sub-ideals reached below the removal of unit ``x`` all agree with it on the
    units numbered ``x`` and above, and the ideals that agree on those bits are consecutive in
    this order, so the rows one search reads lie together (in order of size, as
    `enumerate_ideals` lists them, they are spread over the whole table). Consecutive ideals
    also differ in few units, which is how the kernel moves its per-ideal counts along.

    *Layout*: one int64 array ``mx`` holds a row per ideal ``i``, starting at ``row[i] - 2``:
    the index ``i``, its accelerator work (a float64 the kernel fills in), then its maximal
    units ascending, closed by `_SENTINEL`. An entry packs the unit ``x`` (low 32 bits) and
    the start of the row of ``i`` minus ``x`` (high bits), so a step of the search, and the
    work of the sub-ideal it reaches, read one row: one cache line or two.
    ``words[i]`` is ideal ``i``'s bit set in 32-bit words (int64, never negative).
    """

    masks: list[int]    # bit set of each ideal, in this order
    row: np.ndarray     # where each ideal's entries start in mx
    mx: np.ndarray      # the rows
    words: np.ndarray   # (N, ceil(U / 32)) bit sets

    @classmethod
    def of(cls, ideals: Ideals) -> "_Table":
        masks = ideals.masks
        N, U = len(masks), ideals.units.size
        order = np.asarray(sorted(range(N), key=masks.__getitem__), dtype=np.int64)
        ptr = np.asarray(ideals.mx_ptr, dtype=np.int64)
        lens = np.diff(ptr)[order]
        row = np.empty(N, dtype=np.int64)  # row i: [i, work, entries..., sentinel]
        row[0] = 2
        np.cumsum(lens[:-1] + 3, out=row[1:])
        row[1:] += 2
        size = int(row[-1] + lens[-1] + 1)
        if size >= 2**31:
            raise LimitError(f"graph {ideals.units.graph.name}: {N:,} ideals pass the DP's table "
                             f"(2^31 words); use a method that needs no ideals ({scalable()})")
        mx = np.full(size, _SENTINEL, dtype=np.int64)
        mx[row - 2] = np.arange(N)
        mx[row - 1] = 0  # the work, 0.0 as float64 bits, filled in by the kernel
        pos = np.empty(N, dtype=np.int64)
        pos[order] = np.arange(N)
        within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        old = np.repeat(ptr[order], lens) + within
        child = pos[np.asarray(ideals.mx_child, dtype=np.int64)[old]]
        mx[np.repeat(row, lens) + within] = (row[child] << 32) | np.asarray(ideals.mx_unit, dtype=np.int64)[old]
        W = max(1, -(-U // 32))
        ordered = [masks[i] for i in order.tolist()]
        words = np.frombuffer(b"".join(m.to_bytes(4 * W, "little") for m in ordered), dtype="<u4")
        return cls(ordered, row, mx, np.ascontiguousarray(words.reshape(N, W), dtype=np.int64))


@dataclass
class _Run:
    value: float            # D[all][l][k] (inf: nothing within the bound)
    assignment: np.ndarray | None
    pairs: int              # pairs (J, I) visited
    within: int             # of which the accelerator load of I \ J is within the bound
    finished: bool
    certificate: bool       # no memory test turned on folded nodes


def _absorb(units: _KernelArrays, l_: int, cap: float) -> np.ndarray:
    """``absorb[c]``: the most accelerator work that ``c`` CPU cores can take off the
    accelerators with at most ``cap`` CPU time each (a fractional knapsack, so a bound)."""
    out = np.zeros(l_ + 1)
    if not math.isfinite(cap):
        out[1:] = math.inf
        return out
    ok = np.flatnonzero(units.bad_cpu == 0)
    pa, pc = units.pa[ok], units.pc[ok]
    order = np.argsort(pc / np.maximum(pa, 1e-300), kind="stable")
    pa, pc = pa[order], pc[order]
    cum_pc = np.concatenate([[0.0], np.cumsum(pc)])
    cum_pa = np.concatenate([[0.0], np.cumsum(pa)])
    for c in range(1, l_ + 1):
        budget = c * cap
        j = int(np.searchsorted(cum_pc, budget, side="right")) - 1  # whole units that fit
        extra = 0.0
        if j < len(pa) and pc[j] > 0:
            extra = pa[j] * (budget - cum_pc[j]) / pc[j]
        out[c] = cum_pa[j] + extra
    return out


def _solve(poset: UnitGraph, units: _KernelArrays, table: _Table, cluster: Cluster, cap: float,
           deadline: float | None) -> _Run:
    N = len(table.masks)
    k, l_ = cluster.k, cluster.l
    D = np.empty((N, l_ + 1, k + 1))
    BJ = np.empty((N, l_ + 1, k + 1), dtype=np.int32)
    BT = np.empty((N, l_ + 1, k + 1), dtype=np.int8)
    stats = np.zeros(3, dtype=np.int64)
    M = float(cluster.memory)
    bound = cap * (1 + _SLACK) if math.isfinite(cap) else math.inf
    absorb = _absorb(units, l_, bound)
    i = 0
    with Progress(N, "dp", "ideal") as bar:
        while i < N:
            if deadline is not None and time.perf_counter() > deadline:
                return _Run(math.inf, None, int(stats[0]), int(stats[2]), False, not stats[1])
            i = _kernel(i, N, _CHUNK_PAIRS, table.row, table.mx, table.words, units.pa, units.pc,
                        units.mem, units.mem_core, units.bad_acc, units.bad_cpu, units.he_w, units.he_size,
                        units.inc_ptr, units.inc_he, units.inc_hi, k, l_, M, bound, absorb, D, BJ, BT,
                        stats)
            bar.update(i)
    value = float(D[N - 1, l_, k])
    if not math.isfinite(value):
        return _Run(value, None, int(stats[0]), int(stats[2]), True, not stats[1])
    # follow the back-pointers from (all, l, k); device f-1 / k+c-1 gets the part placed there
    unit_dev = np.full(poset.size, -1, dtype=np.int64)
    I, c, f = N - 1, l_, k
    while I > 0:
        t, J = int(BT[I, c, f]), int(BJ[I, c, f])
        if t in (3, 4):
            part = table.masks[I] & ~table.masks[J]
            dev = f - 1 if t == 3 else k + c - 1
            for x in range(poset.size):
                if part >> x & 1:
                    unit_dev[x] = dev
        if t in (1, 3):
            f -= 1
        else:
            c -= 1
        I = J
    return _Run(value, unit_dev[poset.unit], int(stats[0]), int(stats[2]), True, not stats[1])


def _lower_bound(units: _KernelArrays, cluster: Cluster) -> float:
    """A quick proven lower bound: the largest unit's cheapest device, and a fractional
    balance of all compute over ``k`` accelerators and ``l`` cores (communication ignored)."""
    k, l_ = cluster.k, cluster.l
    a = np.where(units.bad_acc | (k == 0), np.inf, units.pa)
    c = np.where(units.bad_cpu | (l_ == 0), np.inf, units.pc)
    single = float(np.max(np.minimum(a, c))) if len(a) else 0.0
    if not math.isfinite(single):
        return math.inf

    def fits(T: float) -> bool:
        # CPU cores take the units that save most accelerator time per CPU millisecond
        forced_cpu = ~np.isfinite(a)
        cpu_left = l_ * T - c[forced_cpu].sum()
        if cpu_left < 0:
            return False
        acc_need = a[~forced_cpu].sum()
        free = np.flatnonzero(~forced_cpu & np.isfinite(c))
        order = free[np.argsort(c[free] / np.maximum(a[free], 1e-300))]
        for u in order:
            if cpu_left <= 0:
                break
            take = min(1.0, cpu_left / c[u]) if c[u] > 0 else 1.0
            acc_need -= take * a[u]
            cpu_left -= take * c[u]
        return acc_need <= k * T + 1e-12

    lo, hi = single, max(single, float(np.minimum(a, c).sum()))
    if fits(lo):
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return lo


def _result(method: str, graph: Graph, cluster: Cluster, assignment: np.ndarray | None, status: str,
            t0: float, bound: float | None, extra: dict) -> Result:
    seconds = time.perf_counter() - t0
    if assignment is None:
        return Result(method, graph, cluster, None, None, "infeasible" if status == "optimal" else status,
                      seconds, bound=bound, extra=extra)
    value = float(evaluate(graph, cluster, assignment).max_load)
    if status == "optimal":
        bound = value
    return Result(method, graph, cluster, assignment, value, status, seconds, bound=bound, extra=extra)


def _sliced(graph: Graph, cluster: Cluster, poset: UnitGraph) -> np.ndarray | None:
    """The best slicing of the unit numbering (a topological order) by the library's slicer:
    the device of each node, or None when no slicing fits."""
    slicer = Slicer(graph, cluster, poset)
    _, dev = slicer.slice(np.arange(poset.size))
    return None if dev is None else slicer.assignment(dev)


def linear(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """Slice one topological order of the units into at most ``k + l`` blocks, optimally.

    The order is the unit numbering of `devplace_lite.units.unit_graph` (Kahn's algorithm, ties
    by the graph's own topological order), cut by `devplace_lite.throughput.slicing`. Every prefix is an ideal, so the
    result is a chain split and its value an upper bound on `dp`'s; status ``"feasible"``.
    ``O((k + l) U^2)`` time at worst.
    """
    t0 = time.perf_counter()
    poset = unit_graph(graph, fold=True)
    a = _sliced(graph, cluster, poset)
    return _result("linear", graph, cluster, a, "feasible" if a is not None else no_feasible_status(graph, cluster), t0, None,
                   {"units": poset.size})


#: About the most units the DP takes: past it, slicing one order for its first upper bound
#: usually passes the slicer's table limit and the DP refuses (benchmarks/scale: 10,000-node
#: layered graphs are solved, 100,000-node ones refused).
DP_UNITS = 10_000


def dp(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
       limit: int | None = None, prune: bool = True) -> Result:
    """The optimal chain-of-ideals split (module docstring: problem, speed-ups, exactness).

    Status ``"optimal"`` with ``bound == objective``; ``"infeasible"`` when no chain split
    fits (memory caps, unsupported nodes); ``"time_limit"`` with the linear split as the
    incumbent and a proven lower bound when ``time_limit`` seconds pass first. Raises
    `LimitError` when the graph has more than ``limit`` ideals (default: the entry's reach,
    `devplace_lite.methods.PARTITION` ``dp``) or is too large for its first
    upper bound (`DP_UNITS`: the slicer's table). ``prune=False`` visits every
    nested pair (the plain recurrence, for comparison); ``extra["pairs"]`` counts them.
    """
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    extra: dict = {}
    refolded = False
    for merge in (True, "memoryless"):
        poset = unit_graph(graph, fold=merge)
        units = _kernel_arrays(poset)
        try:
            upper = _sliced(graph, cluster, poset)
        except LimitError:  # the slicer's own message would name the first step, not the DP
            raise LimitError(f"graph {graph.name}: the DP cannot take a graph this large ({poset.size:,} units; "
                             f"even its first upper bound, one sliced order, passes the slicer's table limit); "
                             f"use a method that scales ({scalable()})") from None
        ideals = enumerate_ideals(poset, limit)
        # the bound is the evaluator's value of the linear split (the DP's own sums may differ in
        # the last bits, and _SLACK covers that)
        upper_value = None if upper is None else float(evaluate(graph, cluster, upper).max_load)
        cap = upper_value if prune and upper_value is not None else math.inf
        run = _solve(poset, units, _Table.of(ideals), cluster, cap, deadline)
        extra = {"units": poset.size, "ideals": len(ideals), "pairs": run.pairs, "pairs_within": run.within,
                 "upper_bound": upper_value, "refolded": refolded}
        if not run.finished:
            bound = _lower_bound(units, cluster)
            return _result("dp", graph, cluster, upper, "time_limit", t0,
                           None if not math.isfinite(bound) else bound, extra)
        if run.certificate or not poset.folded.any():
            break
        refolded = True  # a memory test turned on folded nodes: redo without folding them
    best = run.assignment
    if best is None or (upper_value is not None and upper_value < evaluate(graph, cluster, best).max_load):
        best = upper  # the DP found nothing strictly inside the slack: the bound was optimal
    return _result("dp", graph, cluster, best, "optimal", t0, None, extra)


#: Largest ``U^2 (k + 1)(l + 1)`` PipeDream's planner takes on (about a minute here).
PIPEDREAM_WORK = 4e9


def _pipedream_plan(poset: UnitGraph, units: _KernelArrays, cluster: Cluster) -> np.ndarray | None:
    """PipeDream's planner on the unit order, without replication.

    A stage ``[j, i)`` costs its compute; the activation crossing boundary ``j`` costs
    ``comm_out(j-1)`` (times two in training: activations forward, gradients backward) and is
    overlapped with compute, so it enters as its own term of the max, as in PipeDream. Memory
    caps and device kinds are respected so that the plan is a valid placement.
    """
    g, U, k, l_ = poset.graph, poset.size, cluster.k, cluster.l
    if U * U * (k + 1) * (l_ + 1) > PIPEDREAM_WORK:
        raise LimitError(f"graph {g.name}: PipeDream's planner takes time quadratic in the units, and "
                         f"{U:,} units on {k + l_} devices pass its limit; use a method that scales "
                         f"({scalable()})")
    fwd = ~g.backward
    out = np.zeros(U)
    for u in range(g.n):  # data a unit sends forward: producers with a consumer in another unit
        if fwd[u] and any(fwd[w] and poset.unit[w] != poset.unit[u] for w in g.succ[u]):
            out[poset.unit[u]] += g.comm[u]
    boundary = out * (2.0 if g.is_training else 1.0)
    cpa = np.concatenate([[0.0], np.cumsum(units.pa)])
    cpc = np.concatenate([[0.0], np.cumsum(units.pc)])
    cmem = np.concatenate([[0.0], np.cumsum(units.mem)])
    cba = np.concatenate([[0], np.cumsum(units.bad_acc)])
    cbc = np.concatenate([[0], np.cumsum(units.bad_cpu)])
    j = np.arange(U + 1)
    inf = np.inf
    A = np.full((U + 1, l_ + 1, k + 1), inf)
    B = np.zeros((U + 1, l_ + 1, k + 1, 2), dtype=np.int64)
    A[0] = 0.0
    for i in range(1, U + 1):
        jj = j[:i]
        comm = np.where(jj > 0, boundary[np.maximum(jj - 1, 0)], 0.0)
        acc = np.maximum(cpa[i] - cpa[jj], comm)
        acc = np.where((cba[i] - cba[jj] == 0) & (cmem[i] - cmem[jj] <= cluster.memory), acc, inf)
        cpu = np.where(cbc[i] - cbc[jj] == 0, np.maximum(cpc[i] - cpc[jj], comm), inf)
        for c in range(l_ + 1):
            for f in range(k + 1):
                best, arg = inf, (-1, 0)
                if f > 0:
                    v = np.maximum(A[jj, c, f - 1], acc)
                    t = int(np.argmin(v))
                    if v[t] < best:
                        best, arg = float(v[t]), (t, 0)
                if c > 0:
                    v = np.maximum(A[jj, c - 1, f], cpu)
                    t = int(np.argmin(v))
                    if v[t] < best:
                        best, arg = float(v[t]), (t, 1)
                A[i, c, f] = best
                B[i, c, f] = arg
    if not math.isfinite(A[U, l_, k]):
        return None
    unit_dev = np.empty(U, dtype=np.int64)
    i, c, f = U, l_, k
    while i > 0:
        jv, kind = B[i, c, f]
        if kind == 0:
            unit_dev[jv:i] = f - 1
            f -= 1
        else:
            unit_dev[jv:i] = k + c - 1
            c -= 1
        i = int(jv)
    return unit_dev[poset.unit]


def pipedream(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0) -> Result:
    """A PipeDream-style split (Narayanan et al., 2019): PipeDream's planner on one topological
    order, with its cost model (compute per stage, only the activation between consecutive
    stages, transfers overlapped with compute); the split is then scored by the real model,
    which pays every crossing producer and does not overlap. Status ``"feasible"``."""
    t0 = time.perf_counter()
    poset = unit_graph(graph, fold=True)
    plan = _pipedream_plan(poset, _kernel_arrays(poset), cluster)
    status = "feasible" if plan is not None else no_feasible_status(graph, cluster)
    return _result("pipedream", graph, cluster, plan, status, t0, None, {"units": poset.size})
