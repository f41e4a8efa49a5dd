"""The one unit model (`devplace_lite.units`): the forward graph with stand-ins, the units, their
sums and hypergraph, and every method that moves units keeping classes together in chain splits."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.throughput import baselines, dp
from devplace_lite.cost import device_loads
from devplace_lite.devices import Cluster
from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.heuristics import kl, local_search_method, topo_fill
from devplace_lite.throughput.heuristics.blocks import block_structure
from devplace_lite.units import backward_only, class_arcs, order_edges, unit_graph

# every method that moves whole units along the unit order
GROUPING = {"single": baselines.single_device, "uniform": baselines.uniform,
            "parameters": baselines.balance_by_parameters, "time": baselines.balance_by_time,
            "greedy": baselines.greedy_fill, "kl": kl, "topo-fill": topo_fill,
            "local-search": local_search_method, "dp": dp.dp, "linear": dp.linear, "pipedream": dp.pipedream}


def test_stand_ins_are_ordered_by_the_mirror_of_their_backward_edges():
    nodes = [Node("a", p_acc=1, color="A"), Node("b", p_acc=1, color="B"), Node("c", p_acc=1, color="A"),
             Node("a'", backward=True, color="A"), Node("b'", backward=True, color="B"),
             Node("x", backward=True), Node("y", backward=True, color="Y"), Node("z", backward=True, color="Y")]
    g = Graph(nodes, [("a", "b"), ("b", "c"), ("b'", "x"), ("x", "a'"), ("x", "y"), ("a", "z"), ("b'", "a'")])
    assert backward_only(g).tolist() == [False] * 5 + [True] * 3
    s, t = order_edges(g)
    pairs = {(g.ids[i], g.ids[j]) for i, j in zip(s.tolist(), t.tolist())}
    # forward edges as they are; b' -> x puts x before B; x -> a' puts both forward nodes of A
    # before x; x -> y puts y before x; a -> z (forward to backward) and b' -> a' (between
    # classes with forward nodes) order nothing
    assert pairs == {("a", "b"), ("b", "c"), ("x", "b"), ("a", "x"), ("c", "x"), ("y", "x")}
    A, B, X, Y = (int(g.units[g.index[v]]) for v in ("a", "b", "x", "y"))
    assert {tuple(p) for p in class_arcs(g).tolist()} == {(A, B), (B, A), (X, B), (A, X), (Y, X)}
    u = unit_graph(g)  # A and B form a cycle (a -> b -> c): fused, with x between them fused too
    assert u.unit[g.index["a"]] == u.unit[g.index["b"]] == u.unit[g.index["x"]] != u.unit[g.index["y"]]
    assert u.standin.tolist() == [True, False] and u.arcs.tolist() == [[0, 1]]


def test_sums_and_hyperedges_score_like_the_evaluator():
    rng = np.random.default_rng(3)
    for seed in range(20):
        g = generate(sorted(FAMILIES)[seed % len(FAMILIES)], 12, seed=seed, training=seed % 2 == 0)
        u = unit_graph(g, fold=True)
        assert np.allclose(u.pa, [g.p_acc[m].sum() for m in u.members])
        for _ in range(5):
            inside = rng.random(u.size) < 0.5
            a = np.where(inside[u.unit], 0, 1)
            compute, comm = device_loads(g, Cluster(accelerators=2), a)
            assert np.isclose(u.acc_load(inside), compute[0] + comm[0])


def test_an_unsupported_backward_only_node_goes_to_the_cpu():
    nodes = [Node("a", p_acc=1, p_cpu=3, comm=1.0), Node("b", p_acc=1, p_cpu=3),
             Node("x", p_acc=1, p_cpu=2, backward=True, supported=False)]
    g = Graph(nodes, [("a", "b"), ("a", "x")])
    for fn in GROUPING.values():
        ev = fn(g, Cluster(accelerators=2, cpus=1)).check()
        assert ev.feasible, ev.violations


def _with_backward_only(family: str, n: int, seed: int, extra: int, unsupported: bool) -> Graph:
    """A generated training graph plus ``extra`` backward nodes without a forward partner:
    classless or in one of two backward-only classes, fed by random nodes (some by none)."""
    base = generate(family, n, seed=seed, training=True)
    rng = np.random.default_rng(seed)
    nodes, edges = list(base.nodes), list(base.edges)
    for i in range(extra):
        color = [None, "Z0", "Z1"][int(rng.integers(3))]
        nodes.append(Node(f"o{i}", p_acc=float(rng.random()), p_cpu=float(rng.random() * 4), comm=float(rng.random()),
                          backward=True, color=color, supported=not (unsupported and i == 0)))
        pool = [v.id for v in nodes[:-1]]
        for j in rng.choice(len(pool), size=int(rng.integers(0, 3)), replace=False):
            edges.append((pool[j], f"o{i}"))
    return Graph(nodes, edges, name=f"{family}-orphans")


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(4, 12), st.integers(0, 10_000), st.integers(1, 4),
       st.booleans())
def test_every_grouping_method_keeps_classes_whole_in_chain_splits(family, n, seed, extra, unsupported):
    g = _with_backward_only(family, n, seed, extra, unsupported)
    assert int(backward_only(g).sum()) == extra
    u = unit_graph(g)
    assert (block_structure(g).of_node == u.unit).all()
    c = Cluster(accelerators=3, cpus=1)
    best = dp.dp(g, c)
    for name, fn in GROUPING.items():
        r = fn(g, c)
        if r.assignment is None:
            assert best.status == "infeasible", name
            continue
        ev = r.check()
        assert r.objective == ev.max_load, name
        assert ev.split == "chain", name
        lo, hi = np.full(u.size, 99), np.full(u.size, -1)
        np.minimum.at(lo, u.unit, r.assignment)
        np.maximum.at(hi, u.unit, r.assignment)
        assert (lo == hi).all(), name  # a unit never splits
        if ev.feasible:
            assert r.objective >= best.objective - 1e-9, name


def _coloured(family: str, n: int, seed: int, classes: int) -> Graph:
    """A generated graph whose nodes fall into a few multi-node colocation classes at random:
    classes whose nodes sit before and after other units, as in hand-written colourings."""
    base = generate(family, n, seed=seed)
    rng = np.random.default_rng(seed)
    colour = {v.id: f"C{int(rng.integers(classes))}" for v in base.nodes if rng.random() < 0.5}
    nodes = [Node(v.id, p_acc=v.p_acc, memory=v.memory, comm=v.comm, color=colour.get(v.id)) for v in base.nodes]
    return Graph(nodes, list(base.edges), name=f"{base.name}-coloured")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(6, 18), st.integers(0, 10_000), st.integers(1, 4),
       st.integers(2, 4))
def test_baselines_give_chain_splits_whatever_the_colouring(family, n, seed, classes, k):
    """Cutting the unit order into blocks is a chain split even when colocation classes
    interleave with other units (a1 -> b -> a2 with a1, a2 in one class)."""
    g = _coloured(family, n, seed, classes)
    units = unit_graph(g)
    order, follow = np.arange(units.size), units.unit
    pos = np.empty(int(follow.max()) + 1, dtype=np.int64)
    pos[order] = np.arange(len(order))
    assert all(pos[follow[u]] <= pos[follow[w]] for u, w in zip(g.src.tolist(), g.dst.tolist()))
    c = Cluster(accelerators=k)
    for name in ("single", "uniform", "parameters", "time", "greedy"):
        ev = GROUPING[name](g, c).check()
        assert ev.split == "chain", (name, ev.split)
