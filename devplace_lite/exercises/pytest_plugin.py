"""The grader as a pytest plugin: one test per (submission file, exercise).

    pytest -p devplace_lite.exercises.pytest_plugin SUBMISSIONS_DIR [--grade-chapter 01]
           [--grade-timeout 30] [--grade-seed 0] [--junitxml grades.xml] [-n 4 --dist loadfile]

Each ``.py``, ``.ipynb`` or ``.md`` file under the folder is one submission, graded in a child
process exactly as ``devplace grade`` does (`devplace_lite.exercises.grading`); a test passes
when its exercise passes, and fails with the check's feedback otherwise. The share of instances
right is recorded as the ``score`` property (in ``--junitxml`` reports, for course platforms).
With xdist, use ``--dist loadfile`` so that a submission is graded by one worker only. Folders
holding one learner's several files, and files named ``test_*.py`` (which pytest imports
itself), are for ``devplace grade``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import SUFFIXES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("devplace-grade", "grading exercise submissions (devplace_lite)")
    group.addoption("--grade-chapter", default=None, help="only this chapter's exercises (e.g. 01)")
    group.addoption("--grade-timeout", type=float, default=30.0, help="seconds per exercise")
    group.addoption("--grade-seed", type=int, default=0, help="seed of the instances")


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    name = file_path.name
    if (file_path.suffix in SUFFIXES and not name.startswith((".", "test_", "conftest"))
            and not name.upper().startswith("README") and ".ipynb_checkpoints" not in file_path.parts):
        return SubmissionFile.from_parent(parent, path=file_path)
    return None


class SubmissionFile(pytest.File):
    """A submission; graded once, the first time one of its tests runs."""

    _graded = None

    def collect(self):
        from . import exercises

        for ex in exercises(self.config.getoption("--grade-chapter")):
            yield ExerciseItem.from_parent(self, name=f"{ex.id} {ex.name}", exercise=ex)

    def graded(self):
        if self._graded is None:
            from . import exercises
            from .grading import Submission, grade_submission

            chosen = exercises(self.config.getoption("--grade-chapter"))
            self._graded = grade_submission(Submission(self.path.name, [self.path]), chosen,
                                            timeout=self.config.getoption("--grade-timeout"),
                                            seed=self.config.getoption("--grade-seed"))
        return self._graded


class ExerciseFailed(Exception):
    """The exercise did not pass; the message is the check's feedback."""


class ExerciseItem(pytest.Item):
    def __init__(self, *, exercise, **kwargs) -> None:
        super().__init__(**kwargs)
        self.exercise = exercise

    def runtest(self) -> None:
        record = self.parent.graded().results[self.exercise.id]
        self.user_properties.append(("score", record["score"]))
        self.user_properties.append(("status", record["status"]))
        if record["status"] != "passed":
            raise ExerciseFailed(record["message"])

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, ExerciseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.exercise.id} {self.exercise.name}"
