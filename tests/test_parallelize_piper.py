"""The exact planner against Piper's own program, on Piper's published inputs.

Piper's time per sample for each instance was recorded by ``benchmarks/parallelize/run.py``
(Piper built from its public repository at `PIPER_COMMIT`; machine and command in that
results.json's ``meta``). Here our planner solves the same instances again, read from the
published files (``DEVPLACE_PIPER`` or ``../shared/reference/msr-piper``; never copied into
the project), and must give Piper's figure: the same time per sample within 1e-6 relative,
and no plan exactly where Piper finds none. Instances that take our planner more than a few
CPU seconds, and the BERT-64/96 models that the benchmark grows through Piper's own binary,
stay in the benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devplace_course.reference import PIPER_COMMIT, piper_dir
from devplace_lite.solve import parallelize
from devplace_lite.multidim.model import read_model

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "parallelize" / "results.json"
FILES = {"bert32": "bert32a100.json", "gnmt": "gnmt.json", "resnet": "resnet.json"}
GIB = float(1 << 30)
BANDWIDTH = 25.0 * GIB  # the benchmark's (and Piper's experiments') bandwidth


def _recorded() -> list[dict]:
    data = json.loads(RESULTS.read_text())
    assert data["meta"]["piper_commit"] == PIPER_COMMIT
    return [r for r in data["rows"] if r["section"] == "compare" and r["model"] in FILES
            and r.get("piper_status", "ok") == "ok" and r["exact_cpu"] < 4.0]


ROWS = _recorded()


def test_the_recorded_run_covers_every_published_input_and_both_answers():
    assert {r["model"] for r in ROWS} == set(FILES)
    assert any(r["piper_tps"] is None for r in ROWS) and any(r["piper_tps"] is not None for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-k{r['devices']}-N{r['microbatches']}-{r['gib']}GiB")
def test_the_exact_planner_gives_pipers_time_per_sample(row):
    folder = piper_dir()
    if folder is None:
        pytest.skip("Piper's published inputs are not on this machine: run `make reference` and set DEVPLACE_PIPER")
    model = read_model(folder / "inputs" / FILES[row["model"]])
    r = parallelize(model, devices=row["devices"], microbatches=row["microbatches"], memory=row["gib"] * GIB,
                    bandwidth=BANDWIDTH)
    if row["piper_tps"] is None:
        assert r.objective is None and r.status == "infeasible", (r.status, r.objective)
    else:
        assert r.status == "optimal"
        assert abs(r.objective - row["piper_tps"]) <= 1e-6 * row["piper_tps"], (r.objective, row["piper_tps"])
