"""Exact means exact: the DP, the chain IP and every bound against a brute force written here.

The brute force (`brute_force`) shares no code with the library's unit model: it reads the
model straight from the issue that defines it (the authors' semantics, issue 14):

* nodes of one colour class share a device; a node without a class is a class of its own;
* a split must be a chain of ideals of the forward graph, where a class with no forward node is
  a zero-cost stand-in ordered by the mirror image of the backward edges that touch it (a
  backward edge ``u -> v`` with ``u`` or ``v`` in such a class orders ``v``'s class before
  ``u``'s);
* loads, memory and where a node may run are the evaluator's (`devplace_lite.cost.evaluate`).

It tries every assignment of classes to devices (identical devices labelled in order of first
use), keeps those whose graph of parts is acyclic, and scores each with `evaluate`.

The instances (`training_instance`) are small random training graphs with the awkward cases
drawn at random: gradient nodes in their forward node's class, classes of several forward
nodes, backward-only classes, classless backward nodes, backward edges among them, CPU cores,
memory caps, nodes no accelerator may run, nodes without a CPU time, zero-time nodes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devplace_lite.throughput import bounds
from devplace_lite.throughput.bounds.best import best_bound
from devplace_lite.throughput.bounds.combinatorial import combinatorial_bound
from devplace_lite.cost import evaluate
from devplace_lite.devices import Cluster
from devplace_lite.throughput.dp import dp, linear
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.ip import ip_chain

SEEDS = st.integers(0, 2**32 - 1)


def training_instance(seed: int) -> tuple[Graph, Cluster]:
    """A random training graph of at most seven classes, and a cluster for it."""
    rng = np.random.default_rng(seed)
    nf = int(rng.integers(1, 5))
    nodes: list[Node] = []
    colour = [f"F{i}" for i in range(nf)]
    if nf > 2 and rng.random() < 0.2:  # a class of two forward nodes
        i, j = sorted(rng.choice(nf, 2, replace=False).tolist())
        colour[j] = colour[i]

    def costs(backward: bool) -> dict:
        p_acc = 0.0 if rng.random() < 0.15 else float(rng.uniform(0.2, 4.0))
        r = rng.random()
        p_cpu = None if r < 0.15 else (0.0 if p_acc == 0 and r < 0.5 else float(rng.uniform(0.5, 8.0)))
        supported = p_cpu is None or rng.random() > 0.1
        return dict(p_acc=p_acc, p_cpu=p_cpu, supported=supported, memory=float(rng.uniform(0, 10)),
                    comm=0.0 if rng.random() < 0.2 else float(rng.uniform(0.05, 2.0)), backward=backward)

    for i in range(nf):
        nodes.append(Node(f"f{i}", color=colour[i], **costs(False)))
    edges = [(f"f{i}", f"f{j}") for i in range(nf) for j in range(i + 1, nf) if rng.random() < 0.5]
    # backward nodes in the order gradients run: later layers first, the orphans anywhere
    back: list[str] = []
    for i in reversed(range(nf)):
        if rng.random() < 0.7:
            nodes.append(Node(f"g{i}", color=colour[i], **costs(True)))
            back.append(f"g{i}")
    for j in range(int(rng.integers(0, 4))):
        c = [None, "B0", "B1"][int(rng.integers(3))]  # classless, or a backward-only class
        nodes.append(Node(f"o{j}", color=c, **costs(True)))
        back.insert(int(rng.integers(len(back) + 1)), f"o{j}")
    edges += [(back[i], back[j]) for i in range(len(back)) for j in range(i + 1, len(back)) if rng.random() < 0.4]
    edges += [(f"f{i}", b) for i in range(nf) for b in back if rng.random() < 0.25]
    g = Graph(nodes, edges, name=f"training-{seed}")
    k = int(rng.integers(1, 4))
    l_ = int(rng.integers(0, 3 if k < 3 else 2))
    if (~g.supported).any() and rng.random() < 0.8:
        l_ = max(l_, 1)
    memory = float(g.memory.sum() * rng.uniform(0.3, 0.9)) if rng.random() < 0.4 else math.inf
    return g, Cluster(accelerators=k, cpus=l_, memory=memory)


class BruteForce:
    """The optimum of the authors' model by trying every class assignment (module docstring)."""

    def __init__(self, g: Graph, c: Cluster) -> None:
        self.g, self.c = g, c
        keys = [v.color if v.color is not None else ("lone", v.id) for v in g.nodes]
        first: dict = {}
        for key in keys:
            first.setdefault(key, len(first))
        self.cls = [first[key] for key in keys]
        self.C = len(first)
        self.with_forward = with_forward = {self.cls[i] for i, v in enumerate(g.nodes) if not v.backward}
        arcs = set()
        for s, t in g.edges:
            i, j = g.index[s], g.index[t]
            a, b = self.cls[i], self.cls[j]
            if not g.nodes[i].backward and not g.nodes[j].backward:
                arcs.add((a, b))
            elif g.nodes[i].backward and g.nodes[j].backward and not {a, b} <= with_forward:
                arcs.add((b, a))  # the mirror image
        self.arcs = {(a, b) for a, b in arcs if a != b}

    def is_chain(self, class_device) -> bool:
        """The graph of parts (an arc where a class arc crosses devices) has no cycle."""
        out: dict[int, set[int]] = {}
        for a, b in self.arcs:
            if class_device[a] != class_device[b]:
                out.setdefault(class_device[a], set()).add(class_device[b])
        state: dict[int, int] = {}

        def cyclic(d: int) -> bool:
            state[d] = 1
            for e in out.get(d, ()):
                if state.get(e) == 1 or (e not in state and cyclic(e)):
                    return True
            state[d] = 2
            return False

        return not any(d not in state and cyclic(d) for d in list(out))

    def placement_is_chain(self, assignment) -> bool:
        dev = {}
        for i, d in enumerate(np.asarray(assignment).tolist()):
            if dev.setdefault(self.cls[i], d) != d:
                return False  # a class split across devices
        return self.is_chain(dev)

    def optimum(self) -> float:
        k, D = self.c.k, self.c.size
        best = math.inf
        for labels in itertools.product(range(D), repeat=self.C):
            if not (_first_use(labels, 0, k) and _first_use(labels, k, D)) or not self.is_chain(labels):
                continue
            ev = evaluate(self.g, self.c, np.array([labels[x] for x in self.cls]))
            if ev.feasible:
                best = min(best, ev.max_load)
        return best


def _first_use(labels, lo: int, hi: int) -> bool:
    """Devices ``lo..hi-1`` (identical) appear in order of first use."""
    nxt = lo
    for d in labels:
        if lo <= d < hi:
            if d > nxt:
                return False
            nxt = max(nxt, d + 1)
    return True


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_the_instances_cover_the_hard_cases():
    """The property tests are only as good as their instances: check each case comes up."""
    seen = dict.fromkeys(["backward_only_class", "classless_backward", "mirror_arc", "two_forward_class",
                          "unsupported", "no_cpu", "zero_time", "cap", "cpus", "infeasible", "orphan_matters"], 0)
    for seed in range(300):
        g, c = training_instance(seed)
        bf = BruteForce(g, c)
        colours = [v.color for v in g.nodes]
        seen["backward_only_class"] += any(col in ("B0", "B1") for col in colours)
        seen["classless_backward"] += any(v.backward and v.color is None for v in g.nodes)
        seen["mirror_arc"] += any(g.nodes[g.index[s]].backward for s, _ in g.edges) and bool(bf.arcs)
        seen["two_forward_class"] += len({v.color for v in g.nodes if not v.backward}) < int((~g.backward).sum())
        seen["unsupported"] += bool((~g.supported).any())
        seen["no_cpu"] += bool(np.isnan(g.p_cpu).any())
        seen["zero_time"] += bool((g.p_acc == 0).any())
        seen["cap"] += math.isfinite(c.memory)
        seen["cpus"] += c.l > 0
        if seed < 80:
            truth = bf.optimum()
            seen["infeasible"] += not math.isfinite(truth)
            # the stand-ins' order binds: without the mirror arcs the optimum would be lower
            free = BruteForce(g, c)
            free.arcs = {(a, b) for a, b in free.arcs if {a, b} <= free.with_forward}
            seen["orphan_matters"] += math.isfinite(truth) and free.optimum() < truth - 1e-9
    assert all(v >= 3 for v in seen.values()), seen


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_dp_is_exact_on_training_graphs(seed):
    g, c = training_instance(seed)
    bf = BruteForce(g, c)
    truth = bf.optimum()
    r = dp(g, c)
    if not math.isfinite(truth):
        assert r.status == "infeasible" and r.assignment is None
        return
    assert r.status == "optimal" and close(r.objective, truth), (r.objective, truth)
    ev = r.check()
    assert ev.feasible and r.objective == ev.max_load and r.bound == r.objective
    assert bf.placement_is_chain(r.assignment) and ev.split == "chain"
    lin = linear(g, c)
    assert lin.status == "unknown" or (bf.placement_is_chain(lin.assignment) and lin.objective >= truth - 1e-9)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_library_exhaustive_search_is_the_same_model(seed):
    g, c = training_instance(seed)
    truth = BruteForce(g, c).optimum()
    r = exhaustive(g, c, kind="chain")
    assert (r.objective is None) == (not math.isfinite(truth))
    assert r.objective is None or close(r.objective, truth)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_chain_ip_is_exact_on_training_graphs(seed):
    g, c = training_instance(seed)
    bf = BruteForce(g, c)
    truth = bf.optimum()
    r = ip_chain(g, c, solver="highs")
    if not math.isfinite(truth):
        assert r.status == "infeasible"
        return
    assert r.status == "optimal" and math.isclose(r.objective, truth, rel_tol=1e-6, abs_tol=1e-7), (r.objective, truth)
    assert r.check().feasible and bf.placement_is_chain(r.assignment)


BOUNDS = {"combinatorial": combinatorial_bound, "stage-relax": bounds.stage_relax, "pinned": bounds.pinned,
          "reach": bounds.reach, "exact-mip": bounds.exact_mip}


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(SEEDS)
def test_every_bound_stays_below_the_optimum(seed):
    g, c = training_instance(seed)
    truth = BruteForce(g, c).optimum()
    if not math.isfinite(truth):
        return
    limit = 1e-6 * truth + 1e-9
    for name, fn in BOUNDS.items():
        b = fn(g, c, time_limit=5.0)
        assert b.bound <= truth + limit, (name, b.bound, truth)
    b = best_bound(g, c, time_limit=5.0)
    assert b.bound <= truth + limit, ("best", b.bound, truth)
    assert b.status != "optimal" or math.isclose(b.bound, truth, rel_tol=2e-6)  # "tight" is within 1e-6
    exact = bounds.exact_mip(g, c, time_limit=30.0)
    assert exact.status != "optimal" or math.isclose(exact.bound, truth, rel_tol=1e-6, abs_tol=1e-7)


@pytest.mark.parametrize("seed", range(3))
def test_a_backward_only_class_costs_what_the_authors_say(seed):
    """A hand-made case: the classless gradient ``x`` feeds ``a``'s gradient and is fed by
    ``b``'s, so its stand-in sits between ``a`` and ``b``: ``x`` may share ``a``'s device or
    ``b``'s, or run on a third device between them, never before ``a`` nor after ``b``."""
    nodes = [Node("a", p_acc=2, color="A", comm=0.1), Node("b", p_acc=2, color="B", comm=0.1),
             Node("a'", p_acc=3, backward=True, color="A", comm=0.1),
             Node("b'", p_acc=3, backward=True, color="B", comm=0.1),
             Node("x", p_acc=4 + seed, backward=True, comm=0.1)]
    g = Graph(nodes, [("a", "b"), ("b", "b'"), ("b'", "x"), ("x", "a'")])
    c = Cluster(accelerators=3)
    bf = BruteForce(g, c)
    assert bf.arcs == {(0, 1), (2, 1), (0, 2)}  # A -> B, x -> B, A -> x
    r = dp(g, c)
    assert r.status == "optimal" and close(r.objective, bf.optimum())
