"""A course file: which exercises count, their points and pass thresholds, the grading settings.

A small TOML file (read with the standard library's ``tomllib``)::

    [grading]
    seed_file = "grading-seed.txt"   # your secret; relative to this file (or give --seed/--seed-file)
    timeout = 30                     # seconds per exercise
    load_timeout = 120               # seconds to load a submission (imports, notebook set-up)

    [limits]                         # per submission; these are the defaults
    memory_mb = 2048
    processes = 64
    file_mb = 16
    scratch_mb = 64
    output_kb = 1024

    [exercises]                      # graded in this order; points default to 1
    "01.2" = { points = 4 }
    "01.3" = { points = 3, pass = 0.9 }                   # full points from 90 % of instances right
    "02.3" = { points = 5, pass = 1.0, partial = false }  # all or nothing

Marks: an exercise earns its ``points`` when its score (share of instances right) is at least
``pass`` (default 1.0); below, ``points x score`` when ``partial`` (the default), else 0. A copy,
a timeout, a crash, a missing function earn 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devplace_lite.errors import DevplaceError, UsageError
from devplace_lite.files import read_input
from .sandbox import Limits

#: The largest course file read, in bytes.
COURSE_FILE_BYTES = 1 << 20
_GRADING_KEYS = {"seed_file", "timeout", "load_timeout"}


@dataclass
class Mark:
    """How one exercise is marked."""

    points: float = 1.0
    pass_at: float = 1.0
    partial: bool = True

    def earned(self, result: dict[str, Any]) -> float:
        if result["status"] not in ("passed", "failed"):
            return 0.0
        score = float(result["score"])
        if score >= self.pass_at - 1e-12:
            return self.points
        return self.points * score if self.partial else 0.0


@dataclass
class Course:
    """What a course file says (every field optional)."""

    marks: dict[str, Mark] = field(default_factory=dict)
    seed_file: Path | None = None
    timeout: float | None = None
    load_timeout: float | None = None
    limits: Limits = field(default_factory=Limits)

    def mark(self, ex_id: str) -> Mark:
        return self.marks.get(ex_id, Mark())


def _number(where: str, value: Any, low: float = 0.0, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low \
            or (integer and int(value) != value):
        kind = "an integer" if integer else "a number"
        raise UsageError(f"course file: {where} must be {kind} of at least {low:g}, got {value!r}")
    return value


def load_course(path: str | Path) -> Course:
    """Read and check a course file; `UsageError` (one line naming the field) when it is wrong."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise UsageError("course files need Python 3.11, or the tomli package on 3.10") from None

    from .core import get

    path = Path(path)
    try:  # a regular file of at most COURSE_FILE_BYTES: a FIFO would block and /dev/zero fill memory
        data = tomllib.loads(read_input(path, limit=COURSE_FILE_BYTES).decode("utf-8"))
    except DevplaceError as e:
        raise UsageError(f"course file: {e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"course file {path}: not TOML: {e}") from None
    unknown = set(data) - {"grading", "limits", "exercises"}
    if unknown:
        raise UsageError(f"course file {path}: unknown section {sorted(unknown)[0]!r} (grading, limits, exercises)")
    course = Course()
    grading = data.get("grading", {})
    if set(grading) - _GRADING_KEYS:
        raise UsageError(f"course file: unknown key grading.{sorted(set(grading) - _GRADING_KEYS)[0]}")
    if "seed_file" in grading:
        course.seed_file = (path.parent / str(grading["seed_file"])).resolve()
    for key in ("timeout", "load_timeout"):
        if key in grading:
            setattr(course, key, float(_number(f"grading.{key}", grading[key], 1e-3)))
    limits = data.get("limits", {})
    fields = set(Limits.__dataclass_fields__)
    if set(limits) - fields:
        raise UsageError(f"course file: unknown key limits.{sorted(set(limits) - fields)[0]} ({', '.join(sorted(fields))})")
    course.limits = Limits(**{k: int(_number(f"limits.{k}", v, 1, integer=True)) for k, v in limits.items()})
    for ex_id, spec in data.get("exercises", {}).items():
        get(ex_id)  # an unknown id is a UsageError naming the known ones
        if not isinstance(spec, dict) or set(spec) - {"points", "pass", "partial"}:
            raise UsageError(f"course file: exercises.{ex_id} takes points, pass and partial, got {spec!r}")
        pass_at = float(_number(f"exercises.{ex_id}.pass", spec.get("pass", 1.0)))
        if pass_at > 1:
            raise UsageError(f"course file: exercises.{ex_id}.pass is a share of instances, at most 1, got {pass_at}")
        partial = spec.get("partial", True)
        if not isinstance(partial, bool):
            raise UsageError(f"course file: exercises.{ex_id}.partial must be true or false, got {partial!r}")
        course.marks[ex_id] = Mark(float(_number(f"exercises.{ex_id}.points", spec.get("points", 1.0))), pass_at, partial)
    return course
