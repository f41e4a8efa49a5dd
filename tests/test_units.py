"""The one attachment rule for backward-only classes (`devplace_lite.units.host_units`), and the
methods that move forward units all following it."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite import baselines, dp
from devplace_lite.devices import Cluster
from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import Graph, Node
from devplace_lite.heuristics import kl, local_search_method, topo_fill
from devplace_lite.heuristics.blocks import block_structure
from devplace_lite.ideals import unit_poset
from devplace_lite.units import host_units, pipeline_units

# every method that groups nodes into forward units; the others (exhaustive, random, etf, heft,
# brkga, the MIPs) search over placements where a backward-only class may go anywhere
GROUPING = {"single": baselines.single_device, "uniform": baselines.uniform,
            "parameters": baselines.balance_by_parameters, "time": baselines.balance_by_time,
            "greedy": baselines.greedy_fill, "kl": kl, "topo-fill": topo_fill,
            "local-search": local_search_method, "dp": dp.dp, "linear": dp.linear, "pipedream": dp.pipedream}


def test_heaviest_neighbour_ties_classes_rounds_and_fallback():
    nodes = [Node("a", p_acc=1, comm=2.0), Node("b", p_acc=1, comm=2.0), Node("c", p_acc=1, comm=1.0),
             Node("v", backward=True),                  # fed by x only: waits for x, then follows it
             Node("x", backward=True, comm=0.5),        # a and b both send 2.0: the lower index wins
             Node("y", backward=True, color="Y"),       # class Y pools its nodes' edges:
             Node("z", backward=True, color="Y"),       # c sends z 1.0, more than the 0.5 x sends y
             Node("w", backward=True, color="W")]       # no neighbour at all: the first forward unit
    g = Graph(nodes, [("a", "b"), ("b", "c"), ("x", "v"), ("a", "x"), ("b", "x"), ("x", "y"), ("c", "z")])
    host = dict(zip(g.ids, host_units(g).tolist()))
    u = dict(zip(g.ids, g.units.tolist()))
    assert all(host[v] == u[v] for v in "abc")
    assert host["x"] == host["v"] == u["a"]
    assert host["y"] == host["z"] == u["c"]
    assert host["w"] == u["a"]


def test_an_unsupported_backward_only_node_takes_its_host_to_the_cpu():
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
def test_every_grouping_method_places_backward_only_classes_with_their_host(family, n, seed, extra, unsupported):
    g = _with_backward_only(family, n, seed, extra, unsupported)
    host = host_units(g)
    loose = np.flatnonzero(host != g.units)
    assert len(loose) == extra  # exactly the added nodes belong to backward-only classes
    anchor = {int(h): int(np.flatnonzero((g.units == h) & ~g.backward)[0]) for h in host[loose]}
    # the DP's poset and the heuristics' blocks put each such node with its host
    poset, blocks = unit_poset(g, merge_free=False), block_structure(g)
    for v in loose:
        assert poset.unit[v] == poset.unit[anchor[int(host[v])]]
        assert blocks.of_node[v] == blocks.of_node[anchor[int(host[v])]]
    c = Cluster(accelerators=3, cpus=1)
    feasible = dp.dp(g, c).status == "optimal"  # an unsupported node may sit with a CPU-less host
    for name, fn in GROUPING.items():
        r = fn(g, c)
        if r.assignment is None:
            assert not feasible, name
            continue
        assert r.objective == r.check().max_load, name
        assert r.check().feasible == feasible, (name, r.check().violations)
        a = r.assignment
        for v in loose:
            assert a[v] == a[anchor[int(host[v])]], (name, g.ids[v])


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
    """Cutting the order of `pipeline_units` into blocks is a chain split even when colocation
    classes interleave with other units (a1 -> b -> a2 with a1, a2 in one class)."""
    g = _coloured(family, n, seed, classes)
    order, follow = pipeline_units(g)
    pos = np.empty(int(follow.max()) + 1, dtype=np.int64)
    pos[order] = np.arange(len(order))
    assert all(pos[follow[u]] <= pos[follow[w]] for u, w in zip(g.src.tolist(), g.dst.tolist()))
    c = Cluster(accelerators=k)
    for name in ("single", "uniform", "parameters", "time", "greedy"):
        ev = GROUPING[name](g, c).check()
        assert ev.split == "chain", (name, ev.split)
