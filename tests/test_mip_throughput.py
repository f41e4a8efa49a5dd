"""The max-load integer programs against the exhaustive ground truth, the DP and the evaluator."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from devplace_lite.cli import main
from devplace_lite.cost import evaluate
from devplace_lite.devices import Cluster
from devplace_lite.errors import UsageError
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import generate, with_backward
from devplace_lite.graph import Graph, Node
from devplace_lite.io import load_graph, save_graph
from devplace_lite.throughput.ip import _DeviceModel, _StageModel, throughput_ip
from devplace_lite.units import unit_graph

FAMILIES = ["layered", "series_parallel", "skip_chain", "cells", "random"]
EXHAUSTIVE_KIND = {"chain": "chain", "contiguous": "contiguous", "noncontiguous": "any"}


def case(seed: int) -> tuple[Graph, Cluster]:
    """A small seeded graph (every third a training graph) and a cluster (every third memory-capped)."""
    fam = FAMILIES[seed % len(FAMILIES)]
    g = with_backward(generate(fam, 5, seed=seed)) if seed % 3 == 2 else generate(fam, 7, seed=seed)
    clusters = [Cluster(2, 1), Cluster(3, 0), Cluster(2, 1, memory=float(np.sort(g.memory)[-3:].sum()))]
    return g, clusters[seed % 3]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def check_result(r, kind: str) -> None:
    ev = r.check()
    assert ev.feasible, ev.violations
    assert r.objective == pytest.approx(ev.max_load, abs=1e-12)
    assert ev.split in {"chain": {"chain"}, "contiguous": {"chain", "contiguous"},
                        "noncontiguous": {"chain", "contiguous", "none"}}[kind]
    assert r.bound is not None and r.bound <= r.objective + 1e-12


@pytest.mark.parametrize("seed", range(9))
def test_flavours_equal_exhaustive_and_nest(seed):
    g, c = case(seed)
    values = {}
    for kind in ("chain", "contiguous", "noncontiguous"):
        truth = exhaustive(g, c, kind=EXHAUSTIVE_KIND[kind])
        r = throughput_ip(g, c, kind, solver="scip")
        assert r.status == "optimal"
        assert close(r.objective, truth.objective), (kind, r.objective, truth.objective)
        check_result(r, kind)
        values[kind] = r.objective
    assert values["noncontiguous"] <= values["contiguous"] + 1e-9 <= values["chain"] + 2e-9


@pytest.mark.parametrize("seed", [0, 4, 5])
def test_highs_and_no_warm_start_agree(seed):
    g, c = case(seed)
    for kind in ("chain", "contiguous", "noncontiguous"):
        truth = exhaustive(g, c, kind=EXHAUSTIVE_KIND[kind]).objective
        for kw in ({"solver": "highs"}, {"warm_start": None}, {"symmetry": True}, {"dp_cut": True}):
            r = throughput_ip(g, c, kind, **kw)
            assert r.status == "optimal" and close(r.objective, truth), (kind, kw)


def test_chain_ip_equals_dp():
    dp = pytest.importorskip("devplace_lite.throughput.dp")
    for seed in (1, 3, 7):
        g, c = generate(FAMILIES[seed % 5], 10, seed=seed), Cluster(3, 0)
        assert close(throughput_ip(g, c, "chain", warm_start=None).objective, dp.dp(g, c).objective)


def test_the_dp_cut_closes_what_the_solver_alone_does_not():
    """ResNet-50 layers on 8 accelerators: the chain IP's relaxation stayed 75 % below the optimum
    after 60 s (benchmarks/mip); the DP's proven value as a row closes it at the first LP."""
    dp = pytest.importorskip("devplace_lite.throughput.dp")
    g = load_graph(Path(__file__).parent.parent / "data/graphs/resnet50_layer_inference.json")
    c = Cluster(8, 1, memory=g.defaults.get("memory", math.inf))
    r = throughput_ip(g, c, "chain", solver="highs", time_limit=120, dp_cut=True)
    assert r.extra["cut"] == "dp" and r.status == "optimal" and r.gap == 0.0
    assert close(r.objective, dp.dp(g, c).objective)
    check_result(r, "chain")
    # valid only where the DP solves the same model and proved it: never another flavour or start
    assert throughput_ip(g, c, "contiguous", time_limit=1, dp_cut=True).extra.get("cut") != "dp"  # "columns" may be
    assert "cut" not in throughput_ip(g, c, "chain", time_limit=1, warm_start=None, dp_cut=True).extra


def two_part_counterexample() -> Graph:
    """a -> b, c -> d: the convex parts {a, d}, {b, c} balance, but wait on each other."""
    nodes = [Node("a", p_acc=1, comm=0.1), Node("b", p_acc=2), Node("c", p_acc=2, comm=0.1), Node("d", p_acc=3)]
    return Graph(nodes, [("a", "b"), ("c", "d")], name="two-part")


def test_contiguous_is_weaker_than_chain_on_the_counterexample():
    g, c = two_part_counterexample(), Cluster(2)
    chain = throughput_ip(g, c, "chain")
    contig = throughput_ip(g, c, "contiguous")
    assert contig.objective == pytest.approx(4.2) and chain.objective == pytest.approx(5.0)
    assert contig.check().split == "contiguous"


def test_the_certifying_bound_is_on_the_methods_own_optimum():
    """An ip-contig answer stopped by its limit holding the best chain split (5.0) must not be
    certified against the chain optimum: the contiguous optimum is 4.2."""
    from devplace_lite.methods import PARTITION
    from devplace_lite.result import Result
    from devplace_lite.solve import _raise_bound

    g, c = two_part_counterexample(), Cluster(2)
    chain = throughput_ip(g, c, "chain")
    res = Result("ip-contig", g, c, chain.assignment, chain.objective, "time_limit", 1.0, bound=0.0)
    _raise_bound(res, PARTITION["ip-contig"], 5.0)
    assert res.extra["bound_kind"] == "any" and 0 < res.bound <= 4.2 + 1e-9
    _raise_bound(chain_res := Result("ip", g, c, chain.assignment, chain.objective, "time_limit", 1.0, bound=0.0),
                 PARTITION["ip"], 5.0)
    assert chain_res.extra["bound_kind"] == "chain" and chain_res.bound == pytest.approx(5.0)


def test_seeds_separate_the_flavours():
    """Some small cases have contiguous < chain and noncontiguous < contiguous, so the equality
    tests above would notice a formulation that collapsed one flavour onto another."""
    strict_contig = strict_any = False
    for seed in range(40):
        g = generate(FAMILIES[seed % 5], 8, seed=seed)
        c = Cluster(3, 0)
        e = {k: exhaustive(g, c, kind=v).objective for k, v in EXHAUSTIVE_KIND.items()}
        if e["contiguous"] < e["chain"] - 1e-9:
            r = throughput_ip(g, c, "contiguous")
            assert close(r.objective, e["contiguous"])
            strict_contig = True
        if e["noncontiguous"] < e["contiguous"] - 1e-9:
            r = throughput_ip(g, c, "noncontiguous")
            assert close(r.objective, e["noncontiguous"])
            strict_any = True
        if strict_contig and strict_any:
            break
    assert strict_contig and strict_any


@pytest.mark.parametrize("seed", range(6))
def test_every_split_of_the_kind_is_a_model_point_with_its_load(seed):
    """Encoding any feasible split of the kind gives a feasible column vector whose T is the
    evaluator's max-load (the model admits every split and prices it right)."""
    g, c = case(seed)
    rng = np.random.default_rng(seed)
    data = unit_graph(g, chain=False).on(c)
    models = {"chain": _StageModel(data), "contiguous": _DeviceModel(data, True, False),
              "noncontiguous": _DeviceModel(data, False, False)}
    tried = 0
    for _ in range(300):
        a_unit = rng.integers(0, c.size, data.U)
        a = a_unit[data.unit]
        ev = evaluate(g, c, a)
        if not ev.feasible:
            continue
        for kind, form in models.items():
            ok = {"chain": {"chain"}, "contiguous": {"chain", "contiguous"}}.get(kind, {"chain", "contiguous", "none"})
            if ev.split in ok:
                v = form.encode(a)
                assert form.model.violation(v) <= 1e-9, kind
                assert v[form.T] == pytest.approx(ev.max_load)
                back = evaluate(g, c, form.decode(v))  # the same split, devices maybe renamed
                assert back.max_load == pytest.approx(ev.max_load) and back.split in ok
                tried += 1
    assert tried > 20


def test_decode_of_the_chain_model_keeps_the_loads():
    g, c = case(1)
    data = unit_graph(g, chain=False).on(c)
    form = _StageModel(data)
    r = throughput_ip(g, c, "chain")
    v = form.encode(r.assignment)
    assert evaluate(g, c, form.decode(v)).max_load == pytest.approx(r.objective)


def test_time_limit_returns_incumbent_and_bound():
    g, c = generate("layered", 300, seed=0), Cluster(6, 1)
    for kind in ("contiguous", "noncontiguous"):
        r = throughput_ip(g, c, kind, time_limit=1.0)
        assert r.status == "time_limit"
        check_result(r, kind)
        assert r.bound < r.objective and 0 < r.gap < 1


@pytest.mark.parametrize("seed", range(9))
def test_ip_contig_of_the_registry_equals_exhaustive(seed):
    """`ip-contig` as the library, the CLI and the chapters call it (the column bound first):
    proven optimal, at the contiguous optimum of exhaustive search."""
    from devplace_lite.solve import partition

    g, c = case(seed)
    truth = exhaustive(g, c, kind="contiguous")
    r = partition(g, c, "ip-contig", time_limit=60)
    assert r.status == "optimal" and close(r.objective, truth.objective), (r.objective, truth.objective, r.extra)
    assert "columns_bound" in r.extra
    check_result(r, "contiguous")


def test_ip_contig_of_the_registry_keeps_its_deadline():
    """Stopped by a one-second limit (the column bound needs about 15 s on a quiet machine
    here, benchmarks/mip), it answers with its incumbent, a proven bound and status time_limit;
    and it stops: its CPU time stays far below what the whole search takes."""
    import time

    from devplace_lite.solve import partition

    g, c = generate("layered", 300, seed=0), Cluster(4, 1)
    t = time.process_time()
    r = partition(g, c, "ip-contig", time_limit=1.0)
    cpu = time.process_time() - t
    assert r.status == "time_limit" and r.assignment is not None and r.extra["warm_start"]
    check_result(r, "contiguous")
    assert 0 < r.bound < r.objective and 0 < r.gap < 1
    assert cpu < 8.0, cpu


def test_time_limit_on_a_reference_workload(reference_dir):
    from devplace_lite.io import load_graph

    g = load_graph(reference_dir / "throughput-inputs/OperatorGraphs/bert_l-3_training.json")
    c = Cluster.for_graph(g)
    r = throughput_ip(g, c, "contiguous", time_limit=2.0)
    assert r.status in ("time_limit", "optimal")
    check_result(r, "contiguous")


def test_infeasible_and_bad_input():
    g = generate("layered", 6, seed=0)
    r = throughput_ip(g, Cluster(2, 0, memory=float(g.memory.max()) / 2), "contiguous")
    assert r.status == "infeasible" and r.assignment is None and "fits on no device" in r.extra["reason"]
    tight = Cluster(2, 0, memory=float(g.memory.max()) + 1)  # every node fits alone, not all together
    assert g.memory.sum() > 2 * tight.memory
    for kind in ("chain", "noncontiguous"):
        assert throughput_ip(g, tight, kind).status == "infeasible"
    with pytest.raises(UsageError):
        throughput_ip(g, Cluster(2), "convex")
    with pytest.raises(UsageError):
        throughput_ip(g, Cluster(2), "chain", solver="gurobi")


def test_unsupported_nodes_go_to_the_cpu():
    g = generate("series_parallel", 8, seed=3)
    nodes = [Node(**{**v.__dict__, "supported": i % 4 != 1}) for i, v in enumerate(g.nodes)]
    g = g.with_nodes(nodes)
    c = Cluster(2, 1)
    for kind in ("chain", "contiguous", "noncontiguous"):
        r = throughput_ip(g, c, kind)
        assert np.all(r.assignment[~g.supported] >= c.k)
        assert close(r.objective, exhaustive(g, c, kind=EXHAUSTIVE_KIND[kind]).objective)


@pytest.mark.parametrize("method", ["ip", "ip-contig", "ip-noncontig"])
def test_cli_json_contract(tmp_path, capsys, method):
    g = generate("cells", 11, seed=2)
    path = tmp_path / "g.json"
    save_graph(g, path)
    assert main(["partition", str(path), "--method", method, "-k", "2", "--cpus", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal" and out["gap"] == 0 and math.isclose(out["bound"], out["objective"])
    assert set(out["placement"]) == set(g.ids)
    assert main(["partition", str(path), "--method", method, "-k", "3", "--time-limit", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] in ("optimal", "time_limit") and out["bound"] <= out["objective"] + 1e-12


@pytest.mark.parametrize("seed", range(200))
def test_the_orbitope_rows_keep_exactly_one_labelling_of_each_split(seed):
    """symmetry="orbitope": every feasible split, labelled as `canonical_labels` does, is a model
    point with its load (no split is lost), and a relabelling of two used accelerators is not
    (the k! labellings are cut to one)."""
    from devplace_lite.throughput.ip import canonical_labels

    g, c = case(seed)
    rng = np.random.default_rng(seed)
    data = unit_graph(g, chain=False).on(c)
    form = _DeviceModel(data, seed % 2 == 0, "orbitope")
    for _ in range(40):
        a = rng.integers(0, c.size, data.U)[data.unit]
        ev = evaluate(g, c, a)
        if not ev.feasible or (seed % 2 == 0 and ev.split == "none"):
            continue
        a = canonical_labels(data, a)
        v = form.encode(a)
        assert form.model.violation(v) <= 1e-9
        assert v[form.T] == pytest.approx(ev.max_load)
        used = sorted({int(d) for d in a if d < c.k})
        if len(used) >= 2:
            swap = {used[0]: used[1], used[1]: used[0]}
            b = np.array([swap.get(int(d), int(d)) for d in a])
            assert form.model.violation(form.encode(b)) > 0.5


@pytest.mark.parametrize("seed", range(60))
def test_orbitope_rows_and_the_combinatorial_cut_keep_the_optimum(seed):
    """The contiguous and non-contiguous IPs with the orbitope rows and the chapter 05 cut equal
    the exhaustive optimum, on SCIP and HiGHS alternately, and the cut is below it."""
    from devplace_lite.throughput.bounds import combinatorial_bound

    g, c = case(seed)
    comb = combinatorial_bound(g, c).bound
    for kind in ("contiguous", "noncontiguous"):
        truth = exhaustive(g, c, kind=EXHAUSTIVE_KIND[kind]).objective
        assert comb <= truth + 1e-9
        r = throughput_ip(g, c, kind, solver=("scip", "highs")[seed % 2], symmetry="orbitope", bound_cut=True,
                          warm_start=None if seed % 4 == 1 else "auto")
        assert r.status == "optimal" and close(r.objective, truth), (kind, r.objective, truth)
        check_result(r, kind)
