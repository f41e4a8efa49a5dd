"""The reproduction appendix's claims table (`benchmarks/reproduction/claims.json`): every row
rests on a recorded result that still supports its verdict, and the checks catch a result that
stops doing so."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ lives in the checkout, not the package
from benchmarks.reproduction.claims import CHECKS, ROOT, VERDICTS, assess, claims  # noqa: E402

FIELDS = ("id", "paper", "claim", "paper_figure", "ours", "verdict", "why", "source", "command", "chapter")


def test_every_claim_has_a_check_and_the_fields_the_appendix_prints():
    rows = claims()
    assert [c["id"] for c in rows] == list(CHECKS) and len({c["id"] for c in rows}) == len(rows)
    for c in rows:
        assert all(isinstance(c[f], str) and c[f].strip() for f in FIELDS), c["id"]
        assert c["verdict"] in VERDICTS, c["id"]
        assert any(p.name.startswith(c["chapter"] + "_") for p in (ROOT / "chapters").glob("*.md")), c["id"]
    papers = {c["paper"] for c in rows}
    assert papers == {"tarnawski2020", "addanki2019", "archer2024", "tavarageri2019"}
    bib = (ROOT / "chapters/references.bib").read_text()
    assert all(f"{{{p}," in bib for p in papers)


def test_every_claim_rests_on_a_recorded_result_with_its_command():
    for c in claims():
        for src in c["source"].split(", "):
            folder = ROOT / src
            assert (folder / "results.json").is_file() and (folder / "README.md").is_file(), (c["id"], src)
            readme = (folder / "README.md").read_text()
            run = src.replace("/", ".") + ".run"
            assert run in c["command"] or f"{src}/run.py" in c["command"], (c["id"], c["command"])
            assert run in readme or f"{src}/run.py" in readme, (c["id"], "README does not give the command")


@pytest.mark.parametrize("cid", list(CHECKS))
def test_the_recorded_results_support_the_verdict(cid):
    found = {c["id"]: (c, o, ours) for c, o, ours in assess()}
    c, outcome, ours = found[cid]
    assert outcome.problems == [], f"{cid} ({c['verdict']}): " + "; ".join(outcome.problems)
    assert "{" not in ours and ours.strip()


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for src in {s for c in claims() for s in c["source"].split(", ")} | {"benchmarks/reproduction"}:
        (root / src).mkdir(parents=True)
        for f in ("results.json", "claims.json"):
            if (ROOT / src / f).is_file():
                shutil.copy(ROOT / src / f, root / src / f)
    return root


def _edit(root: Path, source: str, change) -> None:
    path = root / source / "results.json"
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


@pytest.mark.parametrize("cid, source, change", [
    ("T20-dp-optimal", "benchmarks/dp", lambda o: o["rows"][0].update(status="time_limit")),
    ("T20-experts", "benchmarks/experts", lambda o: [r.update(speedup=1.05) for r in o["rows"][:2]]),
    ("T20-baselines", "benchmarks/experts", lambda o: o["rows"][0]["baselines"].update(kl=1.0)),
    ("T20-noncontiguous", "benchmarks/experts", lambda o: [r["noncontiguous"].update(better=False) for r in o["rows"]]),
    ("T20-latency", "benchmarks/latency", lambda o: o["records"][1]["ip@60"].update(objective=1e9)),
    ("P19-steps", "benchmarks/rl", lambda o: o["held_out"]["summary"].update(rnn={"ratio": 1.0})),
    ("P19-transfer", "benchmarks/rl", lambda o: o["held_out"]["summary"]["placeto-best-of-9"].update(ratio=1.2)),
    ("A24-geomean", "benchmarks/bounds", lambda o: o["summary"]["table"]["best-nodp"]["16"].update(geomean=0.9)),
    ("S19-quality", "benchmarks/heuristics", lambda o: o["summary"].update(within_10pct=40)),
    ("S19-speed", "benchmarks/heuristics", lambda o: [r.update(all_under_1s=False) for r in o["rows"] if r["nodes"] >= 1000]),
])
def test_a_result_that_stops_supporting_its_verdict_is_caught(tmp_path, cid, source, change):
    root = _copy(tmp_path)
    assert CHECKS[cid](root).problems == []          # the copy holds, as the originals do
    _edit(root, source, change)
    assert CHECKS[cid](root).problems != []
