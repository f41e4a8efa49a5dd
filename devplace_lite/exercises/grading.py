"""Grade a folder of submissions: every exercise of every submission, each submission in a child process.

A *submission* is one entry of the folder: a ``.py`` file, a notebook (``.ipynb`` or a MyST
``.md``), or a sub-folder whose such files are loaded together (one per learner, as course
platforms download them). It defines the exercise functions under their registered names
(``devplace grade --list``; e.g. ``my_max_load`` for exercise 01.2). Hidden files, ``README*``,
``__pycache__`` and ``.ipynb_checkpoints`` are ignored.

Isolation: the worker (`devplace_lite.exercises.runner`) runs with a fresh working directory
and no standard input; each exercise gets ``timeout`` seconds (an alarm inside the worker) and
the worker as a whole a hard limit, after which its process group is killed. When the worker
dies (a crash, ``os._exit``, a hang the alarm cannot break), the exercise it was on is marked
``crashed`` or ``timeout`` and a new worker grades the rest. This protects the grader from
hangs and crashes, not from malice: run untrusted code in a container.

Cost: one worker start (about a second) per submission, plus one per crash; ``jobs``
submissions are graded at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..graph import GraphError
from .core import Exercise
from .runner import SUFFIXES

_IGNORED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


@dataclass
class Submission:
    """One learner's files and what grading found."""

    name: str
    paths: list[Path]
    results: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> float:
        return sum(r["score"] for r in self.results.values())

    def to_dict(self) -> dict:
        return {"submission": self.name, "files": [p.name for p in self.paths], "total": self.total,
                "seconds": round(self.seconds, 3), "notes": self.notes, "results": self.results}


def _wanted(p: Path) -> bool:
    return (p.is_file() and p.suffix in SUFFIXES and not p.name.startswith(".")
            and not p.name.upper().startswith("README"))


def discover(folder: Path) -> list[Submission]:
    """The submissions of a folder, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GraphError(f"submissions folder {folder} does not exist or is not a folder")
    subs = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in _IGNORED_DIRS:
            continue
        if entry.is_dir():
            files = sorted(p for p in entry.rglob("*") if _wanted(p)
                           and not any(part in _IGNORED_DIRS or part.startswith(".") for part in p.relative_to(entry).parts))
            if files:
                subs.append(Submission(entry.name, files))
        elif _wanted(entry):
            subs.append(Submission(entry.name, [entry]))
    return subs


def _read_events(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut short by a crash
    return events


def _tail(path: Path, chars: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " ".join(text[-chars:].split())


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "was killed after the hard time limit"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def grade_submission(sub: Submission, exercises: list[Exercise], *, timeout: float = 30.0, seed: int = 0) -> Submission:
    """Fill ``sub.results`` (exercise id -> status, score, message) by running workers until every
    exercise has an answer."""
    start = time.perf_counter()
    env = {**os.environ, "DEVPLACE_FAST": "1", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    by_id = {e.id: e for e in exercises}
    remaining = [e.id for e in exercises]
    with tempfile.TemporaryDirectory(prefix="devplace-grade-") as tmp:
        for attempt in range(len(exercises) + 1):
            if not remaining:
                break
            events_path, log_path = Path(tmp) / f"events{attempt}.jsonl", Path(tmp) / f"log{attempt}.txt"
            work = Path(tmp) / f"work{attempt}"
            work.mkdir()
            cmd = [sys.executable, "-m", "devplace_lite.exercises.runner", *map(str, (p.resolve() for p in sub.paths)),
                   "--ids", ",".join(remaining), "--out", str(events_path), "--seed", str(seed),
                   "--timeout", str(timeout)]
            limit = timeout * (len(remaining) + 1) + 20.0  # load + every exercise + interpreter start
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    code: int | None = proc.wait(timeout=limit)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    code = None
            events = _read_events(events_path)
            loaded = next((e for e in events if e["event"] == "loaded"), None)
            if loaded is not None and attempt == 0:
                sub.notes.extend(loaded["notes"])
            current = None
            for e in events:
                if e["event"] == "start":
                    current = e["id"]
                elif e["event"] == "result":
                    sub.results[e["id"]] = {k: e[k] for k in ("status", "score", "message")}
                    current = None
            remaining = [i for i in remaining if i not in sub.results]
            if not remaining:
                break
            why = _exit_reason(code)
            status = "timeout" if code is None else "crashed"
            if loaded is None:  # died while loading: nothing can be graded
                output = _tail(log_path)
                sub.notes.append(f"the submission's process {why} while loading it" + (f"; last output: {output}" if output else ""))
                for i in remaining:
                    sub.results[i] = {"status": status, "score": 0.0,
                                      "message": f"{i} {by_id[i].name}: not graded, the submission {why} while loading"}
                break
            if current is None:  # died between exercises (should not happen); blame the next one
                current = remaining[0]
            output = _tail(log_path)
            sub.results[current] = {"status": status, "score": 0.0,
                                    "message": f"{current} {by_id[current].name}: the process {why}"
                                               + (f"; last output: {output}" if output else "")}
            remaining = [i for i in remaining if i != current]
    sub.results = {e.id: sub.results[e.id] for e in exercises}
    sub.seconds = time.perf_counter() - start
    return sub


def grade_folder(folder: Path, exercises: list[Exercise], *, timeout: float = 30.0, seed: int = 0,
                 jobs: int = 1) -> list[Submission]:
    """Grade every submission of ``folder`` on ``exercises``, ``jobs`` at a time."""
    if not exercises:
        raise GraphError("no exercises to grade")
    if timeout <= 0:
        raise GraphError(f"--timeout must be positive, got {timeout}")
    subs = discover(folder)
    with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool:
        list(pool.map(lambda s: grade_submission(s, exercises, timeout=timeout, seed=seed), subs))
    return subs


SHORT = {"passed": None, "failed": None, "not attempted": "n/a", "missing": "missing", "timeout": "timeout",
         "crashed": "crashed", "error": "error"}


def table(subs: list[Submission], exercises: list[Exercise]) -> str:
    """A plain-text score table: one row per submission, one column per exercise, and the total."""
    head = ["submission"] + [e.id for e in exercises] + ["total"]
    rows = []
    for s in subs:
        cells = [s.name]
        for e in exercises:
            r = s.results[e.id]
            cells.append(SHORT.get(r["status"]) or f"{r['score']:.2f}")
        cells.append(f"{s.total:.2f}/{len(exercises)}")
        rows.append(cells)
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])
