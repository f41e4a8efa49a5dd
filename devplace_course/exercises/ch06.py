"""Exercises of chapter 06 (heuristics: the loads of every prefix of a block order, HEFT's priorities)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.heuristics.blocks import block_structure
from devplace_lite.throughput.heuristics.intervals import BothWays
from devplace_lite.throughput.heuristics.list_scheduling import _bottom_level, _Rules
from .core import Case, close, random_topological_order, register

_FAMILIES = ["cells", "layered", "series_parallel", "skip_chain", "random"]


def _tiny() -> tuple[Graph, str]:
    """The chapter's example: ``a1 -> b -> a2`` with ``a1, a2`` in one class fuse into one block."""
    g = Graph([Node("a1", p_acc=1, comm=1, color="A"), Node("b", p_acc=1, comm=1),
               Node("a2", p_acc=1, comm=1, color="A"), Node("c", p_acc=3, comm=1)],
              [("a1", "b"), ("b", "a2"), ("a2", "c")], name="tiny")
    return g, ('graph = Graph([Node("a1", p_acc=1, comm=1, color="A"), Node("b", p_acc=1, comm=1), '
               'Node("a2", p_acc=1, comm=1, color="A"), Node("c", p_acc=3, comm=1)], '
               '[("a1", "b"), ("b", "a2"), ("a2", "c")])')


# -- 06.2  the load of every prefix of a block order ----------------------------------------------


def prefix_loads_reference(graph: Graph, cluster: Cluster, order) -> np.ndarray:
    """Load on one accelerator of ``order[:i]`` (blocks), ``i = 0..len(order)``: row 0 of the interval loads."""
    return BothWays(graph, block_structure(graph), np.asarray(order, dtype=np.int64)).row(0)


def _prefix_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's tiny graph, in the library's order
        g, text = _tiny()
        order = block_structure(g).order.tolist()
        return Case((g, Cluster(accelerators=2), order),
                    text=f"{text}; cluster = Cluster(accelerators=2); order = {order}")
    if i == 1:  # the chapter's check: a training graph in the library's block order
        g = generate("cells", 15, seed=0, training=True)
        order = block_structure(g).order.tolist()
        return Case((g, Cluster(accelerators=2), order),
                    text=f"graph = generate('cells', 15, seed=0, training=True); cluster = Cluster(accelerators=2); "
                         f"order = {order}")
    family = str(rng.choice(_FAMILIES))
    n, seed, training = int(rng.integers(4, 16)), int(rng.integers(0, 1000)), bool(rng.random() < 0.6)
    g = generate(family, n, seed=seed, training=training)
    order = random_topological_order(block_structure(g).succ, rng)
    return Case((g, Cluster(accelerators=2), order),
                text=f"graph = generate({family!r}, {n}, seed={seed}, training={training}); "
                     f"cluster = Cluster(accelerators=2); order = {order}")


def _prefix_parts(graph: Graph, order) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per prefix: its work, what it sends, what it receives, and transfers counted once per crossing edge."""
    b = block_structure(graph)
    work, sends, receives, per_edge = [], [], [], []
    for i in range(len(order) + 1):
        inside = np.zeros(b.count, dtype=bool)
        inside[list(order[:i])] = True
        side = inside[b.of_node]
        cross = side[graph.src] != side[graph.dst]
        out_u = np.unique(graph.src[cross & side[graph.src]])
        in_u = np.unique(graph.src[cross & ~side[graph.src]])
        work.append(graph.p_acc[side].sum())
        sends.append(graph.comm[out_u].sum())
        receives.append(graph.comm[in_u].sum())
        per_edge.append(graph.comm[graph.src[cross]].sum())
    return np.array(work), np.array(sends), np.array(receives), np.array(per_edge)


def _prefix_diagnose(case: Case, expected, got) -> str | None:
    if np.shape(got) == (len(case.args[2]),):
        return "one value short: return len(order) + 1 loads, from the empty prefix (0) to the whole order"
    return None


def _prefix_slips(case: Case) -> list:
    graph, _, order = case.args
    work, sends, receives, per_edge = _prefix_parts(graph, order)
    return [(work, "that is the work of each prefix alone: a prefix also pays c(u) for every producer whose "
                    "edges cross the cut"),
             (work + sends, "only the producers inside the prefix are charged: a prefix also receives c(u) from "
                            "each producer outside with a consumer inside (training graphs have edges backwards)"),
             (work + receives, "only the inputs are charged: a producer inside the prefix with a consumer outside "
                               "sends, and that costs c(u) too"),
             (work + per_edge, "a transfer is counted once per crossing edge; the model charges c(u) once per "
                               "producer and side, however many of its consumers sit across")]


register(id="06.2", name="my_prefix_loads", title="the load of every prefix of a block order",
         reference=prefix_loads_reference, cases=_prefix_cases, compare=close(rtol=1e-9, atol=1e-9),
         slips=_prefix_slips, diagnose=_prefix_diagnose, fixed=2, n=15,
         forbidden=("devplace_lite.throughput.heuristics.intervals", "devplace_lite.throughput.heuristics.incremental"),
         hint="for each i put the nodes of the blocks order[:i] on device 0 and all others on device 1 "
              "(block_structure(graph).of_node maps a node to its block), and add compute and comm of "
              "device 0 from device_loads; i runs from 0 to len(order)")

# -- 06.4  HEFT's upward rank ---------------------------------------------------------------------


def upward_rank(graph: Graph, cluster: Cluster) -> np.ndarray:
    """HEFT's priority of every node, as `devplace_lite.throughput.heuristics.heft` computes it."""
    rules = _Rules(graph, cluster)
    finite = np.where(np.isfinite(rules.cost), rules.cost, np.nan)
    mean_cost = np.nan_to_num(np.nanmean(finite, axis=1))
    D = rules.D
    pair = (rules.is_acc[:, None].astype(float) + rules.is_acc[None, :]) * (1 - np.eye(D))
    return _bottom_level(graph, mean_cost, graph.comm * pair.mean())


def _without_cpu(graph: Graph, rng: np.random.Generator, share: float) -> tuple[Graph, list[int]]:
    """``graph`` with no CPU time for a random share of its nodes (they may run on accelerators only)."""
    drop = [int(v) for v in np.flatnonzero(rng.random(graph.n) < share)]
    gone = set(drop)
    nodes = [replace(v, p_cpu=None) if i in gone else v for i, v in enumerate(graph.nodes)]
    return Graph(nodes, graph.edges, name=graph.name), drop


def _rank_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's small training graph and cluster
        return Case((generate("layered", 30, seed=4, training=True), Cluster(accelerators=3, cpus=1)),
                    text="graph = generate('layered', 30, seed=4, training=True); "
                         "cluster = Cluster(accelerators=3, cpus=1)")
    if i == 1:  # one device: no transfer is ever paid
        g, text = _tiny()
        return Case((g, Cluster(accelerators=1)), text=f"{text}; cluster = Cluster(accelerators=1)")
    if i == 2:  # CPU cores only: transfers are free between cores
        g = generate("series_parallel", 8, seed=2)
        return Case((g, Cluster(accelerators=0, cpus=2)),
                    text="graph = generate('series_parallel', 8, seed=2); cluster = Cluster(accelerators=0, cpus=2)")
    family = str(rng.choice(_FAMILIES))
    n, seed, training = int(rng.integers(3, 25)), int(rng.integers(0, 1000)), bool(rng.random() < 0.5)
    k, cores = int(rng.integers(1, 5)), int(rng.integers(0, 3))
    g = generate(family, n, seed=seed, training=training)
    text = f"graph = generate({family!r}, {n}, seed={seed}, training={training})"
    if cores and rng.random() < 0.5:  # some operators the CPU cores cannot run
        g, drop = _without_cpu(g, rng, 0.3)
        text = (f"from dataclasses import replace; {text}; graph = Graph([replace(v, p_cpu=None) if i in {drop} "
                f"else v for i, v in enumerate(graph.nodes)], graph.edges)")
    return Case((g, Cluster(accelerators=k, cpus=cores)),
                text=f"{text}; cluster = Cluster(accelerators={k}, cpus={cores})")


def _rank_diagnose(case: Case, expected, got) -> str | None:
    got = np.asarray(got, dtype=float)
    if got.shape == (case.args[0].n,) and not np.all(np.isfinite(got)):
        return "a node's mean cost must average only the devices that may run it (no CPU time: accelerators only)"
    return None


def _rank_slips(case: Case) -> list:
    graph, cluster = case.args
    R = _Rules(graph, cluster)
    finite = np.where(np.isfinite(R.cost), R.cost, np.nan)
    mean_cost = np.nan_to_num(np.nanmean(finite, axis=1))
    D = R.D
    pair = (R.is_acc[:, None].astype(float) + R.is_acc[None, :]) * (1 - np.eye(D))
    distinct = pair.sum() / (D * (D - 1)) if D > 1 else 0.0
    order = graph.topological_order()[::-1].tolist()
    summed = np.zeros(graph.n)
    for v in order:
        s = graph.succ[v]
        summed[v] = mean_cost[v] + (graph.comm[v] * pair.mean() + summed[s].sum() if s else 0.0)
    return [(_bottom_level(graph, mean_cost, np.zeros(graph.n)),
              "the transfers are missing: add c(u) times the mean transfer factor when u has successors"),
             (_bottom_level(graph, mean_cost, graph.comm * distinct),
              "the transfer is averaged over pairs of distinct devices; HEFT here averages over all D x D "
              "ordered pairs, the D pairs (d, d) costing nothing"),
             (_bottom_level(graph, np.nan_to_num(np.nanmin(finite, axis=1)), np.zeros(graph.n)),
              "that is ETF's priority (fastest device, no transfers); HEFT uses the mean cost and the mean transfer"),
             (summed, "the rank follows the longest path to an exit: take the max over the successors, not the sum")]


register(id="06.4", name="my_upward_rank", title="HEFT's upward rank of every node",
         reference=upward_rank, cases=_rank_cases, compare=close(rtol=1e-9, atol=1e-9),
         slips=_rank_slips, diagnose=_rank_diagnose, fixed=3, n=15,
         forbidden=("devplace_lite.throughput.heuristics.list_scheduling",),
         hint="visit the nodes in reverse topological order: rank[v] = mean cost of v over the devices that may run "
              "it + (if v has successors) c(v) x mean transfer factor + max rank of its successors; the factor is "
              "the mean over all D x D device pairs (a, b) of [a != b] x (accelerator ends among a, b)")
