"""The max-load integer program (throughput), in three flavours of split.

Problem: place every unit (colocation class, or single node) on one of ``k`` accelerators or
``l`` CPU cores so that the largest device load of `devplace_lite.cost` is least, subject to
the memory cap of each accelerator, unsupported nodes (CPU only), nodes without a CPU time
(accelerators only), and a split kind on the forward graph:

* ``"chain"``: a chain of ideals, i.e. ordered stages with every forward edge going forward
  (what a pipeline needs; the optimum equals the DP's and ``exhaustive(kind="chain")``);
* ``"contiguous"``: every device's part convex in the forward graph (Tarnawski et al.'s
  contiguous IP; equals ``exhaustive(kind="contiguous")``, at most the chain optimum);
* ``"noncontiguous"`` (alias ``"any"``): no shape asked (equals ``exhaustive(kind="any")``).

Formulation (``x[u,d]`` = unit ``u`` on device ``d``; ``c(p)`` the producer's transfer time)::

    min T
    sum_d x[u,d] = 1                                   every unit placed once
    x[u,d] = 0      where u may not run on d            unsupported / no CPU time
    y[p,d] >= x[u(p),d] - x[u(w),d]                     p's output leaves d  (p -> w)
    y[p,d] >= x[u(w),d] - x[u(p),d]                     p's output enters d  (p -> w)
    T >= sum_u p_acc(u) x[u,d] + sum_p c(p) y[p,d]      accelerator d
    T >= sum_u p_cpu(u) x[u,d]                          CPU core d
    sum_u m(u) x[u,d] <= M                              accelerator d

``y[p,d]`` is continuous in [0, 1]: once the ``x`` are integral the rows force it to 1 exactly
when ``p``'s output crosses ``d``'s boundary, and minimising ``T`` never gains from more, so
the comm term is counted once per producer per device, as in the evaluator. *Contiguity*
(per device, forward edges ``a -> b``) uses a predecessor-closed indicator ``z[.,d]`` that
contains the part and excludes whatever the part feeds from outside::

    z[v,d] >= x[u(v),d],   z[b,d] <= z[a,d],   z[b,d] <= x[u(b),d] - x[u(a),d] + 1

A path that leaves the part at ``b`` has ``z = 0`` from ``b`` on, so it can never come back.
The *chain* flavour indexes stages instead of devices: ``g[u,s]`` = unit ``u`` sits in stage
``s`` or earlier (non-decreasing in ``s``), stage membership ``g[u,s] - g[u,s-1]``, and a
forward edge ``a -> b`` asks ``g[u(b),s] <= g[u(a),s]`` (nothing runs before what it reads).
With CPU cores too, the stages have fixed types: ``l`` CPU slots before each accelerator and
after the last, of which at most ``l`` may be used.

Symmetry: identical accelerators (and identical cores) make every relabelling of a solution
optimal too; ``symmetry=True`` keeps the labelling in which devices are used in order of
the units' topological order (unit number ``r`` among those an accelerator may run can only
use accelerators ``0..r``), and passes the same relabelling to the warm start. It is off by
default: SCIP and HiGHS find these symmetries themselves (orbital fixing, orbitopes), and in
our measurements (``benchmarks/mip``) they did better without the fixed labelling.

Solving: the rows go into a `devplace_lite.mip.solve.LinearModel` handed to SCIP (default) or
HiGHS with one thread and a seed, and a warm start: the DP's split if the DP
(`devplace_lite.throughput.dp`) finishes within `WARM_SHARE` of the time limit, else the best baseline
chain split. The reported objective is always the evaluator's max-load of the returned placement;
the bound is the larger of the solver's and ``max(largest unit, total work / devices)``.
The contiguous flavour is first bounded by column generation over convex parts (``columns``,
on by default there; `devplace_lite.throughput.columns`: no device labels, every part pays its
own transfers), which usually proves the start within the gap by itself; it starts from the
combinatorial bound of chapter 05 (valid for any split), and its bound is otherwise a row on
``T``. With ``dp_cut=True`` the chain flavour also takes the DP's proven
optimum as a row on ``T``: the relaxation alone stays far below it on many identical devices
(75 % on ResNet-50 layers with k = 8 after 60 s), and the DP proves the same model's optimum
in milliseconds.

Complexity: NP-hard in general; the model has ``U D`` binaries (``U S`` and ``S`` for the
chain), ``2 m k`` comm rows and ``(n + 2m) D`` contiguity rows; solve times are measured in
``benchmarks/mip``.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> g, c = generate("layered", 10, seed=1), Cluster(accelerators=2)
>>> r = throughput_ip(g, c, "contiguous", solver="highs")
>>> r.status, abs(r.objective - r.check().max_load) < 1e-9
('optimal', True)

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..cost import as_assignment, chain_order, device_loads, evaluate
from ..devices import Cluster
from ..errors import DevplaceError, LimitError, UsageError
from ..graph import Graph
from ..result import Result
from ..methods import PARTITION
from ..units import UnitCosts, order_vertices, unit_graph
from ..units import comm_pairs, memory_share, order_pairs
from ..mip.solve import LinearModel, Solution, check_solver, solve

#: Share of the time limit the DP's warm start may take. Its split is the incumbent every bound is
#: measured against, and neither the column stage nor the IP improved it within a minute on the
#: authors' layer graphs (`benchmarks/mip/front_door.py`). The DP needs 2.5-5.2 CPU s on
#: Inception-v3 training; at 0.2 of 60 s wall under load it missed its share, and the linearised
#: split left 1-3 % more of the gap open. At 0.6 it missed as often as at 0.4 under load 16 on two
#: cores (4-5 CPU s per command), so the column stage keeps the larger rest.
WARM_SHARE = 0.4
#: Share of the time limit that must be left after the column bound for the device-indexed IP to
#: start. The column stage takes all the time it needs: on the authors' layer graphs the IP after
#: it never moved its root bound or the incumbent within a minute (`benchmarks/mip`), and building
#: its model (thousands of rows) started with seconds left overran the deadline under load. With
#: less left, the answer is the incumbent, the column bound and status ``time_limit``.
IP_FLOOR = 0.1

KINDS = ("chain", "contiguous", "noncontiguous")
_ALIASES = {"any": "noncontiguous", "noncontig": "noncontiguous", "contig": "contiguous"}
#: Which splits of `devplace_lite.cost.split_kind` each flavour accepts (as a warm start).
_ACCEPTS = {"chain": {"chain"}, "contiguous": {"chain", "contiguous"},
            "noncontiguous": {"chain", "contiguous", "none"}}


def canonical_kind(kind: str) -> str:
    k = _ALIASES.get(str(kind), str(kind))
    if k not in KINDS:
        raise UsageError(f"unknown split kind {kind!r}; known: {', '.join(KINDS)} (or 'any')")
    return k


def canonical_labels(data: UnitCosts, assignment: np.ndarray) -> np.ndarray:
    """The same split with accelerators (and CPU cores) renumbered by first use in unit order."""
    k = data.cluster.k
    dev = data.units.unit_devices(assignment)
    relabel: dict[int, int] = {}
    n_acc = n_cpu = 0
    for u in data.units.first_order.tolist():
        d = int(dev[u])
        if d not in relabel:
            if d < k:
                relabel[d], n_acc = n_acc, n_acc + 1
            else:
                relabel[d], n_cpu = k + n_cpu, n_cpu + 1
    return np.array([relabel[int(d)] for d in assignment], dtype=np.int64)


# -- the formulations -----------------------------------------------------------------------------
class _DeviceModel:
    """``x[u,d]`` formulation: the contiguous and non-contiguous flavours."""

    def __init__(self, data: UnitCosts, contiguous: bool, symmetry: bool | str) -> None:
        self.data, self.contiguous = data, contiguous
        c, U = data.cluster, data.U
        k, D = c.k, c.size
        m = self.model = LinearModel()
        ub = data.allowed.astype(float)
        if symmetry:
            for ok, lo, hi in ((data.acc_supported, 0, k), (data.cpu_ok, k, D)):
                rank = np.cumsum(ok[data.units.first_order]) - 1  # rank among units this type may run
                r = np.empty(U, dtype=np.int64)
                r[data.units.first_order] = rank
                for d in range(lo, hi):
                    ub[(d - lo) > r, d] = 0.0
        self.x = m.add_vars((U, D), ub=ub, integer=True)
        self.sums: list[tuple[list[int], int, np.ndarray]] = []  # running sums of _order_parts
        if symmetry == "orbitope":
            self._order_parts()
        self.T = m.add_vars(1)[0]
        m.obj[self.T] = 1.0
        producers, pairs = comm_pairs(data)
        self.producers = producers
        self.y = m.add_vars((len(producers), k), ub=1.0)
        x, y, T = self.x, self.y, self.T
        for u in range(U):
            m.add_row(((x[u, d], 1.0) for d in range(D)), lo=1.0, hi=1.0)
        unit = data.unit
        for r, w in pairs:
            up = unit[producers[r]]
            for d in range(k):
                m.add_row([(y[r, d], 1.0), (x[up, d], -1.0), (x[w, d], 1.0)], lo=0.0)
                m.add_row([(y[r, d], 1.0), (x[up, d], 1.0), (x[w, d], -1.0)], lo=0.0)
        comm = data.graph.comm[producers] if producers else np.zeros(0)
        share = memory_share(data)
        for d in range(D):
            if d < k:
                m.add_row([(x[u, d], data.pa[u]) for u in range(U)]
                          + [(y[r, d], comm[r]) for r in range(len(producers))] + [(T, -1.0)], hi=0.0)
                if data.memory_binds:
                    m.add_row([(x[u, d], share[u]) for u in range(U)], hi=1.0)
            else:
                m.add_row([(x[u, d], data.pc[u]) for u in range(U)] + [(T, -1.0)], hi=0.0)
        if contiguous:
            keep = order_vertices(data.graph)
            self.fwd = np.flatnonzero(keep)
            col = -np.ones(data.graph.n, dtype=np.int64)
            col[self.fwd] = np.arange(len(self.fwd))
            self.zcol = col
            self.z = m.add_vars((len(self.fwd), D), ub=1.0)
            z = self.z
            for i, v in enumerate(self.fwd.tolist()):
                for d in range(D):
                    m.add_row([(z[i, d], 1.0), (x[unit[v], d], -1.0)], lo=0.0)
            for a, b in order_pairs(data.graph):
                ia, ib = col[a], col[b]
                for d in range(D):
                    m.add_row([(z[ib, d], 1.0), (z[ia, d], -1.0)], hi=0.0)
                    if unit[a] != unit[b]:
                        m.add_row([(z[ib, d], 1.0), (x[unit[b], d], -1.0), (x[unit[a], d], 1.0)], hi=1.0)

    def _order_parts(self) -> None:
        """Parts of one device type in order of their first unit: a unit may open part ``d``
        only if an earlier unit (unit order, among those the type may run) opened part
        ``d - 1``. Of the ``k!`` labellings of a split exactly one, `canonical_labels`', is
        left (the column inequalities of the partitioning orbitope, Kaibel and Pfetsch 2008),
        so the search never meets the same split twice under another labelling. Rows stay
        sparse through running sums ``s[i, d]`` = units among the first ``i`` on part ``d``."""
        data, m, x = self.data, self.model, self.x
        k, D = data.cluster.k, data.cluster.size
        for ok, lo, hi in ((data.acc_supported, 0, k), (data.cpu_ok, k, D)):
            L = [u for u in data.units.first_order.tolist() if ok[u]]
            if hi - lo < 2 or len(L) < 2:
                continue
            s = m.add_vars((len(L) + 1, hi - lo - 1))  # s[i, j]: on part lo + j among L[:i]
            self.sums.append((L, lo, s))
            for j in range(hi - lo - 1):
                m.add_row([(s[0, j], 1.0)], hi=0.0)
                for i, u in enumerate(L):
                    m.add_row([(s[i + 1, j], 1.0), (s[i, j], -1.0), (x[u, lo + j], -1.0)], lo=0.0, hi=0.0)
                    m.add_row([(x[u, lo + j + 1], 1.0), (s[i, j], -1.0)], hi=0.0)

    def decode(self, values: np.ndarray) -> np.ndarray:
        dev = np.argmax(values[self.x], axis=1)
        return dev[self.data.unit]

    def encode(self, assignment: np.ndarray) -> np.ndarray:
        data, g = self.data, self.data.graph
        k, D = data.cluster.k, data.cluster.size
        v = np.zeros(self.model.n_vars)
        dev = data.units.unit_devices(assignment)
        v[self.x[np.arange(data.U), dev]] = 1.0
        for r, p in enumerate(self.producers):
            for w in g.succ[p]:
                if assignment[w] != assignment[p]:
                    for d in (int(assignment[p]), int(assignment[w])):
                        if d < k:
                            v[self.y[r, d]] = 1.0
        compute, comm = device_loads(g, data.cluster, assignment)
        v[self.T] = float((compute + comm).max())
        for L, lo, s in self.sums:
            on = dev[np.asarray(L)][:, None] == lo + np.arange(s.shape[1])[None, :]
            v[s[1:]] = np.cumsum(on, axis=0)
            v[s[0]] = 0.0
        if self.contiguous:
            keep = order_vertices(g)
            succ: list[list[int]] = [[] for _ in range(g.n)]
            for a, b in order_pairs(data.graph):
                succ[a].append(b)
            for d in range(D):
                inside = (assignment == d) & keep
                # z = 1 except on what the part feeds from outside and everything after it
                out = [w for a in np.flatnonzero(inside) for w in succ[a] if not inside[w]]
                gone = np.zeros(g.n, dtype=bool)
                while out:
                    w = out.pop()
                    if not gone[w]:
                        gone[w] = True
                        out.extend(succ[w])
                v[self.z[:, d]] = (~gone[self.fwd]).astype(float)
        return v


class _StageModel:
    """``g[u,s]`` formulation: the chain of ideals (ordered stages of fixed types).

    Stage types follow the pattern ``l`` CPU slots, an accelerator, ``l`` CPU slots, ...,
    an accelerator, ``l`` CPU slots, and at most ``l`` CPU slots may be used: every order of
    ``k`` accelerator parts and ``l`` CPU parts fits the pattern, and no binary has to choose
    a stage's type (that choice made the relaxation both weak and slow to solve).
    """

    def __init__(self, data: UnitCosts) -> None:
        self.data = data
        c, U = data.cluster, data.U
        k = c.k
        l = self.l = c.l if data.cpu_ok.any() else 0  # no unit may use a core: no CPU stages
        self.is_acc = np.array(([False] * l + [True]) * k + [False] * l, dtype=bool)
        S = self.S = len(self.is_acc)
        cpu_slots = np.flatnonzero(~self.is_acc)
        m = self.model = LinearModel()
        lb = np.zeros((U, S))
        lb[:, S - 1] = 1.0
        self.g = m.add_vars((U, S), lb=lb, ub=1.0, integer=True)
        self.T = m.add_vars(1)[0]
        m.obj[self.T] = 1.0
        g, T = self.g, self.T

        def member(u: int, s: int) -> list[tuple[int, float]]:
            return [(g[u, s], 1.0)] + ([(g[u, s - 1], -1.0)] if s else [])

        for u in range(U):
            for s in range(S - 1):
                m.add_row([(g[u, s], 1.0), (g[u, s + 1], -1.0)], hi=0.0)
            for s in range(S):  # a unit only in stages of a type that may run it
                if not (data.acc_supported[u] if self.is_acc[s] else data.cpu_ok[u]):
                    m.add_row(member(u, s), hi=0.0)
        unit = data.unit
        prec = sorted({(int(unit[a]), int(unit[b])) for a, b in order_pairs(data.graph) if unit[a] != unit[b]})
        for ua, ub_ in prec:
            for s in range(S - 1):
                m.add_row([(g[ub_, s], 1.0), (g[ua, s], -1.0)], hi=0.0)
        if l:  # used[s] >= member(u, s): at most l CPU slots hold anything
            self.used = m.add_vars(len(cpu_slots), ub=1.0)
            for i, s in enumerate(cpu_slots.tolist()):
                for u in np.flatnonzero(data.cpu_ok).tolist():
                    m.add_row([(self.used[i], 1.0)] + [(c_, -v) for c_, v in member(u, s)], lo=0.0)
            m.add_row([(self.used[i], 1.0) for i in range(len(cpu_slots))], hi=float(l))
        producers, pairs = comm_pairs(data)
        self.producers = producers
        comm = data.graph.comm[producers] if producers else np.zeros(0)
        acc_slots = np.flatnonzero(self.is_acc)
        self.y = m.add_vars((len(producers), S), ub=1.0)
        for r, w in pairs:
            up = unit[producers[r]]
            for s in acc_slots.tolist():
                diff = member(up, s) + [(c_, -v) for c_, v in member(w, s)]
                m.add_row([(self.y[r, s], 1.0)] + [(c_, -v) for c_, v in diff], lo=0.0)
                m.add_row([(self.y[r, s], 1.0)] + diff, lo=0.0)
        cpu_total, share = [], memory_share(data)
        for s in range(S):
            if self.is_acc[s]:
                terms = [(c_, data.pa[u] * v) for u in range(U) for c_, v in member(u, s)]
                terms += [(self.y[r, s], comm[r]) for r in range(len(producers))]
                if data.memory_binds:
                    m.add_row([(c_, share[u] * v) for u in range(U) for c_, v in member(u, s)], hi=1.0)
            else:
                terms = [(c_, data.pc[u] * v) for u in range(U) for c_, v in member(u, s)]
                cpu_total += terms
            m.add_row(terms + [(T, -1.0)], hi=0.0)
        if l and len(cpu_slots) > l:  # the used CPU slots carry at most l T between them
            m.add_row(cpu_total + [(T, -float(l))], hi=0.0)

    def decode(self, values: np.ndarray) -> np.ndarray:
        k = self.data.cluster.k
        stage = np.argmax(values[self.g] > 0.5, axis=1)
        used = np.zeros(self.S, dtype=bool)
        used[stage] = True
        cpu_rank = np.cumsum(~self.is_acc & used) - 1
        device = np.where(self.is_acc, np.cumsum(self.is_acc) - 1, k + cpu_rank)
        return device[stage][self.data.unit]

    def encode(self, assignment: np.ndarray) -> np.ndarray:
        data, gr = self.data, self.data.graph
        c = data.cluster
        k, l = c.k, self.l
        order = chain_order(gr, c, assignment)
        used = set(order)
        order += [d for d in range(c.size) if d not in used]  # devices only backward nodes use
        slot_of: dict[int, int] = {}
        acc_slots = np.flatnonzero(self.is_acc).tolist()
        gap, in_gap = 0, 0
        for d in order:
            if d >= k and not l:
                continue  # an unused core (every used one has a stage)
            if d < k:
                slot_of[d] = acc_slots[gap]
                gap, in_gap = gap + 1, 0
            else:
                slot_of[d] = gap * (l + 1) + in_gap
                in_gap += 1
        v = np.zeros(self.model.n_vars)
        dev = data.units.unit_devices(assignment)
        stage = np.array([slot_of[int(d)] for d in dev], dtype=np.int64)
        v[self.g] = (np.arange(self.S)[None, :] >= stage[:, None]).astype(float)
        if l:
            cpu_slots = np.flatnonzero(~self.is_acc)
            v[self.used] = np.isin(cpu_slots, stage).astype(float)
        for r, p in enumerate(self.producers):
            for w in gr.succ[p]:
                if assignment[w] != assignment[p]:
                    for d in (int(assignment[p]), int(assignment[w])):
                        if d < k:
                            v[self.y[r, slot_of[d]]] = 1.0
        compute, comm = device_loads(gr, c, assignment)
        v[self.T] = float((compute + comm).max())
        return v


# -- warm starts ----------------------------------------------------------------------------------
def warm_candidates(graph: Graph, cluster: Cluster, budget: float = 10.0) -> list[tuple[str, np.ndarray]]:
    """Feasible chain splits to start from: the exact DP (given ``budget`` seconds; past it,
    its linearised split), and the baselines that cut one topological order."""
    from . import baselines

    out = []
    dp = _dp_split(graph, cluster, budget)
    if dp is not None:
        out.append(dp)
    for name, fn in (("time", baselines.balance_by_time), ("greedy", baselines.greedy_fill),
                     ("single", baselines.single_device)):
        try:
            r = fn(graph, cluster)
        except DevplaceError:  # a baseline that cannot run on this cluster
            continue
        if r.assignment is not None and r.status not in ("infeasible", "unknown"):
            out.append((name, r.assignment))
    return out


def _dp_split(graph: Graph, cluster: Cluster, budget: float) -> tuple[str, np.ndarray] | None:
    """The throughput DP's split within ``budget`` seconds (`devplace_lite.throughput.dp`), else the
    linearised DP's; ``None`` when neither finds a feasible chain split."""
    try:
        from . import dp
    except ImportError:  # the DP is an optional neighbour: the baselines still give a start
        return None
    try:
        r = dp.dp(graph, cluster, time_limit=budget)
        name = "dp" if r.status == "optimal" else "dp-linear"
    except LimitError:  # too many ideals to enumerate
        try:
            r, name = dp.linear(graph, cluster), "dp-linear"
        except LimitError:  # too many units to slice: the baselines give the start
            return None
    if r.assignment is None or r.status in ("infeasible", "unknown"):
        return None
    return name, r.assignment


def _pick_start(data: UnitCosts, kind: str, warm_start, symmetry: bool, budget: float):
    """The best feasible warm start for this flavour, relabelled for the symmetry rows."""
    graph, cluster = data.graph, data.cluster
    if warm_start is None or warm_start is False:
        return None
    if isinstance(warm_start, str) and warm_start == "auto":
        cands = warm_candidates(graph, cluster, budget)
    elif isinstance(warm_start, Result):
        cands = [] if warm_start.assignment is None else [(warm_start.method, warm_start.assignment)]
    else:
        cands = [("given", as_assignment(graph, cluster, warm_start))]
    best = None
    for name, a in cands:
        ev = evaluate(graph, cluster, a)
        if ev.feasible and ev.split in _ACCEPTS[kind] and (best is None or ev.max_load < best[2]):
            best = (name, np.asarray(a, dtype=np.int64), ev.max_load)
    if best is None:
        return None
    name, a, _ = best
    if symmetry and kind != "chain":  # the labelling the symmetry rows keep
        a = canonical_labels(data, a)
    return name, a


# -- the method ------------------------------------------------------------------------------------
def throughput_ip(graph: Graph, cluster: Cluster, kind: str = "contiguous", *, solver: str = "scip",
                  time_limit: float | None = None, gap: float = 0.0, seed: int = 0, threads: int = 1,
                  warm_start="auto", symmetry: bool | str = False, dp_cut: bool = False,
                  bound_cut: bool = False, columns: bool | None = None) -> Result:
    """Minimise the largest device load over splits of ``kind`` with an integer program.

    Parameters
    ----------
    kind : ``"chain"``, ``"contiguous"`` or ``"noncontiguous"`` (``"any"``).
    solver : ``"scip"`` (default) or ``"highs"``.
    time_limit : seconds for the whole call (model building included); on expiry the best split
        found (or the warm start) comes back with status ``time_limit`` and the proven bound.
    gap : relative gap at which to stop; 0 proves optimality (status ``optimal``), a positive
        gap gives status ``feasible`` with the bound.
    warm_start : ``"auto"`` (the DP when available, else baseline chain splits), a `Result`, a
        placement, or ``None``.
    symmetry : fix the labelling of identical devices (contiguous and non-contiguous flavours):
        ``True`` bounds the device index of each unit by its rank (unit ``r`` may use devices
        ``0..r``), ``"orbitope"`` also orders the parts by their first unit, which leaves one
        labelling of each split (`_DeviceModel._order_parts`); default off.
    bound_cut : add the row ``T >= `` the combinatorial bound of chapter 05
        (`devplace_lite.throughput.bounds.combinatorial_bound`: valid for splits of any shape, so for every
        flavour); the reported bound is never below it.
    columns : contiguous flavour only: first bound the optimum by column generation over convex
        parts (`devplace_lite.throughput.columns`, HiGHS; the time left after the warm start),
        take any better split it meets as the start, and return at once when its bound meets the
        start within ``gap``; otherwise its bound becomes the row ``T >=`` bound of the IP, which
        runs only when at least `IP_FLOOR` of the time limit is left (else status ``time_limit``).
        ``None`` (default): on for the contiguous flavour, whose device-indexed relaxation
        alone stays several percent open at k = 8 (``benchmarks/mip``).
    dp_cut : chain flavour only: when the DP proved its split optimal within its share of the
        limit (the ``"auto"`` warm start), add the row ``T >= `` its value. The DP solves the
        same model exactly, so the row is valid and the solver's bound meets the warm start at
        once; off by default, so that the IP's own proof is what is measured.

    Returns
    -------
    Result whose ``objective`` is the evaluator's max-load of the returned placement and whose
    ``bound`` is a proven lower bound on the flavour's optimum.
    """
    t0 = time.perf_counter()
    kind = canonical_kind(kind)
    solver = check_solver(solver)
    method = {"chain": "ip", "contiguous": "ip-contig", "noncontiguous": "ip-noncontig"}[kind]
    data = unit_graph(graph, chain=False).on(cluster)
    extra = {"kind": kind, "solver": solver}
    if data.U == 0:
        return Result(method, graph, cluster, np.zeros(0, dtype=np.int64), 0.0, "optimal", 0.0, bound=0.0, extra=extra)
    nowhere = np.flatnonzero(~data.allowed.any(axis=1))
    if len(nowhere):
        v = graph.nodes[int(np.flatnonzero(data.unit == nowhere[0])[0])].id
        extra["reason"] = f"node {v} fits on no device (memory, support or CPU time)"
        return Result(method, graph, cluster, None, None, "infeasible", time.perf_counter() - t0, extra=extra)
    budget = 10.0 if time_limit is None else WARM_SHARE * time_limit  # for the DP's warm start
    binaries, reach = data.U * cluster.size, PARTITION[method].reach
    if binaries > reach.limit:  # the model alone would take minutes and gigabytes to build
        why = (f"{binaries:,} unit-device binaries, more than {reach.limit:,}: the integer program is not "
               f"built for graphs this large")
        if time_limit is not None and isinstance(warm_start, str) and warm_start == "auto":
            from .baselines import balance_by_time, single_device  # one linear-time start, not every one
            warm_start = (balance_by_time if cluster.k else single_device)(graph, cluster)
        start = None if time_limit is None else _pick_start(data, kind, warm_start, symmetry, budget)
        if time_limit is None or start is None:
            raise LimitError(f"graph {graph.name}: {why}; {reach.advice()}")
        extra.update(reason=why, warm_start=start[0])
        return Result(method, graph, cluster, start[1], float(evaluate(graph, cluster, start[1]).max_load),
                      "time_limit", time.perf_counter() - t0, bound=data.lower_bound(), extra=extra)
    start = _pick_start(data, kind, warm_start, symmetry, budget)
    if columns is None:
        columns = kind == "contiguous"
    if columns:
        if kind != "contiguous":
            raise UsageError(f"columns=True bounds the contiguous flavour only, not {kind!r}")
        if start is not None:
            start, early = _column_stage(data, start, symmetry, gap, time_limit, t0, extra)
            if early is not None:
                return Result(method, graph, cluster, start[1], early[0], early[1], time.perf_counter() - t0,
                              bound=early[2], extra=extra)
    if start is not None:  # nothing better may put a unit where it alone takes longer than the start
        data = data.units.on(cluster, cap=float(evaluate(graph, cluster, start[1]).max_load))
    form = _StageModel(data) if kind == "chain" else _DeviceModel(data, kind == "contiguous", symmetry)
    if "columns_bound" in extra and extra["columns_bound"] > 0:  # solver tolerance below the proven value
        form.model.add_row([(form.T, 1.0)], lo=extra["columns_bound"] * (1 - 1e-9))
        extra["cut"] = "columns"
    if bound_cut:
        from .bounds import combinatorial_bound

        comb = combinatorial_bound(graph, cluster)
        if math.isfinite(comb.bound) and comb.bound > 0:  # solver tolerance below the proven value
            form.model.add_row([(form.T, 1.0)], lo=comb.bound * (1 - 1e-9))
            extra["cut"] = "combinatorial"
            extra["combinatorial_bound"] = comb.bound
    start_vec = None
    if start is not None:
        start_vec = form.encode(start[1])
        if form.model.violation(start_vec) > 1e-6:  # never hand a solver a bad start
            raise AssertionError(f"warm start {start[0]} violates the {kind} model")
        extra["warm_start"] = start[0]
        extra["start_objective"] = float(start_vec[form.T])
        if dp_cut and kind == "chain" and start[0] == "dp":  # "dp" only when the DP proved it
            value = extra["start_objective"]
            form.model.add_row([(form.T, 1.0)], lo=value - 1e-9 * max(1.0, abs(value)))  # solver tolerance
            extra["cut"] = "dp"
    extra.update(variables=form.model.n_vars, rows=form.model.n_rows)
    left = None
    if time_limit is not None:
        left = max(0.01, time_limit - (time.perf_counter() - t0))
    sol = solve(form.model, solver, time_limit=left, gap=gap, seed=seed, threads=threads, start=start_vec)
    extra.update(nodes=sol.nodes, solve_seconds=round(sol.seconds, 3))
    return _result(method, data, kind, form, sol, start, t0, extra)


def _column_stage(data: UnitCosts, start, symmetry, gap: float, time_limit: float | None, t0: float,
                  extra: dict):
    """Column generation before the IP (``columns=True``): returns the start (replaced by a
    better split the search met) and, when the bound meets it within ``gap``, the answer
    ``(objective, status, bound)``; else ``None`` there and the bound in ``extra``."""
    from .bounds import combinatorial_bound
    from .columns import column_bound

    graph, cluster = data.graph, data.cluster
    upper = float(evaluate(graph, cluster, start[1]).max_load)
    # milliseconds, valid for any split: where the column LP cannot finish in time (MIP pricing on
    # the authors' training graphs), it is the bound that stands
    lower = data.lower_bound()
    comb = combinatorial_bound(graph, cluster).bound
    if math.isfinite(comb) and comb > lower:
        lower = extra["combinatorial_bound"] = comb
    share = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    cb = column_bound(graph, cluster, upper=upper, lower=lower, gap=gap, time_limit=share)
    extra.update(columns_bound=cb.bound, columns_seconds=round(cb.seconds, 3), columns_exact=cb.exact,
                 columns_guesses=len(cb.guesses))
    if cb.split is not None and cb.upper < upper:
        a = canonical_labels(data, cb.split) if symmetry else np.asarray(cb.split, dtype=np.int64)
        start, upper = ("columns", a), cb.upper
    extra["warm_start"] = start[0]
    if cb.bound >= upper - 1e-9 * max(1.0, upper):
        return start, (upper, "optimal", upper)
    if gap > 0 and upper - cb.bound <= gap * upper * (1 + 1e-9):  # the first guess is (1 - gap) upper
        return start, (upper, "feasible", cb.bound)
    if time_limit is not None and time_limit - (time.perf_counter() - t0) < IP_FLOOR * time_limit:
        return start, (upper, "time_limit", max(cb.bound, lower))
    return start, None


def _result(method: str, data: UnitCosts, kind: str, form, sol: Solution, start, t0: float, extra: dict) -> Result:
    graph, cluster = data.graph, data.cluster
    seconds = lambda: time.perf_counter() - t0  # noqa: E731
    if sol.status == "infeasible":
        return Result(method, graph, cluster, None, None, "infeasible", seconds(), extra=extra)
    status = {"optimal": "optimal", "gap": "feasible", "time_limit": "time_limit"}[sol.status]
    scored = []
    if sol.values is not None:
        a = form.decode(sol.values)
        ev = evaluate(graph, cluster, a)
        if ev.feasible and ev.split in _ACCEPTS[kind]:
            scored.append((ev.max_load, a))
        else:  # only solver tolerances can get here (e.g. a memory row met to 1e-6 relative)
            extra["rejected"] = "; ".join(ev.violations) or f"split is {ev.split}"
            status = "feasible" if status == "optimal" else status
    if start is not None:
        scored.append((evaluate(graph, cluster, start[1]).max_load, start[1]))
    lower = max(data.lower_bound(), extra.get("combinatorial_bound", 0.0))
    bound = max(lower, sol.bound) if sol.bound is not None else lower
    if not scored:
        return Result(method, graph, cluster, None, None, "time_limit", seconds(), bound=bound, extra=extra)
    objective, a = min(scored, key=lambda t: t[0])
    if bound >= objective - 1e-9 * max(1.0, abs(objective)) and status == "feasible":
        status = "optimal"  # stopped at a positive gap, but the gap happens to be closed
    bound = objective if status == "optimal" else min(bound, objective)  # tolerances: never above
    return Result(method, graph, cluster, np.asarray(a, dtype=np.int64), float(objective), status, seconds(),
                  bound=float(bound), extra=extra)


# -- the registry's entry points ---------------------------------------------------------------------
def ip_chain(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
             solver: str = "scip") -> Result:
    """The optimal chain-of-ideals split (pipeline stages) by integer programming."""
    return throughput_ip(graph, cluster, "chain", solver=solver, time_limit=time_limit, seed=seed)


def ip_contiguous(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
                  solver: str = "scip") -> Result:
    """The optimal split with every device's part convex, by integer programming after the
    column-generation bound over convex parts (`throughput_ip`'s ``columns``)."""
    return throughput_ip(graph, cluster, "contiguous", solver=solver, time_limit=time_limit, seed=seed)


def ip_noncontiguous(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
                     solver: str = "scip") -> Result:
    """The optimal split of any shape, by integer programming."""
    return throughput_ip(graph, cluster, "noncontiguous", solver=solver, time_limit=time_limit, seed=seed)


__all__ = ["KINDS", "throughput_ip", "ip_chain", "ip_contiguous", "ip_noncontiguous", "warm_candidates",
           "canonical_labels", "comm_pairs", "order_pairs"]
