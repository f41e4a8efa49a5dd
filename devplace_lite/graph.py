"""The graph model: a DAG of operators with costs, checked on construction.

One model is used everywhere in the library (see DESIGN.md): node ``v`` has an accelerator
time ``p_acc`` (ms), a CPU time ``p_cpu`` (ms, or ``None`` when it may not run on a CPU), a
memory footprint ``memory`` (bytes), a flag ``supported`` (may run on an accelerator), a flag
``backward`` (training graphs), an optional colocation class ``color`` (nodes of a class share
a device), and a communication cost ``comm`` (ms): the time to move the node's output between
a device and host memory, paid once per device that sends or receives it.

`Graph` keeps the nodes in numpy arrays indexed ``0..n-1`` so that evaluators and algorithms
run vectorised; node ids are strings for the outside world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Sequence

import numpy as np

from .errors import GraphError

#: The largest total of one quantity over a graph's nodes (all times together: p_acc + p_cpu +
#: comm; memory; out_bytes; flops). Every value may be finite and the sum still overflow: loads,
#: bounds and the IPs' big-M (a time total times up to 2·k·q) must stay finite, hence the headroom
#: of about 1e8 below the float range (1.8e308).
MAX_TOTAL = 1e300


@dataclass(frozen=True)
class Node:
    """One operator (or layer) of the graph.

    Times are milliseconds, memory and bytes are bytes. ``p_cpu=None`` forbids CPU cores;
    ``supported=False`` forbids accelerators.
    """

    id: str
    p_acc: float = 0.0
    p_cpu: float | None = None
    memory: float = 0.0
    comm: float = 0.0
    supported: bool = True
    backward: bool = False
    color: str | None = None
    name: str = ""
    out_bytes: float = 0.0
    flops: float = 0.0


def _finite_nonneg(value: Any, node: str, fld: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GraphError(f"node {node}: field '{fld}' is not a number: {value!r}") from None
    if not math.isfinite(x):
        raise GraphError(f"node {node}: field '{fld}' is not finite: {value!r}")
    if x < 0:
        raise GraphError(f"node {node}: field '{fld}' is negative: {value!r}")
    return x


@dataclass
class Graph:
    """A validated DAG of `Node` objects.

    Parameters
    ----------
    nodes : sequence of Node
        Unique ids.
    edges : iterable of (source id, target id)
        Data dependencies; duplicates are merged, self-loops and cycles are errors.
    name : str
        A label for tables and plots.
    defaults : dict
        Cluster defaults carried by the file: ``accelerators``, ``cpus``, ``memory``.
    meta : dict
        Free-form provenance (source file, model, spec).

    Examples
    --------
    >>> g = Graph([Node("a", p_acc=1.0, comm=0.5), Node("b", p_acc=2.0)], [("a", "b")])
    >>> g.n, g.m, g.topological_order().tolist()
    (2, 1, [0, 1])
    """

    nodes: Sequence[Node]
    edges: Iterable[tuple[str, str]]
    name: str = "graph"
    defaults: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nodes = list(self.nodes)
        ids = [v.id for v in self.nodes]
        if not all(isinstance(i, str) and i for i in ids):
            self._refuse_ids()
        self.index: dict[str, int] = dict(zip(ids, range(len(ids))))
        if len(self.index) < len(ids):
            self._refuse_ids()
        self._check_numbers()
        src, dst = self._edge_indices(list(self.edges))
        # duplicates merged, sorted by (source, target)
        key = np.sort(src * max(self.n, 1) + dst)
        key = key[np.concatenate(([True], key[1:] != key[:-1]))] if len(key) else key
        self.src, self.dst = key // max(self.n, 1), key % max(self.n, 1)
        self.edges = list(zip(map(ids.__getitem__, self.src.tolist()), map(ids.__getitem__, self.dst.tolist())))
        self._check_acyclic()

    def _refuse_ids(self) -> None:
        """The first node whose id is not a non-empty string or repeats an earlier one."""
        seen: set[str] = set()
        for i, v in enumerate(self.nodes):
            if not isinstance(v.id, str) or not v.id:
                raise GraphError(f"node #{i}: id must be a non-empty string, got {v.id!r}")
            if v.id in seen:
                raise GraphError(f"node {v.id}: duplicate id")
            seen.add(v.id)

    def _edge_indices(self, edges: list) -> tuple[np.ndarray, np.ndarray]:
        """Source and target indices of the edges, by a mapping pass in C; when that meets a
        malformed pair, an unknown node or a self-loop, the edge-by-edge pass names the first."""
        try:
            src = np.fromiter(map(self.index.__getitem__, [s for s, _ in edges]), dtype=np.int64, count=len(edges))
            dst = np.fromiter(map(self.index.__getitem__, [t for _, t in edges]), dtype=np.int64, count=len(edges))
            if not (src == dst).any():
                return src, dst
        except (KeyError, TypeError, ValueError):
            pass
        src, dst = [], []
        for e in edges:
            try:
                s, t = e
            except (TypeError, ValueError):
                raise GraphError(f"edge {e!r}: expected a (source, target) pair") from None
            i, j = self.index.get(s), self.index.get(t)
            if i is None:
                raise GraphError(f"edge {s} -> {t}: unknown source node {s}")
            if j is None:
                raise GraphError(f"edge {s} -> {t}: unknown target node {t}")
            if i == j:
                raise GraphError(f"edge {s} -> {t}: self-loop on node {s}")
            src.append(i)
            dst.append(j)
        return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)

    def _check_numbers(self) -> None:
        """The per-node arrays, every number finite and >= 0; on a bad value, the per-node check
        names the node and field (one vectorised pass when all is well)."""
        nodes = self.nodes
        try:
            cols = {fld: np.array([getattr(v, fld) for v in nodes], dtype=float)
                    for fld in ("p_acc", "memory", "comm", "out_bytes", "flops")}
            p_cpu = np.array([np.nan if v.p_cpu is None else v.p_cpu for v in nodes], dtype=float)
            given = np.array([v.p_cpu is not None for v in nodes], dtype=bool)
            ok = all(bool(np.all(np.isfinite(x) & (x >= 0))) for x in cols.values()) \
                and bool(np.all(np.isfinite(p_cpu[given]) & (p_cpu[given] >= 0)))
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            for v in nodes:
                for fld in ("p_acc", "memory", "comm", "out_bytes", "flops"):
                    _finite_nonneg(getattr(v, fld), v.id, fld)
                if v.p_cpu is not None:
                    _finite_nonneg(v.p_cpu, v.id, "p_cpu")
            # every value passed one at a time (numbers numpy would not take as a batch)
            cols = {fld: np.array([float(getattr(v, fld)) for v in nodes]) for fld in ("p_acc", "memory", "comm", "out_bytes", "flops")}
            p_cpu = np.array([np.nan if v.p_cpu is None else float(v.p_cpu) for v in nodes])
            given = ~np.isnan(p_cpu)
        self.p_acc, self.memory, self.comm, self.out_bytes = (cols[f] for f in ("p_acc", "memory", "comm", "out_bytes"))
        self.p_cpu = p_cpu
        self._check_totals(cols, p_cpu[given])
        self.supported = np.array([v.supported for v in nodes], dtype=bool)
        self.backward = np.array([v.backward for v in nodes], dtype=bool)
        nowhere = np.flatnonzero(~self.supported & ~given)
        if len(nowhere):
            raise GraphError(f"node {nodes[nowhere[0]].id}: allowed on no device (unsupported on accelerators, no p_cpu)")

    def _check_totals(self, cols: dict[str, np.ndarray], p_cpu: np.ndarray) -> None:
        """Refuse a graph whose totals leave the float range (`MAX_TOTAL`): each value finite,
        their sum infinite, would give ``inf`` loads and ``nan`` gaps downstream."""
        with np.errstate(over="ignore", invalid="ignore"):
            totals = {"time (p_acc + p_cpu + comm)": float(cols["p_acc"].sum() + p_cpu.sum() + cols["comm"].sum())}
            totals.update((f, float(cols[f].sum())) for f in ("memory", "out_bytes", "flops"))
        for what, total in totals.items():
            if not total <= MAX_TOTAL:
                shown = "beyond the float range" if math.isinf(total) else f"{total:.3g}"
                raise GraphError(f"the nodes' total {what} is {shown}, over the {MAX_TOTAL:.0e} a graph may "
                                 "total (loads summed from it must stay finite)")

    # -- sizes and adjacency -------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def m(self) -> int:
        return len(self.src)

    @property
    def ids(self) -> list[str]:
        return [v.id for v in self.nodes]

    @cached_property
    def succ(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for s, t in zip(self.src.tolist(), self.dst.tolist()):
            out[s].append(t)
        return out

    @cached_property
    def pred(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for s, t in zip(self.src.tolist(), self.dst.tolist()):
            out[t].append(s)
        return out

    @property
    def is_training(self) -> bool:
        return bool(self.backward.any())

    def _check_acyclic(self) -> None:
        order = self._kahn()
        if len(order) < self.n:
            left = set(range(self.n)) - set(order)
            # walk predecessors inside the leftover set until a node repeats: it lies on a cycle
            v = min(left)
            seen: list[int] = []
            while v not in seen:
                seen.append(v)
                v = next(u for u in self.pred[v] if u in left)
            cycle = seen[seen.index(v):][::-1]
            names = " -> ".join(self.nodes[u].id for u in cycle + [cycle[0]])
            raise GraphError(f"graph has a cycle through node {self.nodes[v].id}: {names}")
        self._topo = np.array(order, dtype=np.int64)

    def _kahn(self) -> list[int]:
        # successors read from the sorted edge arrays: building `succ` (a list per node) here
        # would cost every command on a large graph its time and memory
        indeg = np.bincount(self.dst, minlength=self.n).tolist()
        ptr = np.concatenate([[0], np.cumsum(np.bincount(self.src, minlength=self.n))]).tolist()
        dst = self.dst.tolist()
        stack = [v for v in range(self.n - 1, -1, -1) if indeg[v] == 0]
        order: list[int] = []
        while stack:
            v = stack.pop()
            order.append(v)
            for w in reversed(dst[ptr[v]:ptr[v + 1]]):
                indeg[w] -= 1
                if indeg[w] == 0:
                    stack.append(w)
        return order

    def topological_order(self) -> np.ndarray:
        """A fixed topological order of node indices (deterministic for a given graph)."""
        return self._topo.copy()

    # -- derived quantities ----------------------------------------------------------------
    @cached_property
    def units(self) -> np.ndarray:
        """Unit index of each node: nodes of one colour class form one unit, others their own."""
        label: dict[Any, int] = {}
        out = np.empty(self.n, dtype=np.int64)
        for i, v in enumerate(self.nodes):
            key = ("c", v.color) if v.color is not None else ("n", i)
            out[i] = label.setdefault(key, len(label))
        return out

    def total_work(self) -> float:
        """Sum of accelerator times (CPU times for nodes no accelerator may run)."""
        return float(np.where(self.supported, self.p_acc, np.nan_to_num(self.p_cpu)).sum())

    def node(self, node_id: str) -> Node:
        try:
            return self.nodes[self.index[node_id]]
        except KeyError:
            raise GraphError(f"unknown node {node_id}") from None

    def subgraph(self, keep: Iterable[int], name: str | None = None) -> "Graph":
        """The induced subgraph on the given node indices."""
        ks = sorted(set(int(i) for i in keep))
        kept = set(ks)
        edges = [(self.nodes[s].id, self.nodes[t].id) for s, t in zip(self.src.tolist(), self.dst.tolist())
                 if s in kept and t in kept]
        return Graph([self.nodes[i] for i in ks], edges, name=name or self.name,
                     defaults=dict(self.defaults), meta=dict(self.meta))

    def with_nodes(self, nodes: Sequence[Node], name: str | None = None) -> "Graph":
        """The same edges with replaced node records (same ids, same order)."""
        return Graph(nodes, self.edges, name=name or self.name, defaults=dict(self.defaults), meta=dict(self.meta))

    # -- networkx interop ------------------------------------------------------------------
    def to_networkx(self):
        """A `networkx.DiGraph` whose node attributes are the `Node` fields."""
        import networkx as nx

        g = nx.DiGraph(name=self.name, defaults=dict(self.defaults), meta=dict(self.meta))
        for v in self.nodes:
            attrs = dict(v.__dict__)
            attrs.pop("id")
            g.add_node(v.id, **attrs)
        g.add_edges_from(self.edges)
        return g

    @classmethod
    def from_networkx(cls, g, name: str | None = None) -> "Graph":
        """Build from a `networkx.DiGraph` whose node attributes use the `Node` field names."""
        allowed = set(Node.__dataclass_fields__) - {"id"}
        nodes = []
        for v, attrs in g.nodes(data=True):
            unknown = set(attrs) - allowed
            if unknown:
                raise GraphError(f"node {v}: unknown attribute(s) {sorted(unknown)}")
            nodes.append(Node(id=str(v), **attrs))
        edges = [(str(s), str(t)) for s, t in g.edges()]
        return cls(nodes, edges, name=name or g.graph.get("name", "graph"),
                   defaults=dict(g.graph.get("defaults", {})), meta=dict(g.graph.get("meta", {})))

    def __repr__(self) -> str:
        kind = "training" if self.is_training else "inference"
        return f"Graph({self.name!r}, n={self.n}, m={self.m}, {kind})"
