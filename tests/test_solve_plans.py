"""`solve.plan` and `solve.parallelize`: the front door owns every plan's budget and status.

Both doors (the library, `devplace_lite.solve` / ``dl.plan`` / ``dl.parallelize``, and the
command line) answer with a `devplace_lite.result.PlanAnswer`: the same keys, the same plan,
bound and status. A time limit shorter than the search returns the incumbent, a proven bound
(checked against the optimum found without a limit) and status ``time_limit``. No assertion
reads a wall clock: the limits are far below what the searches need in CPU time (measured:
the 18-layer model's exact plan takes 0.6 s of CPU, the limits leave it 0.01 s).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import devplace_lite as dl
from devplace_lite import solve
from devplace_lite.cli import main
from devplace_lite.multidim import evaluate
from devplace_lite.multidim.generate import random_model
from devplace_lite.multidim.model import model_to_dict
from devplace_lite.multidim.plan import work_bound
from devplace_lite.result import PlanAnswer

#: The keys every plan's JSON begins with (`PlanAnswer.answer`).
SHARED = ["method", "status", "objective", "bound", "gap", "unit"]


def _cli(argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _slow_model():
    """Exact planning takes 0.6 s of CPU here (`plan_exact`), sixty times the least slice a
    limit leaves (`solve.MIN_SLICE`)."""
    return random_model(9, layers=18, devices=64, memory=1e10)


# -- Piper's format -----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(60))
def test_the_work_bound_is_below_the_exact_optimum(seed):
    rng = np.random.default_rng(seed)
    m = random_model(seed, layers=int(rng.integers(2, 7)), chain=bool(seed % 2), devices=int(rng.choice([2, 4, 8])),
                     memory=float(rng.choice([1e9, 4e9, 1e10])))
    r = solve.parallelize(m)
    if r.objective is None:
        assert r.status == "infeasible" and r.bound is None
        return
    assert work_bound(m) <= r.objective * (1 + 1e-12)
    assert r.status == "optimal" and r.bound == r.objective and r.gap == 0


def test_a_short_limit_returns_the_incumbent_its_bound_and_time_limit_on_both_doors(tmp_path, capsys):
    m = _slow_model()
    best = solve.parallelize(m).objective  # no limit: the exact optimum
    lib = dl.parallelize(m, time_limit=0.01)
    assert lib.status == "time_limit" and lib.objective is not None
    assert evaluate(m, lib.stages)[0] == pytest.approx(lib.objective, rel=1e-12)  # a valid plan: the incumbent
    assert 0 < lib.bound <= best * (1 + 1e-12) <= lib.objective * (1 + 1e-12)
    assert lib.gap == pytest.approx((lib.objective - lib.bound) / lib.objective)
    f = tmp_path / "slow.json"
    f.write_text(json.dumps(model_to_dict(m)))
    a = _cli(["parallelize", str(f), "--time-limit", "0.01", "--json", "-q"], capsys)
    assert a["status"] == "time_limit" and a["bound"] == pytest.approx(lib.bound, rel=1e-12)
    assert a["objective"] == pytest.approx(lib.objective, rel=1e-12) and a["reason"]


def test_the_whole_call_counts_from_its_start():
    """A limit that ran out before the call (``started`` long ago) still answers: the method gets
    the least slice, and the answer is the incumbent with its bound."""
    r = solve.parallelize(_slow_model(), time_limit=1.0, started=time.monotonic() - 60)
    assert r.status == "time_limit" and r.bound is not None and r.seconds >= 60


@pytest.mark.parametrize("method", ["exact", "piper", "pipeline", "data", "equal"])
def test_library_and_command_line_give_the_same_plan_bound_and_status(method, tmp_path, capsys):
    m = random_model(4, layers=5, devices=8)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(model_to_dict(m)))
    r = dl.parallelize(m, method=method)
    a = _cli(["parallelize", str(f), "--method", method, "--json", "-q"], capsys)
    assert list(a)[:len(SHARED)] == SHARED and a["unit"] == "s per sample"
    for key in ("method", "status"):
        assert a[key] == getattr(r, key)
    for key in ("objective", "bound", "gap"):
        assert a[key] == pytest.approx(getattr(r, key), rel=1e-12)
    assert [s["layers"] for s in a["stages"]] == [list(s.layers) for s in r.stages]


def test_a_baseline_is_certified_by_the_work_bound():
    """A baseline proves nothing itself: its bound is the work bound, and its status says
    ``optimal`` only where that bound meets it."""
    m = random_model(4, layers=5, devices=8)
    r = solve.parallelize(m, method="equal")
    assert isinstance(r, PlanAnswer) and r.bound == pytest.approx(work_bound(m))
    assert r.status == ("optimal" if r.gap <= solve.GAP_TOL else "feasible")


# -- a model ------------------------------------------------------------------------------------
def test_a_model_plan_under_a_short_limit_is_the_incumbent_with_its_bound_on_both_doors(tmp_path, capsys):
    """On a roofline (no timing enters the costs): a limit that runs out in the capture leaves the
    mesh search its first shape only; the others keep their quick bound, so the plan is the
    incumbent with a bound below the optimum found without a limit."""
    from devplace_lite.zoo import load

    spec = "devplace_lite.zoo.external:qwen2"
    model, inputs = load(spec, batch=8, seed=0)
    full = dl.plan(model, inputs, devices=8, spec="H100", model_spec=spec)
    cut = dl.plan(model, inputs, devices=8, spec="H100", model_spec=spec, time_limit=0.01)
    assert isinstance(cut, PlanAnswer) and cut.status == "time_limit" and cut.time_limit == 0.01
    assert any(r["status"] == "not tried" for r in cut.mesh["tried"])
    assert cut.bound <= full.objective * (1 + 1e-9) <= cut.objective * (1 + 1e-9)
    a = _cli(["plan", spec, "--devices", "8", "--spec", "H100", "--batch", "8", "--time-limit", "0.01",
              "--out", str(tmp_path), "--json"], capsys)
    assert a["status"] == "time_limit" and a["bound"] <= full.objective * (1 + 1e-9) <= a["objective"] * (1 + 1e-9)


def test_a_model_plan_answers_the_keys_of_every_plan_alike_on_both_doors(tmp_path, capsys):
    from devplace_lite.zoo import load

    spec = "devplace_lite.zoo.external:qwen2"
    model, inputs = load(spec, batch=8, seed=0)
    p = solve.plan(model, inputs, devices=8, spec="H100", memory=2**30, model_spec=spec)
    a = _cli(["plan", spec, "--devices", "8", "--spec", "H100", "--memory", str(2**30), "--batch", "8",
              "--out", str(tmp_path), "--json"], capsys)
    assert [k for k in a if k in SHARED] == SHARED and a["unit"] == "ms"
    assert (a["status"], a["objective"], a["bound"], a["gap"]) == (p.status, p.objective, p.bound, p.gap)
    assert (a["objective"], a["bound"]) == (p.mesh["step_ms"], p.mesh["bound_ms"])
    assert (a["dp"], a["ranks"], a["tp"], a["split_points"]) == (p.dp, p.ranks, p.tp, p.split_points)


def test_a_bad_time_limit_is_one_usage_error_at_either_door():
    from devplace_lite.errors import UsageError

    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="time limit"):
            solve.parallelize(random_model(1, layers=3), time_limit=bad)
        with pytest.raises(UsageError, match="time limit"):
            solve.plan(None, (), k=2, time_limit=bad)


def test_devplace_parallelize_through_solve_imports_neither_torch_nor_the_model_planner(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "m.json"
    f.write_text(json.dumps(model_to_dict(random_model(4, layers=5, devices=8))))
    code = ("import sys; from devplace_lite.cli import main; "
            f"rc = main(['parallelize', {str(f)!r}, '-q', '--json', '--time-limit', '30']); "
            "print(rc, sorted(m for m in sys.modules if m == 'torch' or m.startswith('devplace_lite.pipeline')), "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stderr.strip().splitlines()[-1] == "0 []", out.stderr
    assert json.loads(out.stdout)["status"] == "optimal"
