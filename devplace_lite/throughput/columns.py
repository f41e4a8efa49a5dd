"""A lower bound for contiguous splits by column generation over convex parts.

Problem: prove that no split whose every part is convex (the ``"contiguous"`` flavour of
`devplace_lite.throughput.ip`: each accelerator's and each core's part convex in the forward
graph, the quotient between parts may be cyclic) has a largest load of ``T`` or less.

Why a new relaxation: the device-indexed IP's LP spreads every unit evenly over identical
accelerators, so no output crosses a boundary, its bound sits near total work / ``k`` and
branching meets each split under ``k!`` labellings. Here a part is a column: a whole convex set
``S`` with its own work *and* its own transfers, so there is nothing to relabel and every
column pays the communication its boundary costs.

Formulation for a guess ``T`` (``A(T)``: convex unit sets an accelerator can hold, load
``acc(S) = p_acc(S) + sum of c(p) over producers crossing S <= T`` and memory ``<= M``;
``C(T)``: convex sets of CPU-runnable units with ``p_cpu(S) <= T``)::

    N(T) = min  sum_{S in A} lam_S
           s.t. sum_{S contains u} lam_S + sum_{C contains u} mu_C = 1     every unit u   (pi_u)
                sum_C mu_C <= l                                                            (rho)
                lam, mu >= 0

Every contiguous split with max-load ``<= T`` gives a 0/1 point with at most ``k`` accelerator
columns, so ``N(T) > k`` proves ``T* > T``. Weak duality gives the bound without solving the
LP to the end (Farley's bound): for *any* ``pi``, with ``a >= max_{S in A} pi(S) > 0`` and
``r >= max(0, max_{C in C} pi(C))``, the point ``(pi / a, r / a)`` is dual feasible, so
``N(T) >= (sum pi - l r) / a``. Only this computation decides a refutation: the restricted
master's columns, its duals and its solver tolerances only decide how strong the bound is, and
a set within `FIT` of a limit counts as fitting (more columns can only weaken the bound).

Pricing, two ways:

* **Enumerated** (inference graphs whose units are single nodes, up to `PAIR_IDEALS` ideals):
  the convex sets are exactly the differences ``I \\ J`` of nested ideals (`_PairTable`), so
  ``a`` and ``r`` are exact maxima, one array operation per round. When the LP is solved at
  ``N(T) <= k`` with a fractional point, branching on whether two units share a part (Ryan and
  Foster; pricing drops the sets that break a rule) decides the guess exactly: every node's LP
  above ``k`` refutes ``T``, and an integral node is a contiguous split with every load
  ``<= T`` (a better incumbent when ``T`` is below the caller's).
* **MIP** (elsewhere): columns from intervals of topological orders of the unit graph (convex;
  their loads follow from prefix sums), then a pricing MIP (HiGHS) over one part: binaries
  ``s_u``; convexity as ``s = top - low`` on every forward vertex, with ``top`` and ``low``
  continuous and down-closed (``top_b <= top_a`` for an arc ``a -> b``, the same for ``low``),
  exact once ``s`` is binary (on a path out of the part and back, the middle has ``top = 1``
  and ``low = 0``), and its closure rows have an integral LP (the device IP's exit indicator,
  used before, took about four times the CPU); comm ``y_p >= |s_a - s_b|`` per
  producer-consumer pair, ``load <= T``. Its *dual bound* is ``a``, so a pricing stopped by its
  time limit still gives a valid (weaker) bound; every improving solution it met, not only its
  best, enters the master (each is a feasible set); each pricing MIP gets `PRICE_SHARE` of the
  time left (all of it after a slice that found no column), so that one hard pricing problem
  does not take the caller's whole deadline. The cores' pricing MIP runs only when the
  accelerators' finds no column or Farley's bound could pass ``k`` (``r >= rho``, the core
  row's price, so ``(sum pi - l rho) / a`` bounds it from above). The root LP only: no branching.

The bound on ``T*`` is the largest refuted ``T``: first ``(1 - gap) UB`` (enough to certify the
incumbent ``UB`` within ``gap``; `PROBE` when no gap is asked), then ``UB`` less `NEAR` (which
proves it optimal), then a bisection while time is left.

Complexity: per guess, as many LP re-solves as column batches; enumerated pricing is
``O(pairs)`` per round after an ``O(pairs P)`` table (``P`` producers; nested ideal pairs
whose work passes the incumbent are dropped first), and branching is exponential in the worst
case; MIP pricing solves one ``U``-binary MIP per round, after ``O(P U^2)`` to tabulate the
interval loads of each order.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.throughput.exhaustive import exhaustive
>>> g, c = generate("layered", 8, seed=3), Cluster(accelerators=2)
>>> opt = exhaustive(g, c, kind="contiguous").objective
>>> b = column_bound(g, c, upper=opt, time_limit=20)
>>> b.bound <= opt + 1e-9
True

Reference: the set-partitioning view of graph partitioning with column generation
(Mehrotra and Trick, "Cliques and clustering: a combinatorial approach", 1998; Farley's bound:
A. A. Farley, "A note on bounding a class of linear programming problems", 1990).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..dag import topological_order
from ..devices import Cluster
from ..errors import LimitError
from ..graph import Graph
from ..mip.solve import LinearModel
from ..units import UnitCosts, comm_pairs, memory_share, order_pairs, order_vertices, unit_graph

#: Relative slack on every comparison with ``k`` and with 1 (LP and MIP tolerances are 1e-7).
EPS = 1e-6
#: Relative slack by which a set may pass a load or memory limit and still count as fitting
#: (float sums of a few hundred terms agree to about 1e-14).
FIT = 1e-12
#: How far below the incumbent the guess that proves it optimal lies (relative): far above
#: `FIT`, below the 1e-9 at which `devplace_lite.throughput.ip` calls a gap closed.
NEAR = 5e-10
#: Columns taken from one round of interval pricing, per device type.
BATCH = 30
#: Share of the time left that one pricing MIP may take: stopped, its dual bound still bounds
#: (a weaker Farley bound), and the LP gets the columns it found before the next round.
PRICE_SHARE = 0.25
#: Relative gap at which a pricing MIP stops: its dual bound then weakens the Farley bound by
#: that much at most, far below the 1 % a caller asks for.
PRICE_GAP = 1e-3
#: With ``gap=0``, the relative gap of the first guess: refuted, it certifies the incumbent
#: within 1 % (with room for rounding) before the guess just below it, whose branching can take
#: the whole time limit. As close to 1 % as rounding allows: a lower guess is refuted sooner (on
#: ResNet-50 training at k = 8, 0.991 x the DP's split took about 13 CPU s, 0.9901 x about 8).
PROBE = 0.0099


class _Parts:
    """What every guess of ``T`` shares: the unit graph, producers, the convexity pairs and the
    topological orders whose intervals are the cheap columns."""

    def __init__(self, data: UnitCosts, upper: float, seed: int = 0) -> None:
        self.data, self.upper = data, upper
        g, unit = data.graph, data.unit
        self.producers, self.pairs = comm_pairs(data)
        self.comm = g.comm[self.producers] if self.producers else np.zeros(0)
        self.prod_unit = unit[self.producers] if self.producers else np.zeros(0, dtype=np.int64)
        self.fwd = np.flatnonzero(order_vertices(g))
        self.order_pairs = order_pairs(g)
        arcs = {(int(unit[a]), int(unit[b])) for a, b in self.order_pairs if unit[a] != unit[b]}
        self.orders = _topological_orders(data.U, sorted(arcs), seed)
        # consumers of each producer row, as unit ids (the pairs are distinct)
        self.consumers: list[list[int]] = [[] for _ in self.producers]
        self.pair_row = np.array([r for r, _ in self.pairs], dtype=np.int64)
        self.pair_unit = np.array([w for _, w in self.pairs], dtype=np.int64)
        for r, w in self.pairs:
            self.consumers[r].append(w)
        self.pool: dict[tuple[bool, bytes], tuple[np.ndarray, bool, float]] = {}
        self.table = _PairTable.table(self, upper)

    def keep(self, master: "_Master", members: np.ndarray, cpu: bool) -> bool:
        """Add a column to the master (and to the pool the next guesses start from)."""
        members = np.sort(np.asarray(members, dtype=np.int64))
        key = (cpu, members.tobytes())
        if key not in self.pool:
            mask = np.zeros(self.data.U, dtype=bool)
            mask[members] = True
            load = float(self.data.pc[mask].sum()) if cpu else self.load(mask)
            self.pool[key] = (members, cpu, load)
        return master.add(members, cpu)

    def load(self, members: np.ndarray) -> float:
        """Accelerator load of a unit set given as a boolean mask."""
        d = self.data
        crossed = np.zeros(len(self.producers), dtype=bool)
        if len(self.pairs):
            cross = members[self.prod_unit[self.pair_row]] != members[self.pair_unit]
            np.logical_or.at(crossed, self.pair_row, cross)
        return float(d.pa[members].sum() + self.comm[crossed].sum())


def _topological_orders(U: int, arcs: list[tuple[int, int]], seed: int, count: int = 6) -> list[np.ndarray]:
    """A few topological orders of the unit graph (smallest index first, then random tie
    breaks); none when the arcs hold a cycle (then no interval is known to be convex)."""
    rng = np.random.default_rng(seed)
    succ: list[list[int]] = [[] for _ in range(U)]
    for a, b in arcs:
        succ[a].append(b)
    out = []
    for i in range(count):
        order = topological_order(succ, np.arange(U, dtype=float) if i == 0 else rng.random(U))
        if len(order) < U:
            return []
        out.append(order)
    return out


class _Intervals:
    """Every interval ``order[i:j]`` of one topological order with its accelerator load, CPU
    load, memory and whether its units may run there, for one guess ``T``."""

    def __init__(self, parts: _Parts, order: np.ndarray, T: float) -> None:
        d = parts.data
        U = d.U
        self.order = order
        pos = np.empty(U, dtype=np.int64)
        pos[order] = np.arange(U)
        i = np.arange(U + 1)[:, None]
        j = np.arange(U + 1)[None, :]
        valid = j > i
        work = np.r_[0.0, np.cumsum(d.pa[order])]
        cpu = np.r_[0.0, np.cumsum(d.pc[order])]
        acc_bad = np.r_[0, np.cumsum(~d.acc_ok[order])]
        cpu_bad = np.r_[0, np.cumsum(~d.cpu_ok[order])]
        comm = np.zeros((U + 1, U + 1))
        for r in range(len(parts.producers)):
            a = pos[parts.prod_unit[r]]
            ws = np.sort(pos[np.asarray(parts.consumers[r])])
            cnt = np.searchsorted(ws, np.arange(U + 1), side="left")  # consumers before position
            inside = cnt[None, :] - cnt[:, None]
            a_in = (i <= a) & (a < j)
            comm += parts.comm[r] * ((a_in & (inside < len(ws))) | (~a_in & (inside > 0)))
        self.acc = valid & (acc_bad[None, :] == acc_bad[:, None]) & (work[None, :] - work[:, None] + comm <= T)
        if d.memory_binds:
            mem = np.r_[0.0, np.cumsum(memory_share(d)[order])]
            self.acc &= mem[None, :] - mem[:, None] <= 1.0
        self.cpu = valid & (cpu_bad[None, :] == cpu_bad[:, None]) & (cpu[None, :] - cpu[:, None] <= T)

    def best(self, pi: np.ndarray, ok: np.ndarray, above: float, count: int) -> list[np.ndarray]:
        """Up to ``count`` feasible intervals (as unit arrays) whose duals sum above ``above``."""
        P = np.r_[0.0, np.cumsum(pi[self.order])]
        value = np.where(ok, P[None, :] - P[:, None], -np.inf).ravel()
        top = np.argpartition(value, len(value) - count)[-count:] if len(value) > count else np.arange(len(value))
        flat = top[np.argsort(value[top])[::-1]]
        value = value.reshape(ok.shape)
        out = []
        for f in flat.tolist():
            i, j = divmod(f, value.shape[1])
            if value[i, j] <= above:
                break
            out.append(self.order[i:j])
        return out


#: Largest ideal count and nested-pair count for which pricing enumerates every convex set.
PAIR_IDEALS = 6000
PAIR_LIMIT = 3_000_000


class _PairTable:
    """Every convex unit set as ``I \\ J`` for nested ideals ``J ⊊ I``, with its loads: exact
    pricing by one array operation per round.

    Valid where a unit set is convex exactly when it is such a difference: units are single
    forward nodes (an inference graph without colocation classes). For a convex ``S``, the
    down-closure ``I`` of ``S`` is an ideal and so is ``I \\ S`` (a predecessor of a node of
    ``I \\ S`` outside it would lie in ``S`` with a path through ``I \\ S`` back into ``S``);
    conversely ``I \\ J`` is convex (a path out of it and back would re-enter ``I`` from ``J``).
    `table` returns ``None`` elsewhere, or when the ideals or pairs pass `PAIR_IDEALS` /
    `PAIR_LIMIT`.
    """

    def __init__(self, parts: "_Parts", members: np.ndarray, ii: np.ndarray, jj: np.ndarray) -> None:
        d = parts.data
        self.B, self.ii, self.jj = members, ii, jj
        Bf = self.Bf = members.astype(float)
        diff = lambda v: (Bf @ v)[ii] - (Bf @ v)[jj]  # noqa: E731  (J ⊆ I: sums subtract)
        self.acc_load = diff(d.pa)
        self.cpu_load = diff(d.pc)
        self.acc_bad = diff((~d.acc_ok).astype(float)) > 0.5
        self.cpu_bad = diff((~d.cpu_ok).astype(float)) > 0.5
        self.mem = diff(memory_share(d)) if d.memory_binds else None
        if len(parts.producers):  # consumers of each producer inside S, and whether it is in S
            cons = np.zeros((d.U, len(parts.producers)))
            cons[parts.pair_unit, parts.pair_row] = 1.0
            C = Bf @ cons  # consumers of each producer inside an ideal (exact small integers)
            total = cons.sum(axis=0) - 0.5
            P = members[:, parts.prod_unit]
            for lo in range(0, len(ii), 20000):
                a, b = ii[lo:lo + 20000], jj[lo:lo + 20000]
                inside = C[a] - C[b]
                own = P[a] & ~P[b]
                cross = np.where(own, inside < total, inside > 0.5)
                self.acc_load[lo:lo + 20000] += cross @ parts.comm

    @staticmethod
    def table(parts: "_Parts", upper: float) -> "_PairTable | None":
        from .ideals import enumerate_ideals

        d, g = parts.data, parts.data.graph
        if g.backward.any() or d.U != g.n:
            return None
        poset = unit_graph(g, chain=True)
        if poset.size != g.n:
            return None
        try:
            ideals = enumerate_ideals(poset, limit=PAIR_IDEALS)
        except LimitError:
            return None
        N, U = len(ideals), d.U
        bits = np.zeros((N, U), dtype=bool)
        col = np.empty(U, dtype=np.int64)  # the poset's unit -> ours, through the node
        col[poset.unit] = d.unit
        for i, m in enumerate(ideals.masks):
            raw = np.frombuffer(m.to_bytes((U + 7) // 8, "little"), dtype=np.uint8)
            on = np.unpackbits(raw, bitorder="little")[:U].astype(bool)
            bits[i, col[on]] = True
        size = bits.sum(axis=1)
        Bf = bits.astype(np.float32)
        ii, jj = [], []
        count = 0
        for lo in range(0, N, 512):  # J ⊆ I  <=>  J has no unit outside I
            sub = (Bf[lo:lo + 512] @ (1.0 - Bf).T) < 0.5  # row: J = lo + r, column: I
            r, c = np.nonzero(sub & (size[lo:lo + 512, None] < size[None, :]))
            count += len(r)
            if count > PAIR_LIMIT:
                return None
            jj.append(r + lo)
            ii.append(c)
        ii, jj = np.concatenate(ii), np.concatenate(jj)
        # a set whose work alone passes the incumbent on both device types is never a column
        work = lambda v: (bits.astype(float) @ v)[ii] - (bits.astype(float) @ v)[jj]  # noqa: E731
        small = (work(d.pa) <= upper * (1 + 1e-9)) | (work(d.pc) <= upper * (1 + 1e-9))
        return _PairTable(parts, bits, ii[small], jj[small])

    def at(self, T: float) -> None:
        """Fix the guess: which sets fit an accelerator and which a core. Sums in another order
        than the evaluator's differ in the last bits, so a set within `FIT` (relative) of a
        limit counts as fitting: more columns only weaken the bound, fewer would break it."""
        self.acc_ok = ~self.acc_bad & (self.acc_load <= T * (1 + FIT))
        if self.mem is not None:
            self.acc_ok &= self.mem <= 1.0 + FIT
        self.cpu_ok = ~self.cpu_bad & (self.cpu_load <= T * (1 + FIT))
        self.acc_idx, self.cpu_idx = np.flatnonzero(self.acc_ok), np.flatnonzero(self.cpu_ok)

    def allowed(self, rules: list[tuple[int, int, bool]]) -> np.ndarray | None:
        """Which sets keep the branching rules ``(u, v, together)`` (``None``: all)."""
        if not rules:
            return None
        keep = np.ones(len(self.ii), dtype=bool)
        for u, v, together in rules:
            in_u = self.B[self.ii, u] & ~self.B[self.jj, u]
            in_v = self.B[self.ii, v] & ~self.B[self.jj, v]
            keep &= (in_u == in_v) if together else ~(in_u & in_v)
        return keep

    def price(self, pi: np.ndarray, cpu: bool, count: int, keep: np.ndarray | None = None
              ) -> tuple[float, list[np.ndarray]]:
        """``(max pi(S), the best sets)`` over every feasible convex set of the device type
        that ``keep`` (`allowed`) leaves."""
        ok = self.cpu_idx if cpu else self.acc_idx
        if keep is not None:
            ok = ok[keep[ok]]
        if not len(ok):
            return 0.0, []
        val = self.Bf @ pi
        value = val[self.ii[ok]] - val[self.jj[ok]]
        top = np.argpartition(value, len(value) - count)[-count:] if len(value) > count else np.arange(len(value))
        top = top[np.argsort(value[top])[::-1]]
        sets = [np.flatnonzero(self.B[self.ii[ok[t]]] & ~self.B[self.jj[ok[t]]]) for t in top]
        return max(0.0, float(value[top[0]])), sets


class _Pricing:
    """One part as a MIP (HiGHS): the most dual weight a convex set of load ``<= T`` can hold."""

    def __init__(self, parts: _Parts, T: float, cpu: bool) -> None:
        import highspy

        d = parts.data
        U, unit = d.U, d.unit
        m = LinearModel()
        ok = d.cpu_ok if cpu else d.acc_ok
        self.s = m.add_vars(U, ub=ok.astype(float), integer=True)
        s = self.s
        col = -np.ones(d.graph.n, dtype=np.int64)
        col[parts.fwd] = np.arange(len(parts.fwd))
        top = m.add_vars(len(parts.fwd), ub=1.0)
        low = m.add_vars(len(parts.fwd), ub=1.0)
        for i, v in enumerate(parts.fwd.tolist()):
            m.add_row([(top[i], 1.0), (low[i], -1.0), (s[unit[v]], -1.0)], lo=0.0, hi=0.0)
        for a, b in parts.order_pairs:
            m.add_row([(top[col[b]], 1.0), (top[col[a]], -1.0)], hi=0.0)
            m.add_row([(low[col[b]], 1.0), (low[col[a]], -1.0)], hi=0.0)
        if cpu:
            m.add_row([(s[u], d.pc[u]) for u in range(U)], hi=T)
        else:
            y = m.add_vars(len(parts.producers), ub=1.0)
            for r, w in parts.pairs:
                up = parts.prod_unit[r]
                m.add_row([(y[r], 1.0), (s[up], -1.0), (s[w], 1.0)], lo=0.0)
                m.add_row([(y[r], 1.0), (s[up], 1.0), (s[w], -1.0)], lo=0.0)
            m.add_row([(s[u], d.pa[u]) for u in range(U)] + [(y[r], parts.comm[r]) for r in range(len(y))], hi=T)
            if d.memory_binds:
                m.add_row([(s[u], w) for u, w in enumerate(memory_share(d))], hi=1.0)
        self.h = m.highs(gap=PRICE_GAP)
        self.h.setOptionValue("mip_abs_gap", 1e-6)
        # every improving solution the search met is a feasible set: the degenerate masters of
        # memory-bound graphs converge in far fewer rounds with several columns per round
        self.h.setOptionValue("mip_improving_solution_save", True)
        self.idx = np.asarray(s, dtype=np.int32)
        self.highspy = highspy

    def price(self, pi: np.ndarray, time_limit: float) -> tuple[float, list[np.ndarray], bool]:
        """``(a, sets, done)``: ``a >=`` the largest ``pi(S)`` over the feasible sets (the MIP's
        dual bound), the feasible sets the search met (units; the best first, then every
        improving one it saved), and whether the MIP ended (within `PRICE_GAP`) rather than at
        its time limit."""
        h = self.h
        h.changeColsCost(len(self.idx), self.idx, -np.asarray(pi, dtype=float))
        h.setOptionValue("time_limit", max(0.05, float(time_limit)))
        h.run()
        info = h.getInfo()
        status = h.getModelStatus()
        if status == self.highspy.HighsModelStatus.kInfeasible:  # not even the empty set: cannot be
            return 0.0, None, True
        dual = float(info.mip_dual_bound)
        a = -dual if math.isfinite(dual) else float(np.clip(pi, 0, None).sum())
        sets = []
        if info.primal_solution_status == 2:
            v = np.array(h.getSolution().col_value)[self.idx]
            sets.append(np.flatnonzero(v > 0.5))
            for saved in h.getSavedMipSolutions():
                sets.append(np.flatnonzero(np.asarray(saved.col_value)[self.idx] > 0.5))
        return max(a, 0.0), sets, status == self.highspy.HighsModelStatus.kOptimal


class _Master:
    """The restricted master LP (HiGHS), grown column by column."""

    def __init__(self, U: int, k: int, l: int) -> None:
        import highspy

        self.U, self.k, self.l = U, k, l
        h = self.h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        inf = self.inf = highspy.kHighsInf
        h.addRows(U, np.ones(U), np.ones(U), 0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32),
                  np.zeros(0))
        if l:
            h.addRow(-inf, float(l), 0, np.zeros(0, dtype=np.int32), np.zeros(0))
        self.seen: set[tuple[bool, bytes]] = set()
        self.cols: list[tuple[np.ndarray, bool]] = []
        # an artificial column per unit keeps the LP feasible before real columns cover it
        for u in range(U):
            h.addCol(float(k + 1), 0.0, inf, 1, np.array([u], dtype=np.int32), np.ones(1))

    def add(self, members: np.ndarray, cpu: bool) -> bool:
        key = (cpu, np.sort(np.asarray(members, dtype=np.int64)).tobytes())
        if key in self.seen or not len(members):
            return False
        self.seen.add(key)
        self.cols.append((np.sort(np.asarray(members, dtype=np.int64)), cpu))
        rows = np.sort(np.asarray(members, dtype=np.int32))
        if cpu:
            rows = np.r_[rows, np.int32(self.U)].astype(np.int32)
        self.h.addCol(0.0 if cpu else 1.0, 0.0, self.inf, len(rows), rows, np.ones(len(rows)))
        return True

    def solve(self) -> tuple[float, np.ndarray, float]:
        """``(value, pi, rho)``: the LP value, the duals of the partition rows (free in sign) and
        the core row's price (``>= 0``)."""
        self.h.run()
        sol = self.h.getSolution()
        dual = np.array(sol.row_dual)
        pi = dual[:self.U]
        rho = max(0.0, -float(dual[self.U])) if self.l else 0.0
        return float(self.h.getInfo().objective_function_value), pi, rho

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """``(artificial, lam)``: the LP values of the artificial and of the real columns."""
        v = np.array(self.h.getSolution().col_value)
        return v[:self.U], v[self.U:]


def _fits(members: np.ndarray, rules: list[tuple[int, int, bool]]) -> bool:
    inside = set(members.tolist())
    return all(((u in inside) == (v in inside)) if together else not (u in inside and v in inside)
               for u, v, together in rules)


def _node(parts: _Parts, T: float, rules: list[tuple[int, int, bool]], deadline: float, k: int, l: int):
    """Column generation at one node of the branching (exact pricing only). Returns
    ``("pruned", farley, None)`` when the node's LP exceeds ``k``, ``("lp", farley, master)``
    when the LP is solved at ``<= k``, ``("time", farley, None)`` when the deadline comes first."""
    table = parts.table
    master = _Master(parts.data.U, k, l)
    for members, cpu, load in parts.pool.values():
        if load <= T and _fits(members, rules):
            master.add(members, cpu)
    keep = table.allowed(rules)
    best = 0.0
    while time.perf_counter() < deadline:
        value, pi, rho = master.solve()
        a, sets = table.price(pi, False, BATCH, keep)
        r, cpu_sets = table.price(pi, True, BATCH, keep) if l else (0.0, [])
        if a > 0:
            best = max(best, (pi.sum() - l * max(r, 0.0)) / a)
        if best > k * (1 + EPS) + EPS:
            return "pruned", best, None
        added = sum(parts.keep(master, S, False) for S in sets if pi[S].sum() > 1.0 + EPS)
        added += sum(parts.keep(master, C, True) for C in cpu_sets if pi[C].sum() > rho + EPS)
        if not added:
            return "lp", best, master
    return "time", best, None


def _branch(master: "_Master") -> tuple[int, int] | None:
    """The unit pair whose sharing of a part is most fractional in the LP (Ryan and Foster)."""
    art, lam = master.values()
    used = np.flatnonzero(lam > 1e-9)
    U = master.U
    M = np.zeros((len(used), U))
    for r, c in enumerate(used.tolist()):
        M[r, master.cols[c][0]] = 1.0
    together = (M * lam[used, None]).T @ M
    frac = np.minimum(together, 1.0 - together)
    np.fill_diagonal(frac, 0.0)
    u, v = np.unravel_index(np.argmax(frac), frac.shape)
    return (int(u), int(v)) if frac[u, v] > 1e-6 else None


def _split(parts: _Parts, master: "_Master") -> np.ndarray | None:
    """The placement an integral LP solution describes (``None`` when it is fractional)."""
    art, lam = master.values()
    if art.max(initial=0.0) > 1e-6 or np.any((lam > 1e-6) & (lam < 1 - 1e-6)):
        return None
    k = parts.data.cluster.k
    dev = -np.ones(parts.data.U, dtype=np.int64)
    acc = cpu = 0
    for c in np.flatnonzero(lam > 0.5).tolist():
        members, on_cpu = master.cols[c]
        dev[members] = k + cpu if on_cpu else acc
        cpu, acc = (cpu + 1, acc) if on_cpu else (cpu, acc + 1)
    return dev[parts.data.unit] if (dev >= 0).all() else None


def refute(parts: _Parts, T: float, deadline: float) -> tuple[bool, float, np.ndarray | None]:
    """Decide one guess: is ``N(T) > k``?

    Parameters
    ----------
    parts : what every guess shares (`_Parts`: units, producers, the enumerated sets if any).
    T : the guess (ms).
    deadline : `time.perf_counter` value at which to give up (``math.inf``: none).

    Returns
    -------
    ``(refuted, farley, split)``: whether no contiguous split has max-load ``<= T`` (proven),
    the root's best Farley bound on ``N(T)``, and a placement with every load ``<= T`` when
    the branching met one (enumerated sets only; else ``None``).
    """
    d = parts.data
    c = d.cluster
    k, l = c.k, (c.l if d.cpu_ok.any() else 0)
    # a unit that fits no device type within T refutes T at once (its work alone is a load)
    alone = np.minimum(np.where(d.acc_ok, d.pa, np.inf), np.where(d.cpu_ok, d.pc, np.inf) if l else np.inf)
    if (alone > T).any():
        return True, math.inf, None
    if k == 0:
        return False, 0.0, None
    if parts.table is None:
        return _root_only(parts, T, deadline, k, l)
    parts.table.at(T)
    stack: list[list[tuple[int, int, bool]]] = [[]]
    root = None
    while stack:
        rules = stack.pop()
        status, farley, master = _node(parts, T, rules, deadline, k, l)
        root = farley if root is None else root
        if status == "time":
            return False, root, None
        if status == "pruned":
            continue
        split = _split(parts, master)
        if split is not None:
            return False, root, split
        pair = _branch(master)
        if pair is None:  # fractional without a fractional pair (a set both on a core and not)
            return False, root, None
        stack.append(rules + [(pair[0], pair[1], False)])
        stack.append(rules + [(pair[0], pair[1], True)])
    return True, root, None


def _root_only(parts: _Parts, T: float, deadline: float, k: int, l: int) -> tuple[bool, float, None]:
    """The root LP with interval columns and MIP pricing (where sets cannot be enumerated)."""
    d = parts.data
    U = d.U
    master = _Master(U, k, l)
    for members, cpu, load in parts.pool.values():  # what earlier guesses generated and still fits
        if load <= T:
            master.add(members, cpu)
    tables = [_Intervals(parts, o, T) for o in parts.orders]
    for t in tables:  # a greedy cover by maximal intervals along each order
        for ok, cpu in ((t.acc, False), (t.cpu, True)) if l else ((t.acc, False),):
            i = 0
            while i < U:
                js = np.flatnonzero(ok[i])
                if not len(js):
                    i += 1
                    continue
                j = int(js.max())
                parts.keep(master, t.order[i:j], cpu)
                i = j
    acc_price = _Pricing(parts, T, cpu=False)
    cpu_price = _Pricing(parts, T, cpu=True) if l else None
    best, share = 0.0, PRICE_SHARE
    while time.perf_counter() < deadline:
        value, pi, rho = master.solve()
        found = 0
        for t in tables:
            for members in t.best(pi, t.acc, 1.0 + EPS, BATCH):
                found += parts.keep(master, members, False)
            if l:
                for members in t.best(pi, t.cpu, rho + EPS, BATCH):
                    found += parts.keep(master, members, True)
        if found:
            continue
        a, sets, done = acc_price.price(pi, share * (deadline - time.perf_counter()))
        added = sum(parts.keep(master, S, False) for S in sets if pi[S].sum() > 1.0 + EPS)
        # r >= rho (a core column in the basis prices at rho), so (sum pi - l rho) / a bounds
        # Farley's bound from above: a new column and no chance to refute, the core waits
        priced = not l or not added or (pi.sum() - l * rho) / max(a, EPS) > k * (1 + EPS) + EPS
        r, cpu_sets, cpu_done = (0.0, [], not l) if not (l and priced) else \
            cpu_price.price(pi, share * (deadline - time.perf_counter()))
        if a > 0 and priced:  # r bounds every core set's dual weight only when priced
            best = max(best, (pi.sum() - l * max(r, 0.0)) / a)
        if best > k * (1 + EPS) + EPS:
            return True, best, None
        added += sum(parts.keep(master, C, True) for C in cpu_sets if pi[C].sum() > rho + EPS)
        if not added and done and cpu_done:  # the LP is optimal over all columns
            return False, best, None
        if not added:  # pricing stopped at its slice without a column: give it the time left
            share = 1.0
    return False, best, None


@dataclass
class ColumnBound:
    """What `column_bound` proved and found.

    ``bound``: a lower bound on the contiguous optimum; ``upper`` and ``split``: the best
    contiguous split known at the end (``split`` is ``None`` when it is still the caller's,
    else a placement the search met, with max-load ``upper``); ``seconds``; ``exact``: whether
    every convex set was priced (enumeration and branching) rather than the root LP with MIP
    pricing; ``guesses``: each ``(T, refuted, root Farley bound on N(T), seconds so far)``.
    """

    bound: float
    upper: float
    split: np.ndarray | None
    seconds: float
    exact: bool
    guesses: list[tuple[float, bool, float, float]]


def column_bound(graph: Graph, cluster: Cluster, *, upper: float, lower: float = 0.0, gap: float = 0.0,
                 time_limit: float | None = None, seed: int = 0, enumerate_sets: bool = True) -> ColumnBound:
    """The largest ``T`` refuted for contiguous splits (module docstring) within the time limit.

    Parameters
    ----------
    upper : the max-load of a known contiguous split (the incumbent); guesses stay below it.
    lower : a bound already proven (returned when nothing better is refuted).
    gap : the first guess is ``(1 - gap) upper`` (``(1 - PROBE) upper`` for 0); once that is
        refuted and a guess just below the incumbent was tried, a positive ``gap`` stops the
        search (0: bisect to the end).
    time_limit : seconds for the whole call (``None``: until the bisection ends).
    enumerate_sets : price by enumerating the convex sets where the graph allows it (else the
        root LP with interval columns and MIP pricing everywhere; tests compare the two).

    Returns
    -------
    ColumnBound

    Examples
    --------
    >>> from devplace_lite.generators import generate
    >>> from devplace_lite.devices import Cluster
    >>> from devplace_lite.throughput.dp import dp
    >>> g, c = generate("layered", 30, seed=0), Cluster(accelerators=4, cpus=1)
    >>> split = dp(g, c)  # a chain of ideals: contiguous, so an incumbent
    >>> b = column_bound(g, c, upper=split.objective, gap=0.01, time_limit=60)
    >>> b.exact, b.bound >= 0.99 * split.objective
    (True, True)
    """
    from ..cost import evaluate

    t0 = time.perf_counter()
    deadline = math.inf if time_limit is None else t0 + time_limit
    data = unit_graph(graph, chain=False).on(cluster)
    parts = _Parts(data, upper, seed)
    if not enumerate_sets:
        parts.table = None
    guesses: list[tuple[float, bool, float, float]] = []
    lo, hi, top = lower, upper, upper  # refuted, incumbent, least guess not refuted
    split = None
    near = False  # whether the guess just below the incumbent was tried
    first = gap if gap > 0 else PROBE
    while time.perf_counter() < deadline:
        if lo < (1.0 - first) * hi < top:
            T = (1.0 - first) * hi
        elif not near and lo < hi * (1 - NEAR) < top:
            T, near = hi * (1 - NEAR), True
        elif gap > 0 and lo >= (1.0 - gap) * hi:
            break
        elif top - lo > 1e-7 * max(1.0, hi):
            T = 0.5 * (lo + top)
        else:
            break
        left = deadline - time.perf_counter()
        ok, farley, found = refute(parts, T, time.perf_counter() + (left if not guesses else left / 2))
        guesses.append((T, ok, farley, round(time.perf_counter() - t0, 3)))
        if ok:
            lo = max(lo, T)
        else:
            top = T
        if found is not None:  # a split with every load <= T: a better incumbent
            value = float(evaluate(graph, cluster, found).max_load)
            if value < hi:
                hi, split = value, found
                top = min(top, hi)
    return ColumnBound(float(min(lo, hi)), float(hi), split, time.perf_counter() - t0, parts.table is not None,
                       guesses)


__all__ = ["ColumnBound", "column_bound", "refute"]
