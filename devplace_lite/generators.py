"""Seeded random DAG families with realistic costs, and the training-graph transform.

Families (each ``f(n, seed) -> Graph`` for about ``n`` nodes):

* ``layered``: layers of a few parallel operators, each reading from the layer before;
* ``series_parallel``: built by repeated series and parallel composition (fork-join blocks);
* ``skip_chain``: a chain with long skip connections (ResNet / U-Net style);
* ``cells``: a stack of NAS-style cells, each reading the outputs of the two cells before it;
* ``random``: an Erdős–Rényi DAG over a random order (for tests of generic algorithms).

Costs: accelerator times are log-normal (a few large ops, many small ones, as in profiles),
CPU cores are 10-40x slower, memory and output sizes log-normal, and communication is output
bytes over a 16 GB/s host link, so that compute and transfers are of the same order.
`with_backward` turns an inference graph into a training graph: one backward node per forward
node, reversed edges, the two in one colocation class.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import GraphError, UsageError
from .graph import Graph, Node

LINK_BYTES_PER_S = 16e9


def _costs(rng: np.random.Generator, ids: list[str], cpu: bool = True) -> list[Node]:
    n = len(ids)
    p_acc = rng.lognormal(mean=0.0, sigma=0.8, size=n)
    slow = rng.uniform(10.0, 40.0, size=n)
    out_bytes = np.round(rng.lognormal(mean=np.log(4e6), sigma=0.7, size=n))
    memory = np.round(rng.lognormal(mean=np.log(2e7), sigma=1.0, size=n))
    comm = out_bytes / LINK_BYTES_PER_S * 1e3
    return [Node(id=ids[i], p_acc=round(float(p_acc[i]), 6),
                 p_cpu=round(float(p_acc[i] * slow[i]), 6) if cpu else None,
                 memory=float(memory[i]), comm=round(float(comm[i]), 6), out_bytes=float(out_bytes[i]),
                 name=f"op{ids[i]}")
            for i in range(n)]


def _make(name: str, n: int, edges: list[tuple[int, int]], seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    ids = [str(i) for i in range(n)]
    return Graph(_costs(rng, ids), [(str(s), str(t)) for s, t in edges], name=name,
                 meta={"generator": name, "seed": seed})


def layered(n: int, seed: int = 0, width: int = 3, density: float = 0.5) -> Graph:
    """Layers of 1..``width`` operators; each reads one or more nodes of the previous layer."""
    rng = np.random.default_rng(seed)
    layers: list[list[int]] = []
    count = 0
    while count < n:
        w = int(min(rng.integers(1, width + 1), n - count))
        layers.append(list(range(count, count + w)))
        count += w
    edges = []
    for prev, cur in zip(layers, layers[1:]):
        fed: set[int] = set()  # nodes of prev with an edge out (only cur reads prev)
        for v in cur:
            srcs = [u for u in prev if rng.random() < density] or [int(rng.choice(prev))]
            edges += [(u, v) for u in srcs]
            fed.update(srcs)
        for u in prev:  # every node feeds the next layer, so the graph has no dead branches
            if u not in fed:
                edges.append((u, int(rng.choice(cur))))
    return _make(f"layered-{n}-s{seed}", count, edges, seed + 1)


def series_parallel(n: int, seed: int = 0) -> Graph:
    """Fork-join blocks in series: a fork node, 2-3 branches of short chains, a join node."""
    rng = np.random.default_rng(seed)
    edges: list[tuple[int, int]] = []
    last = 0
    count = 1
    while count < n:
        if n - count < 4 or rng.random() < 0.3:
            edges.append((last, count))
            last = count
            count += 1
            continue
        ends = []
        for _ in range(int(rng.integers(2, 4))):
            length = int(rng.integers(1, 3))
            prev = last
            for _ in range(length):
                edges.append((prev, count))
                prev = count
                count += 1
            ends.append(prev)
        for e in ends:
            edges.append((e, count))
        last = count
        count += 1
    return _make(f"series_parallel-{n}-s{seed}", count, edges, seed + 1)


def skip_chain(n: int, seed: int = 0, skip_prob: float = 0.3, max_skip: int = 4) -> Graph:
    """A chain 0 -> 1 -> ... with skip edges of length 2..``max_skip`` (residual connections)."""
    rng = np.random.default_rng(seed)
    edges = [(i, i + 1) for i in range(n - 1)]
    for i in range(n - 2):
        if rng.random() < skip_prob:
            edges.append((i, min(n - 1, i + int(rng.integers(2, max_skip + 1)))))
    return _make(f"skip_chain-{n}-s{seed}", n, edges, seed + 1)


def cells(n: int, seed: int = 0, cell_size: int = 5) -> Graph:
    """NAS-style cells: each of ``cell_size`` inner nodes reads two earlier nodes of the cell or
    the two previous cells' outputs; the last inner node is the cell's output."""
    rng = np.random.default_rng(seed)
    edges: list[tuple[int, int]] = []
    outputs = [0]
    count = 1
    while count + cell_size <= n or len(outputs) == 1:
        inputs = outputs[-2:]
        inner: list[int] = []
        first = len(edges)
        for _ in range(cell_size):
            v = count
            count += 1
            pool = inputs + inner
            for u in set(rng.choice(pool, size=min(2, len(pool)), replace=False).tolist()):
                edges.append((int(u), v))
            inner.append(v)
        sources = {s for s, _ in edges[first:]}  # inner nodes are read only inside their cell
        for u in inner[:-1]:  # every inner node reaches the cell's output
            if u not in sources:
                edges.append((u, inner[-1]))
        outputs.append(inner[-1])
    return _make(f"cells-{count}-s{seed}", count, edges, seed + 1)


def random_dag(n: int, seed: int = 0, p: float = 0.3) -> Graph:
    """Each pair ``i < j`` of a random order is an edge with probability ``p``."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    edges = [(int(perm[i]), int(perm[j])) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return _make(f"random-{n}-s{seed}", n, edges, seed + 1)


FAMILIES: dict[str, Callable[..., Graph]] = {
    "layered": layered,
    "series_parallel": series_parallel,
    "skip_chain": skip_chain,
    "cells": cells,
    "random": random_dag,
}


def generate(family: str, n: int, seed: int = 0, training: bool = False) -> Graph:
    """A graph of about ``n`` forward nodes from a named family, optionally with backward nodes."""
    if family not in FAMILIES:
        raise UsageError(f"unknown graph family {family!r}; known: {', '.join(FAMILIES)}")
    if n < 1:
        raise UsageError(f"graph size must be at least 1, got {n}")
    g = FAMILIES[family](n, seed=seed)
    return with_backward(g) if training else g


def with_backward(graph: Graph, ratio: float = 2.0) -> Graph:
    """A training graph: backward node ``v.grad`` per forward node ``v`` (``ratio`` x its times),
    an edge ``w.grad -> u.grad`` per forward edge ``u -> w``, ``v -> v.grad`` (the stashed
    activation), and ``v`` and ``v.grad`` in one colocation class."""
    if graph.is_training:
        raise GraphError(f"graph {graph.name} already has backward nodes")
    fwd, bwd = [], []
    for v in graph.nodes:
        color = v.color if v.color is not None else v.id
        fwd.append(Node(**{**v.__dict__, "color": color}))
        bwd.append(Node(id=f"{v.id}.grad", p_acc=round(v.p_acc * ratio, 6),
                        p_cpu=None if v.p_cpu is None else round(v.p_cpu * ratio, 6),
                        memory=0.0, comm=v.comm, supported=v.supported, backward=True, color=color,
                        name=f"{v.name or v.id}.grad", out_bytes=v.out_bytes, flops=v.flops * ratio))
    edges = list(graph.edges)
    edges += [(f"{t}.grad", f"{s}.grad") for s, t in graph.edges]
    edges += [(v.id, f"{v.id}.grad") for v in graph.nodes]
    return Graph(fwd + bwd, edges, name=f"{graph.name}-train", defaults=dict(graph.defaults),
                 meta={**graph.meta, "training": True})
