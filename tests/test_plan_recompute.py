"""Activation recomputation in `devplace plan`: under ``--memory`` the plan recomputes on the
stages that need it and nowhere else, its step is the least over every split and every
recomputation flag vector that fits (an exhaustive replay here, on a captured model), the
JSON and notes say so, infeasibility is one line that says without and with recomputation, and
a real torchrun run with one stage recomputed (GPipe and 1F1B, two ranks) gives the gradients
of the unsplit model while that rank's saved activations drop."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.errors import GraphError  # noqa: E402
from devplace_lite.pipeline.costs import segment_costs  # noqa: E402
from devplace_lite.pipeline.planner import plan, plan_graph  # noqa: E402
from devplace_lite.pipeline.torchrun import launch  # noqa: E402
from devplace_lite.schedules.search import evaluate, stage_bytes  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import plan_models  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return plan_models.unequal_profile()


def _every(graph, schedule, m=4):
    """(step, rank peak, flags) of every split into 1 or 2 stages and every flag vector."""
    costs = segment_costs(graph, microbatches=m)
    n = len(graph.meta["segments"]["names"])
    out = []
    for s in (1, 2):
        for cuts in itertools.combinations(range(1, n), s - 1):
            for flags in itertools.product([False, True], repeat=s):
                sim = evaluate(costs, list(cuts), schedule, s, m, recompute=list(flags))
                out.append((sim.step_ms, max(sim.rank_peak_bytes), flags))
    return out


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_memory_cap_recomputes_where_needed_and_is_least(graph, schedule):
    every = _every(graph, schedule)
    plain = min(pk for _, pk, fl in every if not any(fl))
    least = min(pk for _, pk, _ in every)
    assert least < plain  # recomputation lets this model fit under less memory
    cap = (least + plain) / 2
    p = plan_graph(graph, k=2, microbatches=4, schedule=schedule, memory=cap)
    assert p.step_ms() == pytest.approx(min(step for step, pk, _ in every if pk <= cap), rel=1e-12)
    assert p.search.status == "optimal" and any(p.recompute) and max(p.simulation().rank_peak_bytes) <= cap
    j = p.to_json()
    assert j["recompute"] == p.recompute and [m["recompute"] for m in j["stage_memory"]] == p.recompute
    assert any("only with activation recomputation" in note for note in j["notes"])
    # the stage table's peak is the replay's on every one-stage rank (the last holds the step's outputs too)
    table = [m["peak"] for m in p.stage_memory()]
    table[-1] += p.costs.step_bytes
    assert table == pytest.approx(j["forecast"]["rank_peak_bytes"])
    # recomputation costs time: without a cap the plan has none and is no slower
    free = plan_graph(graph, k=2, microbatches=4, schedule=schedule)
    assert free.recompute is None and free.step_ms() <= p.step_ms() * (1 + 1e-12)
    with pytest.raises(GraphError, match="without or with activation recomputation .every split replayed"):
        plan_graph(graph, k=2, microbatches=4, schedule=schedule, memory=least - 1)
    with pytest.raises(GraphError, match="without activation recomputation.*--recompute auto"):
        plan_graph(graph, k=2, microbatches=4, schedule=schedule, memory=cap, recompute="never")


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr()


def test_cli_auto_chooses_recomputation_and_refuses_in_one_line(graph, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(HERE)
    every = _every(graph, "1f1b")
    plain = min(pk for _, pk, fl in every if not any(fl))
    least = min(pk for _, pk, _ in every)
    common = ["plan", "plan_models:unequal", "-k", 2, "--microbatches", 4, "--batch", 4, "--repeats", 2]
    code, out = _cli(capsys, *common, "--schedule", "auto", "--memory", int((least + plain) / 2),
                     "--out", tmp_path / "a", "--json")
    assert code == 0, out.err
    j = json.loads(out.out)
    assert max(j["forecast"]["rank_peak_bytes"]) <= (least + plain) / 2
    assert all("recompute" in t for t in j["schedule_auto"] if "refused" not in t)
    assert j["recompute"] == [m["recompute"] for m in j["stage_memory"]]
    assert any("per-stage activation recomputation" in note for note in j["notes"])
    code, out = _cli(capsys, *common, "--memory", 1000, "--out", tmp_path / "b")
    assert code == 2 and out.err.count("\n") == 1 and "without or with activation recomputation" in out.err
    code, out = _cli(capsys, *common, "--recompute", "sometimes", "--out", tmp_path / "c")
    assert code == 2 and "--recompute" in out.err
    assert "--recompute" in _help(capsys)


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    return capsys.readouterr().out


@pytest.fixture
def on_path(monkeypatch):
    root = HERE.parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), str(HERE), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_recomputed_stage_runs_with_the_same_gradients_and_fewer_saved_bytes(tmp_path, on_path, schedule):
    """Two ranks, stage 0 (four segments) recomputed one segment at a time: outputs and
    gradients equal the unsplit model's (as they do without recomputation, with the same loss),
    rank 0's measured saved-activation peak drops to its segments' inputs, rank 1's does not
    change, what one backward holds again is one segment's activations (the forecast's within
    5 %, well under the stage's), and the measured peaks (the recomputed activations of one
    backward counted apart) are the forecast's within 25 %."""
    model, x = plan_models.unequal(batch=8)
    p = plan(model, x, k=2, microbatches=4, schedule=schedule, model_spec="plan_models:unequal", repeats=2)
    assert p.num_stages == 2 and p.recompute is None
    q = dataclasses.replace(p, recompute=[True, False])
    base = launch(p.write(tmp_path / "plain")["plan"], steps=1, warmup=0, check=True, timeout=400)
    rec = launch(q.write(tmp_path / "recompute")["plan"], steps=1, warmup=0, check=True, timeout=400)
    for run in (base, rec):
        assert run["check"]["outputs_allclose"] and run["check"]["grads_allclose"], run["check"]
    assert rec["recompute"] == [0] and base["recompute"] == []
    assert rec["loss"] == pytest.approx(base["loss"], rel=1e-6)
    assert rec["activation_peak_bytes"][0] < base["activation_peak_bytes"][0]
    assert rec["activation_peak_bytes"][1] == base["activation_peak_bytes"][1]
    fp, fq = p.simulation().rank_peak_bytes, q.simulation().rank_peak_bytes
    assert fq[0] < fp[0] and fq[1] == fp[1]
    # the recomputed activations, measured apart, are what one backward holds again
    assert rec["recompute_transient_bytes"][0] > 0 and rec["recompute_transient_bytes"][1] == 0
    held = stage_bytes(q.costs, q.cuts)
    assert len(q.stage_segments[0]) == 4 and rec["activation_peak_bytes"][0] <= \
        q.simulation().stage_in_flight[0] * held["input_bytes"][0]
    assert rec["recompute_transient_bytes"][0] == pytest.approx(held["recompute_bytes"][0], rel=0.05)
    assert held["recompute_bytes"][0] < 0.85 * held["activation_bytes"][0]  # one segment, not the stage
    assert rec["peak_memory"][0] < base["peak_memory"][0]
    for run, fc in ((base, fp), (rec, fq)):
        assert all(abs(m - f) <= 0.25 * m for m, f in zip(run["peak_memory"], fc)), (run["peak_memory"], fc)


def test_calibration_counts_the_recomputed_forward(graph):
    """A recomputing stage's measured backward holds its forward once more: calibration takes it
    out before the ratio, and the forecast's compute and busy time put it in."""
    from devplace_lite.pipeline.calibration import _stage_scales

    p = plan_graph(graph, k=2, microbatches=4, schedule="1f1b")
    q = dataclasses.replace(p, recompute=[True, False])
    run = {"stage_forward_cpu_ms": q.forward_ms, "stage_input_cpu_ms": [None, None],
           "stage_backward_cpu_ms": [b + (f if s == 0 else 0.0) for s, (f, b) in
                                     enumerate(zip(q.forward_ms, q.backward_ms))]}
    scales = _stage_scales(q, run)
    assert scales["F"] == pytest.approx([1.0, 1.0]) and scales["B"] == pytest.approx([1.0, 1.0])
    assert _stage_scales(p, run)["B"][0] > 1.0  # the same run read as a plain stage's: a slower backward
    assert q.compute_ms == pytest.approx([p.compute_ms[0] + p.forward_ms[0], p.compute_ms[1]])
    assert q.simulation().rank_busy_ms == pytest.approx([4 * c for c in q.compute_ms])
