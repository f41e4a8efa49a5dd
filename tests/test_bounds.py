"""Lower bounds never exceed the optimum they claim to bound; upper bounds never beat it.

Ground truth is `exhaustive` on tiny graphs: ``kind="chain"`` for the bounds that rest on
ideals (window relaxation, pinned stage, reach, exact MIP, best), ``kind="any"`` for the
combinatorial bounds, which claim to hold for every placement.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from devplace_lite.throughput.bounds import Bound, UnitModel, best_bound, classic_bound, combinatorial_bound, neighbourhood, pinned_bound, reach_bound, stage_mip, window_relaxation
from devplace_lite.throughput.brkga import Slicer, brkga, slice_order
from devplace_lite.cli import main
from devplace_lite.cost import evaluate
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.io import load_graph, save_graph
from devplace_lite.errors import UsageError

TOL = 1e-6
FAMILIES = ["layered", "skip_chain", "cells", "series_parallel", "random"]


def _graph(family: str, seed: int, training: bool = False):
    return generate(family, 4, seed, training=True) if training else generate(family, 7, seed)


def _clusters(graph):
    mem = float(graph.memory.sum())
    return [Cluster(accelerators=2), Cluster(accelerators=3), Cluster(accelerators=2, cpus=1),
            Cluster(accelerators=1, cpus=1), Cluster(accelerators=3, memory=0.5 * mem)]


# every family, inference and training, each seed with three of the five clusters
CASES = [(f, s, t, (s + 2 * j + t) % 5) for f in FAMILIES for s in (0, 1) for t in (False, True) for j in range(3)
         if not (t and f == "random")]


def _case(family, seed, training, i):
    g = _graph(family, seed, training)
    return g, _clusters(g)[i]


def _leq(bound: float, opt: float) -> bool:
    return bound <= opt * (1 + TOL) + 1e-9


@pytest.mark.parametrize("family,seed,training,i", CASES)
def test_lower_bounds_below_exhaustive(family, seed, training, i):
    g, c = _case(family, seed, training, i)
    chain = exhaustive(g, c, kind="chain")
    anyk = exhaustive(g, c, kind="any")
    if chain.objective is None:
        pytest.skip("no chain split fits this cluster")
    opt, opt_any = chain.objective, anyk.objective
    assert _leq(combinatorial_bound(g, c).bound, opt_any)
    if c.l == 0:
        assert _leq(classic_bound(g, c).bound, opt_any)
    assert _leq(best_bound(g, c, kind="any", time_limit=5).bound, opt_any)
    model = UnitModel(g, c)
    for width in (1, 2):
        for b in range(1, c.k - min(width, c.k) + 2):
            assert _leq(window_relaxation(g, c, b, width, model=model).bound, opt)
    assert _leq(pinned_bound(model, range(model.U)).bound, opt)
    assert _leq(reach_bound(model, lower=0.5 * combinatorial_bound(g, c).bound).bound, opt)
    assert _leq(best_bound(g, c, time_limit=5).bound, opt)


@pytest.mark.parametrize("family,seed,training,i", CASES)
def test_exact_mip_equals_exhaustive_chain(family, seed, training, i):
    g, c = _case(family, seed, training, i)
    chain = exhaustive(g, c, kind="chain")
    r = stage_mip(g, c)
    if chain.objective is None:
        assert r.status == "infeasible"
        return
    assert r.status == "optimal"
    assert r.objective == pytest.approx(chain.objective, rel=1e-6)
    assert r.objective == pytest.approx(r.check().max_load, rel=1e-12)
    assert r.check().split == "chain" and r.check().feasible
    assert _leq(r.bound, chain.objective)


@pytest.mark.parametrize("family,seed,i", [(f, s, i) for f in FAMILIES for s in (2, 3) for i in (0, 1, 2)])
def test_relaxations_never_above_exact_mip(family, seed, i):
    g = generate(family, 9, seed)
    c = _clusters(g)[i]
    exact = stage_mip(g, c)
    assert exact.status == "optimal"
    model = UnitModel(g, c)
    for b in range(1, c.k + 1):
        assert _leq(window_relaxation(g, c, b, model=model).bound, exact.objective)
    assert _leq(reach_bound(model, lower=0.5 * combinatorial_bound(g, c).bound).bound, exact.objective)
    assert _leq(pinned_bound(model, range(model.U)).bound, exact.objective)


def _brute_slice(graph, cluster, order):
    """Every way to cut the node order into blocks, each block on an accelerator or a core."""
    n, best = len(order), math.inf
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        blocks = [order[a:b] for a, b in zip(bounds, bounds[1:])]
        if len(blocks) > cluster.size:
            continue
        for kinds in itertools.product((0, 1), repeat=len(blocks)):
            if sum(kinds) > cluster.l or len(kinds) - sum(kinds) > cluster.k:
                continue
            a = np.empty(graph.n, dtype=np.int64)
            acc = cpu = 0
            for block, kind in zip(blocks, kinds):
                if kind:
                    a[block] = cluster.k + cpu
                    cpu += 1
                else:
                    a[block] = acc
                    acc += 1
            ev = evaluate(graph, cluster, a)
            if ev.feasible:
                best = min(best, ev.max_load)
    return best


@pytest.mark.parametrize("family,seed,i", [(f, s, i) for f in FAMILIES for s in (0, 1) for i in (0, 1, 2)])
def test_slice_order_is_the_best_slicing(family, seed, i):
    g = generate(family, 7, seed)
    c = _clusters(g)[i]
    order = g.topological_order()
    value, a = slice_order(g, c, order)
    assert value == pytest.approx(_brute_slice(g, c, order), rel=1e-9)
    ev = evaluate(g, c, a)
    assert ev.max_load == pytest.approx(value, rel=1e-9) and ev.split == "chain" and ev.feasible


@pytest.mark.parametrize("family,seed,training,i", CASES[::3])
def test_upper_bounds_at_least_optimum(family, seed, training, i):
    g, c = _case(family, seed, training, i)
    opt = exhaustive(g, c, kind="chain").objective
    if opt is None:
        pytest.skip("no chain split fits this cluster")
    r = brkga(g, c, time_limit=2, seed=1)
    ev = r.check()
    assert r.objective == pytest.approx(ev.max_load, rel=1e-12)
    assert ev.split == "chain" and ev.feasible
    assert r.objective >= opt * (1 - TOL)
    value, _ = slice_order(g, c, g.topological_order())
    assert value >= opt * (1 - TOL)


def test_brkga_reaches_the_optimum_on_small_graphs():
    hits = 0
    for seed in range(4):
        g = generate("cells", 9, seed)
        c = Cluster(accelerators=3)
        hits += brkga(g, c, time_limit=2, seed=seed).objective <= exhaustive(g, c).objective * (1 + 1e-9)
    assert hits == 4


def test_brkga_is_seeded():
    g = generate("random", 30, 4, training=False)
    c = Cluster(accelerators=4)
    a = brkga(g, c, time_limit=30, generations=5, seed=7)
    b = brkga(g, c, time_limit=30, generations=5, seed=7)
    assert np.array_equal(a.assignment, b.assignment)


def test_combinatorial_beats_classic_and_knows_cpus():
    g = generate("layered", 30, 1)
    c = Cluster(accelerators=4)
    assert combinatorial_bound(g, c).bound >= classic_bound(g, c).bound * (1 - 1e-12)
    with pytest.raises(UsageError, match="CPU"):
        classic_bound(g, Cluster(accelerators=4, cpus=1))
    # with a core that takes work for free, sum(p_acc)/k overstates the optimum; ours does not
    free = g.with_nodes([Node(**{**v.__dict__, "p_cpu": 0.0}) for v in g.nodes])
    b = combinatorial_bound(free, Cluster(accelerators=4, cpus=1))
    assert b.bound == 0.0


def test_window_bound_is_off_by_k_on_a_star_and_pinned_is_exact():
    """A hub feeding k leaves with huge outputs: only the pinned bound sees the transfers."""
    k = 4
    nodes = [Node("hub", p_acc=1.0, comm=100.0)] + [Node(f"x{i}", p_acc=1.0) for i in range(k)]
    g = Graph(nodes, [("hub", f"x{i}") for i in range(k)])
    c = Cluster(accelerators=k)
    opt = exhaustive(g, c).objective
    assert opt == pytest.approx(k + 1)  # everything on one device: no transfer pays off
    assert classic_bound(g, c).bound == pytest.approx((k + 1) / k)
    model = UnitModel(g, c)
    assert pinned_bound(model, range(model.U)).bound == pytest.approx(opt, rel=1e-6)


def test_infeasible_instances_are_reported():
    g = Graph([Node("a", p_acc=1.0, supported=False, p_cpu=2.0), Node("b", p_acc=1.0)],
              [("a", "b")])
    b = combinatorial_bound(g, Cluster(accelerators=2))
    assert b.status == "infeasible" and b.bound == math.inf and b.to_json()["bound"] is None
    assert stage_mip(g, Cluster(accelerators=2)).status == "infeasible"


def test_bound_json_contract(tmp_path, capsys):
    p = tmp_path / "g.json"
    save_graph(generate("series_parallel", 30, seed=2), p)
    for method in ("combinatorial", "stage-relax", "pinned", "reach", "exact-mip", "best"):
        code = main(["bound", str(p), "-k", "3", "--method", method, "--time-limit", "5", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        ans = json.loads(out)
        for key in ("bound", "method", "seconds", "status"):
            assert key in ans
        assert ans["status"] in ("optimal", "time_limit", "infeasible", "trivial")
    # every bound stays below a split that exists
    g = load_graph(p)
    ub = brkga(g, Cluster(accelerators=3), time_limit=2).objective
    assert best_bound(g, Cluster(accelerators=3), time_limit=5).bound <= ub * (1 + TOL)


def test_bound_dataclass_rejects_unknown_status():
    with pytest.raises(ValueError):
        Bound(1.0, "x", 0.0, "maybe")


def test_slicer_cutoff_prunes_without_changing_the_optimum():
    g = generate("layered", 40, 3)
    c = Cluster(accelerators=5)
    s = Slicer(g, c)
    order = s.order_from_keys(np.random.default_rng(0).random(s.units.size))
    value, _ = s.slice(order)
    assert s.slice(order, cutoff=value * 1.0001)[0] == pytest.approx(value)
    assert s.slice(order, cutoff=value)[0] == math.inf


def test_bounds_on_the_authors_workload(reference_dir):
    from devplace_lite.throughput.dp import dp

    g = load_graph(reference_dir / "throughput-inputs" / "OperatorGraphs" / "bert_l-3_inference.json")
    c = Cluster(accelerators=4)
    opt = dp(g, c).objective
    model = UnitModel(g, c)
    order = np.argsort(-neighbourhood(model))[:4]
    pin = pinned_bound(model, order).bound
    assert _leq(pin, opt) and pin >= 0.99 * opt  # the embedding weight read at both ends decides
    assert combinatorial_bound(g, c).bound < 0.8 * opt


def test_best_bound_survives_a_dp_out_of_time(monkeypatch):
    """A DP stopped by its share proves nothing, but its incumbent bounds the optimum above and
    the relaxations after it still run: the bound stays valid and the gap still closes."""
    from devplace_lite.throughput import dp as dp_module

    real, runs = dp_module.dp, []

    def stopped(graph, cluster, *, time_limit=None, **kw):  # stops before its first ideal
        runs.append(real(graph, cluster, time_limit=1e-9, **kw))
        return runs[-1]

    monkeypatch.setattr(dp_module, "dp", stopped)
    g, c = generate("layered", 12, 1), Cluster(accelerators=3)
    opt = exhaustive(g, c, kind="chain").objective
    b = best_bound(g, c, time_limit=60)
    assert [r.status for r in runs] == ["time_limit"]
    assert b.extra["components"]["dp"] == {"bound": None, "seconds": round(runs[0].seconds, 4), "status": "time_limit"}
    assert b.extra["upper"] <= runs[0].objective * (1 + TOL)  # the DP's incumbent counts
    assert set(b.extra["components"]) - {"combinatorial", "pinned", "dp"}  # steps 5-7 still ran
    assert _leq(b.bound, opt)
    assert b.status == "optimal" and b.bound == pytest.approx(opt, rel=1e-6)


def test_a_highs_solve_is_cancelled_past_its_deadline():
    """HiGHS checks its own time limit too seldom in some phases; run_highs cancels the solve
    past the deadline. A reach step that takes HiGHS minutes, given no time limit of its own,
    comes back interrupted, with a dual bound still valid."""
    import highspy

    from devplace_lite.throughput.bounds.single_stage import StageSet
    from devplace_lite.generators import random_dag
    from devplace_lite.mip.solve import _run_interruptibly
    from devplace_lite.progress import Progress

    model = UnitModel(random_dag(100, seed=0, p=0.04), Cluster(accelerators=16), chain=True)
    s = StageSet(model, "acc")
    s.reach(30.0, 8.0, time_limit=0.01)  # sets up the step of T = 8 from p(A) <= 30 (HiGHS: > 60 s)
    s.h.setOptionValue("time_limit", math.inf)
    _run_interruptibly(s.h, Progress(None, "highs", "s"), deadline=0.0)  # long past
    assert s.h.getModelStatus() == highspy.HighsModelStatus.kInterrupt
    assert s.h.getInfo().mip_dual_bound < 0  # minimising -p(D): a finite bound on the reach
