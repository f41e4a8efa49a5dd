"""The latency integer program and the greedy, against the exhaustive latency search."""

from __future__ import annotations

import json

import numpy as np
import pytest

from devplace_lite.cli import main
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import GraphError, Node
from devplace_lite.io import save_graph
from devplace_lite.single_sample.model import evaluate_latency, exhaustive_latency, latency_of, reentry_pieces
from devplace_lite.single_sample.search import greedy_latency, unit_blocks
from devplace_lite.single_sample.ip import _LatencyModel, latency_ip
from devplace_lite.units import unit_graph

FAMILIES = ["layered", "series_parallel", "skip_chain", "cells", "random"]


def small(seed: int, n: int):
    g = generate(FAMILIES[seed % 5], n, seed=seed)
    clusters = [Cluster(2, 1), Cluster(2, 0), Cluster(2, 1, memory=float(np.sort(g.memory)[-3:].sum()))]
    return g, clusters[seed % 3]


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


@pytest.mark.parametrize("seed,q", [(s, 1) for s in range(8)] + [(s, 2) for s in (0, 4, 5)])
def test_ip_equals_exhaustive_and_beats_greedy(seed, q):
    g, c = small(seed, 6 if q == 1 else 5)
    truth = exhaustive_latency(g, c, q=q)
    r = latency_ip(g, c, q)
    assert r.status == "optimal" and close(r.objective, truth.objective)
    assert r.objective == pytest.approx(latency_of(r), abs=1e-12)
    assert r.bound == r.objective
    assert r.check().feasible
    gr = greedy_latency(g, c)
    if gr.status == "feasible":
        assert r.objective <= gr.objective + 1e-9
    counts = np.bincount([c_.device for c_ in evaluate_latency(g, c, r.assignment, r.extra["pieces"]).calls],
                         minlength=c.k)
    assert counts.max() <= q


@pytest.mark.parametrize("seed", [1, 3])
def test_highs_and_cold_start_agree(seed):
    g, c = small(seed, 6)
    truth = exhaustive_latency(g, c).objective
    for kw in ({"solver": "highs"}, {"warm_start": None}, {"symmetry": True}):
        r = latency_ip(g, c, 1, **kw)
        assert r.status == "optimal" and close(r.objective, truth), kw


def test_ip_strictly_beats_greedy_somewhere():
    """The greedy fills one accelerator while memory lasts; the IP uses CPU parallelism and
    more accelerators, so on some graphs it is strictly better."""
    wins = 0
    for seed in range(6):
        g, c = generate("layered", 9, seed=seed), Cluster(3, 1)
        r, gr = latency_ip(g, c, 1, time_limit=20), greedy_latency(g, c)
        assert r.objective <= gr.objective + 1e-9
        wins += r.objective < gr.objective - 1e-9
        if wins:
            break
    assert wins >= 1


def test_greedy_packs_consecutive_blocks_by_memory():
    g = generate("skip_chain", 12, seed=4)
    mem = float(np.sort(g.memory)[-4:].sum())
    c = Cluster(3, 1, memory=mem)
    r = greedy_latency(g, c)
    a = r.assignment
    ev = evaluate_latency(g, c, a, r.extra["pieces"])
    assert ev.feasible and r.objective == pytest.approx(ev.latency)
    order = np.concatenate(unit_blocks(g))
    seq = a[order]
    acc_runs = [d for i, d in enumerate(seq) if d < c.k and (i == 0 or seq[i - 1] != d)]
    assert acc_runs == sorted(set(acc_runs))  # each accelerator: one run of consecutive blocks, in order
    assert len(ev.calls) == len(acc_runs)
    nodes = [Node(**{**v.__dict__, "supported": i != 3}) for i, v in enumerate(g.nodes)]
    r2 = greedy_latency(g.with_nodes(nodes), c)
    assert r2.assignment[3] >= c.k and r2.status == "feasible"


def test_every_convex_split_is_a_model_point_with_its_latency():
    g, c = small(0, 8)
    c = Cluster(2, 1)
    rng = np.random.default_rng(0)
    for q in (1, 2):
        form = _LatencyModel(unit_graph(g, chain=False).on(c), q, big_m=1e4, symmetry=False)
        tried = 0
        for _ in range(200):
            a = rng.integers(0, c.size, g.n)
            p = reentry_pieces(g, c, a)
            ev = evaluate_latency(g, c, a, p)
            if ev.deadlock or not ev.feasible or np.bincount([x.device for x in ev.calls], minlength=c.k).max() > q:
                continue
            v = form.encode(a, p)
            assert form.model.violation(v) <= 1e-9
            assert v[form.T] == pytest.approx(ev.latency)
            tried += 1
        assert tried >= 5


def test_time_limit_returns_incumbent_and_bound():
    g, c = generate("layered", 120, seed=1), Cluster(4, 1)
    r = latency_ip(g, c, 1, time_limit=1.0)
    assert r.status == "time_limit"
    assert r.objective == pytest.approx(latency_of(r), abs=1e-12)
    assert r.bound < r.objective
    assert r.objective <= greedy_latency(g, c).objective + 1e-9


def test_bad_input():
    g = generate("layered", 5, seed=0)
    with pytest.raises(GraphError):
        latency_ip(g, Cluster(2, 1), q=0)
    with pytest.raises(GraphError):
        exhaustive_latency(generate("layered", 30, seed=0), Cluster(4, 1))
    r = latency_ip(g, Cluster(1, 0, memory=float(g.memory.max()) / 2))
    assert r.status == "infeasible"


@pytest.mark.parametrize("method", ["ip", "greedy"])
def test_cli_latency_json(tmp_path, capsys, method):
    g = generate("cells", 11, seed=2)
    path = tmp_path / "g.json"
    save_graph(g, path)
    assert main(["latency", str(path), "--method", method, "-k", "2", "--cpus", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective_kind"] == "latency" and set(out["placement"]) == set(g.ids)
    assert out["status"] == ("optimal" if method == "ip" else "feasible")
    from devplace_lite.cost import as_assignment

    a = as_assignment(g, Cluster(2, 1), out["placement"])
    assert evaluate_latency(g, Cluster(2, 1), a, out["pieces"]).latency == pytest.approx(out["objective"])
