"""The cost model: device loads, max-load, memory and split kind of a placement.

Load of the node set ``S`` placed on an accelerator (the "calls" model of Tarnawski et al.,
no overlap of compute and communication)::

    acc(S) = sum_{v in S} p_acc(v) + sum_{u : some edge of u crosses S's boundary} c(u)

where each producer ``u`` is counted once per device, whether the device sends ``u``'s
output (u in S) or receives it (u outside S). A CPU core pays ``sum p_cpu(S)`` and no
communication. The throughput objective is the largest device load.

A *placement* is either a mapping node id -> device name (``acc0``, ``cpu1``, ...) or an
integer array of device indices in node order (see `devplace_lite.devices.Cluster`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

import numpy as np

from .dag import topological_order
from .devices import Cluster
from .graph import Graph, GraphError
from .units import order_edges, order_vertices

Placement = Union[Mapping[str, str], Sequence[int], np.ndarray]


def as_assignment(graph: Graph, cluster: Cluster, placement: Placement) -> np.ndarray:
    """Device index of every node, from a name mapping or an index array.

    A mapping must name every node and only known nodes and devices.
    """
    if isinstance(placement, Mapping):
        a = np.full(graph.n, -1, dtype=np.int64)
        for nid, dev in placement.items():
            i = graph.index.get(str(nid))
            if i is None:
                raise GraphError(f"placement names unknown node {nid}")
            a[i] = cluster.device_index(dev)
        missing = np.flatnonzero(a < 0)
        if len(missing):
            raise GraphError(f"placement leaves node {graph.nodes[missing[0]].id} unplaced "
                             f"({len(missing)} node(s) in all)")
        return a
    a = np.asarray(placement, dtype=np.int64)
    if a.shape != (graph.n,):
        raise GraphError(f"placement array has shape {a.shape}, expected ({graph.n},)")
    if a.size and (a.min() < 0 or a.max() >= cluster.size):
        raise GraphError(f"placement uses a device index outside 0..{cluster.size - 1}")
    return a


def placement_names(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> dict[str, str]:
    """Node id -> device name."""
    names = cluster.names
    return {v.id: names[int(d)] for v, d in zip(graph.nodes, assignment)}


def device_loads(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(compute, communication) load of every device under the model; vectorised, O(n + m log m).

    A node on a CPU core without a CPU time contributes ``inf``.
    """
    a = np.asarray(assignment, dtype=np.int64)
    D, k = cluster.size, cluster.k
    on_acc = a < k
    per_node = np.where(on_acc, graph.p_acc, graph.p_cpu)
    per_node = np.where(np.isnan(per_node), np.inf, per_node)
    compute = np.bincount(a, weights=per_node, minlength=D)[:D]
    du, dw = a[graph.src], a[graph.dst]
    cross = du != dw
    u = graph.src[cross]
    keys = np.unique(np.concatenate([u * D + du[cross], u * D + dw[cross]]))
    comm = np.bincount(keys % D, weights=graph.comm[keys // D], minlength=D)[:D]
    comm[k:] = 0.0
    return compute, comm


def max_load(graph: Graph, cluster: Cluster, placement: Placement) -> float:
    """The throughput objective: the largest device load (ms per sample in steady state)."""
    compute, comm = device_loads(graph, cluster, as_assignment(graph, cluster, placement))
    return float((compute + comm).max())


def _quotient(graph: Graph, a: np.ndarray) -> np.ndarray:
    """``(P, 2)`` distinct device pairs ``(d, e)``, ``d != e``, joined by an order edge
    (`devplace_lite.units.order_edges`) from d to e; ``O(m log m)``, never a devices-square table."""
    s, t = order_edges(graph)
    ds, dt = a[s], a[t]
    cross = ds != dt
    pairs = np.stack([ds[cross], dt[cross]], axis=1)
    return np.unique(pairs, axis=0) if len(pairs) else pairs.reshape(0, 2)


def chain_order(graph: Graph, cluster: Cluster, placement: Placement) -> list[int] | None:
    """Devices in pipeline order if the split is a chain of ideals, else ``None``.

    The split is a chain of ideals when the graph of parts (one vertex per used device, an arc
    where an edge of the forward graph with stand-ins crosses between parts, see
    `devplace_lite.units`) is acyclic; its topological order is the stage order, ties to the
    lower device. Devices holding no vertex of that graph are left out.
    """
    a = as_assignment(graph, cluster, placement)
    used = np.unique(a[order_vertices(graph)])
    rank = np.searchsorted(used, _quotient(graph, a))
    succ: list[list[int]] = [[] for _ in range(len(used))]
    for x, y in rank.tolist():
        succ[x].append(y)
    order = topological_order(succ)
    return used[order].tolist() if len(order) == len(used) else None


def _is_convex(part: np.ndarray, succ: list[list[int]], pred: list[list[int]]) -> bool:
    """No path of the order graph leaves ``part`` and comes back (search forward and backward)."""
    def reach(adj: list[list[int]]) -> np.ndarray:
        seen = np.zeros(len(part), dtype=bool)
        stack = [w for v in np.flatnonzero(part) for w in adj[v] if not part[w]]
        while stack:
            v = stack.pop()
            if seen[v]:
                continue
            seen[v] = True
            stack.extend(w for w in adj[v] if not seen[w])
        return seen
    return not np.any(reach(succ) & reach(pred) & ~part)


def split_kind(graph: Graph, cluster: Cluster, placement: Placement) -> str:
    """``"chain"`` (parts orderable so every edge of the forward graph with stand-ins goes
    forward), ``"contiguous"`` (every part convex in that graph, but the parts form a cycle) or
    ``"none"``."""
    a = as_assignment(graph, cluster, placement)
    if chain_order(graph, cluster, a) is not None:
        return "chain"
    keep = order_vertices(graph)
    s, t = order_edges(graph)
    succ: list[list[int]] = [[] for _ in range(graph.n)]
    pred: list[list[int]] = [[] for _ in range(graph.n)]
    for x, y in zip(s.tolist(), t.tolist()):
        succ[x].append(y)
        pred[y].append(x)
    for d in set(a[keep].tolist()):
        if not _is_convex((a == d) & keep, succ, pred):
            return "none"
    return "contiguous"


@dataclass
class Evaluation:
    """Everything the model says of one placement."""

    devices: list[str]
    compute: np.ndarray
    comm: np.ndarray
    memory: np.ndarray
    max_load: float
    bottleneck: str
    split: str
    violations: list[str] = field(default_factory=list)

    @property
    def loads(self) -> np.ndarray:
        return self.compute + self.comm

    @property
    def feasible(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        finite = math.isfinite(self.max_load)
        return {
            "objective": self.max_load if finite else None,
            "bottleneck": self.bottleneck,
            "feasible": self.feasible,
            "split": self.split,
            "violations": self.violations,
            "devices": {
                d: {"load": float(c + m) if math.isfinite(c + m) else None, "compute": float(c) if math.isfinite(c) else None,
                    "comm": float(m), "memory": float(mem)}
                for d, c, m, mem in zip(self.devices, self.compute, self.comm, self.memory)
            },
        }


def violations(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> list[str]:
    """Why a placement is infeasible (unsupported ops, CPU-less ops, memory, colocation)."""
    a = np.asarray(assignment)
    k = cluster.k
    out: list[str] = []
    bad = np.flatnonzero((a < k) & ~graph.supported)
    if len(bad):
        out.append(f"node {graph.nodes[bad[0]].id} is not supported on accelerators but is on {cluster.names[a[bad[0]]]}"
                   + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    bad = np.flatnonzero((a >= k) & np.isnan(graph.p_cpu))
    if len(bad):
        out.append(f"node {graph.nodes[bad[0]].id} has no CPU time but is on {cluster.names[a[bad[0]]]}"
                   + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    mem = np.bincount(a, weights=graph.memory, minlength=cluster.size)[: cluster.size]
    for d in range(k):
        if mem[d] > cluster.memory:
            out.append(f"{cluster.names[d]} holds {mem[d]:.0f} bytes, over its cap of {cluster.memory:.0f}")
    u = graph.units
    lo = np.full(u.max() + 1 if len(u) else 0, np.iinfo(np.int64).max)
    hi = np.full_like(lo, -1)
    np.minimum.at(lo, u, a)
    np.maximum.at(hi, u, a)
    split = np.flatnonzero(lo != hi)
    if len(split):
        first = int(np.flatnonzero(u == split[0])[0])
        out.append(f"colocation class {graph.nodes[first].color} is split across devices"
                   + (f" (and {len(split) - 1} more)" if len(split) > 1 else ""))
    return out


def evaluate(graph: Graph, cluster: Cluster, placement: Placement) -> Evaluation:
    """Score any placement: per-device loads and memory, max-load, split kind, violations.

    Examples
    --------
    >>> from devplace_lite.graph import Graph, Node
    >>> g = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=2)], [("a", "b")])
    >>> ev = evaluate(g, Cluster(accelerators=2), {"a": "acc0", "b": "acc1"})
    >>> ev.loads.tolist(), ev.max_load, ev.split
    ([1.5, 2.5], 2.5, 'chain')
    """
    a = as_assignment(graph, cluster, placement)
    compute, comm = device_loads(graph, cluster, a)
    loads = compute + comm
    mem = np.bincount(a, weights=graph.memory, minlength=cluster.size)[: cluster.size]
    top = int(np.argmax(loads)) if len(loads) else 0
    return Evaluation(devices=cluster.names, compute=compute, comm=comm, memory=mem,
                      max_load=float(loads.max()), bottleneck=cluster.names[top],
                      split=split_kind(graph, cluster, a), violations=violations(graph, cluster, a))


def allowed_kinds(graph: Graph, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes may run on an accelerator (supported, within the memory cap), and which on
    the CPU (a CPU time and a core)."""
    acc = graph.supported & (cluster.k > 0) & (graph.memory <= cluster.memory)
    cpu = ~np.isnan(graph.p_cpu) & (cluster.l > 0)
    return acc, cpu
