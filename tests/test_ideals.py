"""Ideals of the unit graph: enumeration, counting, width and the reductions."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from devplace_lite.generators import FAMILIES, generate, with_backward
from devplace_lite.graph import Graph, Node
from devplace_lite.dag import transitive_closure
from devplace_lite.throughput.ideals import count_ideals, enumerate_ideals, width
from devplace_lite.units import unit_graph
from devplace_lite.io import load_graph
from devplace_lite.errors import LimitError


def brute_ideals(poset) -> set[int]:
    """Every subset of units closed under predecessors, by trying all 2^U subsets."""
    U = poset.size
    out = set()
    for mask in range(1 << U):
        if all(not (mask >> u & 1) or all(mask >> p & 1 for p in poset.pred[u]) for u in range(U)):
            out.add(mask)
    return out


def brute_width(poset) -> int:
    g = nx.DiGraph()
    g.add_nodes_from(range(poset.size))
    g.add_edges_from((u, w) for u in range(poset.size) for w in poset.succ[u])
    return max(len(a) for a in nx.antichains(g))


SMALL = [(fam, n, seed) for fam in sorted(FAMILIES) for n in (3, 6, 9, 12) for seed in range(3)]


@pytest.mark.parametrize("fam,n,seed", SMALL)
def test_enumeration_is_exactly_the_ideals(fam, n, seed):
    poset = unit_graph(generate(fam, n, seed=seed))
    ideals = enumerate_ideals(poset)
    assert len(set(ideals.masks)) == len(ideals.masks)  # each ideal once
    assert set(ideals.masks) == brute_ideals(poset)
    assert count_ideals(poset) == len(ideals)
    sizes = [bin(m).count("1") for m in ideals.masks]
    assert sizes == sorted(sizes) and ideals.masks[0] == 0 and ideals.masks[-1] == (1 << poset.size) - 1
    # the maximal-unit table: i minus x is the named child, and x has no successor inside i
    for i, mask in enumerate(ideals.masks):
        row = range(ideals.mx_ptr[i], ideals.mx_ptr[i + 1])
        xs = [int(ideals.mx_unit[p]) for p in row]
        assert xs == sorted(u for u in range(poset.size)
                            if mask >> u & 1 and not any(mask >> w & 1 for w in poset.succ[u]))
        for p in row:
            assert ideals.masks[ideals.mx_child[p]] == mask & ~(1 << int(ideals.mx_unit[p]))


@pytest.mark.parametrize("fam,n,seed", SMALL)
def test_width_is_the_largest_antichain(fam, n, seed):
    poset = unit_graph(generate(fam, n, seed=seed))
    assert width(poset) == brute_width(poset)
    # Dilworth's bound on the number of ideals: at most (U/w + 1)^w
    assert count_ideals(poset) <= (poset.size / width(poset) + 1) ** width(poset) + 1e-9


def test_small_cases_by_hand():
    chain = Graph([Node(str(i), p_acc=1) for i in range(5)], [(str(i), str(i + 1)) for i in range(4)])
    assert count_ideals(chain) == 6 and width(chain) == 1
    flat = Graph([Node(str(i), p_acc=1) for i in range(5)], [])
    assert count_ideals(flat) == 32 and width(flat) == 5
    diamond = Graph([Node(x, p_acc=1) for x in "abcd"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    assert count_ideals(diamond) == 6 and width(diamond) == 2


def test_over_the_limit_is_one_clear_error_not_a_hang():
    flat = Graph([Node(str(i), p_acc=1) for i in range(40)], [])  # 2^40 ideals
    assert count_ideals(flat, limit=10_000) is None
    with pytest.raises(LimitError) as err:
        enumerate_ideals(unit_graph(flat, fold=True), limit=10_000)
    msg = str(err.value)
    assert "\n" not in msg and "10,000 ideals" in msg and "width 40" in msg


def test_colour_classes_contract_and_cycles_fuse():
    # a -> b -> c with a and c in one class: b must share their stage, so all three fuse
    nodes = [Node("a", p_acc=1, color="x"), Node("b", p_acc=1), Node("c", p_acc=1, color="x"), Node("d", p_acc=1)]
    g = Graph(nodes, [("a", "b"), ("b", "c"), ("c", "d")])
    poset = unit_graph(g, fold=True)
    assert poset.size == 2 and len(set(poset.unit[:3].tolist())) == 1 and poset.unit[3] != poset.unit[0]
    assert count_ideals(g) == 3


def test_training_units_carry_their_backward_nodes():
    g = with_backward(generate("layered", 8, seed=2))
    poset = unit_graph(g, fold=True)
    fwd = unit_graph(generate("layered", 8, seed=2), fold=True)
    assert poset.size == fwd.size and count_ideals(poset) == count_ideals(fwd)
    for v in g.nodes:
        if v.backward:
            assert poset.unit[g.index[v.id]] == poset.unit[g.index[v.id[:-len(".grad")]]]


def test_zero_time_leaves_fold_into_their_neighbour():
    # z hangs off b, takes no time, holds memory: folded and marked
    nodes = [Node("a", p_acc=1, p_cpu=5), Node("b", p_acc=1, p_cpu=5),
             Node("z", p_acc=0, p_cpu=0, memory=7.0), Node("y", p_acc=0, p_cpu=None)]
    g = Graph(nodes, [("a", "b"), ("b", "z"), ("b", "y")])
    poset = unit_graph(g, fold=True)
    assert poset.unit[2] == poset.unit[1] and poset.folded.tolist() == [False, False, True, False]
    assert poset.unit[3] != poset.unit[1]  # y may not run on a CPU core, so it is not free
    assert unit_graph(g, fold="memoryless").unit[2] != poset.unit[1]
    assert unit_graph(g).size == 4


def test_backward_only_classes_get_stand_ins_ordered_by_mirrored_backward_edges():
    nodes = [Node("a", p_acc=1, comm=1.0, color="A"), Node("b", p_acc=1, comm=1.0, color="B"),
             Node("a.g", p_acc=1, comm=0.5, backward=True, color="A"),
             Node("b.g", p_acc=1, comm=3.0, backward=True, color="B"),
             Node("acc", p_acc=1, comm=0.2, backward=True),          # classless
             Node("acc2", p_acc=1, comm=0.1, backward=True, color="Z")]  # class of backward nodes only
    edges = [("a", "b"), ("b", "b.g"), ("b.g", "acc"), ("acc", "a.g"), ("acc", "acc2")]
    g = Graph(nodes, edges)
    poset = unit_graph(g)
    u = dict(zip(g.ids, poset.unit.tolist()))
    assert poset.size == 4 and poset.standin.tolist() == [False, True, True, False]  # a, acc2, acc, b
    # b.g -> acc gives acc before B; acc -> a.g gives A before acc; acc -> acc2 gives acc2 before acc
    arcs = {(a, b) for a, b in poset.arcs.tolist()}
    assert arcs == {(u["a"], u["b"]), (u["acc"], u["b"]), (u["a"], u["acc"]), (u["acc2"], u["acc"])}
    bit = {x: 1 << u[x] for x in u}
    assert set(enumerate_ideals(poset).masks) == {
        0, bit["a"], bit["acc2"], bit["a"] | bit["acc2"], bit["a"] | bit["acc2"] | bit["acc"], (1 << 4) - 1}


def test_transitive_closure_matches_networkx():
    poset = unit_graph(generate("cells", 16, seed=4))
    R = transitive_closure(poset.succ)
    g = nx.DiGraph([(u, w) for u in range(poset.size) for w in poset.succ[u]])
    g.add_nodes_from(range(poset.size))
    for u in range(poset.size):
        assert set(np.flatnonzero(R[u]).tolist()) == nx.descendants(g, u)


# The authors report 17,914 (GNMT), 2,906 (BERT-12 inference), 2,938 (BERT-12 training), 3,776
# (BERT-6 training), 36,596 (Inception-v3) and 242 (ResNet-50 layers) ideals after their
# preprocessing (REFERENCES.md); ours agree: the operator training graphs have more ideals than
# their inference graphs because the stand-ins of backward-only classes join the poset.
REFERENCE_COUNTS = {
    "LayerGraphs/gnmt_inference": 17_914, "LayerGraphs/gnmt_training": 17_914,
    "LayerGraphs/inceptionv3_inference": 36_596, "LayerGraphs/inceptionv3_training": 36_596,
    "LayerGraphs/resnet50_inference": 242, "LayerGraphs/resnet50_training": 242,
    "LayerGraphs/bert24_inference": 30, "LayerGraphs/bert24_training": 30,
    "OperatorGraphs/bert_l-12_inference": 2_906, "OperatorGraphs/bert_L-12_training": 2_938,
    "OperatorGraphs/bert_l-6_inference": 1_923, "OperatorGraphs/bert_l-6_training": 3_776,
    "OperatorGraphs/bert_l-3_inference": 1_428, "OperatorGraphs/bert_l-3_training": 2_774,
    "OperatorGraphs/resnet50_inference": 241, "OperatorGraphs/resnet50_training": 258,
}


@pytest.mark.reference
@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_reference_ideal_counts(reference_dir, name):
    g = load_graph(reference_dir / "throughput-inputs" / f"{name}.json")
    assert count_ideals(g) == REFERENCE_COUNTS[name]
    assert len(enumerate_ideals(unit_graph(g, fold=True))) == REFERENCE_COUNTS[name]


def test_every_unit_subset_check_agrees_for_all_small_dags():
    # all DAGs on 4 labelled nodes in a fixed order: counting agrees with brute force everywhere
    pairs = list(itertools.combinations(range(4), 2))
    for bits in range(1 << len(pairs)):
        edges = [(str(a), str(b)) for j, (a, b) in enumerate(pairs) if bits >> j & 1]
        g = Graph([Node(str(i), p_acc=1) for i in range(4)], edges)
        poset = unit_graph(g)
        assert count_ideals(poset) == len(brute_ideals(poset))
        assert width(poset) == brute_width(poset)
