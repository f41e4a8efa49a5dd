"""Grade a folder of submissions: each one sandboxed, on hidden instances, checked outside it.

A *submission* is one entry of the folder: a ``.py`` file, a notebook (``.ipynb`` or a MyST
``.md``), or a sub-folder whose such files are loaded together (one per learner, as course
platforms download them). It defines the exercise functions under their registered names
(``devplace grade --list``; e.g. ``my_max_load`` for exercise 01.2). Hidden files, ``README*``,
``__pycache__``, ``.ipynb_checkpoints`` and symbolic links are ignored.

How a submission is graded:

1. The instances come from the instructor's secret seed (`resolve_seed`; never the book's seed
   0, whose instances students saw), with the reference's answers, computed here once per run.
2. The submission runs in its own `devplace_course.exercises.sandbox.Session`: its worker loads it
   (within ``load_timeout`` seconds: imports, notebook set-up), then is sent one instance at a
   time (the arguments only, never the answer) and sends back the function's answer as JSON.
   Each exercise has ``timeout`` seconds in all, on the submission's clock
   (`devplace_course.exercises.sandbox.RunClock`: time it runs or sleeps; time it waits for a CPU
   that the machine's other processes hold is not counted, so a loaded machine does not fail a
   quick answer), and at most three times that of wall time. A runaway (endless loop, memory, processes,
   output) is killed with its whole process tree and scores 0 on that exercise; a new sandbox
   grades the exercises after it.
3. The answers are judged here, outside the submission (`devplace_course.exercises.core.assess`):
   nothing the submission does can change the checker or forge a result.
4. An exercise whose function calls the library's own answer (`devplace_course.exercises.guard`:
   statically, or caught calling it at run time) is flagged as a copy and scores 0.

Cost: a sandbox start and a load per submission (a few seconds: Python and numpy start in the
sandbox), plus one per runaway; ``jobs`` submissions at once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devplace_lite.errors import DevplaceError, UsageError
from devplace_lite.files import read_input, write_text_atomic
from . import answers
from .core import NOT_ATTEMPTED, Case, Exercise, Outcome, assess
from .course import Course
from .sandbox import Died, Limits, Session, describe, kill_open, require_sandbox, worker_failed
from .worker import SUFFIXES

_IGNORED_DIRS = {"__pycache__", ".ipynb_checkpoints"}
#: how the feedback's rebuild line names the grading seed (the seed itself stays the instructor's)
SEED_TEXT = ", seed=GRADING_SEED"
#: statuses that score 0 whatever the check said
RUNAWAY = ("timeout", "memory", "output", "crashed")
#: the largest seed file read, in bytes (a number or a pass phrase)
SEED_FILE_BYTES = 1 << 16


@dataclass
class Submission:
    """One learner's files and what grading found."""

    name: str
    paths: list[Path]
    results: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> float:
        return sum(r["points"] for r in self.results.values())

    def to_dict(self) -> dict:
        return {"submission": self.name, "files": [p.name for p in self.paths], "total": self.total,
                "seconds": round(self.seconds, 3), "notes": self.notes, "review": self.review, "results": self.results}


@dataclass
class Plan:
    """What to grade and how: the exercises, the secret seed, budgets, limits, marks."""

    exercises: list[Exercise]
    seed: int
    timeout: float = 30.0
    load_timeout: float = 120.0
    limits: Limits = field(default_factory=Limits)
    course: Course = field(default_factory=Course)
    unsafe: bool = False
    bwrap: str | None = None
    instances: dict[str, list[Case]] = field(default_factory=dict)

    def prepare(self) -> "Plan":
        """Check the settings, find the sandbox (or refuse), and draw the instances with their answers."""
        if not self.exercises:
            raise UsageError("no exercises to grade")
        for name in ("timeout", "load_timeout"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        self.bwrap = require_sandbox(self.unsafe)
        for ex in self.exercises:
            if ex.id not in self.instances:
                self.instances[ex.id] = [ex.case(i, self.seed) for i in range(ex.n)]
        return self

    @property
    def cpu_seconds(self) -> int:
        """CPU time of any one process of a session: enough for loading and every exercise."""
        return int(self.load_timeout + self.timeout * len(self.exercises) + 60)

    def max_points(self, ex_id: str) -> float:
        return self.course.mark(ex_id).points


def resolve_seed(seed: int | None = None, seed_file: str | Path | None = None) -> int:
    """The instructor's grading seed: ``--seed N`` or the contents of ``--seed-file`` (a number, or
    any text, hashed); `UsageError` when there is none or it is the book's seed 0."""
    if seed is not None and seed_file is not None:
        raise UsageError("give --seed or --seed-file, not both")
    if seed_file is not None:
        try:  # a regular file of a few bytes: a FIFO would block and /dev/zero fill memory
            text = read_input(seed_file, limit=SEED_FILE_BYTES).decode("utf-8").strip()
        except DevplaceError as e:
            raise UsageError(f"seed file: {e}") from None
        except UnicodeDecodeError:
            raise UsageError(f"seed file {seed_file}: not UTF-8 text") from None
        if not text:
            raise UsageError(f"seed file {seed_file} is empty")
        seed = int(text) if text.isdigit() else int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) + 1
    if seed is None:
        raise UsageError("grading needs your secret seed: --seed N or --seed-file FILE (or seed_file in the course "
                         "file); the book's instances, seed 0, are the ones students saw")
    if seed == 0:
        raise UsageError("seed 0 is the book's: students saw those instances; pick a secret seed of your own")
    if seed < 0:
        raise UsageError(f"the seed must be a positive integer, got {seed}")
    return seed


# -- finding the submissions ----------------------------------------------------------------------------
def _wanted(p: Path) -> bool:
    return (not p.is_symlink() and p.is_file() and p.suffix in SUFFIXES and not p.name.startswith(".")
            and not p.name.upper().startswith("README"))


def discover(folder: Path) -> list[Submission]:
    """The submissions of a folder, sorted by name (symbolic links are never followed)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"submissions folder {folder} does not exist or is not a folder")
    subs = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in _IGNORED_DIRS or entry.is_symlink():
            continue
        if entry.is_dir():
            files = []
            for root, dirs, names in os.walk(entry):  # os.walk does not follow links to folders
                dirs[:] = sorted(d for d in dirs if d not in _IGNORED_DIRS and not d.startswith("."))
                files += [Path(root) / n for n in sorted(names) if _wanted(Path(root) / n)]
            if files:
                subs.append(Submission(entry.name, files))
        elif _wanted(entry):
            subs.append(Submission(entry.name, [entry]))
    return subs


# -- grading one submission -----------------------------------------------------------------------------
class _Stop(Exception):
    """An exercise was stopped (its time is up): the session is killed, the next one goes on."""


def _outcome(event: dict) -> Outcome:
    if event.get("not_implemented"):
        return Outcome(not_implemented=True)
    if "error" in event:
        return Outcome(error=str(event["error"])[:500])
    try:
        return Outcome(got=answers.decode(event.get("value")))
    except answers.AnswerError as e:
        return Outcome(error=f"returned {e}")


def _record(plan: Plan, ex: Exercise, status: str, score: float, message: str) -> dict:
    result = {"status": status, "score": score, "message": message, "points": 0.0, "max_points": plan.max_points(ex.id)}
    result["points"] = plan.course.mark(ex.id).earned(result)
    return result


def _judge(plan: Plan, ex: Exercise, outcomes: list[Outcome], copies: list[str]) -> dict:
    cases = plan.instances[ex.id]
    res = assess(ex, cases[: len(outcomes)], outcomes, seed_text=SEED_TEXT)
    status, score, message = res.status, res.score, res.message
    if status == NOT_ATTEMPTED:
        score = 0.0
    memory = next((i for i, o in enumerate(outcomes) if o.error and o.error.startswith("MemoryError")), None)
    if memory is not None:
        status, score = "memory", 0.0
        message = f"{ex.id} {ex.name}: ran out of memory (limit {plan.limits.memory_mb} MB) on instance #{memory}: stopped"
    return _flagged(_record(plan, ex, status, score, message), copies)


def _flagged(result: dict, copies: list[str] | None) -> dict:
    """``result`` as a copy (0 points) when the guard found the library's answer in use."""
    if not copies:
        return result
    head = result["message"].split(":")[0]
    return {**result, "status": "copy", "score": 0.0, "points": 0.0,
            "message": f"{head}: flagged as a copy, scored 0: it uses the library's own answer: " + "; ".join(copies[:3])
                       + f". (Its answers alone: {result['status']}, score {result['score']:.2f}.)"}


def grade_submission(sub: Submission, plan: Plan, halt: threading.Event | None = None) -> Submission:
    """Fill ``sub.results`` (exercise id -> status, score, points, message), sandbox after sandbox
    until every exercise has an answer. ``plan`` must be prepared (`Plan.prepare`). Once ``halt``
    is set no new sandbox starts and ``sub`` is returned as it stands."""
    start = time.perf_counter()
    by_id = {e.id: e for e in plan.exercises}
    todo = [e.id for e in plan.exercises]
    copies: dict[str, list[str]] = {}
    first, printed = True, 0
    while todo:
        if halt is not None and halt.is_set():
            return sub
        with Session(sub.paths, plan.limits, plan.cpu_seconds, plan.bwrap) as session:
            if first:
                sub.notes += session.stage_notes
            loaded = _load(session, sub, plan, todo, by_id, copies, first)  # None: todo is cleared
            first = False
            while todo:
                ex = by_id[todo.pop(0)]
                if ex.id not in loaded["defined"]:
                    sub.results[ex.id] = _record(plan, ex, "missing", 0.0,
                                                 f"{ex.id} {ex.name}: the submission defines no function {ex.name}")
                    continue
                try:
                    outcomes = _run_exercise(session, ex, plan, copies)
                except _Stop as stop:
                    sub.results[ex.id] = _flagged(_record(plan, ex, "timeout", 0.0, f"{ex.id} {ex.name}: {stop}"),
                                                  copies.get(ex.id))
                    break  # the session is killed; the next one grades the rest
                except Died as died:
                    status, _, why = died.why.partition(": ")
                    output = session.output()
                    sub.results[ex.id] = _flagged(_record(plan, ex, status, 0.0, f"{ex.id} {ex.name}: {why} on this exercise"
                                                  + (f"; its last output: {' '.join(output[-300:].split())}" if output else "")),
                                                  copies.get(ex.id))
                    break
                sub.results[ex.id] = _judge(plan, ex, outcomes, copies.get(ex.id, []))
        printed += session.output_bytes  # read to the end once the session is over
    if printed:
        sub.notes.append(f"printed {printed} bytes (not graded)")
    sub.results = {e.id: sub.results[e.id] for e in plan.exercises}
    sub.seconds = time.perf_counter() - start
    return sub


def _note_copy(copies: dict[str, list[str]], event: dict) -> None:
    found = copies.setdefault(str(event.get("id")), [])
    line = f"at run time, {str(event.get('what'))[:200]}"
    if line not in found:
        found.append(line)


def _load(session: Session, sub: Submission, plan: Plan, todo: list[str], by_id: dict[str, Exercise],
          copies: dict[str, list[str]], first: bool) -> dict | None:
    """Start the worker on the submission; its ``loaded`` event, or None (every exercise left is then
    recorded as not graded, with why)."""
    exercises = {i: (by_id[i].name, list(by_id[i].forbidden)) for i in todo}
    deadline = session.deadline(plan.load_timeout)
    static_seen = ready = False  # both come before any submission code runs; a later one is forged
    try:
        session.send({"op": "setup", "exercises": exercises, "files": session.inside})
        while True:
            event = session.next_event(deadline)
            if event is None:
                why, status = (f"loading took more than {plan.load_timeout:g} s (the load timeout: imports, notebook "
                               f"set-up, top-level code), stopped"), "timeout"
                break
            kind = event.get("event")
            if kind == "ready":
                ready = True
            elif kind == "static" and not static_seen:
                static_seen = True
                for ex_id, found in (event.get("copies") or {}).items():
                    copies.setdefault(str(ex_id), []).extend(str(f) for f in found if str(f) not in copies.get(str(ex_id), []))
                if first:
                    sub.review = [str(x) for x in event.get("review") or []]
            elif kind == "copy":
                _note_copy(copies, event)
            elif kind == "loaded":
                if first:
                    sub.notes += [str(n) for n in event.get("notes") or []]
                event["defined"] = {str(x) for x in event.get("defined") or []}
                return event
    except Died as died:
        if not ready:
            raise worker_failed(session, died) from None
        status, _, why = died.why.partition(": ")
        output = session.output()
        why = f"{why} while loading" + (f"; last output: {' '.join(output[-300:].split())}" if output else "")
    sub.notes.append(f"the submission could not be loaded: {why}")
    for ex_id in todo:
        sub.results[ex_id] = _record(plan, by_id[ex_id], status, 0.0, f"{ex_id} {by_id[ex_id].name}: not graded: {why}")
    todo.clear()
    return None


def _run_exercise(session: Session, ex: Exercise, plan: Plan, copies: dict[str, list[str]]) -> list[Outcome]:
    """The learner's answers on every instance of ``ex``, within the exercise's time."""
    deadline = session.deadline(plan.timeout)
    outcomes: list[Outcome] = []

    def wait(kind: str, i: int | None = None) -> dict:
        while True:
            event = session.next_event(deadline)
            if event is None:
                forks = session.cgroup is not None and session.cgroup.hit_process_limit()
                session.kill()
                raise _Stop(f"stopped after {plan.timeout:g} s (the time per exercise) on instance #{len(outcomes)} "
                            f"of {ex.n}: " + (f"it kept starting processes, up to the limit of {plan.limits.processes}"
                                              if forks else "an endless loop, or far too slow?"))
            if event.get("event") == "copy":
                _note_copy(copies, event)
            elif event.get("event") == kind and event.get("id") == ex.id and (i is None or event.get("i") == i):
                return event

    for i, case in enumerate(plan.instances[ex.id]):
        session.send({"op": "call", "id": ex.id, "i": i, "case": Case(case.args, case.kwargs)})  # never the answer
        outcomes.append(_outcome(wait("answer", i)))
        if (i == 0 and outcomes[0].not_implemented) or (outcomes[-1].error or "").startswith("MemoryError"):
            break  # not attempted; or a memory hog, stopped at its first try
    session.send({"op": "end", "id": ex.id})
    wait("ended")
    return outcomes


def grade_folder(folder: Path, plan: Plan, *, jobs: int = 1) -> list[Submission]:
    """Grade every submission of ``folder``, ``jobs`` at a time (``plan`` is prepared here)."""
    plan.prepare()
    subs = discover(folder)
    halt = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, int(jobs)))
    try:
        for done in [pool.submit(grade_submission, s, plan, halt) for s in subs]:
            done.result()
    except BaseException:  # SIGTERM or Ctrl-C in the caller: stop the sandboxes, not wait for them
        halt.set()
        kill_open()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return subs


# -- reports ---------------------------------------------------------------------------------------------
SHORT = {"passed": None, "failed": None, NOT_ATTEMPTED: "n/a", "missing": "missing", "timeout": "timeout",
         "crashed": "crashed", "memory": "memory", "output": "output", "copy": "COPY"}


def table(subs: list[Submission], plan: Plan) -> str:
    """A plain-text table: one row per submission, the points of each exercise (or why none), the total."""
    exercises = plan.exercises
    out_of = sum(plan.max_points(e.id) for e in exercises)
    head = ["submission"] + [e.id for e in exercises] + ["total"]
    rows = []
    for s in subs:
        cells = [s.name]
        for e in exercises:
            r = s.results[e.id]
            cells.append(SHORT.get(r["status"]) or f"{r['points']:.2f}")
        cells.append(f"{s.total:.2f}/{out_of:g}")
        rows.append(cells)
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def flags(sub: Submission) -> str:
    """What an instructor should look at, in one cell: a failed load, copies, runaways, review notes."""
    out = [n[:200] for n in sub.notes if n.startswith("the submission could not be loaded")]
    out += [f"{ex_id} {r['status']}" for ex_id, r in sub.results.items() if r["status"] in ("copy", *RUNAWAY)]
    if sub.review:
        out.append("review: " + ", ".join(sub.review[:5]))
    return "; ".join(out)


def csv_text(subs: list[Submission], plan: Plan) -> str:
    """The grade sheet: one row per submission, one column per exercise (points), the total, flags."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["submission"] + [e.id for e in plan.exercises] + ["total", "out_of", "flags"])
    out_of = sum(plan.max_points(e.id) for e in plan.exercises)
    for s in subs:
        w.writerow([s.name] + [f"{s.results[e.id]['points']:g}" for e in plan.exercises] + [f"{s.total:g}", f"{out_of:g}",
                                                                                             flags(s)])
    return buf.getvalue()


def gradescope_results(sub: Submission, plan: Plan) -> dict[str, Any]:
    """A Gradescope-style ``results.json`` for one submission (score, and one test per exercise)."""
    tests = [{"name": f"{e.id} {e.name}", "score": sub.results[e.id]["points"], "max_score": plan.max_points(e.id),
              "status": "passed" if sub.results[e.id]["status"] == "passed" else "failed",
              "output": sub.results[e.id]["message"]} for e in plan.exercises]
    return {"score": sub.total, "output": "\n".join(sub.notes), "tests": tests}


def results_paths(names: list[str], path: str | os.PathLike) -> list[Path]:
    """Where `write_results` writes Gradescope's ``results.json`` for the submissions ``names``:
    ``path`` itself for one submission (unless it is a folder or is spelled with a trailing
    ``/``), else ``NAME.json`` in the folder ``path``, one per submission. ``NAME`` is the
    submission's name less its suffix, or the whole name where that would be shared (``a.py``
    and ``a.md`` would both write ``a.json``).

    Raises
    ------
    UsageError
        Several submissions and ``path`` is a file, not a folder.
    """
    text = os.fspath(path)
    path = Path(path)
    if len(names) == 1 and not path.is_dir() and not text.endswith((os.sep, "/")):
        return [path]
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"--results-json {text}: {len(names)} submissions need a folder (one file each), "
                         "and this is not one")
    stems = Counter(Path(n).stem for n in names)
    full = set(names)

    def own(name: str) -> str:
        stem = Path(name).stem
        return stem if stems[stem] == 1 and (stem == name or stem not in full) else name

    return [path / f"{own(n)}.json" for n in names]


def write_results(subs: list[Submission], plan: Plan, path: str | os.PathLike) -> list[Path]:
    """Gradescope ``results.json``: the file itself for one submission, else one ``NAME.json`` each
    in the folder ``path`` (`results_paths`)."""
    targets = results_paths([s.name for s in subs], path)
    if targets != [Path(path)]:
        Path(path).mkdir(parents=True, exist_ok=True)
    for s, target in zip(subs, targets):
        write_text_atomic(target, json.dumps(gradescope_results(s, plan), indent=1) + "\n")
    return targets


def header(plan: Plan) -> str:
    """How this run graded: the sandbox and its limits, the budgets, the seed's source."""
    return (f"{describe(plan.bwrap, plan.limits)}\nhidden instances from your secret seed; {plan.load_timeout:g} s to "
            f"load a submission, {plan.timeout:g} s per exercise (time the submission runs or sleeps, not time it "
            "waits for a busy CPU)")
