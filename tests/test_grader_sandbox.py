"""The grader against hostile submissions, in one run as an instructor would grade a class: an
honest one, a copy of the reference, an endless loop, a memory hog, a fork bomb, a flood of
output, a vandal (reads a fake ~/.ssh key, the answer key and the environment, writes outside its
folder, tries a local listener, kills what it can, leaves setsid daemons), a notebook whose
"definitions" do harm, and a link to the answer key. Then: copy detection against the ways a
student would dodge it, and the book's own solutions graded without a flag.

The grader runs as a separate command (``devplace grade``) with a fake home and a secret in its
environment; the test checks what it printed, the grade sheet, the files around it, the listener
and the processes left behind. Fork bombs run only inside the sandbox, under its process limit.
"""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import jupytext
import nbformat
import pytest

from devplace_course.exercises import exercises

ROOT = Path(__file__).resolve().parent.parent
FAKE_KEY = "FAKE-PRIVATE-KEY-f00dfeed"
ANSWER_KEY = "ANSWER-KEY-SECRET-31337"
ENV_SECRET = "ENV-SECRET-c0ffee"
SEED_TEXT = "the instructor's secret seed, 2026"
SLEEP_TOKEN = "987651"


def chapter_solutions(chapter: str) -> str:
    """The book's own solution cells of a chapter's coding exercises: an honest submission."""
    names = [e.name for e in exercises(chapter)]
    md = next((ROOT / "chapters").glob(f"{chapter}_*.md"))
    cells = [c.source for c in jupytext.read(md).cells if c.cell_type == "code"
             and "solution" in c.metadata.get("tags", []) and any(f"def {n}(" in c.source for n in names)]
    return "\n\n".join(cells) + "\n"


HONEST = chapter_solutions("01")
COPY = textwrap.dedent('''
    from devplace_lite.cost import max_load as load_of
    from devplace_lite.schedules import timeline as schedule
    from devplace_course.exercises.ch01 import fewest_microbatches as reference

    def my_max_load(graph, cluster, assignment):
        return load_of(graph, cluster, assignment)

    def my_gpipe_step(stage_times, microbatches):
        return schedule.makespan(schedule.gpipe(stage_times, microbatches))

    def fewest_microbatches(stages, target):
        return reference(stages, target)
''')
LOOP = HONEST.replace("def my_max_load(graph, cluster, assignment):\n",
                      "def my_max_load(graph, cluster, assignment):\n    while True:\n        pass\n")
HOG = HONEST.replace("def my_max_load(graph, cluster, assignment):\n",
                     "def my_max_load(graph, cluster, assignment):\n    hoard = []\n    while True:\n"
                     "        hoard.append(bytearray(64 << 20))\n")
FORK_BOMB = "import os\n" + HONEST.replace("def my_max_load(graph, cluster, assignment):\n",
                                           "def my_max_load(graph, cluster, assignment):\n    while True:\n"
                                           "        try:\n            os.fork()\n        except OSError:\n            pass\n")
SPEW = HONEST.replace("def my_gpipe_step(stage_times, microbatches):\n",
                      "def my_gpipe_step(stage_times, microbatches):\n    while True:\n        print('x' * 10000)\n")


def vandal(home: Path, keys: Path, folder: Path, port: int) -> str:
    """Everything the issue saw a submission do, with the real paths (the worst case: it knows them)."""
    return textwrap.dedent(f'''
        import json, os, signal, socket, sys
        LEARNED = []

        def attempt(what, fn):
            try:
                LEARNED.append(f"{{what}}: {{fn()!r}}"[:300])
            except BaseException as e:
                LEARNED.append(f"{{what}} failed: {{type(e).__name__}}")

        def read(p):
            with open(p) as f:
                return f.read()

        def write(p, text="vandal was here\\n"):
            with open(p, "a") as f:
                f.write(text)
            return "written"

        attempt("ssh key", lambda: read({str(home / ".ssh" / "id_rsa")!r}))
        attempt("ssh key via ~", lambda: read(os.path.expanduser("~/.ssh/id_rsa")))
        attempt("answer key", lambda: read({str(keys / "answers.py")!r}))
        attempt("network", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3).recv(16))
        attempt("append to the answer key", lambda: write({str(keys / "answers.py")!r}))
        attempt("overwrite another submission", lambda: write({str(folder / "honest.py")!r}, "my_max_load = None\\n"))
        attempt("write beside itself", lambda: write(os.path.join(os.path.dirname(__file__), "dropped.py")))
        attempt("write into the grader's folder", lambda: write({str(folder.parent / "VANDALISED")!r}))
        attempt("write a home file", lambda: write({str(home / ".bashrc")!r}))
        attempt("patch the library", lambda: write(os.path.join(os.path.dirname(os.__file__), "os.py")))
        attempt("kill the parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
        attempt("kill everyone", lambda: os.kill(-1, signal.SIGKILL) if os.fork() else os._exit(0))
        attempt("environment", lambda: dict(os.environ))  # last: the longest
        attempt("forge answers", lambda: [os.write(fd, b'{{"event": "answer", "i": 0, "value": 0}}\\n')
                                          for fd in range(3, 12) if fd != 1 and fd != 2])
        for _ in range(3):  # daemons meant to outlive grading
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", "{SLEEP_TOKEN}"])
                os._exit(0)

        def my_max_load(graph, cluster, assignment):
            raise RuntimeError(" | ".join(LEARNED))

        def fewest_microbatches(stages, target):   # graded like anyone else
            m = 1
            while (stages - 1) / (m + stages - 1) > target:
                m += 1
            return m
    ''')


def harmful_notebook(home: Path) -> nbformat.NotebookNode:
    """Its "definitions" run code: a default value and a decorator, which run only in the sandbox."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os"),
                nbformat.v4.new_code_cell(f"def leak(x=open({str(home / '.ssh' / 'id_rsa')!r}).read()):\n    return x"),
                nbformat.v4.new_code_cell(f"def wreck(f):\n    try:\n        open({str(home / 'WRECKED')!r}, 'w').write('x')\n"
                                          f"    except OSError:\n        pass\n"
                                          f"    return f\n\n@wreck\ndef my_gpipe_step(stage_times, microbatches):\n"
                                          f"    return sum(stage_times) + (microbatches - 1) * max(stage_times)")]
    return nb


def snapshot(root: Path, skip: set[str]) -> dict[str, str]:
    """Every file under ``root`` (names outside ``skip``) with a hash of its contents."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and not (set(p.relative_to(root).parts) & skip):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def processes_with(token: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmd:
                found.append(f"{pid}: {cmd}")
    return found


def uids_alive(low: int, high: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                uid = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                continue
            if low <= uid < high:
                found.append(int(pid))
    return found


class Listener:
    """A local TCP server that records every connection (none must come from the sandbox)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            self.connections.append(addr)
            conn.sendall(b"listener here")
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="module")
def class_run(tmp_path_factory, bwrap):
    """One grading run over the whole class, as the issue's "Done when" asks."""
    base = tmp_path_factory.mktemp("course")
    home, keys, folder = base / "home", base / "keys", base / "submissions"
    for d in (home / ".ssh", keys, folder):
        d.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(FAKE_KEY + "\n")
    (keys / "answers.py").write_text(f"ANSWERS = {ANSWER_KEY!r}\n")
    (keys / "seed.txt").write_text(SEED_TEXT + "\n")
    listener = Listener()
    for name, text in [("honest.py", HONEST), ("copy.py", COPY), ("loop.py", LOOP), ("hog.py", HOG),
                       ("forkbomb.py", FORK_BOMB), ("spew.py", SPEW),
                       ("vandal.py", vandal(home, keys, folder, listener.port))]:
        (folder / name).write_text(text)
    nbformat.write(harmful_notebook(home), folder / "notebook.ipynb")
    (folder / "key.py").symlink_to(keys / "answers.py")
    (base / "course.toml").write_text('[limits]\nmemory_mb = 512\nprocesses = 32\n\n'
                                      '[exercises]\n"01.2" = { points = 4 }\n"01.3" = { points = 3 }\n"01.4" = { points = 3 }\n')
    before = snapshot(base, skip={"out"})
    out = base / "out"
    out.mkdir()
    env = {**os.environ, "HOME": str(home), "DEVPLACE_TEST_SECRET": ENV_SECRET}
    cmd = [sys.executable, "-m", "devplace_lite.cli", "grade", str(folder), "--course", str(base / "course.toml"),
           "--seed-file", str(keys / "seed.txt"), "--timeout", "10", "--load-timeout", "90", "--jobs", "2",
           "--details", "--csv", str(out / "sheet.csv"), "--results-json", str(out / "results")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=base)
    stdout, stderr = proc.communicate(timeout=900)
    listener.close()
    yield {"base": base, "folder": folder, "out": out, "rc": proc.returncode, "stdout": stdout, "stderr": stderr,
           "before": before, "after": snapshot(base, skip={"out"}), "listener": listener, "grader_pid": proc.pid,
           "sheet": {r["submission"]: r for r in csv.DictReader((out / "sheet.csv").read_text().splitlines())}}


def row(run, name: str) -> list[str]:
    return next(ln.split() for ln in run["stdout"].splitlines() if ln.startswith(name + " "))


def test_the_grader_finishes_and_grades_everyone(class_run):
    assert class_run["rc"] == 0, class_run["stderr"]
    assert "sandbox: bubblewrap" in class_run["stdout"] and "no network" in class_run["stdout"]
    names = {"copy.py", "forkbomb.py", "hog.py", "honest.py", "loop.py", "notebook.ipynb", "spew.py", "vandal.py"}
    assert set(class_run["sheet"]) == names  # the link to the answer key is no submission
    assert (class_run["out"] / "results" / "honest.json").exists()


def test_honest_full_marks(class_run):
    assert row(class_run, "honest.py") == ["honest.py", "4.00", "3.00", "3.00", "10.00/10"]
    assert class_run["sheet"]["honest.py"]["total"] == "10" and class_run["sheet"]["honest.py"]["flags"] == ""


def test_a_copy_of_the_reference_is_flagged_and_scores_0(class_run):
    assert row(class_run, "copy.py") == ["copy.py", "COPY", "COPY", "COPY", "0.00/10"]
    text = class_run["stdout"]
    assert "flagged as a copy, scored 0" in text and "devplace_lite.cost.max_load" in text
    assert "01.2 copy; 01.3 copy; 01.4 copy" in class_run["sheet"]["copy.py"]["flags"]


def test_the_runaways_are_stopped_and_score_0(class_run):
    assert row(class_run, "loop.py")[1:3] == ["timeout", "3.00"]     # the rest graded in a new sandbox
    assert row(class_run, "hog.py")[1:3] == ["memory", "3.00"]
    assert row(class_run, "forkbomb.py")[1:3] == ["timeout", "3.00"]
    assert row(class_run, "spew.py")[1:3] == ["4.00", "output"]
    text = class_run["stdout"]
    assert "the time per exercise" in text and "ran out of memory (limit 512 MB)" in text
    assert "printed more than 1024 KB" in text
    assert "kept starting processes, up to the limit of 32" in text or "cgroup" not in text


def test_the_vandal_changes_nothing(class_run):
    assert class_run["before"] == class_run["after"]  # every file around the grader, byte for byte
    assert not (class_run["base"] / "VANDALISED").exists() and not (class_run["base"] / "home" / "WRECKED").exists()
    assert not (class_run["folder"] / "dropped.py").exists()


def test_the_vandal_learns_nothing(class_run):
    sheet = (class_run["out"] / "sheet.csv").read_text()
    results = "".join(p.read_text() for p in (class_run["out"] / "results").iterdir())
    for secret in (FAKE_KEY, ANSWER_KEY, ENV_SECRET, SEED_TEXT):  # contents, not the paths its code names
        for where in (class_run["stdout"], class_run["stderr"], sheet, results):
            assert secret not in where
    text = class_run["stdout"]
    assert "ssh key failed: FileNotFoundError" in text and "answer key failed: FileNotFoundError" in text
    assert "network failed: ConnectionRefusedError" in text or "network failed: OSError" in text
    assert not class_run["listener"].connections
    assert row(class_run, "vandal.py")[3] == "3.00"  # its honest exercise is graded like anyone's


def test_nothing_is_left_running(class_run):
    assert not processes_with(f"sleep {SLEEP_TOKEN}")
    if os.geteuid() == 0:  # the grader's sandboxes ran as uids of a block of its own
        low = 200_000 + (class_run["grader_pid"] % 50_000) * 64
        assert not uids_alive(low, low + 64)


def test_a_notebooks_definitions_run_only_in_the_sandbox(class_run):
    assert row(class_run, "notebook.ipynb")[2] == "3.00"  # its decorated function still graded
    assert not (class_run["base"] / "home" / "WRECKED").exists()


# -- copy detection against the ways around it --------------------------------------------------------
DODGES = {
    "alias.py": "import devplace_lite.cost as c\nf = c.max_load\ndef my_max_load(g, cl, a):\n    return f(g, cl, a)\n",
    "getattr.py": ("import importlib\ndef my_max_load(g, cl, a):\n    m = importlib.import_module('devplace_lite.' + 'co' + 'st')\n"
                   "    return getattr(m, 'max_' + 'load')(g, cl, a)\n"),
    "dunder.py": "def my_max_load(g, cl, a):\n    return __import__('devplace_lite.cost', fromlist=['x']).evaluate(g, cl, a).max_load\n",
    "registry.py": "from devplace_course.exercises import get\ndef my_max_load(g, cl, a):\n    return get('01.2').reference(g, cl, a)\n",
    "helper.py": "from devplace_lite.cost import device_loads\ndef _h(g, cl, a):\n    c, m = device_loads(g, cl, a)\n    return (c + m).max()\n"
                 "def my_max_load(g, cl, a):\n    return float(_h(g, cl, a))\n",
    "patchback.py": ("import devplace_lite.cost as c\ndef my_max_load(g, cl, a):\n    try:\n        c.max_load.__code__ = c.device_loads.__code__\n"
                     "    except RuntimeError:\n        pass\n    return c.max_load(g, cl, a)\n"),
    "reload.py": ("import importlib, devplace_lite.cost as c\ndef my_max_load(g, cl, a):\n    fresh = importlib.reload(c)\n"
                  "    return fresh.max_load(g, cl, a)\n"),
    "child.py": ("import subprocess, sys, pickle\ndef my_max_load(g, cl, a):\n"
                 "    code = 'import pickle, sys; from devplace_lite import cost; g, cl, a = pickle.load(sys.stdin.buffer); print(cost.max_load(g, cl, a))'\n"
                 "    out = subprocess.run([sys.executable, '-c', code], input=pickle.dumps((g, cl, a)), capture_output=True)\n"
                 "    return float(out.stdout)\n"),
    "honest.py": HONEST,
}


@pytest.fixture(scope="module")
def dodges(tmp_path_factory, bwrap):
    from devplace_course.exercises.grading import Plan, grade_folder

    folder = tmp_path_factory.mktemp("dodges")
    for name, text in DODGES.items():
        (folder / name).write_text(text)
    plan = Plan([e for e in exercises("01") if e.id == "01.2"], 424242, timeout=30.0, load_timeout=90.0)
    return {s.name: s.results["01.2"] for s in grade_folder(folder, plan, jobs=2)}


@pytest.mark.parametrize("name", [n for n in DODGES if n != "honest.py"])
def test_every_way_of_calling_the_reference_is_flagged(dodges, name):
    assert dodges[name]["status"] == "copy" and dodges[name]["points"] == 0, dodges[name]["message"]
    assert "flagged as a copy" in dodges[name]["message"]


def test_an_honest_submission_is_not_flagged(dodges):
    assert dodges["honest.py"]["status"] == "passed"


def test_static_inspection_reads_aliases_strings_and_pasted_code():
    import inspect

    from devplace_lite import cost
    from devplace_course.exercises.guard import inspect_statically

    def report(src: str, patterns=("devplace_lite.cost:max_load",)):
        import ast

        return inspect_statically([ast.parse(src)], {"01.2": ("my_max_load", list(patterns))})
    assert "01.2" in report("from devplace_lite.cost import max_load as m\ndef my_max_load(g, c, a):\n    return m(g, c, a)\n").copies
    assert "01.2" in report("import devplace_lite.cost\ndef h():\n    return devplace_lite.cost.max_load\n"
                            "def my_max_load(g, c, a):\n    return h()(g, c, a)\n").copies
    assert "01.2" in report("def my_max_load(g, c, a):\n    return getattr(__import__('x'), 'max_load')(g, c, a)\n").copies
    pasted = inspect.getsource(cost.max_load).replace("def max_load(", "def my_max_load(")
    found = report(pasted).copies["01.2"]
    assert any("is a copy of the code of devplace_lite.cost.max_load" in f for f in found)
    clean = report('def my_max_load(g, c, a):\n    """Unlike max_load, from the formula."""\n    return 0.0\n'
                   'def unused():\n    from devplace_lite.cost import max_load\n    return max_load\n')
    assert not clean.copies  # a docstring's words and unreachable code are not calls
    review = report("import importlib\ndef my_max_load(g, c, a):\n    importlib.invalidate_caches()\n"
                    "    return getattr(g, 'p_' + 'acc').sum()\n").review
    assert any("importlib" in r for r in review) and any("computed name" in r for r in review)
    # an import that no code which runs uses (the book's hidden install cell) is not for review
    assert not report("import importlib.util, subprocess\ndef my_max_load(g, c, a):\n    return 0.0\n").review


@pytest.mark.slow
def test_the_books_own_solutions_pass_and_none_is_flagged(tmp_path, bwrap):
    """Each chapter, handed in as a notebook, is graded 1.00 on its own exercises: the sandbox gives
    the solutions what they need, and the copy guard does not mistake a library helper the
    exercise allows for the answer."""
    from devplace_course.exercises.grading import Plan, grade_folder

    chapters = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
    for md in chapters:
        jupytext.write(jupytext.read(md), tmp_path / f"{md.stem}.ipynb")
    plan = Plan(exercises(), 777, timeout=120.0, load_timeout=240.0)
    graded = {s.name: s for s in grade_folder(tmp_path, plan, jobs=2)}
    for md in chapters:
        sub = graded[f"{md.stem}.ipynb"]
        for ex in exercises(md.name[:2]):
            r = sub.results[ex.id]
            assert r["status"] == "passed", (md.name, r["message"], sub.notes)


def test_an_environment_under_tmp_is_bound_over_the_private_tmp(monkeypatch):
    """A checkout or virtualenv under /tmp (a CI clone, say) must stay visible: the sandbox's own
    /tmp is mounted first and the Python folders over it (the other order hid the interpreter:
    'bwrap: execvp /tmp/.../.venv/bin/python: No such file or directory', every submission 0)."""
    from devplace_course.exercises import sandbox

    monkeypatch.setattr(sandbox, "python_paths", lambda: [Path("/tmp/ci/repo/.venv"), Path("/tmp/ci/repo/devplace_lite")])
    monkeypatch.setattr(sandbox, "_namespaces", lambda bwrap: [])
    cmd = sandbox.Session(files=[], limits=sandbox.Limits(), cpu_seconds=1, bwrap="bwrap")._bwrap_command(Path("/x"))
    tmpfs = cmd.index("--tmpfs")
    assert cmd[tmpfs + 1] == "/tmp"
    for p in ("/tmp/ci/repo/.venv", "/tmp/ci/repo/devplace_lite"):
        bind = next(i for i in range(len(cmd) - 2) if cmd[i] == "--ro-bind" and cmd[i + 1] == p)
        assert bind > tmpfs
