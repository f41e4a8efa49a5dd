"""`devplace plan --schedule S` for every torch schedule: the plan's split is the least
replayed step among all splits (an exhaustive replay here), its stages sit on ranks as torch's
class puts them, the script runs that class, and bad input to the new options is one line.
Real torchrun runs of the multi-stage schedules equal the unsplit model (slow)."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.pipeline.costs import segment_costs  # noqa: E402
from devplace_lite.pipeline.planner import plan, plan_graph  # noqa: E402
from devplace_lite.pipeline.torchrun import launch  # noqa: E402
from devplace_lite.schedules.search import evaluate  # noqa: E402
from devplace_lite.schedules.simulate import SCHEDULES  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import plan_models  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return plan_models.unequal_profile()


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_plan_is_the_least_replayed_step_of_every_split(graph, schedule):
    p = plan_graph(graph, k=2, microbatches=4, schedule=schedule)
    costs = segment_costs(graph, microbatches=4)
    n, v = len(p.names), SCHEDULES[schedule].per_rank
    counts = [1, 2] if v == 1 else [2 * v]
    every = [evaluate(costs, list(cuts), schedule, s // v, 4, v).step_ms
             for s in counts for cuts in itertools.combinations(range(1, n), s - 1)]
    assert p.search.status == "optimal" and p.step_ms() == pytest.approx(min(every), rel=1e-12)
    assert p.num_stages in counts and p.ranks * p.per_rank == p.num_stages
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    want = generate_stage_to_rank_mapping(p.ranks, p.num_stages, style=SCHEDULES[schedule].style)
    assert p.stage_ranks == [want[s] for s in range(p.num_stages)]
    fc = p.to_json()["forecast"]
    assert len(fc["rank_peak_bytes"]) == len(fc["rank_idle_ms"]) == p.ranks
    # torch's passes, measured: I + W need not be B; its first stage runs no I, its W is the whole backward
    assert all(i >= 0 and w >= 0 for i, w in zip(fc["input_ms"], fc["weight_ms"]))
    assert fc["input_ms"][0] == 0 and fc["weight_ms"][0] == fc["backward_ms"][0]
    # the stage memory table and the rank peaks come from the same replay
    per_rank = [sum(m["parameters"] for s, m in enumerate(p.stage_memory()) if p.stage_ranks[s] == r)
                for r in range(p.ranks)]
    assert all(peak >= prm for peak, prm in zip(fc["rank_peak_bytes"], per_rank))


def test_the_script_runs_the_schedules_class(graph, tmp_path):
    p = plan_graph(graph, k=2, microbatches=4, schedule="zbv")
    p.model_spec = "plan_models:unequal"
    text = p.write(tmp_path)["script"].read_text()
    assert "SCHEDULE = 'ScheduleZBVZeroBubble'" in text and "STAGE_TO_RANK = {0: 0, 1: 1, 2: 1, 3: 0}" in text
    plan_json = json.loads((tmp_path / "plan.json").read_text())
    assert plan_json["ranks"] == 2 and plan_json["stages"] == 4 and plan_json["stage_to_rank"] == [0, 1, 1, 0]


def test_memory_cap_picks_the_least_step_that_fits(graph):
    costs = segment_costs(graph, microbatches=4)
    n = len(graph.meta["segments"]["names"])
    every = [evaluate(costs, list(cuts), "gpipe", s, 4) for s in (1, 2) for cuts in itertools.combinations(range(1, n), s - 1)]
    peaks = sorted({max(e.rank_peak_bytes) for e in every})
    cap = peaks[len(peaks) // 2]
    capped = plan_graph(graph, k=2, microbatches=4, schedule="gpipe", memory=cap, recompute="never")
    assert max(capped.simulation().rank_peak_bytes) <= cap
    assert capped.step_ms() == pytest.approx(min(e.step_ms for e in every if max(e.rank_peak_bytes) <= cap))
    from devplace_lite.errors import GraphError

    with pytest.raises(GraphError, match="without activation recomputation .every split replayed"):
        plan_graph(graph, k=2, microbatches=4, schedule="gpipe", memory=peaks[0] - 1, recompute="never")


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, words", [
    (["gpt", "-k", "2", "--schedule", "pipedream"], "invalid choice: 'pipedream'"),
    (["gpt", "-k", "2", "--schedule", "zbv", "--stages-per-rank", "3"], "runs exactly 2 stage(s) per rank"),
    (["gpt", "-k", "2", "--stages-per-rank", "0"], "--stages-per-rank: expected an integer in [1, 8]"),
    (["gpt", "-k", "2", "--microbatches", "auto"], "--microbatches auto needs --schedule auto"),
    (["gpt", "-k", "2", "--schedule", "auto", "--stages-per-rank", "2"], "with --schedule auto leave it out"),
    (["gpt", "-k", "2", "--schedule", "interleaved-1f1b", "--microbatches", "5"], "multiple of the number of rounds"),
    (["gpt", "-k", "4", "--schedule", "dualpipev", "--microbatches", "4"], "at least as many microbatches"),
])
def test_bad_schedule_options_are_one_line_and_status_2(capsys, tmp_path, argv, words):
    code, out, err = _cli(capsys, "plan", *argv, "--out", tmp_path / "p")
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "p").exists()


def test_cli_schedule_auto_keeps_the_least_forecast(capsys, tmp_path):
    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--repeats", 1, "--schedule", "auto", "--microbatches", 4,
                          "--out", tmp_path, "--json")
    assert code == 0, err
    ans = json.loads(out)
    ok = [t for t in ans["schedule_auto"] if "step_ms" in t]
    assert {t["schedule"] for t in ok} >= {"gpipe", "1f1b"}
    assert ans["forecast"]["step_ms"] == pytest.approx(min(t["step_ms"] for t in ok))
    assert ans["schedule"] == min(ok, key=lambda t: t["step_ms"])["schedule"]


@pytest.fixture
def on_path(monkeypatch):
    root = HERE.parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), str(HERE), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zbv", "dualpipev"])
def test_multi_stage_schedules_run_and_equal_the_unsplit_model(tmp_path, on_path, schedule):
    """Two ranks of two stages each, a weight tied between the first and last stage (on one
    rank under the V schedules): outputs and gradients equal the unsplit model's, and the
    measured peak memory per rank is the forecast's within 25 %."""
    model, x = plan_models.unequal(batch=8)
    p = plan(model, x, k=2, microbatches=4, schedule=schedule, model_spec="plan_models:unequal", repeats=2)
    run = launch(p.write(tmp_path)["plan"], steps=1, warmup=0, check=True, timeout=400)
    assert run["ranks"] == 2 and run["stages"] == 4
    assert run["check"]["outputs_allclose"] and run["check"]["grads_allclose"], run["check"]
    fc = p.simulation().rank_peak_bytes
    assert all(abs(m - f) <= 0.25 * m for m, f in zip(run["peak_memory"], fc)), (run["peak_memory"], fc)
    kinds = {e[0] for ev in run["events"] for e in ev}
    assert kinds == ({"F", "I", "W"} | ({"B"} if schedule == "dualpipev" else set()) if SCHEDULES[schedule].split_backward
                     else {"F", "B"})


def _fake_run(p, scale_stage0=1.0):
    f = [x * (scale_stage0 if s == 0 else 1.0) for s, x in enumerate(p.forward_ms)]
    b = [x * (scale_stage0 if s == 0 else 1.0) for s, x in enumerate(p.backward_ms)]
    i = [x * (scale_stage0 if s == 0 else 1.0) for s, x in enumerate(p.input_ms)]
    return {"stage_forward_cpu_ms": f, "stage_backward_cpu_ms": b, "stage_input_cpu_ms": i,
            "stage_cpu_ms": [x + y for x, y in zip(f, b)], "step_cpu_replay_ms": p.step_ms(), "step_ms": p.step_ms()}


@pytest.mark.parametrize("second_scale, kept", [(1.0, "calibrated"), (5.0, "uncalibrated")])
def test_calibration_scales_each_stage_and_keeps_the_better(graph, tmp_path, monkeypatch, second_scale, kept):
    """Stage 0 runs 3x its forecast: its factors are 3, the others 1; the calibrated plan is
    kept when its own run matches it, the first plan when the second run is further off."""
    import devplace_lite.pipeline.torchrun as tr
    from devplace_lite.pipeline.calibration import calibrate

    p = plan_graph(graph, k=2, microbatches=4, schedule="1f1b")
    p.model_spec = "plan_models:unequal"
    calls = []

    def fake_launch(plan_path, **kw):
        q = json.loads(Path(plan_path).read_text())
        calls.append(q)
        fc = q["forecast"]
        scale = second_scale  # the only run launched: the first is given
        return {"stage_forward_cpu_ms": [x * scale for x in fc["forward_ms"]],
                "stage_backward_cpu_ms": [x * scale for x in fc["backward_ms"]],
                "stage_input_cpu_ms": [x * scale for x in fc["input_ms"]],
                "stage_cpu_ms": [x * scale for x in fc["compute_ms"]], "step_cpu_replay_ms": fc["step_ms"] * scale,
                "step_ms": fc["step_ms"] * scale}

    monkeypatch.setattr(tr, "launch", fake_launch)
    first = {**_fake_run(p, 3.0), "action_overhead_ms": 0.1, "action_wall_ms": 0.25}
    cal = calibrate(p, tmp_path, first=first)
    assert cal["stage_scales"]["F"][0] == pytest.approx(3.0) and cal["stage_scales"]["F"][1:] == pytest.approx([1.0])
    assert calls[-1]["forecast"]["action_ms"] == 0.25  # the re-plan prices a pass's wall cost as the run measured it
    assert cal["kept"] == kept and cal["max_error_kept"] == min(cal["max_error_before"], cal["max_error_after"])
    written = json.loads((tmp_path / "plan.json").read_text())
    want = calls[-1] if kept == "calibrated" else json.loads((tmp_path / "uncalibrated" / "plan.json").read_text())
    assert written["forecast"]["step_ms"] == pytest.approx(want["forecast"]["step_ms"])


def test_calibration_scales_the_weight_pass_apart_where_the_run_split_the_backward(graph):
    """Under a zero-bubble schedule the run measures W per stage: its factor is its own, and the
    scaled profile forecasts that stage's W accordingly; a run with no split backward scales W
    as B."""
    from devplace_lite.pipeline.calibration import _stage_scales, scaled_graph
    from devplace_lite.pipeline.baseline_splits import with_stages

    p = plan_graph(graph, k=2, microbatches=4, schedule="zbv")
    run = _fake_run(p)
    run["stage_weight_cpu_ms"] = [w * (2.0 if s == 1 else 1.0) for s, w in enumerate(p.weight_ms)]
    scales = _stage_scales(p, run)
    assert scales["W"] == pytest.approx([1.0, 2.0, 1.0, 1.0]) and scales["B"] == pytest.approx([1.0] * 4)
    q = plan_graph(scaled_graph(p.graph, *([scales[k][s] for s in p.stage_of] for k in "FBIW")), k=2,
                   microbatches=4, schedule="zbv")
    assert with_stages(q, p.stage_of, "p's split").weight_ms == pytest.approx([w * (2.0 if s == 1 else 1.0) for s, w in enumerate(p.weight_ms)])
    assert _stage_scales(p, _fake_run(p))["W"] == scales["B"]  # no W measured: as the backward
