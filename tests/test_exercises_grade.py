"""The grader over a folder of submissions: good, wrong, crashing and hanging ones, notebooks and
folders, through the library, the `devplace grade` command (CSV, results.json, course file) and
the pytest plugin. Every submission runs in the bubblewrap sandbox (the `bwrap` fixture)."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from devplace_lite.cli import main
from devplace_course.exercises import exercises
from devplace_course.exercises.grading import Plan, csv_text, discover, grade_folder, resolve_seed, results_paths, table

CH01 = exercises("01")
SEED = 20260907
GOOD = textwrap.dedent('''
    import math
    from devplace_lite.schedules import timeline as schedule

    def my_max_load(graph, cluster, assignment):
        load = [0.0] * cluster.size
        for i, v in enumerate(graph.nodes):
            d = int(assignment[i])
            load[d] += v.p_acc if d < cluster.k else v.p_cpu
        paid = set()
        for u, w in zip(graph.src, graph.dst):
            du, dw = int(assignment[u]), int(assignment[w])
            for d in (du, dw) if du != dw else ():
                if d < cluster.k and (u, d) not in paid:
                    paid.add((u, d))
                    load[d] += graph.comm[u]
        return max(load)

    def my_gpipe_step(stage_times, microbatches):
        return sum(stage_times) + (microbatches - 1) * max(stage_times)

    def fewest_microbatches(stages, target):
        m = 1
        while (stages - 1) / (m + stages - 1) > target:
            m += 1
        return m

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

    def my_max_load(graph, cluster, assignment):
        os._exit(7)              # takes the whole process down

    def my_gpipe_step(stage_times, microbatches):
        return sum(stage_times) + (microbatches - 1) * max(stage_times)

    def fewest_microbatches(stages, target):
        raise NotImplementedError
''')
HANG = textwrap.dedent('''
    import signal, time

    signal.signal(signal.SIGALRM, signal.SIG_IGN)   # no alarm inside can stop it: the grader kills from outside

    def my_max_load(graph, cluster, assignment):
        while True:              # an endless loop
            pass

    def my_gpipe_step(stage_times, microbatches):
        try:
            time.sleep(10**6)
        except BaseException:    # swallowing everything must not defeat the time limit
            return 0.0

    def fewest_microbatches(stages, target):
        m = 1
        while (stages - 1) / (m + stages - 1) > target:
            m += 1
        return m
''')
SLOW_LOAD = "import time\ntime.sleep(10**6)   # a top-level hang: the load timeout stops it\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("submissions")
    (d / "good.py").write_text(GOOD)
    (d / "wrong.py").write_text(WRONG)
    (d / "crash.py").write_text(CRASH)
    (d / "hang.py").write_text(HANG)
    (d / "slowload.py").write_text(SLOW_LOAD)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%matplotlib inline\nimport math"),
                nbformat.v4.new_code_cell("1 / 0   # a chapter computation: skipped by the grader"),
                nbformat.v4.new_code_cell("def fewest_microbatches(stages, target):\n"
                                          "    return max(1, math.ceil(round((stages - 1) * (1 - target) / target, 9)))\n"
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
def graded(folder, bwrap):
    plan = Plan(CH01, SEED, timeout=8.0, load_timeout=60.0)
    return {s.name: s for s in grade_folder(folder, plan, jobs=2)}, plan


def status(graded, sub, ex_id):
    return graded[0][sub].results[ex_id]["status"]


def test_discovery(folder):
    assert [s.name for s in discover(folder)] == ["crash.py", "good.py", "hang.py", "md.md", "nb.ipynb", "slowload.py",
                                                   "team", "wrong.py"]


def test_good_submission_gets_full_marks(graded):
    subs, _ = graded
    assert all(status(graded, "good.py", e.id) == "passed" for e in CH01)
    assert subs["good.py"].total == len(CH01) and any("printed" in n for n in subs["good.py"].notes)


def test_wrong_submission_gets_feedback(graded):
    r = graded[0]["wrong.py"].results
    assert r["01.2"]["status"] == "failed" and r["01.2"]["score"] < 0.5 and "first failing instance" in r["01.2"]["message"]
    assert r["01.3"]["status"] == "failed" and 0 < r["01.3"]["score"] < 1 and "diagnosis" in r["01.3"]["message"]
    assert r["01.4"]["status"] == "missing" and "fewest_microbatches" in r["01.4"]["message"]
    assert "seed=GRADING_SEED" in r["01.2"]["message"] and str(SEED) not in r["01.2"]["message"]


def test_crash_costs_only_the_crashing_exercise(graded):
    r = graded[0]["crash.py"].results
    assert r["01.2"]["status"] == "crashed" and "exited with status 7" in r["01.2"]["message"]
    assert r["01.3"]["status"] == "passed" and r["01.4"]["status"] == "not attempted"


def test_hang_costs_only_the_hanging_exercises(graded):
    r = graded[0]["hang.py"].results
    assert r["01.2"]["status"] == "timeout" and r["01.3"]["status"] == "timeout"
    assert "the time per exercise" in r["01.2"]["message"] and r["01.2"]["points"] == 0
    assert r["01.4"]["status"] == "passed"


def test_a_slow_load_is_its_own_budget_and_says_so(graded):
    subs, _ = graded
    r = subs["slowload.py"].results
    assert all(x["status"] == "timeout" and "the load timeout" in x["message"] for x in r.values())
    assert any("could not be loaded" in n and "load timeout" in n for n in subs["slowload.py"].notes)


def test_notebooks_and_folders(graded):
    assert status(graded, "nb.ipynb", "01.4") == "passed" and status(graded, "nb.ipynb", "01.2") == "missing"
    assert status(graded, "md.md", "01.3") == "passed"
    assert status(graded, "team", "01.3") == "passed"


def test_table_and_csv_have_a_row_per_submission(graded):
    subs, plan = graded
    ordered = sorted(subs.values(), key=lambda s: s.name)
    lines = table(ordered, plan).splitlines()
    assert lines[0].split() == ["submission", "01.2", "01.3", "01.4", "total"] and len(lines) == 2 + len(ordered)
    assert "3.00/3" in next(ln for ln in lines if ln.startswith("good.py"))
    assert "timeout" in next(ln for ln in lines if ln.startswith("hang.py"))
    rows = list(csv.DictReader(csv_text(ordered, plan).splitlines()))
    assert [r["submission"] for r in rows] == [s.name for s in ordered]
    good = next(r for r in rows if r["submission"] == "good.py")
    assert (good["01.2"], good["total"], good["out_of"], good["flags"]) == ("1", "3", "3", "")
    assert "01.2 timeout" in next(r for r in rows if r["submission"] == "hang.py")["flags"]


def test_the_seed_is_the_instructors_never_the_books(tmp_path):
    from devplace_lite.errors import UsageError

    with pytest.raises(UsageError, match="secret seed"):
        resolve_seed()
    with pytest.raises(UsageError, match="book's"):
        resolve_seed(0)
    (tmp_path / "seed").write_text("correct horse battery staple\n")
    assert resolve_seed(seed_file=tmp_path / "seed") == resolve_seed(seed_file=tmp_path / "seed") > 0
    (tmp_path / "n").write_text("42\n")
    assert resolve_seed(seed_file=tmp_path / "n") == 42 == resolve_seed(42)


def test_cli_course_csv_results_json_and_list(tmp_path, capsys, bwrap):
    small = tmp_path / "subs"
    small.mkdir()
    (small / "good.py").write_text(GOOD)
    (small / "wrong.py").write_text(WRONG)
    (tmp_path / "secret.txt").write_text("a secret of mine\n")
    (tmp_path / "course.toml").write_text('[grading]\nseed_file = "secret.txt"\ntimeout = 20\n\n'
                                          '[exercises]\n"01.3" = { points = 3, pass = 0.25 }\n"01.2" = { points = 4 }\n')
    sheet, results = tmp_path / "sheet.csv", tmp_path / "results"
    assert main(["grade", str(small), "--course", str(tmp_path / "course.toml"), "--json", "--csv", str(sheet),
                 "--results-json", str(results)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["id"] for e in out["exercises"]] == ["01.3", "01.2"] and "bubblewrap" in out["sandbox"]
    by = {s["submission"]: s for s in out["submissions"]}
    assert by["good.py"]["total"] == 7 and by["wrong.py"]["results"]["01.2"]["points"] == 0
    wrong_13 = by["wrong.py"]["results"]["01.3"]
    assert 0.25 <= wrong_13["score"] < 1 and wrong_13["points"] == 3  # over the course's pass threshold
    rows = list(csv.reader(sheet.read_text().splitlines()))
    assert rows[0] == ["submission", "01.3", "01.2", "total", "out_of", "flags"] and rows[1][:5] == ["good.py", "3", "4", "7", "7"]
    gradescope = json.loads((results / "good.json").read_text())
    assert gradescope["score"] == 7 and [t["max_score"] for t in gradescope["tests"]] == [3, 4]
    assert main(["grade", str(small), "--exercise", "01.3", "--details", "--seed", "99"]) == 0
    text = capsys.readouterr().out
    assert "sandbox: bubblewrap" in text and "diagnosis" in text
    assert next(ln for ln in text.splitlines() if ln.startswith("submission")).split() == ["submission", "01.3", "total"]
    assert main(["grade", "--list", "--chapter", "01"]) == 0
    listing = capsys.readouterr().out
    assert all(e.name in listing for e in CH01)


def test_cli_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    bad = [(["grade", str(tmp_path / "nope"), "--seed", "5"], "does not exist"),
           (["grade", str(tmp_path), "--chapter", "42", "--seed", "5"], "no exercises registered for chapter 42"),
           (["grade", str(tmp_path), "--exercise", "01.99", "--seed", "5"], "unknown exercise '01.99'"),
           (["grade", str(tmp_path)], "secret seed"),
           (["grade", str(tmp_path), "--seed", "0"], "book's"),
           (["grade", str(tmp_path), "--seed", "5", "--course", str(tmp_path / "none.toml")],
            "course file: cannot read"),
           (["grade", str(tmp_path), "--seed", "5", "--course", str(tmp_path)], "course file: "),
           # a FIFO with no writer blocked for ever, /dev/zero filled memory: both read only as regular files now
           (["grade", str(tmp_path), "--seed", "5", "--course", str(tmp_path / "fifo")], "course file: "),
           (["grade", str(tmp_path), "--seed-file", str(tmp_path / "fifo")], "seed file: "),
           (["grade", str(tmp_path), "--seed-file", "/dev/zero"], "seed file: /dev/zero: not a regular file")]
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bad.toml").write_text('[exercises]\n"01.2" = { points = -1 }\n')
    bad.append((["grade", str(tmp_path), "--seed", "5", "--course", str(tmp_path / "bad.toml")], "exercises.01.2.points"))
    for argv, message in bad:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)


@pytest.fixture
def small_class(tmp_path, monkeypatch):
    """Two submissions, a course naming a seed file, a FIFO; grading itself fails the test (every
    refusal below must come before any work)."""
    import devplace_course.exercises.grading as grading

    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(GOOD)
    (subs / "wrong.py").write_text(WRONG)
    (tmp_path / "seed.txt").write_text("secret\n")
    (tmp_path / "course.toml").write_text('[grading]\nseed_file = "seed.txt"\n')
    (tmp_path / "sheet.csv").write_text("a file")
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setattr(grading, "grade_folder", lambda *a, **k: pytest.fail("graded before refusing an output"))
    return tmp_path


@pytest.mark.parametrize("option,value,needle", [
    ("--results-json", "fifo", "2 submissions need a folder"),
    ("--results-json", "fifo/", "2 submissions need a folder"),
    ("--csv", "fifo", "fifo: not a regular file (a FIFO); refusing to replace it"),
    ("--csv", "subs/good.py", "output subs/good.py is inside the input folder subs"),
    ("--csv", "subs/sheet.csv", "output subs/sheet.csv is inside the input folder subs"),
    ("--results-json", "nothere/../subs", "is inside the input folder subs"),
    ("--results-json", "sheet.csv", "2 submissions need a folder (one file each), and this is not one"),
    ("--results-json", "", "cannot write '' (an empty name)"),
    ("--csv", "", "cannot write '' (an empty name)"),
    ("--csv", "out/", "cannot write 'out/': an output must name a file"),
    ("--csv", "seed.txt", "is the input"),
    ("--results-json", "course.toml", "2 submissions need a folder"),
    ("--csv", "course.toml", "output course.toml is the input course.toml"),
])
def test_grade_outputs_are_checked_before_grading(small_class, capsys, monkeypatch, option, value, needle):
    """``--results-json FIFO`` replaced the FIFO by a regular file (as root, ``/dev/null`` too: the
    same path, not run here) and ``--csv subs/good.py`` overwrote a submission, both after grading."""
    monkeypatch.chdir(small_class)
    before = {p.name: p.read_bytes() for p in small_class.rglob("*") if p.is_file()}
    assert main(["grade", "subs", "--course", "course.toml", "--unsafe-no-sandbox", option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert stat.S_ISFIFO(os.lstat("fifo").st_mode)
    assert {p.name: p.read_bytes() for p in small_class.rglob("*") if p.is_file()} == before


def test_one_submissions_results_json_is_not_written_over_a_fifo(small_class, capsys):
    (small_class / "subs" / "wrong.py").unlink()
    assert main(["grade", str(small_class / "subs"), "--seed", "5", "--results-json", str(small_class / "fifo")]) == 2
    assert "fifo: not a regular file (a FIFO); refusing to replace it" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(small_class / "fifo").st_mode)


def test_results_json_names_one_file_per_submission():
    assert results_paths(["a.py"], "r.json") == [Path("r.json")]
    assert results_paths(["a.py"], "r/") == [Path("r/a.json")]  # a trailing / asks for a folder
    # a.py and a.md both wrote a.json (the second replaced the first); a stem that is another's name keeps its suffix
    assert results_paths(["a.md", "a.py", "b.py", "c", "c.py", "d.py", "d.py.md"], "r") == [
        Path("r") / n for n in ("a.md.json", "a.py.json", "b.json", "c.json", "c.py.json", "d.json", "d.py.md.json")]


def test_grade_writes_its_outputs_as_every_command_does(tmp_path, monkeypatch, capsys):
    """Atomic, keeping a replaced file's mode, through a symbolic link, no file left beside it
    (graded unsandboxed: what is tested is the writing)."""
    import devplace_course.exercises.sandbox as sandbox

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    (out / "sheet.csv").write_text("old")
    (out / "sheet.csv").chmod(0o600)
    (out / "target.json").write_text("old")
    (tmp_path / "results.json").symlink_to(out / "target.json")
    assert main(["grade", str(subs), "--seed", "5", "--exercise", "01.3", "--unsafe-no-sandbox", "--json",
                 "--csv", str(out / "sheet.csv"), "--results-json", str(tmp_path / "results.json")]) == 0
    assert json.loads(capsys.readouterr().out)["submissions"][0]["total"] == 1
    assert stat.S_IMODE((out / "sheet.csv").stat().st_mode) == 0o600
    assert (out / "sheet.csv").read_text().splitlines()[1].startswith("good.py,1,")
    assert (tmp_path / "results.json").is_symlink() and json.loads((out / "target.json").read_text())["score"] == 1
    assert sorted(os.listdir(out)) == ["sheet.csv", "target.json"]


def test_refuses_to_grade_without_bwrap_unless_told(tmp_path, monkeypatch, capsys):
    import devplace_course.exercises.sandbox as sandbox

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    (tmp_path / "good.py").write_text(GOOD)
    assert main(["grade", str(tmp_path), "--seed", "5", "--exercise", "01.3"]) == 2
    err = capsys.readouterr().err
    assert "bubblewrap (bwrap) is not installed" in err and "--unsafe-no-sandbox" in err and "macOS" in err
    assert main(["grade", str(tmp_path), "--seed", "5", "--exercise", "01.3", "--unsafe-no-sandbox"]) == 0
    out = capsys.readouterr().out
    assert "NO SANDBOX" in out and "1.00/1" in out


def test_pytest_plugin_selects_exercises(tmp_path, bwrap):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(GOOD)
    (subs / "wrong.py").write_text(WRONG)
    report = tmp_path / "grades.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "devplace_course.exercises.pytest_plugin", str(subs),
                        "--grade-exercise", "01.2", "--grade-exercise", "01.4", "--grade-seed", "31",
                        "--grade-timeout", "20", f"--junitxml={report}", "-q", "-p", "no:cacheprovider",
                        "-p", "no:randomly", "--rootdir", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr  # the wrong submission fails its tests
    assert "2 failed, 2 passed" in r.stdout
    cases = ET.parse(report).getroot().iter("testcase")
    props = {(c.get("classname"), c.get("name")): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in cases}
    good = {name: p for (cls, name), p in props.items() if cls.endswith("good")}
    wrong = {name: p for (cls, name), p in props.items() if cls.endswith("wrong")}
    assert sorted(good) == ["01.2 my_max_load", "01.4 fewest_microbatches"]
    assert all(p["status"] == "passed" and p["score"] == "1.0" and p["points"] == "1.0" for p in good.values())
    assert wrong["01.4 fewest_microbatches"] == {"score": "0.0", "status": "missing", "points": "0.0"}



@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="the kernel keeps no run-queue times")
def test_the_exercise_clock_runs_for_loops_and_sleeps_but_not_for_a_busy_machine():
    """The grader's budgets run on `RunClock`: a make test beside two busy loops timed out a quick
    answer on wall time. Here a worker shares one CPU with two busy loops: its clock runs at its
    share of the CPU (about a third), while a sleeping worker's clock runs with the wall."""
    from devplace_course.exercises.sandbox import RunClock

    loop = [sys.executable, "-c", "while True: pass"]
    pin = lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # noqa: E731 - one CPU for all
    procs = [subprocess.Popen(loop, preexec_fn=pin) for _ in range(3)]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)  # the interpreters have started
        clocks = [RunClock(procs[0].pid), RunClock(sleeper.pid)]
        t0, c0 = time.monotonic(), [c.now() for c in clocks]
        time.sleep(3.0)
        wall = time.monotonic() - t0
        busy, asleep = (c.now() - s for c, s in zip(clocks, c0))
        assert clocks[0].worker == procs[0].pid and clocks[1].worker == sleeper.pid
        assert busy < 0.7 * wall, (busy, wall)  # a third of one CPU, less when the machine is busier
        assert asleep > 0.95 * wall, (asleep, wall)
    finally:
        for p in procs + [sleeper]:
            p.kill()
            p.wait()


def _cmdline(psutil, proc) -> str:
    """A process's command line, or '' once it has ended: the sandbox's short-lived helpers
    (bwrap's own forks) become zombies between listing and reading, which psutil raises for."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
        return ""


def _lives(psutil, proc) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_terminated_grader_ends_its_sandboxes_instead_of_waiting_for_them(tmp_path, bwrap):
    """SIGTERM to ``devplace grade`` while a submission loops: the command ends (143) without
    running the exercise's budget out, and no process of its sandboxes outlives it."""
    import signal

    psutil = pytest.importorskip("psutil")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "hang.py").write_text(HANG)
    cmd = [sys.executable, "-c", "import sys; from devplace_lite.cli import main; sys.exit(main())", "grade", str(subs),
           "--seed", "5", "--exercise", "01.2", "--timeout", "3000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        workers: list = []
        for _ in range(600):  # until the submission's worker runs (its loop then holds the exercise)
            kids = psutil.Process(proc.pid).children(recursive=True)
            workers = [k for k in kids if "devplace_course.exercises.worker" in _cmdline(psutil, k)]
            if workers or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert workers, proc.stderr.read() if proc.poll() is not None else "no worker started"
        time.sleep(1.0)  # into the exercise's loop
        everything = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        # Before the fix the command waited for the 3000 s budget (3x that of wall time under load).
        assert proc.wait(timeout=240) == 143, proc.stderr.read()
        alive = [p.pid for p in everything if _lives(psutil, p)]
        assert not alive, f"processes of the grader outlived it: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()


def _private_checkout(root: Path, umask_077: bool) -> Path:
    """A copy of the library and the course as a checkout inside a folder only its owner may enter (``mktemp -d``;
    root's home), its own files readable by all as ``git clone`` makes them, or (``umask_077``)
    only by their owner. Returns the folder to put on ``PYTHONPATH``."""
    import shutil

    import devplace_course
    import devplace_lite

    top = root / "a private folder"  # a space in the path too
    src = top / "my checkout"
    for package in (devplace_lite, devplace_course):  # the library and the course beside it, as a clone has them
        shutil.copytree(Path(package.__file__).parent, src / package.__name__, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [*top.rglob("*")] if umask_077 else []:
        path.chmod(0o700 if path.is_dir() else 0o600)
    top.chmod(0o700)
    return src


def _grade_from(src: Path, tmp_path: Path, sandboxed: bool) -> subprocess.CompletedProcess:
    """``devplace grade`` of a correct submission by the package at ``src``; without the sandbox
    with no ``bwrap`` on the ``PATH``, as on a machine that has none."""
    subs = tmp_path / "subs"
    subs.mkdir(exist_ok=True)
    (subs / "good.py").write_text(GOOD)
    cmd = [sys.executable, "-m", "devplace_lite.cli", "grade", str(subs), "--seed", "5", "--exercise", "01.3",
           "--json"] + ([] if sandboxed else ["--unsafe-no-sandbox"])
    env = {**os.environ, "PYTHONPATH": str(src)} | ({} if sandboxed else {"PATH": str(tmp_path / "no-bwrap")})
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


@pytest.mark.parametrize("sandboxed,umask_077", [(True, False), (False, False), (False, True)],
                         ids=["sandbox", "unsafe-no-sandbox", "unsafe-no-sandbox-umask-077"])
def test_grades_the_same_from_a_checkout_only_its_owner_can_enter(tmp_path, request, sandboxed, umask_077):
    """A checkout below a 0700 folder (issue 44): the worker, an unprivileged uid when the grader
    is root, used to fail importing the package, and every submission was reported crashed,
    0.00/1. It grades a correct submission 1.00 in both modes, and without a sandbox also when
    the checkout's own files are private."""
    if sandboxed:
        request.getfixturevalue("bwrap")
    r = _grade_from(_private_checkout(tmp_path, umask_077), tmp_path, sandboxed)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["submissions"][0]["results"]["01.3"]["status"] == "passed", out
    assert out["submissions"][0]["total"] == 1 and ("NO SANDBOX" in out["sandbox"]) != sandboxed


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: otherwise the worker keeps the grader's own uid")
def test_the_sandbox_refuses_a_checkout_others_cannot_read_naming_the_fix(tmp_path, bwrap):
    """In the sandbox the worker keeps no capability (reading every file would let it open files
    outside the sandbox by their handle), so a checkout made with umask 077 cannot be imported
    there: grading stops before any grade, exit 2, in one line naming the folder and the chmod."""
    src = _private_checkout(tmp_path, umask_077=True)
    r = _grade_from(src, tmp_path, sandboxed=True)
    assert r.returncode == 2 and not r.stdout, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the grader's worker could not start" in lines[0], r.stderr
    assert f"{src / 'devplace_lite'} is closed to other users: chmod -R o+rX" in lines[0]


def test_a_worker_that_cannot_start_is_the_graders_error_not_a_zero(tmp_path, monkeypatch, capsys):
    """A worker that dies before it is ready (here: its Python cannot start) stops grading with
    exit status 2 and one line; no submission is reported crashed, no grade sheet written."""
    import devplace_course.exercises.sandbox as sandbox

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    monkeypatch.setattr(sandbox.sys, "executable", "/bin/false")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "good.py").write_text(GOOD)
    sheet = tmp_path / "sheet.csv"
    assert main(["grade", str(subs), "--seed", "5", "--exercise", "01.3", "--unsafe-no-sandbox",
                 "--csv", str(sheet)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "the grader's worker could not start" in lines[0], captured.err
    assert "crashed" not in captured.out and not sheet.exists()
