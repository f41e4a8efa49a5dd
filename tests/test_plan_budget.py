"""`devplace plan --time-limit S`: one deadline for the whole command. The measurement's repeats,
the split, the schedule search, the bound and the ``--schedule auto`` choices all share it; a
step it cuts short keeps its incumbent, and the answer says status ``time_limit``, what was cut
and which choices were not tried. No assertion reads a wall clock: what the deadline did is
read off the answer (a capture takes far longer than 0.01 s, so a limit of 0.01 s has run out
once the model is captured, whatever the load)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.errors import UsageError  # noqa: E402
from devplace_lite.io import load_graph  # noqa: E402
from devplace_lite.pipeline.capture import capture  # noqa: E402
from devplace_lite.pipeline.costs import segment_costs  # noqa: E402
from devplace_lite.pipeline.measure import measure_segments  # noqa: E402
from devplace_lite.pipeline.planner import SCHEDULES, plan, plan_auto, plan_graph  # noqa: E402
from devplace_lite.schedules.search import evaluate  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import plan_models  # noqa: E402


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _replayed_step(answer: dict, graph) -> float:
    """The forecast step of the answer's own split, replayed from the segments' graph it wrote."""
    cuts = [segs[0] for segs in answer["stage_segments"][1:]]
    return evaluate(segment_costs(graph, answer["optimizer"], answer["microbatches"]), cuts, answer["schedule"],
                    answer["ranks"], answer["microbatches"], answer["stages_per_rank"], answer["training"],
                    recompute=answer["recompute"]).step_ms


def test_a_tiny_limit_on_schedule_auto_plans_the_first_choice_and_lists_the_rest(capsys, tmp_path, monkeypatch):
    """28 choices (7 schedules x 4 micro-batch counts of a batch of 8); 0.01 s has run out once
    the model is captured: the plain command's choice (1F1B, 4 micro-batches) is planned, as the
    incumbent, and the 27 others are listed as not tried; the choice is not proven."""
    monkeypatch.chdir(HERE)
    code, out, err = _cli(capsys, "plan", "plan_models:unequal", "-k", 2, "--batch", 8, "--repeats", 3,
                          "--schedule", "auto", "--microbatches", "auto", "--time-limit", 0.01,
                          "--out", tmp_path / "p", "--json")
    assert code == 0, err
    a = json.loads(out)
    assert a["status"] == "time_limit" and "schedule auto" in a["stopped"] and a["time_limit"] == 0.01
    every = {(name, m) for name in SCHEDULES for m in (1, 2, 4, 8)}
    assert {(t["schedule"], t["microbatches"]) for t in a["schedule_auto"]} == every
    ran = [t for t in a["schedule_auto"] if "not_tried" not in t]
    assert [(t["schedule"], t["microbatches"]) for t in ran] == [("1f1b", 4)]
    assert all(t["not_tried"] == "the time limit ran out first" for t in a["schedule_auto"] if t not in ran)
    choice = a["auto_choice"]
    assert choice["status"] == "time_limit" and choice["tried"] == 1 and choice["choices"] == 28
    assert {(t["schedule"], t["microbatches"]) for t in choice["not_tried"]} == every - {("1f1b", 4)}
    assert choice["bound_ms"] is None and choice["bound_tried_ms"] <= choice["step_ms"] * (1 + 1e-12)
    assert any("not proven the best of all" in n for n in a["notes"])
    # the limit had run out before the measurement: one timed run per segment, said in the notes
    assert any(f"{a['segments']} of {a['segments']} segment(s) timed fewer than 3 times" in n for n in a["notes"])
    # the incumbent is a whole plan: its files, its forecast the replay of its split, a true bound
    assert (a["schedule"], a["microbatches"]) == ("1f1b", 4)
    assert a["forecast"]["step_ms"] == pytest.approx(ran[0]["step_ms"], rel=1e-12)
    assert _replayed_step(a, load_graph(a["files"]["graph"])) == pytest.approx(a["forecast"]["step_ms"], rel=1e-12)
    assert 0 < a["bound_ms"] <= a["objective_ms"] * (1 + 1e-9)
    written = json.loads(Path(a["files"]["plan"]).read_text())
    assert written["status"] == "time_limit" and written["split_points"] == a["split_points"]
    assert Path(a["files"]["script"]).is_file()


def test_without_a_limit_schedule_auto_tries_every_choice_and_proves_it(tmp_path):
    """No limit: every schedule is planned (or refused by torch's class, a proof it does not
    apply), every search is exhaustive, and the least of their bounds meets the kept step."""
    model, x = plan_models.unequal(batch=8)
    p, tried = plan_auto(model, x, k=2, microbatches=4, repeats=1, warmup=0)
    assert [t["schedule"] for t in tried] == list(SCHEDULES) and not any("not_tried" in t for t in tried)
    assert p.auto["status"] == "optimal" and p.auto["tried"] == len(SCHEDULES) and p.auto["not_tried"] == []
    assert p.auto["bound_ms"] == pytest.approx(p.step_ms(), rel=1e-12) == min(t["step_ms"] for t in tried
                                                                            if "step_ms" in t)
    assert p.stopped == [] and p.status == p.result.status and p.time_limit is None


def test_measurement_repeats_stop_at_the_deadline_one_timed_run_per_segment_at_least():
    model, x = plan_models.unequal(batch=4)
    cap = capture(model, x)
    full = measure_segments(cap, training=True, repeats=3, warmup=1)
    late = measure_segments(cap, training=True, repeats=3, warmup=1, deadline=time.monotonic() - 1.0)
    assert full.cut_short == 0 and late.cut_short == cap.num_segments
    assert all(t > 0 for t in late.forward_ms + late.backward_ms)
    assert late.activation_bytes == full.activation_bytes and late.param_bytes == full.param_bytes


def test_the_library_plan_counts_from_its_start(tmp_path):
    """``started`` ten seconds ago with a limit of one second: the measurement gets one timed run
    per segment, the steps after it their least slices, and the plan is whole."""
    model, x = plan_models.unequal(batch=8)
    p = plan(model, x, k=2, microbatches=4, repeats=3, time_limit=1.0, started=time.monotonic() - 10.0)
    n = len(p.names)
    assert any(f"{n} of {n} segment(s) timed fewer than 3 times" in note for note in p.notes)
    assert p.time_limit == 1.0 and set(p.stopped) <= {"partition", "schedule search"}
    assert p.status == ("time_limit" if p.stopped else p.result.status)
    a = p.to_json()
    assert _replayed_step(a, p.graph) == pytest.approx(p.step_ms(), rel=1e-12)
    assert p.search.bound_ms <= p.step_ms() * (1 + 1e-12) and p.bound <= p.result.objective * (1 + 1e-9)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e10", "soon", ""])
def test_bad_time_limits_are_one_line_and_status_2(capsys, tmp_path, value):
    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--schedule", "auto", "--time-limit", value,
                          "--out", tmp_path / "p")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--time-limit" in err, err
    assert not (tmp_path / "p").exists()


def test_bad_time_limits_in_the_library_are_usage_errors():
    model, x = plan_models.unequal(batch=4)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="time limit"):
            plan_auto(model, x, k=2, microbatches=2, time_limit=bad)
        with pytest.raises(UsageError, match="time limit"):
            plan(model, x, k=2, microbatches=2, time_limit=bad)


def test_the_help_says_the_limit_is_the_whole_commands(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "wall seconds for the whole command" in " ".join(capsys.readouterr().out.split())
