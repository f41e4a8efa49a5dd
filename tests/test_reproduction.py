"""The reproduction appendix's claims table (`benchmarks/reproduction/claims.json`): every row
quotes its seed, rests on a recorded result, carries the verdict that result supports (derived
again here from the raw figures, never read from a stored verdict or ratio), and the checks
catch a label, a stored figure or a result changed by hand."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ lives in the checkout, not the package
from benchmarks.reproduction.claims import CHECKS, ROOT, SEEDS, VERDICTS, assess, claims, quoted  # noqa: E402

FIELDS = ("id", "paper", "claim", "quote", "quoted_from", "ours", "verdict", "why", "source", "command", "chapter")
PAPERS = {"tarnawski2020", "addanki2019", "archer2024", "tavarageri2019", "tarnawski2021"}


def test_every_claim_has_a_check_and_the_fields_the_appendix_prints():
    rows = claims()
    assert [c["id"] for c in rows] == list(CHECKS) and len({c["id"] for c in rows}) == len(rows)
    for c in rows:
        assert all(isinstance(c[f], str) and c[f].strip() for f in FIELDS), c["id"]
        assert c["verdict"] in VERDICTS, c["id"]
        assert any(p.name.startswith(c["chapter"] + "_") for p in (ROOT / "chapters").glob("*.md")), c["id"]
        assert "REFERENCES.md" in c["quoted_from"], c["id"]
    assert {c["paper"] for c in rows} == PAPERS
    bib = (ROOT / "chapters/references.bib").read_text()
    assert all(f"{{{p}," in bib for p in PAPERS)


def test_every_quote_is_in_the_seeds_text():
    """A claim's source text is the seed's own words: found there verbatim (white space aside)."""
    if not SEEDS.is_file():
        pytest.skip(f"the seeds' texts are not on this machine ({SEEDS})")
    seeds = SEEDS.read_text()
    missing = [c["id"] for c in claims() if not quoted(c, seeds)]
    assert not missing, f"quotes not found in {SEEDS}: {missing}"


def test_a_figure_of_ours_is_never_quoted_as_the_seeds():
    """Our own measurements (of the authors' programs too) appear only in 'ours'."""
    for c in claims():
        assert c["verdict"] != "exceeded" or c["id"] == "A24-geomean", c["id"]  # the one figure a seed states
    ours_on_theirs = [c for c in claims() if "their program" in c["ours"]]
    assert ours_on_theirs and all("ours on their program" in c["ours"] for c in ours_on_theirs)


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
    assert outcome.verdict == c["verdict"], f"{cid}: the recorded results support {outcome.verdict!r}, not {c['verdict']!r}"
    assert outcome.problems == [], f"{cid}: " + "; ".join(outcome.problems)
    assert "{" not in ours and ours.strip()


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for src in {s for c in claims() for s in c["source"].split(", ")} | {"benchmarks/reproduction"}:
        (root / src).mkdir(parents=True)
        for f in ("results.json", "claims.json", "sweep.json"):
            if (ROOT / src / f).is_file():
                shutil.copy(ROOT / src / f, root / src / f)
    return root


def _edit(root: Path, source: str, change, name: str = "results.json") -> None:
    path = root / source / name
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def _holds(root: Path, cid: str) -> bool:
    """What the test above asks of one row, on a copy of the files."""
    label = next(c for c in claims(root) if c["id"] == cid)["verdict"]
    o = CHECKS[cid](root)
    return o.verdict == label and not o.problems


def _halve_loads(rows):
    for r in rows:
        r["expert"] = r["optimum"] * 0.99  # the expert now beats the "optimum": the speed-up is below 1
        r["speedup"] = r["expert"] / r["optimum"]


@pytest.mark.parametrize("cid, source, change", [
    ("T20-dp-optimal", "benchmarks/dp", lambda o: o["rows"][0].update(status="time_limit")),
    ("T20-experts", "benchmarks/experts", lambda o: [r.update(speedup=1.05) for r in o["rows"][:2]]),  # a stored ratio
    ("T20-experts", "benchmarks/experts", lambda o: _halve_loads(o["rows"])),  # the loads, consistently
    ("T20-baselines", "benchmarks/experts", lambda o: o["rows"][0]["baselines"].update(kl=1.0)),
    ("T20-noncontiguous", "benchmarks/experts", lambda o: [r["noncontiguous"].update(better=False) for r in o["rows"]]),
    ("T20-noncontiguous", "benchmarks/experts",
     lambda o: [r["noncontiguous"].update(load=r["optimum"], better=False) for r in o["rows"]]),
    ("T20-latency", "benchmarks/latency", lambda o: o["records"][1]["ip@60"].update(objective=1e9)),
    ("P19-steps", "benchmarks/rl", lambda o: o["held_out"]["summary"].update(rnn={"ratio": 1.0})),
    ("P19-transfer", "benchmarks/rl", lambda o: o["held_out"]["summary"]["placeto-best-of-9"].update(ratio=1.2)),
    ("A24-geomean", "benchmarks/bounds", lambda o: o["summary"]["table"]["best-nodp"]["16"].update(geomean=0.9)),
    ("S19-quality", "benchmarks/heuristics", lambda o: o["summary"].update(within_10pct=40)),
    ("S19-speed", "benchmarks/heuristics",
     lambda o: [m.update(cpu_seconds=2.0) for r in o["rows"] if r["nodes"] >= 1000 for m in r["methods"].values()]),
    ("P21-optimal", "benchmarks/parallelize",
     lambda o: [r.update(exact_tps=r["exact_tps"] * 1.01) for r in o["rows"] if r["exact_tps"]]),
])
def test_a_result_that_stops_supporting_its_verdict_is_caught(tmp_path, cid, source, change):
    root = _copy(tmp_path)
    assert _holds(root, cid)          # the copy holds, as the originals do
    _edit(root, source, change)
    assert not _holds(root, cid)


@pytest.mark.parametrize("cid", list(CHECKS))
def test_a_verdict_label_changed_by_hand_is_caught(tmp_path, cid):
    root = _copy(tmp_path)
    assert _holds(root, cid)

    def relabel(obj):
        row = next(c for c in obj["claims"] if c["id"] == cid)
        row["verdict"] = next(v for v in VERDICTS if v != row["verdict"])

    _edit(root, "benchmarks/reproduction", relabel, "claims.json")
    assert not _holds(root, cid)
