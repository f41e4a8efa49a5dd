"""The experts' splits against the optimum (`devplace_course.experts`) and ``devplace evaluate
--compare`` (`devplace_lite.commands.evaluate`): checked against loads and chain tests written here from the model alone, against
every chain split of small graphs, and on the authors' published expert files when present."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devplace_lite.cli import main
from devplace_lite.commands.evaluate import compare_with, placement_owner
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph
from devplace_lite.io import load_graph, load_placement, save_graph
from devplace_lite.cost import evaluate
from devplace_lite.dag import topological_order
from devplace_course.experts import BASELINES, bottleneck, compare_expert, published

#: The expert's max load over the DP optimum on each published workload, as the issue measured
#: it with `devplace evaluate` and `devplace partition --method dp` (two decimals).
ISSUE_SPEEDUPS = {"bert24_inference": 1.13, "bert24_training": 1.18, "gnmt_inference": 1.40,
                  "gnmt_training": 1.28, "inceptionv3_inference": 1.99, "resnet50_inference": 1.30}


def loads_by_hand(g: Graph, cluster: Cluster, dev: list[int]) -> list[float]:
    """Each device's load from the model's definition: compute, plus on an accelerator c(u) once
    for every producer u with an edge crossing the device's boundary (inference graphs)."""
    out = []
    for d in range(cluster.size):
        on = {v for v in range(g.n) if dev[v] == d}
        acc = d < cluster.k
        work = sum(float(g.p_acc[v]) if acc else float(g.p_cpu[v]) for v in on)
        if acc:
            crossing = {int(u) for u, w in zip(g.src, g.dst) if (u in on) != (w in on)}
            work += sum(float(g.comm[u]) for u in crossing)
        out.append(work)
    return out


def stage_order(g: Graph, dev: list[int]) -> list[int] | None:
    """Devices in an order every edge goes forward in, or None (a cycle between parts)."""
    used = sorted(set(dev))
    arcs = {(dev[u], dev[w]) for u, w in zip(g.src.tolist(), g.dst.tolist()) if dev[u] != dev[w]}
    order, left = [], set(used)
    while left:
        free = [d for d in sorted(left) if not any(a in left and b == d for a, b in arcs)]
        if not free:
            return None
        order.append(free[0])
        left.remove(free[0])
    return order


def small_instance(seed: int) -> tuple[Graph, Cluster]:
    rng = np.random.default_rng(seed)
    fam = ["layered", "series_parallel", "skip_chain", "cells"][seed % 4]
    g = generate(fam, int(rng.integers(4, 7)), seed=seed)
    return g, Cluster(accelerators=int(rng.integers(2, 4)), cpus=int(rng.integers(0, 2)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_no_chain_split_beats_the_optimum_and_the_best_one_ties_it(seed):
    g, c = small_instance(seed)
    best = math.inf
    first = None
    for dev in itertools.product(range(c.size), repeat=g.n):
        if any(d >= c.k and math.isnan(g.p_cpu[v]) for v, d in enumerate(dev)) or stage_order(g, list(dev)) is None:
            continue
        load = max(loads_by_hand(g, c, list(dev)))
        if load < best:
            best, first = load, dev
    cmp = compare_expert(g, {v.id: c.names[d] for v, d in zip(g.nodes, first)}, c, baselines=())
    assert cmp.optimum.status == "optimal"
    assert cmp.expert_load == pytest.approx(best, rel=1e-9)
    assert cmp.speedup == pytest.approx(1.0, rel=1e-9)        # the best chain split is an optimum


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_bottleneck_and_speedup_of_a_random_chain_split(seed):
    rng = np.random.default_rng(seed)
    g = generate(["layered", "series_parallel", "cells"][seed % 3], int(rng.integers(6, 30)), seed=seed)
    c = Cluster(accelerators=int(rng.integers(2, 5)), cpus=1)
    # an expert's kind of split: cut one topological order into consecutive stages, in device order
    topo = topological_order([list(s) for s in g.succ])
    cuts = sorted(rng.choice(np.arange(1, g.n), size=min(c.k - 1, g.n - 1), replace=False).tolist())
    dev = [0] * g.n
    for pos, v in enumerate(topo):
        dev[v] = int(np.searchsorted(cuts, pos, side="right"))
    hand = loads_by_hand(g, c, dev)
    # (not kl here: it crashes on some of these graphs, KeyError in local_search, reported to the lead)
    cmp = compare_expert(g, {v.id: c.names[d] for v, d in zip(g.nodes, dev)}, c, baselines=("pipedream", "linear"))
    b = cmp.bottleneck
    assert b.load == pytest.approx(max(hand), rel=1e-9) and hand[c.device_index(b.device)] == pytest.approx(max(hand))
    stages = stage_order(g, dev)
    assert stages is not None and b.stages == len(stages)
    assert b.stage == stages.index(c.device_index(b.device)) + 1
    assert b.idle_cpus == ("cpu0",) and b.nodes == dev.count(c.device_index(b.device))
    others = [hand[d] for d in range(c.k) if d != c.device_index(b.device) and d in dev]
    assert b.others_mean == pytest.approx(sum(others) / len(others) if others else 0.0)
    assert cmp.speedup >= 1 - 1e-9                                    # the DP is optimal over chains
    assert cmp.speedup == pytest.approx(max(hand) / cmp.optimum.objective, rel=1e-9)
    name, load = cmp.best_baseline
    assert load == min(cmp.baseline_loads().values()) and load >= cmp.optimum_load * (1 - 1e-9)
    assert not cmp.ip_better and "noncontiguous" not in cmp.to_dict()


def test_ip_better_means_feasible_and_below_the_optimum():
    # "better" is reported exactly when the IP's split is feasible and below the DP's optimum
    g = generate("layered", 8, seed=5)
    c = Cluster(accelerators=2)
    cmp = compare_expert(g, {v.id: "acc0" for v in g.nodes}, c, baselines=(), ip_time_limit=30)
    ip = cmp.noncontiguous
    assert ip is not None and ip.check().feasible
    assert cmp.ip_better == (ip.check().max_load < cmp.optimum_load * (1 - 1e-9))
    assert cmp.to_dict()["noncontiguous"]["better"] == cmp.ip_better


def test_the_default_baselines_are_registered_methods():
    from devplace_lite.methods import PARTITION

    assert set(BASELINES) <= set(PARTITION) and {"pipedream", "kl", "local-search"} <= set(BASELINES)


def test_compare_with_an_unknown_method_is_a_usage_error():
    from devplace_lite.errors import UsageError

    g, c = small_instance(1)
    with pytest.raises(UsageError, match="unknown method"):
        compare_with(g, c, evaluate(g, c, {v.id: "acc0" for v in g.nodes}), "nope")


def test_placement_owner_names_each_kind(tmp_path):
    files = {"e_expert.json": {"fpgas": [{"nodes": [1]}], "cpus": []},
             "answer.json": {"method": "kl", "placement": {"1": "acc0"}},
             "plain.json": {"1": "acc0"}}
    for name, obj in files.items():
        (tmp_path / name).write_text(json.dumps(obj))
    assert "human expert" in placement_owner(tmp_path / "e_expert.json")
    assert "method kl" in placement_owner(tmp_path / "answer.json")
    assert "mapping" in placement_owner(tmp_path / "plain.json")


def test_evaluate_compare_dp_text_and_json(tmp_path, capsys):
    g = generate("layered", 12, seed=7)
    graph = tmp_path / "g.json"
    save_graph(g, graph)
    split = tmp_path / "mine.json"
    split.write_text(json.dumps({v.id: "acc0" for v in g.nodes}))
    assert main(["evaluate", str(graph), str(split), "-k", "3", "--compare", "dp"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == "placement: a node -> device mapping (mine.json)"
    assert "dp: max load" in text and "(optimal)" in text and "runs" in text
    assert main(["evaluate", str(graph), str(split), "-k", "3", "--compare", "dp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g2 = load_graph(graph)
    c = Cluster.for_graph(g2, 3)
    mine = evaluate(g2, c, {v.id: "acc0" for v in g2.nodes}).max_load
    assert out["objective"] == pytest.approx(mine)
    assert out["compare"]["method"] == "dp" and out["compare"]["status"] == "optimal"
    assert out["compare"]["ratio"] == pytest.approx(mine / out["compare"]["objective"])
    assert out["compare"]["ratio"] > 1 and "mapping" in out["split_of"]
    # without --compare the answer is as before: no comparison, nothing said of the owner
    assert main(["evaluate", str(graph), str(split), "-k", "3", "--json"]) == 0
    assert "compare" not in json.loads(capsys.readouterr().out)


def test_evaluate_compare_with_an_unknown_method_exits_2(tmp_path, capsys):
    g = generate("layered", 6, seed=1)
    graph = tmp_path / "g.json"
    save_graph(g, graph)
    split = tmp_path / "mine.json"
    split.write_text(json.dumps({v.id: "acc0" for v in g.nodes}))
    assert main(["evaluate", str(graph), str(split), "-k", "2", "--compare", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and len(err.strip().splitlines()) == 1


def test_published_workloads_against_the_issue(reference_dir):
    ws = published(reference_dir)
    assert sorted(w.name for w in ws) == sorted(ISSUE_SPEEDUPS)
    for w in ws:
        cmp = compare_expert(w.graph, w.expert, name=w.name, baselines=("pipedream", "kl", "local-search"))
        assert cmp.optimum.status == "optimal" and cmp.expert.feasible and cmp.expert.split == "chain"
        assert round(cmp.speedup, 2) == ISSUE_SPEEDUPS[w.name], w.name
        # the expert's loads, recomputed from the model and the expert file read here
        g, c = cmp.graph, cmp.cluster
        raw = json.loads(w.expert.read_text())
        assert {str(n) for part in raw["fpgas"] for n in part["nodes"]} <= set(cmp.placement)
        assert cmp.placement == load_placement(w.expert, g, c)
        hand = loads_by_hand(g, c, [c.device_index(cmp.placement[v.id]) for v in g.nodes]) \
            if not g.backward.any() else None
        if hand is not None:
            assert max(hand) == pytest.approx(cmp.expert_load, rel=1e-9)
        assert all(load >= cmp.optimum_load * (1 - 1e-9) for load in cmp.baseline_loads().values())
        assert cmp.why().startswith("the expert's bottleneck is stage ")


def test_evaluate_compare_on_an_expert_file(reference_dir, capsys):
    graph = reference_dir / "throughput-inputs/LayerGraphs/bert24_inference.json"
    expert = reference_dir / "human-experts/bert24_inference_expert.json"
    assert main(["evaluate", str(graph), str(expert), "--compare", "dp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "human expert" in out["split_of"] and "bert24_inference_expert.json" in out["split_of"]
    assert out["objective"] == pytest.approx(20.083953125) and out["compare"]["objective"] == pytest.approx(17.78990625)
    assert round(out["compare"]["ratio"], 2) == 1.13
