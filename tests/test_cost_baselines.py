"""The evaluator against the model's definition, and the baselines against the exhaustive optimum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.throughput.baselines import balance_by_parameters, balance_by_time, greedy_fill, min_max_blocks, random_best_of, single_device, uniform
from devplace_lite.cost import chain_order, device_loads, evaluate, split_kind
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import batch_loads, exhaustive
from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import Graph, Node

BASELINES = [single_device, uniform, balance_by_parameters, balance_by_time, greedy_fill, random_best_of]
graphs = st.builds(lambda fam, n, seed, tr: generate(fam, n, seed=seed, training=tr),
                   st.sampled_from(sorted(FAMILIES)), st.integers(2, 14), st.integers(0, 10_000), st.booleans())


def naive_loads(g: Graph, c: Cluster, a: np.ndarray) -> np.ndarray:
    """acc(S) and cpu(S) written out from the definition, one device at a time."""
    out = np.zeros(c.size)
    for d in range(c.size):
        S = {i for i in range(g.n) if a[i] == d}
        if d >= c.k:
            out[d] = sum(g.nodes[i].p_cpu for i in S)
            continue
        crossing = {u for u, w in zip(g.src, g.dst) if (u in S) != (w in S)}
        out[d] = sum(g.nodes[i].p_acc for i in S) + sum(g.nodes[u].comm for u in crossing if u in S or
                                                      any(w in S for w in g.succ[u]))
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(graphs, st.integers(1, 4), st.integers(0, 2), st.integers(0, 2**31))
def test_loads_match_the_definition(g, k, l, seed):
    c = Cluster(accelerators=k, cpus=l)
    a = np.random.default_rng(seed).integers(0, c.size, g.n)
    np.testing.assert_allclose(sum(device_loads(g, c, a)), naive_loads(g, c, a))
    np.testing.assert_allclose(batch_loads(g, c, a[None, :])[0], naive_loads(g, c, a))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(graphs, st.integers(0, 2**31))
def test_two_accelerators_pay_work_plus_twice_the_cut(g, seed):
    c = Cluster(accelerators=2)
    a = np.random.default_rng(seed).integers(0, 2, g.n)
    cut = {int(u) for u, w in zip(g.src, g.dst) if a[u] != a[w]}
    assert sum(device_loads(g, c, a)).sum() == pytest.approx(g.p_acc.sum() + 2 * sum(g.comm[u] for u in cut))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(graphs, st.integers(0, 2**31))
def test_relabelling_accelerators_permutes_loads(g, seed):
    c = Cluster(accelerators=3)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, g.n)
    perm = rng.permutation(3)
    ev, ev2 = evaluate(g, c, a), evaluate(g, c, perm[a])
    np.testing.assert_allclose(ev2.loads[perm], ev.loads)
    assert ev.split == ev2.split


@settings(max_examples=40, deadline=None, derandomize=True)
@given(graphs, st.integers(1, 4), st.integers(0, 2**31))
def test_blocks_of_a_topological_order_are_chains(g, k, seed):
    order = g.topological_order()
    cuts = np.sort(np.random.default_rng(seed).integers(0, g.n + 1, k - 1))
    a = np.empty(g.n, dtype=int)
    a[order] = np.searchsorted(cuts, np.arange(g.n), side="right")
    a[g.backward] = 0  # backward nodes are not checked for contiguity
    c = Cluster(accelerators=k)
    assert split_kind(g, c, a) == "chain"
    assert chain_order(g, c, a) == sorted(set(a[~g.backward].tolist()))


def test_the_two_convex_parts_that_form_a_cycle():
    g = Graph([Node(x, p_acc=1) for x in "abcd"], [("a", "b"), ("c", "d")])
    c = Cluster(accelerators=2)
    assert split_kind(g, c, {"a": "acc0", "d": "acc0", "b": "acc1", "c": "acc1"}) == "contiguous"
    g2 = Graph([Node(x, p_acc=1) for x in "abc"], [("a", "b"), ("b", "c")])
    assert split_kind(g2, c, {"a": "acc0", "c": "acc0", "b": "acc1"}) == "none"


def small_instances():
    out = []
    for i, fam in enumerate(sorted(FAMILIES)):
        for tr in (False, True):
            g = generate(fam, 4 if tr else 8, seed=10 + i, training=tr)
            total_mem = g.memory.sum()
            for c in (Cluster(accelerators=2), Cluster(accelerators=3, cpus=1, memory=total_mem / 2.2)):
                out.append(pytest.param(g, c, id=f"{fam}-{'train' if tr else 'inf'}-k{c.k}l{c.l}"))
    return out


@pytest.mark.parametrize("g,c", small_instances())
def test_exhaustive_is_no_worse_than_any_baseline(g, c):
    best = {kind: exhaustive(g, c, kind=kind) for kind in ("chain", "contiguous", "any")}
    assert best["any"].objective <= best["contiguous"].objective + 1e-9 <= best["chain"].objective + 2e-9
    assert best["chain"].check().split == "chain" and best["chain"].check().feasible
    for fn in BASELINES:
        r = fn(g, c)
        ev = r.check()
        assert r.objective == pytest.approx(ev.max_load)
        if r.status == "feasible":
            assert ev.feasible
            kind = "any" if fn is random_best_of else "chain"
            assert ev.split == "chain" or kind == "any"
            assert best[kind].objective <= r.objective + 1e-9
        else:
            assert r.status in ("infeasible", "unknown") and (r.assignment is None or not ev.feasible)


def test_exhaustive_reports_infeasible_when_nothing_fits():
    g = generate("layered", 5, seed=0)
    r = exhaustive(g, Cluster(accelerators=2, memory=g.memory.max() / 2))
    assert r.status == "infeasible" and r.assignment is None


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=30), st.integers(1, 6))
def test_min_max_blocks_is_optimal(w, k):
    blocks = min_max_blocks(np.array(w), k)
    assert blocks[0] == 0 and np.all(np.diff(blocks) >= 0) and blocks[-1] < k
    got = max(np.bincount(blocks, weights=w))
    # brute force over all cut positions
    import itertools
    n = len(w)
    best = min(max(sum(w[a:b]) for a, b in zip((0,) + cuts, cuts + (n,)))
               for r in range(min(k, n)) for cuts in itertools.combinations(range(1, n), r))
    assert got <= best + 1e-6 * max(1, best)
