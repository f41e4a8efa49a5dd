"""The exercise registry and `check`: a learner's function against the reference, case by case.

An `Exercise` ties an id (``"01.2"``: chapter 01, exercise 2) to the name of the function a
learner writes, a reference implementation, a generator of seeded instances, a comparator with
a tolerance and a hint. `check` runs both functions on every instance and reports the first
one where they disagree, with the numbers and, where the exercise knows the usual mistakes, a
diagnosis. A stub that raises ``NotImplementedError`` is *not attempted*: no exception escapes,
so the cells after the check still run (what the student edition relies on).

Cost: ``n`` calls of the reference and of the learner's function, on deep copies of each
instance (a function that mutates its input cannot spoil the comparison).
"""

from __future__ import annotations

import copy
import math
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..graph import GraphError

NOT_ATTEMPTED = "not attempted"
STATUSES = ("passed", "failed", NOT_ATTEMPTED)

#: compare(expected, got) -> None when they agree, else one line saying how they differ
Comparator = Callable[[Any, Any], "str | None"]


@dataclass
class Case:
    """One instance: the arguments of the call and how to rebuild it (shown when it fails)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    text: str = ""


@dataclass
class Exercise:
    """A self-grading coding exercise.

    Parameters
    ----------
    id : str
        ``"NN.x"``: chapter ``NN``, exercise ``x`` as numbered in the chapter (a letter may follow).
    name : str
        The function the learner defines (the grader looks a submission up by this name).
    title : str
        One line for tables.
    reference : callable
        The right answer, called with the case's arguments.
    cases : callable ``(rng, i) -> Case``
        The ``i``-th instance; ``rng`` is seeded by ``(seed, i)`` so each instance can be rebuilt
        alone. Put small and edge cases at small ``i``.
    compare : Comparator
        ``close()`` (numbers within a tolerance, the default), ``exact()``, or your own.
    hint : str
        Shown with every failure.
    diagnose : callable ``(case, expected, got) -> str | None``, optional
        Recognises a typical mistake from the learner's answer and says what it is.
    n : int
        Number of instances `check` runs by default.
    """

    id: str
    name: str
    title: str
    reference: Callable
    cases: Callable[[np.random.Generator, int], Case]
    compare: Comparator = None  # type: ignore[assignment]
    hint: str = ""
    diagnose: Callable[[Case, Any, Any], "str | None"] | None = None
    n: int = 20

    def __post_init__(self) -> None:
        if self.compare is None:
            self.compare = close()

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]

    def case(self, i: int, seed: int = 0) -> Case:
        """The ``i``-th instance for ``seed`` (what `check` ran as instance ``i``)."""
        return self.cases(np.random.default_rng([seed, i]), i)


@dataclass
class CheckResult:
    """What `check` found: ``status``, ``score`` (share of instances right) and a readable ``message``."""

    exercise: str
    name: str
    status: str
    cases: int
    correct: int
    message: str
    failure: dict | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def attempted(self) -> bool:
        return self.status != NOT_ATTEMPTED

    @property
    def score(self) -> float:
        return self.correct / self.cases if self.cases else 0.0

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "name": self.name, "status": self.status, "score": self.score,
                "cases": self.cases, "correct": self.correct, "message": self.message, "failure": self.failure}

    def __repr__(self) -> str:
        return f"CheckResult({self.exercise!r}, {self.status}, score={self.score:.2f})"


# -- comparators -----------------------------------------------------------------------------
def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def close(rtol: float = 1e-9, atol: float = 1e-9) -> Comparator:
    """Numbers, or arrays of numbers, equal within ``atol + rtol * |expected|``."""
    def compare(expected: Any, got: Any) -> str | None:
        if _is_number(expected):
            if not _is_number(got):
                return f"expected a number, got {type(got).__name__} {_short(got)}"
            e, g = float(expected), float(got)
            if e == g or (math.isfinite(e) and abs(g - e) <= atol + rtol * abs(e)):
                return None
            return f"expected {e:.10g}, got {g:.10g} (off by {g - e:+.4g})"
        e = np.asarray(expected, dtype=float)
        try:
            g = np.asarray(got, dtype=float)
        except (TypeError, ValueError):
            return f"expected an array of numbers, got {type(got).__name__} {_short(got)}"
        if g.shape != e.shape:
            return f"expected shape {e.shape}, got shape {g.shape}"
        bad = ~np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        if not bad.any():
            return None
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        at = i[0] if len(i) == 1 else i
        return f"{int(bad.sum())} entr{'y differs' if bad.sum() == 1 else 'ies differ'}; first at [{at}]: expected {e[i]:.10g}, got {g[i]:.10g}"
    return compare


def exact() -> Comparator:
    """Equal by ``==`` (integers, strings, tuples, sets)."""
    def compare(expected: Any, got: Any) -> str | None:
        ok = expected == got
        if isinstance(ok, np.ndarray):
            ok = bool(ok.all()) and np.shape(expected) == np.shape(got)
        return None if ok else f"expected {_short(expected)}, got {_short(got)}"
    return compare


def first_slip(slips: Sequence[tuple[Any, str]], expected: Any, got: Any, rtol: float = 1e-9,
               atol: float = 1e-9) -> str | None:
    """Name the typical mistake behind a wrong answer: ``slips`` pairs what a mistake returns with
    what to tell the learner; the first whose value equals ``got`` (and not ``expected``) speaks."""
    same = close(rtol, atol)
    for value, message in slips:
        if same(value, got) is None and same(value, expected) is not None:
            return message
    return None


def random_topological_order(succ: Sequence[Sequence[int]], rng: np.random.Generator,
                             keep: Sequence[bool] | None = None) -> list[int]:
    """A random topological order of the DAG with successor lists ``succ`` (of the nodes where
    ``keep`` is true, when given): Kahn's sweep, taking the ready node of least random key."""
    n = len(succ)
    keep = np.ones(n, dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    keys = rng.random(n)
    indeg = np.zeros(n, dtype=np.int64)
    for v in np.flatnonzero(keep):
        for w in succ[v]:
            indeg[w] += keep[w]
    ready = [int(v) for v in np.flatnonzero(keep & (indeg == 0))]
    order = []
    while ready:
        v = min(ready, key=lambda x: keys[x])
        ready.remove(v)
        order.append(v)
        for w in succ[v]:
            if keep[w]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    ready.append(int(w))
    return order


def _short(x: Any, limit: int = 120) -> str:
    s = repr(x)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# -- the registry ----------------------------------------------------------------------------
REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise | None = None, /, **fields: Any) -> Exercise:
    """Add an exercise (an `Exercise`, or its fields as keywords). Ids and names must be new."""
    ex = exercise if exercise is not None else Exercise(**fields)
    if ex.id in REGISTRY:
        raise ValueError(f"exercise {ex.id} is registered twice")
    if ex.name in {e.name for e in REGISTRY.values()}:
        raise ValueError(f"exercise {ex.id}: function name {ex.name!r} is already used")
    REGISTRY[ex.id] = ex
    return ex


def _load_chapter_modules() -> None:
    """Import every ``chNN`` module of this package (each registers its chapter's exercises)."""
    import importlib
    import pkgutil

    from . import __path__ as pkg_path

    for mod in sorted(pkgutil.iter_modules(pkg_path), key=lambda m: m.name):
        if mod.name.startswith("ch") and mod.name[2:].isdigit():
            importlib.import_module(f"{__package__}.{mod.name}")


def exercises(chapter: str | None = None) -> list[Exercise]:
    """All registered exercises (of one chapter, ``"01"`` or ``1``), ordered by id."""
    _load_chapter_modules()
    chosen = [e for e in REGISTRY.values() if chapter is None or e.chapter == f"{int(chapter):02d}"]
    return sorted(chosen, key=lambda e: _id_key(e.id))


def _id_key(ex_id: str) -> tuple:
    ch, _, rest = ex_id.partition(".")
    digits = "".join(c for c in rest if c.isdigit())
    return (ch, int(digits or 0), rest)


def get(ex_id: str) -> Exercise:
    """The exercise with this id; `GraphError` (one line, lists the known ids) when unknown."""
    ex_id = str(ex_id)
    if ex_id not in REGISTRY:
        _load_chapter_modules()
    if ex_id not in REGISTRY:
        raise GraphError(f"unknown exercise {ex_id!r}; known: {', '.join(e.id for e in exercises())}")
    return REGISTRY[ex_id]


def instance(ex_id: str, i: int, seed: int = 0) -> Case:
    """Rebuild instance ``i`` of a check, to debug a failure: ``f(*case.args, **case.kwargs)``."""
    return get(ex_id).case(i, seed)


# -- check -----------------------------------------------------------------------------------
def _error_line(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (line {tb[-1].lineno} of {tb[-1].name})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def check(ex_id: str, fn: Callable, *, n: int | None = None, seed: int = 0, quiet: bool = False) -> CheckResult:
    """Run ``fn`` against the reference of exercise ``ex_id`` on ``n`` seeded instances.

    Prints a short report (unless ``quiet``) and returns a `CheckResult`. The report of a
    failure names the first failing instance (how to rebuild it), the expected and the
    returned value, and the exercise's hint. A function raising ``NotImplementedError`` on the
    first instance is *not attempted*: score 0, nothing raised.

    Examples
    --------
    >>> from devplace_lite.exercises import check
    >>> def my_total_work(graph):
    ...     return sum(v.p_acc for v in graph.nodes)
    >>> check("00.1", my_total_work, quiet=True).passed
    True
    """
    ex = get(ex_id)
    if not callable(fn):
        raise TypeError(f"check({ex_id!r}, ...) needs the function {ex.name}, got {type(fn).__name__}")
    total = ex.n if n is None else int(n)
    if total < 1:
        raise ValueError(f"check({ex_id!r}, ...) needs at least one instance, got n={n}")
    correct, failure, failures = 0, None, 0
    for i in range(total):
        case = ex.case(i, seed)
        expected = ex.reference(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        try:
            got = fn(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        except NotImplementedError:
            if i == 0:
                result = CheckResult(ex.id, ex.name, NOT_ATTEMPTED, total, 0,
                                     f"{ex.id} {ex.name}: not attempted (the function raises NotImplementedError)")
                if not quiet:
                    print(result.message)
                return result
            problem, got = "raised NotImplementedError on this instance", None
        except Exception as exc:  # the learner's bug is the finding, not a crash of the check
            problem, got = f"raised {_error_line(exc)}", None
        else:
            problem = ex.compare(expected, got)
        if problem is None:
            correct += 1
            continue
        failures += 1
        if failure is None:
            diagnosis = None
            if ex.diagnose is not None and got is not None:
                try:
                    diagnosis = ex.diagnose(case, expected, got)
                except Exception:  # a diagnosis is a bonus; never let it hide the failure
                    diagnosis = None
            failure = {"instance": i, "seed": seed, "case": case.text, "problem": problem,
                       "expected": _short(expected), "got": None if got is None else _short(got),
                       "diagnosis": diagnosis}
    if failure is None:
        msg = f"{ex.id} {ex.name}: passed, {correct}/{total} instances right"
        result = CheckResult(ex.id, ex.name, "passed", total, correct, msg)
    else:
        lines = [f"{ex.id} {ex.name}: failed on {failures} of {total} instances (score {correct / total:.2f})",
                 f"  first failing instance #{failure['instance']}: {failure['case']}",
                 f"  {failure['problem']}"]
        if failure["diagnosis"]:
            lines.append(f"  diagnosis: {failure['diagnosis']}")
        if ex.hint:
            lines.append(f"  hint: {ex.hint}")
        lines.append(f"  rebuild it: from devplace_lite.exercises import instance; c = instance({ex.id!r}, "
                     f"{failure['instance']}" + (f", seed={seed}" if seed else "") + f"); {ex.name}(*c.args, **c.kwargs)")
        result = CheckResult(ex.id, ex.name, "failed", total, correct, "\n".join(lines), failure)
    if not quiet:
        print(result.message, file=sys.stdout)
    return result
