"""The column-generation bound for contiguous splits against exhaustive search.

An objective below the true contiguous optimum, a bound above it, or a refuted guess at which
a contiguous split fits, is a bug. Every case is checked on both pricing paths: enumeration of
the convex sets with branching (inference graphs) and the root LP with MIP pricing (everywhere).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devplace_lite.cost import evaluate
from devplace_lite.devices import Cluster
from devplace_lite.errors import UsageError
from devplace_lite.generators import generate, with_backward
from devplace_lite.graph import Graph, Node
from devplace_lite.throughput.columns import _Parts, column_bound, refute
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.throughput.ip import throughput_ip
from devplace_lite.units import unit_graph

FAMILIES = ["layered", "series_parallel", "skip_chain", "cells", "random"]
SEEDS = st.integers(0, 2**32 - 1)
SLOW = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def instance(seed: int, training: bool = False) -> tuple[Graph, Cluster]:
    """A small seeded graph and a cluster: 1-3 accelerators, 0-1 cores, a memory cap in a third."""
    rng = np.random.default_rng(seed)
    fam = FAMILIES[int(rng.integers(len(FAMILIES)))]
    g = with_backward(generate(fam, int(rng.integers(3, 6)), seed=int(seed % 1000))) if training else \
        generate(fam, int(rng.integers(4, 9)), seed=int(seed % 1000))
    k, l_ = int(rng.integers(1, 4)), int(rng.integers(0, 2))
    memory = float(np.sort(g.memory)[-3:].sum()) if rng.random() < 0.33 else math.inf
    if k + l_ > 3 and g.n > 7:
        l_ = 0  # keep D ** U within the exhaustive search's reach
    return g, Cluster(k, l_, memory=memory)


def close(a: float, b: float, tol: float = 1e-6) -> bool:
    return abs(a - b) <= tol * max(1.0, abs(b))


def check(g: Graph, c: Cluster, truth: float, enumerate_sets: bool, gap: float = 0.0) -> None:
    """The bound is at most the optimum, the split it returns is contiguous and scored right, and
    the guess just above the optimum is never refuted (a split fits there)."""
    upper = exhaustive(g, c, kind="chain").objective  # a contiguous split, at least the optimum
    cb = column_bound(g, c, upper=upper, enumerate_sets=enumerate_sets, time_limit=60, gap=gap)
    assert cb.bound <= truth * (1 + 1e-9) + 1e-12, (cb.bound, truth)
    assert cb.upper >= truth * (1 - 1e-9) - 1e-12
    if cb.split is not None:
        ev = evaluate(g, c, cb.split)
        assert ev.feasible and ev.split in ("chain", "contiguous") and close(ev.max_load, cb.upper, 1e-12)
    parts = _Parts(unit_graph(g, chain=False).on(c), upper)
    if not enumerate_sets:
        parts.table = None
    refuted, _, split = refute(parts, truth * (1 + 1e-7) + 1e-12, math.inf)
    assert not refuted
    if split is not None:
        ev = evaluate(g, c, split)
        assert ev.feasible and ev.split in ("chain", "contiguous") and ev.max_load <= truth * (1 + 1e-7) + 1e-9
    if cb.exact and enumerate_sets and gap == 0:  # enumeration and branching decide every guess: the bound is the optimum
        assert close(cb.bound, truth, 1e-6), (cb.bound, truth, cb.guesses)


@settings(max_examples=300, **SLOW)
@given(SEEDS)
def test_enumerated_bound_is_the_contiguous_optimum(seed):
    g, c = instance(seed)
    truth = exhaustive(g, c, kind="contiguous")
    if truth.status == "infeasible":
        return
    check(g, c, truth.objective, enumerate_sets=True)


@settings(max_examples=150, **SLOW)
@given(SEEDS)
def test_mip_priced_bound_is_below_the_optimum(seed):
    g, c = instance(seed)
    truth = exhaustive(g, c, kind="contiguous")
    if truth.status == "infeasible":
        return
    check(g, c, truth.objective, enumerate_sets=False, gap=0.01)


@settings(max_examples=150, **SLOW)
@given(SEEDS)
def test_training_graphs_bound_below_the_optimum(seed):
    """Colocation classes and backward nodes: the sets are priced by the MIP (no enumeration)."""
    g, c = instance(seed, training=True)
    truth = exhaustive(g, c, kind="contiguous")
    if truth.status == "infeasible":
        return
    check(g, c, truth.objective, enumerate_sets=True, gap=0.01)


@settings(max_examples=120, **SLOW)
@given(SEEDS, st.sampled_from([0.0, 0.01]))
def test_contiguous_ip_with_columns_equals_exhaustive(seed, gap):
    g, c = instance(seed, training=seed % 3 == 0)
    truth = exhaustive(g, c, kind="contiguous")
    r = throughput_ip(g, c, "contiguous", solver=("scip", "highs")[seed % 2], columns=True, gap=gap,
                      symmetry=seed % 4 == 1)
    if truth.status == "infeasible":
        assert r.status == "infeasible"
        return
    ev = r.check()
    assert ev.feasible and ev.split in ("chain", "contiguous") and r.objective == pytest.approx(ev.max_load, abs=1e-12)
    assert r.bound <= truth.objective * (1 + 1e-9) + 1e-12
    if gap == 0:
        assert r.status == "optimal" and close(r.objective, truth.objective), (r.objective, truth.objective, r.extra)
    else:
        assert r.objective <= truth.objective * (1 + gap) + 1e-9 and r.objective - r.bound <= gap * r.objective + 1e-9


def test_a_cyclic_split_beats_every_chain_and_the_bound_knows():
    """a -> b, c -> d: parts {a, d} and {b, c} form a cycle, so no chain reaches them (4.2
    against the chain's 5.0); the enumerated bound proves 4.2 and finds that split."""
    nodes = [Node("a", p_acc=1, comm=0.1), Node("b", p_acc=2), Node("c", p_acc=2, comm=0.1), Node("d", p_acc=3)]
    g = Graph(nodes, [("a", "b"), ("c", "d")])
    c = Cluster(2, 0)
    chain, contig = exhaustive(g, c, kind="chain").objective, exhaustive(g, c, kind="contiguous").objective
    assert contig == pytest.approx(4.2) and chain == pytest.approx(5.0)
    cb = column_bound(g, c, upper=chain)
    assert close(cb.bound, contig) and close(cb.upper, contig) and cb.split is not None


def test_columns_is_for_the_contiguous_flavour():
    g = generate("layered", 6, seed=1)
    with pytest.raises(UsageError):
        throughput_ip(g, Cluster(2, 0), "chain", columns=True)


def test_layered_fifty_at_eight_accelerators_closes():
    """The instance where the device IP stayed 15 % open after 60 s (benchmarks/mip): the bound
    meets the DP's split, which is therefore the contiguous optimum too."""
    from devplace_lite.throughput.dp import dp

    g, c = generate("layered", 50, seed=0), Cluster(8, 1)
    d = dp(g, c)
    cb = column_bound(g, c, upper=d.objective, gap=0.01, time_limit=120)
    assert cb.exact and cb.bound >= 0.99 * d.objective


@settings(max_examples=40, **SLOW)
@given(SEEDS)
def test_contiguous_ip_out_of_time_keeps_the_combinatorial_bound(seed):
    """With no time for the column LP or the IP, the bound is still chapter 05's combinatorial
    bound (computed before the column stage), and never above the contiguous optimum."""
    from devplace_lite.throughput.bounds import combinatorial_bound

    g, c = instance(seed, training=seed % 2 == 0)
    truth = exhaustive(g, c, kind="contiguous")
    if truth.status == "infeasible":
        return
    r = throughput_ip(g, c, "contiguous", time_limit=1e-3)
    comb = combinatorial_bound(g, c).bound
    assert r.bound >= comb * (1 - 1e-9) - 1e-12, (r.bound, comb, r.extra)
    assert r.bound <= truth.objective * (1 + 1e-9) + 1e-12


def _convex_sets(parts: _Parts):
    """Every non-empty unit set whose forward (order) vertices are convex, by brute force: no
    order path leaves the set and comes back."""
    from itertools import combinations

    d = parts.data
    fwd = set(parts.fwd.tolist())
    succ: dict[int, list[int]] = {v: [] for v in fwd}
    for a, b in parts.order_pairs:
        succ[a].append(b)
    reach = {}
    for v in fwd:  # everything an order path from v reaches
        seen, todo = set(), list(succ[v])
        while todo:
            w = todo.pop()
            if w not in seen:
                seen.add(w)
                todo.extend(succ[w])
        reach[v] = seen
    for size in range(1, d.U + 1):
        for units in combinations(range(d.U), size):
            inside = {v for v in fwd if d.unit[v] in units}
            if all(not (reach[w] & inside) for v in inside for w in reach[v] - inside):
                yield np.array(units, dtype=np.int64)


@settings(max_examples=60, **SLOW)
@given(SEEDS)
def test_pricing_mip_is_the_best_convex_set(seed):
    """The pricing MIP (convexity as the difference of two nested ideals) answers the largest dual
    weight of a convex set that fits, on inference and training graphs (colocation classes),
    against every unit subset: its value never below the best (a bound), and its set that best."""
    from devplace_lite.throughput.columns import PRICE_GAP, _Pricing
    from devplace_lite.units import memory_share

    g, c = instance(seed, training=seed % 2 == 0)
    data = unit_graph(g, chain=False).on(c)
    if c.k == 0 or data.U > 10:
        return
    rng = np.random.default_rng(seed)
    parts = _Parts(data, float(data.pa.sum()))
    T = float(rng.uniform(0.3, 1.0)) * float(data.pa.sum())
    pi = rng.normal(0.3, 1.0, data.U)
    share = memory_share(data)
    best, fitting = 0.0, set()
    for S in _convex_sets(parts):
        mask = np.zeros(data.U, dtype=bool)
        mask[S] = True
        if not data.acc_ok[S].all() or (data.memory_binds and share[S].sum() > 1.0 + 1e-6):
            continue
        if parts.load(mask) <= T * (1 + 1e-6):  # the MIP's feasibility tolerance
            fitting.add(tuple(S.tolist()))
        if parts.load(mask) <= T and (not data.memory_binds or share[S].sum() <= 1.0):
            best = max(best, float(pi[S].sum()))
    a, found, done = _Pricing(parts, T, cpu=False).price(pi, 60.0)
    assert done
    assert a >= best - 1e-6 * max(1.0, best), (a, best)
    got = float(pi[found[0]].sum()) if found else 0.0
    assert got >= best - PRICE_GAP * max(1.0, best) - 1e-6, (got, best)
    # the best set and every improving one the search saved are convex and fit (the empty set
    # is the MIP's trivial solution)
    assert all(not len(S) or tuple(S.tolist()) in fitting for S in found), found


def test_the_ip_waits_for_no_deadline_after_the_column_stage(monkeypatch):
    """When the column stage leaves less than `IP_FLOOR` of the limit, the answer is the
    incumbent with the column stage's bound and status ``time_limit``: no device-indexed IP is
    built (its model alone overran the deadline under load)."""
    import time

    from devplace_lite.throughput import columns, ip

    g, c = generate("layered", 12, seed=4), Cluster(accelerators=3, cpus=1)
    real = columns.column_bound

    def slow(graph, cluster, **kw):  # a weaker bound than the real one, then the rest of the limit gone
        out = real(graph, cluster, **{**kw, "time_limit": None, "gap": 0.5})
        time.sleep(kw["time_limit"])
        return columns.ColumnBound(min(out.bound, 0.9 * out.upper), out.upper, out.split, out.seconds, out.exact,
                                   out.guesses)

    monkeypatch.setattr(columns, "column_bound", slow)
    r = ip.throughput_ip(g, c, "contiguous", time_limit=1.0, solver="highs")
    assert r.status == "time_limit" and "variables" not in r.extra and "nodes" not in r.extra, r.extra
    assert r.bound == pytest.approx(max(r.extra["columns_bound"], r.extra.get("combinatorial_bound", 0.0)))
    assert r.bound <= r.objective and r.objective == pytest.approx(evaluate(g, c, r.assignment).max_load)
