"""The grader as a pytest plugin: one test per (submission file, exercise).

    pytest -p devplace_course.exercises.pytest_plugin SUBMISSIONS_DIR --grade-seed-file SECRET
           [--grade-chapter 01] [--grade-exercise 01.2 ...] [--grade-course course.toml]
           [--grade-timeout 30] [--grade-load-timeout 120] [--junitxml grades.xml]
           [-n 4 --dist loadfile]

Each ``.py``, ``.ipynb`` or ``.md`` file under the folder is one submission, graded exactly as
``devplace grade`` does (`devplace_course.exercises.grading`: sandboxed, on the instances of your
secret seed, checked outside the submission); a test passes when its exercise passes, and fails
with the check's feedback otherwise. The share of instances right is recorded as the ``score``
property, the marks as ``points`` (in ``--junitxml`` reports, for course platforms). With xdist,
use ``--dist loadfile`` so that a submission is graded by one worker only. Folders holding one
learner's several files, and files named ``test_*.py`` (which pytest imports itself), are for
``devplace grade``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .worker import SUFFIXES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("devplace-grade", "grading exercise submissions (devplace_lite)")
    group.addoption("--grade-chapter", default=None, help="only this chapter's exercises (e.g. 01)")
    group.addoption("--grade-exercise", action="append", default=None, help="only this exercise (repeatable)")
    group.addoption("--grade-course", default=None, help="course file (TOML): exercises, points, limits")
    group.addoption("--grade-timeout", type=float, default=None, help="seconds per exercise (default 30)")
    group.addoption("--grade-load-timeout", type=float, default=None, help="seconds to load a submission (default 120)")
    group.addoption("--grade-seed", type=int, default=None, help="your secret seed of the instances")
    group.addoption("--grade-seed-file", default=None, help="a file holding your secret seed")
    group.addoption("--grade-unsafe-no-sandbox", action="store_true", help="grade without bubblewrap")


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    name = file_path.name
    if (file_path.suffix in SUFFIXES and not name.startswith((".", "test_", "conftest"))
            and not name.upper().startswith("README") and ".ipynb_checkpoints" not in file_path.parts
            and not file_path.is_symlink()):
        return SubmissionFile.from_parent(parent, path=file_path)
    return None


def _plan(config: pytest.Config):
    """The grading plan of this run, made once (instances drawn, sandbox found)."""
    plan = getattr(config, "_devplace_plan", None)
    if plan is None:
        from .core import exercises, get
        from .course import Course, load_course
        from .grading import Plan, resolve_seed

        opt = config.getoption
        course = load_course(opt("--grade-course")) if opt("--grade-course") else Course()
        chosen = [get(i) for i in course.marks] if course.marks else exercises()
        if opt("--grade-chapter"):
            chosen = [e for e in chosen if e.chapter == f"{int(opt('--grade-chapter')):02d}"]
        if opt("--grade-exercise"):
            wanted = {get(i).id for i in opt("--grade-exercise")}
            chosen = [e for e in chosen if e.id in wanted]
        seed_file = opt("--grade-seed-file") if opt("--grade-seed-file") or opt("--grade-seed") is not None \
            else course.seed_file
        plan = Plan(chosen, resolve_seed(opt("--grade-seed"), seed_file),
                    timeout=opt("--grade-timeout") or course.timeout or 30.0,
                    load_timeout=opt("--grade-load-timeout") or course.load_timeout or 120.0,
                    limits=course.limits, course=course, unsafe=opt("--grade-unsafe-no-sandbox")).prepare()
        config._devplace_plan = plan
    return plan


class SubmissionFile(pytest.File):
    """A submission; graded once, the first time one of its tests runs."""

    _graded = None

    def collect(self):
        for ex in _plan(self.config).exercises:
            yield ExerciseItem.from_parent(self, name=f"{ex.id} {ex.name}", exercise=ex)

    def graded(self):
        if self._graded is None:
            from .grading import Submission, grade_submission

            self._graded = grade_submission(Submission(self.path.name, [self.path]), _plan(self.config))
        return self._graded


class ExerciseFailed(Exception):
    """The exercise did not pass; the message is the check's feedback."""


class ExerciseItem(pytest.Item):
    def __init__(self, *, exercise, **kwargs) -> None:
        super().__init__(**kwargs)
        self.exercise = exercise

    def runtest(self) -> None:
        record = self.parent.graded().results[self.exercise.id]
        for key in ("score", "status", "points"):
            self.user_properties.append((key, record[key]))
        if record["status"] != "passed":
            raise ExerciseFailed(record["message"])

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, ExerciseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.exercise.id} {self.exercise.name}"
