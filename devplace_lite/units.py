"""The one unit model: what every method moves, and the order a pipeline split must keep.

The model is the authors' (Tarnawski et al., 2020, as their DP program builds it):

* **Classes.** Nodes of one colour class share a device; a node without a class is a class of
  its own (`Graph.units`).
* **The forward class graph.** One vertex per class, an arc ``A -> B`` for every forward edge
  from a node of ``A`` to a node of ``B``. A class with no forward node (a *backward-only*
  class; the authors' BERT operator training graphs have some) is represented by a zero-cost
  forward *stand-in*, ordered by the mirror image of the backward edges that touch it: a
  backward edge ``u -> v`` (both nodes backward) where ``u``'s or ``v``'s class is
  backward-only gives the arc ``class(v) -> class(u)`` (gradients flow against the data).
* **Chain splits.** A split is a chain of ideals when its parts can be ordered so that every
  arc of the class graph goes forward or stays inside a part (`devplace_lite.cost.chain_order`).
* **Loads** (`devplace_lite.cost`): all nodes of a part count, forward and backward, and every
  producer with an edge crossing an accelerator's boundary counts once.

`unit_graph` turns a graph into the units a chain split moves, by reductions that keep every
chain split (and so the optimum):

1. classes, as above;
2. *cycles*: the classes of one strongly connected component of the class graph share a part
   in every chain split, so each component is fused into one unit;
3. *free leaves* (``fold``): a unit whose nodes take no time (zero accelerator and CPU times,
   allowed on an accelerator) and that touches exactly one other unit, by any edge, joins that
   unit, to a fixpoint. Moving it beside its only neighbour never raises a load and keeps the
   chain; it may raise that device's memory, so ``fold=True`` marks the nodes ``folded`` and
   the caller certifies that no memory test turned on them (`devplace_lite.throughput.dp`), while
   ``fold="memoryless"`` folds only units without memory (always exact); a boolean node mask
   names the free nodes directly (the bounds use one that depends on the cluster);
4. units are numbered in a topological order of the arcs between them (Kahn's algorithm, ties
   by each unit's first node in the graph's own topological order), so an ideal is a
   predecessor-closed bit set over ``0..U-1`` and every prefix of the numbering is an ideal.

With ``chain=False`` only reductions 1 and 3 apply and the units carry no order: the model of
splits of any shape (the combinatorial bound, the non-contiguous IP).

Per unit the graph keeps its sums (`UnitGraph.pa`, ``pc``, ``mem``, ...) and the *producer
hypergraph*: producer ``p`` gives the unit set ``{unit(p)} ∪ {unit(w) : p -> w}``; an
accelerator holding the units ``S`` pays ``c(p)`` exactly when that set meets both ``S`` and its
complement. Producers with equal unit sets are merged by adding their costs.

`UnitGraph.on` (or `cluster_units`, which also folds what a cluster makes free) gives the one
per-cluster view every method family reads, `UnitCosts`: each unit's time on an accelerator and
on a CPU core, its memory, where it may run (device type, memory cap, and an optional cap on a
unit's time from a known answer) and the device it is pinned to. The bounds, the integer
programs, the heuristics, the slicer, the DP and the latency search all take their costs from it.

Complexity: ``O((n + m) log n)`` to build; the hypergraph ``O(n + m)`` more; a `UnitCosts`
``O(U D)`` at most (``allowed``).

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> g = Graph([Node("a", p_acc=1), Node("b", p_acc=1), Node("a'", p_acc=2, backward=True, color="A"),
...            Node("b'", p_acc=2, backward=True), Node("x", p_acc=1, backward=True)],
...           [("a", "b"), ("b", "b'"), ("b'", "x"), ("x", "a'")])
>>> u = unit_graph(g)   # a' has no forward partner in class A; b' and x are classless
>>> u.size, u.standin.tolist(), u.arcs.tolist()
(5, [False, False, True, True, True], [[0, 1], [2, 3], [3, 4]])

Here ``a -> b`` is the forward edge; the backward edges ``b' -> x`` and ``x -> a'`` touch
backward-only classes and give the mirrored arcs ``x -> b'`` and ``A -> x``: the stand-in units
2, 3 and 4 are the classes of ``a'``, ``x`` and ``b'``, in that order.

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020, and their
program ``throughput-dp/dp.cpp`` (msr-fiddle/dnn-partitioning), whose model this is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .dag import strong_components, topological_order
from .devices import Cluster
from .graph import Graph


def backward_only(graph: Graph) -> np.ndarray:
    """Per node: its class holds no forward node (the class is represented by a stand-in)."""
    cls = graph.units
    has_fwd = np.zeros(int(cls.max()) + 1 if graph.n else 0, dtype=bool)
    has_fwd[cls[~graph.backward]] = True
    return ~has_fwd[cls]


def order_vertices(graph: Graph) -> np.ndarray:
    """Per node: a vertex of the forward graph with stand-ins (a forward node, or a node of a
    backward-only class, which stands in for its class)."""
    return ~graph.backward | backward_only(graph)


def order_edges(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``(s, t)``: the node pairs a chain split keeps in order, ``s``'s part never after ``t``'s.

    The forward edges, and each backward edge ``u -> v`` that touches a backward-only class,
    mirrored to ``v -> u``; an end in a class with forward nodes is replaced by each of those
    forward nodes (a class is one vertex of the authors' contracted graph). Both ends are
    `order_vertices`.
    """
    bwd, orphan = graph.backward, backward_only(graph)
    s, t = graph.src, graph.dst
    ff = ~bwd[s] & ~bwd[t]
    mirror = np.flatnonzero(bwd[s] & bwd[t] & (orphan[s] | orphan[t]))
    if not len(mirror):
        return s[ff].astype(np.int64), t[ff].astype(np.int64)
    cls = graph.units
    ends = np.r_[s[mirror], t[mirror]]
    wanted = np.unique(cls[ends[~orphan[ends]]])
    fwd_of: dict[int, list[int]] = {int(c): [] for c in wanted}
    for v in np.flatnonzero(~bwd & np.isin(cls, wanted)).tolist():
        fwd_of[int(cls[v])].append(v)
    pairs = [(x, y) for u, v in zip(s[mirror].tolist(), t[mirror].tolist())
             for x in ([v] if orphan[v] else fwd_of[int(cls[v])])
             for y in ([u] if orphan[u] else fwd_of[int(cls[u])])]
    extra = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return np.r_[s[ff], extra[:, 0]].astype(np.int64), np.r_[t[ff], extra[:, 1]].astype(np.int64)


def class_arcs(graph: Graph) -> np.ndarray:
    """Arcs ``(A, 2)`` of the forward class graph over ``graph.units`` (module docstring): the
    `order_edges` between different classes; unique, sorted."""
    s, t = order_edges(graph)
    arcs = np.stack([graph.units[s], graph.units[t]], axis=1)
    arcs = arcs[arcs[:, 0] != arcs[:, 1]]
    return np.unique(arcs, axis=0) if len(arcs) else np.zeros((0, 2), dtype=np.int64)


def free_nodes(graph: Graph, memory: bool = True, cpu: bool = True) -> np.ndarray:
    """Nodes that cost nothing wherever their neighbour is: no accelerator time, allowed on an
    accelerator, no CPU time (unless ``cpu=False``: the cluster has no cores) and no memory
    (unless ``memory=False``: no cap, or the caller certifies memory itself)."""
    free = (graph.p_acc == 0) & graph.supported
    if cpu:
        free &= graph.p_cpu == 0
    if memory:
        free &= graph.memory == 0
    return free


def _fold_free(graph: Graph, label: np.ndarray, free_node: np.ndarray) -> np.ndarray:
    """Fold units made only of free nodes into their only neighbouring unit (by any edge), to a
    fixpoint; returns the new label of each node (the surviving unit's old label)."""
    n_units = int(label.max()) + 1
    free = np.ones(n_units, dtype=bool)
    np.logical_and.at(free, label, free_node)
    nbrs: list[set[int]] = [set() for _ in range(n_units)]
    for a, b in zip(label[graph.src].tolist(), label[graph.dst].tolist()):
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    root = list(range(n_units))
    queue = [u for u in range(n_units) if free[u] and len(nbrs[u]) == 1]
    while queue:
        u = queue.pop()
        if root[u] != u or not free[u] or len(nbrs[u]) != 1:
            continue
        (w,) = nbrs[u]
        root[u] = w  # w is a live unit: it keeps its own root
        nbrs[w].discard(u)
        nbrs[u] = set()
        free[w] &= free[u]
        free[u] = False
        if free[w] and len(nbrs[w]) == 1:
            queue.append(w)
    for u in range(n_units):  # follow the folds to the surviving unit
        r = u
        while root[r] != r:
            r = root[r]
        root[u] = r
    return np.asarray(root, dtype=np.int64)[label]


def unit_graph(graph: Graph, fold: bool | str | np.ndarray = False, chain: bool = True) -> "UnitGraph":
    """The units of ``graph`` (module docstring): classes, forward cycles fused (``chain``),
    free leaves folded (``fold``: ``False``, ``"memoryless"``, ``True`` or a node mask), numbered
    topologically.

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node("a", p_acc=1, color="A"), Node("b", p_acc=1), Node("c", p_acc=1, color="A"),
    ...            Node("z", p_cpu=0)], [("a", "b"), ("b", "c"), ("c", "z")])
    >>> unit_graph(g).unit.tolist(), unit_graph(g, fold=True).unit.tolist()
    ([0, 0, 0, 1], [0, 0, 0, 0])
    """
    label = graph.units.copy()
    arcs = class_arcs(graph)
    if chain and graph.n:
        label = strong_components(int(label.max()) + 1, arcs)[label]
    folded = np.zeros(graph.n, dtype=bool)
    if fold is not False and graph.n:
        if isinstance(fold, np.ndarray):
            mask = fold
        else:
            mask = free_nodes(graph, memory=fold == "memoryless")
        before = label
        label = _fold_free(graph, label, mask)
        moved = label != before
        folded = moved if fold is True else folded
    _, label = np.unique(label, return_inverse=True)
    label = label.astype(np.int64).reshape(-1)
    U = int(label.max()) + 1 if graph.n else 0
    if not chain:
        return UnitGraph(graph, label, np.zeros((0, 2), dtype=np.int64), folded, chain=False)
    cls = graph.units
    # arcs between units (a fold or a fusion makes some internal)
    rep = np.zeros(int(cls.max()) + 1 if graph.n else 0, dtype=np.int64)
    rep[cls] = label
    a, b = rep[arcs[:, 0]], rep[arcs[:, 1]]
    keep = a != b
    unit_arcs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), dtype=np.int64)
    # topological numbering: ties by each unit's first node in the graph's topological order
    pos = np.empty(graph.n, dtype=np.int64)
    pos[graph.topological_order()] = np.arange(graph.n)
    key = np.full(U, graph.n, dtype=np.int64)
    np.minimum.at(key, label, pos)
    succ: list[list[int]] = [[] for _ in range(U)]
    for x, y in unit_arcs.tolist():
        succ[x].append(y)
    order = topological_order(succ, key)
    rank = np.empty(U, dtype=np.int64)
    rank[order] = np.arange(U)
    unit_arcs = rank[unit_arcs] if len(unit_arcs) else unit_arcs
    if len(unit_arcs):
        unit_arcs = unit_arcs[np.lexsort((unit_arcs[:, 1], unit_arcs[:, 0]))]
    return UnitGraph(graph, rank[label], unit_arcs, folded, chain=True)


@dataclass(frozen=True, eq=False)
class UnitGraph:
    """The units of a graph and what every method needs of them (module docstring).

    ``unit[v]``: the unit of node ``v`` (every node, backward ones included); ``arcs`` (A, 2):
    the arcs between units, ``a < b`` (units are numbered topologically), empty when
    ``chain=False``; ``folded[v]``: node ``v`` joined its unit by a free-leaf fold.
    """

    graph: Graph
    unit: np.ndarray
    arcs: np.ndarray
    folded: np.ndarray
    chain: bool = True

    # -- shape ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of units ``U``."""
        return int(self.unit.max()) + 1 if len(self.unit) else 0

    @cached_property
    def succ(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.size)]
        for a, b in self.arcs.tolist():
            out[a].append(b)
        return tuple(map(tuple, out))

    @cached_property
    def pred(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.size)]
        for a, b in self.arcs.tolist():
            out[b].append(a)
        return tuple(map(tuple, out))

    @cached_property
    def pred_mask(self) -> list[int]:
        """Predecessor units of each unit as a bit set (a Python int)."""
        return [sum(1 << p for p in ps) for ps in self.pred]

    @cached_property
    def members(self) -> list[np.ndarray]:
        """Node indices of each unit, ascending."""
        order = np.argsort(self.unit, kind="stable")
        cuts = np.searchsorted(self.unit[order], np.arange(self.size + 1))
        return [order[cuts[u]:cuts[u + 1]] for u in range(self.size)]

    # -- per-unit sums -------------------------------------------------------------------
    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-unit sums of a per-node array (``nan`` entries make the sum ``nan``)."""
        return np.bincount(self.unit, weights=np.asarray(values, dtype=float), minlength=self.size)

    def any(self, mask: np.ndarray) -> np.ndarray:
        """Per unit: some node of it has ``mask`` set."""
        out = np.zeros(self.size, dtype=bool)
        np.logical_or.at(out, self.unit, np.asarray(mask, dtype=bool))
        return out

    @cached_property
    def pa(self) -> np.ndarray:
        """Accelerator time of each unit."""
        return self.sums(self.graph.p_acc)

    @cached_property
    def pc(self) -> np.ndarray:
        """CPU time of each unit, counting 0 for nodes without one (see `bad_cpu`)."""
        return self.sums(np.nan_to_num(self.graph.p_cpu))

    @cached_property
    def mem(self) -> np.ndarray:
        return self.sums(self.graph.memory)

    @cached_property
    def mem_core(self) -> np.ndarray:
        """Memory without the folded nodes (what a fold certificate checks against)."""
        return self.sums(np.where(self.folded, 0.0, self.graph.memory))

    @cached_property
    def bad_acc(self) -> np.ndarray:
        """Holds a node no accelerator may run."""
        return self.any(~self.graph.supported)

    @cached_property
    def bad_cpu(self) -> np.ndarray:
        """Holds a node without a CPU time."""
        return self.any(np.isnan(self.graph.p_cpu))

    @cached_property
    def standin(self) -> np.ndarray:
        """Holds no forward node: its place in the order is a stand-in's."""
        return ~self.any(~self.graph.backward)

    # -- the producer hypergraph ---------------------------------------------------------
    @cached_property
    def hyperedges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ptr, units, cost)``: hyperedge ``h`` is the sorted unit set
        ``units[ptr[h]:ptr[h+1]]`` (at least two units) with cost ``cost[h]``, the summed
        ``comm`` of the producers whose output reaches exactly those units."""
        g, unit = self.graph, self.unit
        # (producer, unit) pairs, unique and sorted: each producer's unit set, ascending
        live = g.comm[g.src] > 0
        p = np.concatenate([g.src[live], np.unique(g.src[live])])
        pairs = np.unique(np.stack([p, unit[np.concatenate([g.dst[live], p[live.sum():]])]], axis=1), axis=0)
        starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]]) if len(pairs) else np.zeros(0, np.int64)
        sizes = np.diff(np.r_[starts, len(pairs)])
        merged: dict[tuple[int, ...], float] = {}
        comm = g.comm.tolist()
        flat = pairs[:, 1].tolist() if len(pairs) else []
        for prod, s, size in zip(pairs[starts, 0].tolist(), starts.tolist(), sizes.tolist()):
            if size > 1:  # in producer order, so each sum adds in the same order as before
                members = tuple(flat[s:s + size])
                merged[members] = merged.get(members, 0.0) + comm[prod]
        keys = sorted(merged)
        ptr = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in keys], out=ptr[1:])
        units = np.array([x for e in keys for x in e], dtype=np.int64)
        return ptr, units, np.array([merged[e] for e in keys], dtype=float)

    @cached_property
    def incidence(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ptr, edge, above)``: the hyperedges through unit ``x`` are ``edge[ptr[x]:ptr[x+1]]``
        (ascending), and ``above[i]`` counts the units of ``edge[i]`` numbered above ``x``."""
        hp, hu, _ = self.hyperedges
        h_of = np.repeat(np.arange(len(hp) - 1), np.diff(hp))
        above = hp[h_of + 1] - 1 - np.arange(len(hu))  # unit sets are sorted ascending
        order = np.lexsort((h_of, hu))
        ptr = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(hu, minlength=self.size), out=ptr[1:])
        return ptr, h_of[order].astype(np.int64), above[order].astype(np.int64)

    def acc_load(self, inside: np.ndarray) -> float:
        """Load of an accelerator holding the units of the boolean mask ``inside``."""
        hp, hu, cost = self.hyperedges
        count = np.add.reduceat(inside[hu].astype(np.int64), hp[:-1]) if len(cost) else np.zeros(0)
        crossing = (count > 0) & (count < np.diff(hp))
        return float(self.pa[inside].sum() + cost[crossing].sum())

    # -- placements ------------------------------------------------------------------------
    def unit_devices(self, assignment: np.ndarray) -> np.ndarray:
        """The device of each unit under a node ``assignment`` that keeps units whole."""
        dev = np.empty(self.size, dtype=np.int64)
        dev[self.unit] = assignment
        return dev

    @cached_property
    def first_order(self) -> np.ndarray:
        """The units by their first node in the graph's topological order, forward nodes before
        backward ones (the order of an unordered unit graph, ``chain=False``)."""
        g = self.graph
        pos = np.empty(g.n, dtype=np.int64)
        pos[g.topological_order()] = np.arange(g.n)
        key = pos + g.n * g.backward.astype(np.int64)
        first = np.full(self.size, np.iinfo(np.int64).max)
        np.minimum.at(first, self.unit, key)
        return np.argsort(first, kind="stable")

    def on(self, cluster: Cluster, cap: float = math.inf) -> "UnitCosts":
        """These units seen on ``cluster`` (`UnitCosts`); ``cap``: a known upper bound on the
        optimum, past which a unit's time rules a device type out."""
        return UnitCosts(self, cluster, cap)


def cluster_units(graph: Graph, cluster: Cluster, chain: bool = True) -> "UnitCosts":
    """The units of ``graph`` with the free leaves that ``cluster`` makes free folded in (no time,
    no CPU time when it has cores, no memory when memory is capped: moving such a leaf beside its
    only neighbour changes no load and no optimum), seen on ``cluster``."""
    free = free_nodes(graph, memory=math.isfinite(cluster.memory), cpu=cluster.l > 0)
    return unit_graph(graph, fold=free, chain=chain).on(cluster)


@dataclass(frozen=True, eq=False)
class UnitCosts:
    """A unit graph on a cluster: what each unit costs where, and where it may run.

    ``units`` (the `UnitGraph`), ``cluster``, ``cap`` (a known upper bound on the optimum: a unit
    whose time on a device type exceeds it cannot sit there in any answer as good; ``inf`` when
    none). Per unit: ``pa``, ``pc`` (CPU time, 0 where a node has none), ``mem``;
    ``acc_supported`` (every node runs on an accelerator, the cluster has one, within ``cap``),
    ``acc_ok`` (that, and the unit's memory fits one accelerator), ``cpu_ok`` (the cluster has
    cores, every node has a CPU time, within ``cap``); ``acc_time`` and ``cpu_time`` (``pa`` and
    ``pc``, ``inf`` where a node cannot run on that device type); ``allowed[u, d]`` per device,
    ``pinned`` (the device a unit must use, or -1).

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node("a", p_acc=1, p_cpu=4, memory=3), Node("b", p_acc=2, supported=False, p_cpu=5)],
    ...           [("a", "b")])
    >>> c = unit_graph(g).on(Cluster(accelerators=2, cpus=1, memory=2))
    >>> c.acc_supported.tolist(), c.acc_ok.tolist(), c.acc_time.tolist(), c.pinned.tolist()
    ([True, False], [False, False], [1.0, inf], [-1, 2])
    """

    units: UnitGraph
    cluster: Cluster
    cap: float = math.inf

    @property
    def graph(self) -> Graph:
        return self.units.graph

    @property
    def unit(self) -> np.ndarray:
        return self.units.unit

    @property
    def U(self) -> int:
        return self.units.size

    @property
    def pa(self) -> np.ndarray:
        return self.units.pa

    @property
    def pc(self) -> np.ndarray:
        return self.units.pc

    @property
    def mem(self) -> np.ndarray:
        return self.units.mem

    @cached_property
    def acc_supported(self) -> np.ndarray:
        return ~self.units.bad_acc & (self.cluster.k > 0) & ~(self.pa > self.cap)

    @cached_property
    def acc_ok(self) -> np.ndarray:
        return self.acc_supported & (self.mem <= self.cluster.memory)

    @cached_property
    def cpu_ok(self) -> np.ndarray:
        return ~self.units.bad_cpu & (self.cluster.l > 0) & ~(self.pc > self.cap)

    @cached_property
    def acc_time(self) -> np.ndarray:
        """``pa``, ``inf`` where a node of the unit runs on no accelerator (the device type's own
        fact: whether this cluster has accelerators, and room, is ``acc_ok``)."""
        return np.where(self.units.bad_acc, np.inf, self.pa)

    @cached_property
    def cpu_time(self) -> np.ndarray:
        """``pc``, ``inf`` where a node of the unit has no CPU time (whether this cluster has
        cores is ``cpu_ok``)."""
        return np.where(self.units.bad_cpu, np.inf, self.pc)

    @cached_property
    def allowed(self) -> np.ndarray:
        """``allowed[u, d]``: unit ``u`` may run on device ``d`` (type, memory, ``cap``)."""
        k = self.cluster.k
        a = np.zeros((self.U, self.cluster.size), dtype=bool)
        a[:, :k] = self.acc_ok[:, None]
        a[:, k:] = self.cpu_ok[:, None]
        return a

    @cached_property
    def pinned(self) -> np.ndarray:
        """-1 for a unit free to go anywhere, else the device it must use: ``cpu0`` when some
        node of it cannot run on an accelerator (a cluster without CPU cores keeps it on
        ``acc0``, where the evaluator reports the violation); nothing is pinned without
        accelerators."""
        out = np.full(self.U, -1, dtype=np.int64)
        if self.cluster.k:
            out[self.units.bad_acc] = self.cluster.k if self.cluster.l else 0
        return out

    @cached_property
    def memory_binds(self) -> bool:
        """Whether a memory cap can ever bind (the units' memory passes it)."""
        return math.isfinite(self.cluster.memory) and self.mem.sum() > self.cluster.memory

    def lower_bound(self) -> float:
        """max(largest unit, total work / devices), each unit at its cheapest supported device
        (0 when some unit has none)."""
        cheapest = np.minimum(np.where(self.acc_supported, self.pa, np.inf), np.where(self.cpu_ok, self.pc, np.inf))
        if not len(cheapest) or not np.all(np.isfinite(cheapest)):
            return 0.0
        return float(max(cheapest.max(), cheapest.sum() / self.cluster.size))


# -- rows the unit-indexed programs share (`devplace_lite.throughput.ip`, `.columns`) ----------
def comm_pairs(data: UnitCosts) -> tuple[list[int], list[tuple[int, int]]]:
    """Producers whose output can cross a device boundary (comm > 0, an edge to another unit),
    and the distinct (producer row, consumer unit) pairs of those edges."""
    g, u = data.graph, data.unit
    rows: dict[int, int] = {}
    pairs: set[tuple[int, int]] = set()
    for p, w in zip(g.src.tolist(), g.dst.tolist()):
        if g.comm[p] > 0 and u[p] != u[w]:
            pairs.add((rows.setdefault(p, len(rows)), int(u[w])))
    return list(rows), sorted(pairs)


def order_pairs(graph: Graph) -> list[tuple[int, int]]:
    """The node pairs every split shape is asked of: the forward graph with stand-ins for
    backward-only classes (`devplace_lite.units.order_edges`)."""
    s, t = order_edges(graph)
    return list(zip(s.tolist(), t.tolist()))


def memory_share(data: UnitCosts) -> np.ndarray:
    """Unit memory as a share of the cap: memory rows read ``sum share x <= 1``, so bytes (1e9)
    and milliseconds (1e-3) do not meet in one badly scaled matrix."""
    return data.mem / data.cluster.memory
