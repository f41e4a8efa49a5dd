"""The grader over a folder of submissions: good, wrong, crashing and hanging ones, notebooks and
folders, through the library, the `devplace grade` command and the pytest plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from devplace_lite.cli import main
from devplace_lite.exercises import exercises
from devplace_lite.exercises.grading import discover, grade_folder, table

CH01 = exercises("01")
GOOD = textwrap.dedent('''
    import math
    from devplace_lite.cost import max_load
    from devplace_lite import schedule

    def my_max_load(graph, cluster, assignment):
        return max_load(graph, cluster, assignment)

    def my_gpipe_step(stage_times, microbatches):
        return sum(stage_times) + (microbatches - 1) * max(stage_times)

    def fewest_microbatches(stages, target):
        return max(1, math.ceil((stages - 1) * (1 - target) / target))

    print("top-level output is harmless")
''')
WRONG = textwrap.dedent('''
    def my_max_load(graph, cluster, assignment):
        return float(graph.p_acc.sum())

    def my_gpipe_step(stage_times, microbatches):
        return (microbatches + len(stage_times) - 1) * max(stage_times)
    # fewest_microbatches is missing
''')
CRASH = textwrap.dedent('''
    import os
    from devplace_lite.cost import max_load

    def my_max_load(graph, cluster, assignment):
        os._exit(7)              # takes the whole process down

    def my_gpipe_step(stage_times, microbatches):
        return sum(stage_times) + (microbatches - 1) * max(stage_times)

    def fewest_microbatches(stages, target):
        raise NotImplementedError
''')
HANG = textwrap.dedent('''
    import time

    def my_max_load(graph, cluster, assignment):
        while True:              # an endless loop
            pass

    def my_gpipe_step(stage_times, microbatches):
        try:
            time.sleep(10**6)
        except Exception:        # swallowing errors must not defeat the time limit
            return 0.0

    def fewest_microbatches(stages, target):
        m = 1
        while (stages - 1) / (m + stages - 1) > target:
            m += 1
        return m

    time.sleep(10**6)            # and a top-level hang after the definitions
''')


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("submissions")
    (d / "good.py").write_text(GOOD)
    (d / "wrong.py").write_text(WRONG)
    (d / "crash.py").write_text(CRASH)
    (d / "hang.py").write_text(HANG)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%matplotlib inline\nimport math"),
                nbformat.v4.new_code_cell("1 / 0   # a chapter computation: skipped by the grader"),
                nbformat.v4.new_code_cell("def fewest_microbatches(stages, target):\n"
                                          "    return max(1, math.ceil((stages - 1) * (1 - target) / target))\n"
                                          "check('01.4', fewest_microbatches)"),
                nbformat.v4.new_markdown_cell("def my_max_load(): not code")]
    nbformat.write(nb, d / "nb.ipynb")
    (d / "md.md").write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                             "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
                             "# mine\n\n```{code-cell} ipython3\ndef my_gpipe_step(stage_times, microbatches):\n"
                             "    return sum(stage_times) + (microbatches - 1) * max(stage_times)\n```\n")
    (d / "team").mkdir()
    (d / "team" / "a.py").write_text("from helper import base\ndef my_gpipe_step(t, m):\n    return base(t) + (m - 1) * max(t)\n")
    (d / "team" / "helper.py").write_text("def base(t):\n    return sum(t)\n")
    (d / "README.md").write_text("instructions, not a submission")
    return d


@pytest.fixture(scope="module")
def graded(folder):
    return {s.name: s for s in grade_folder(folder, CH01, timeout=2.0, jobs=2)}


def status(graded, sub, ex_id):
    return graded[sub].results[ex_id]["status"]


def test_discovery(folder):
    assert [s.name for s in discover(folder)] == ["crash.py", "good.py", "hang.py", "md.md", "nb.ipynb", "team", "wrong.py"]


def test_good_submission_gets_full_marks(graded):
    assert all(status(graded, "good.py", e.id) == "passed" for e in CH01)
    assert graded["good.py"].total == len(CH01)


def test_wrong_submission_gets_feedback(graded):
    r = graded["wrong.py"].results
    assert r["01.2"]["status"] == "failed" and r["01.2"]["score"] < 0.5 and "first failing instance" in r["01.2"]["message"]
    assert r["01.3"]["status"] == "failed" and 0 < r["01.3"]["score"] < 1 and "diagnosis" in r["01.3"]["message"]
    assert r["01.4"]["status"] == "missing" and "fewest_microbatches" in r["01.4"]["message"]


def test_crash_costs_only_the_crashing_exercise(graded):
    r = graded["crash.py"].results
    assert r["01.2"]["status"] == "crashed" and "exited with status 7" in r["01.2"]["message"]
    assert r["01.3"]["status"] == "passed" and r["01.4"]["status"] == "not attempted"


def test_hang_costs_only_the_hanging_exercises(graded):
    r = graded["hang.py"].results
    assert r["01.2"]["status"] == "timeout" and r["01.3"]["status"] == "timeout"
    assert r["01.4"]["status"] == "passed"
    assert any("loading stopped" in n for n in graded["hang.py"].notes)


def test_notebooks_and_folders(graded):
    assert status(graded, "nb.ipynb", "01.4") == "passed" and status(graded, "nb.ipynb", "01.2") == "missing"
    assert status(graded, "md.md", "01.3") == "passed"
    assert status(graded, "team", "01.3") == "passed"


def test_table_has_a_row_per_submission(graded):
    subs = sorted(graded.values(), key=lambda s: s.name)
    text = table(subs, CH01)
    lines = text.splitlines()
    assert lines[0].split() == ["submission", "01.2", "01.3", "01.4", "total"] and len(lines) == 2 + len(subs)
    assert "3.00/3" in next(ln for ln in lines if ln.startswith("good.py"))
    assert "timeout" in next(ln for ln in lines if ln.startswith("hang.py"))


def test_cli_json_and_list(folder, tmp_path, capsys):
    small = tmp_path / "subs"
    small.mkdir()
    (small / "good.py").write_text(GOOD)
    (small / "wrong.py").write_text(WRONG)
    assert main(["grade", str(small), "--chapter", "01", "--json", "--timeout", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["id"] for e in out["exercises"]] == [e.id for e in CH01]
    by = {s["submission"]: s for s in out["submissions"]}
    assert by["good.py"]["total"] == 3 and by["wrong.py"]["results"]["01.4"]["status"] == "missing"
    assert main(["grade", str(small), "--exercise", "01.3", "--details"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["submission", "01.3", "total"] and "diagnosis" in text
    assert main(["grade", "--list", "--chapter", "01"]) == 0
    listing = capsys.readouterr().out
    assert all(e.name in listing for e in CH01)


def test_cli_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert main(["grade", str(tmp_path), "--chapter", "42"]) == 2
    assert "no exercises registered for chapter 42" in capsys.readouterr().err
    assert main(["grade", str(tmp_path), "--exercise", "01.99"]) == 2
    assert "unknown exercise '01.99'" in capsys.readouterr().err


def test_pytest_plugin(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(GOOD)
    (subs / "wrong.py").write_text(WRONG)
    report = tmp_path / "grades.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "devplace_lite.exercises.pytest_plugin", str(subs),
                        "--grade-chapter", "01", "--grade-timeout", "5", f"--junitxml={report}", "-q",
                        "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr  # the wrong submission fails its tests
    assert "3 failed, 3 passed" in r.stdout
    cases = ET.parse(report).getroot().iter("testcase")
    props = {(c.get("classname"), c.get("name")): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in cases}
    good = {name: p for (cls, name), p in props.items() if cls.endswith("good")}
    wrong = {name: p for (cls, name), p in props.items() if cls.endswith("wrong")}
    assert all(p["status"] == "passed" and p["score"] == "1.0" for p in good.values()) and len(good) == 3
    assert wrong["01.4 fewest_microbatches"] == {"score": "0.0", "status": "missing"}
