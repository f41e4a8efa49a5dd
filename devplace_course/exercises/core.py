"""The exercise registry and `check`: a learner's function against the reference, case by case.

An `Exercise` ties an id (``"01.2"``: chapter 01, exercise 2) to the name of the function a
learner writes, a reference implementation, a generator of seeded instances, a comparator with
a tolerance and a hint. `check` runs the learner's function on every instance and `assess`
compares its answers with the reference's: the report names the first failing instance, both
values and, where the exercise knows the usual mistakes, a diagnosis. A stub that raises
``NotImplementedError`` is *not attempted*: no exception escapes, so the cells after the check
still run (what the student edition relies on).

Discriminating instances: an exercise may list its *slips*, the values its typical wrong ideas
return on a case (charging a transfer per edge, forgetting a filter, ...). Each random instance
is then drawn again (up to ``tries`` times) until every slip gets it wrong, so a wrong idea
fails nearly every instance instead of scoring 0.7-0.9, and the diagnosis that fits the most
failing instances is the one reported. The first ``fixed`` instances (the chapter's worked
examples) are never redrawn.

Cost: per instance, the reference and the slips once per draw (usually one or two draws), and
the learner's function once, on deep copies of the instance (a function that mutates its input
cannot spoil the comparison).
"""

from __future__ import annotations

import copy
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from devplace_lite.errors import UsageError

NOT_ATTEMPTED = "not attempted"
STATUSES = ("passed", "failed", NOT_ATTEMPTED, "timeout")
#: set in the grader's sandbox: `check` calls in a submission return at once (the grader checks, outside)
GRADING_ENV = "DEVPLACE_GRADING"
#: seconds a notebook's `check` gives the learner's function over all its instances, by default
CHECK_TIMEOUT = 60.0

#: compare(expected, got) -> None when they agree, else one line saying how they differ
Comparator = Callable[[Any, Any], "str | None"]
_UNSOLVED = object()


@dataclass
class Case:
    """One instance: the arguments of the call and how to rebuild it (shown when it fails).

    ``expected`` and ``slip_values`` are filled by `Exercise.case` (the reference's answer and
    the values of the exercise's typical mistakes), not by the case generators.
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    text: str = ""
    expected: Any = field(default=_UNSOLVED, repr=False)
    slip_values: list | None = field(default=None, repr=False)


@dataclass
class Outcome:
    """What the learner's function did on one instance: returned ``got``, raised (``error``, one
    line), or raised ``NotImplementedError``."""

    got: Any = None
    error: str | None = None
    not_implemented: bool = False


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
        alone. Put the chapter's worked examples at small ``i``.
    compare : Comparator
        ``close()`` (numbers within a tolerance, the default), ``exact()``, or your own.
    hint : str
        Shown with every failure.
    slips : callable ``case -> [(value, message), ...]``, optional
        What each typical mistake returns on a case, and what to tell a learner who made it.
        Random instances are redrawn until every slip gets them wrong; a learner's answer equal
        to a slip's value gets that slip's message as the diagnosis.
    diagnose : callable ``(case, expected, got) -> str | None``, optional
        Recognises a mistake that is not a value (an answer one off, a wrong shape).
    fixed : int
        Instances ``0 .. fixed - 1`` are worked examples: the same for every seed, never redrawn.
    forbidden : tuple of str
        The library's own answers to this exercise, as ``"module"`` (every function and class
        defined there) or ``"module:name"``. A graded submission whose function calls one of them
        (under any name) is flagged as a copy and scores 0; the references in
        ``devplace_course.exercises`` are always forbidden.
    n : int
        Number of instances `check` runs by default.
    tries : int
        Draws per random instance while looking for one that every slip gets wrong.
    """

    id: str
    name: str
    title: str
    reference: Callable
    cases: Callable[[np.random.Generator, int], Case]
    compare: Comparator = None  # type: ignore[assignment]
    hint: str = ""
    slips: Callable[[Case], Sequence[tuple[Any, str]]] | None = None
    diagnose: Callable[[Case, Any, Any], "str | None"] | None = None
    fixed: int = 0
    forbidden: tuple[str, ...] = ()
    n: int = 20
    tries: int = 20

    def __post_init__(self) -> None:
        if self.compare is None:
            self.compare = close()

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]

    def solve(self, case: Case) -> Any:
        """The reference's answer on ``case`` (computed once, on copies of the arguments)."""
        if case.expected is _UNSOLVED:
            case.expected = self.reference(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        return case.expected

    def slip_values(self, case: Case) -> list[tuple[Any, str]]:
        """The typical mistakes' values on ``case`` (computed once; a slip that raises is left out)."""
        if case.slip_values is None:
            try:
                case.slip_values = list(self.slips(case)) if self.slips is not None else []
            except Exception:  # a slip that cannot be computed here cannot be the learner's answer either
                case.slip_values = []
        return case.slip_values

    def case(self, i: int, seed: int = 0) -> Case:
        """The ``i``-th instance for ``seed`` (what `check` ran as instance ``i``), with its answer."""
        rng = np.random.default_rng([seed, i])
        if self.slips is None or i < self.fixed:
            c = self.cases(rng, i)
            self.solve(c)
            return c
        best, best_key = None, None
        for _ in range(max(1, self.tries)):
            c = self.cases(rng, i)
            key = self._discrimination(c, i)
            if best_key is None or key > best_key:
                best, best_key = c, key
            if key[0] and key[1] == len(c.slip_values) and key[2] == len(c.slip_values):
                break
        return best

    def _discrimination(self, case: Case, i: int) -> tuple[bool, int, int]:
        """How well ``case`` tells the typical mistakes from the answer: whether it catches the
        slip instance ``i`` looks for first (they take turns, so each slip is caught on its share
        of the instances even where no instance can catch all), how many slips it catches, and
        how many distinct values they give (distinct values keep the diagnosis unambiguous)."""
        expected = self.solve(case)
        slips = self.slip_values(case)
        caught = [self.compare(expected, value) is not None for value, _ in slips]
        distinct: list[Any] = []
        for value, _ in slips:
            if all(self.compare(other, value) is not None for other in distinct):
                distinct.append(value)
        return (caught[i % len(slips)] if slips else True), sum(caught), len(distinct)

    def diagnoses(self, case: Case, got: Any) -> list[str]:
        """Every message that explains the wrong answer ``got`` on ``case`` (slips first)."""
        expected = self.solve(case)
        same = _matcher(self.compare)
        out = [msg for value, msg in self.slip_values(case)
               if same(value, got) and not same(value, expected)]
        if self.diagnose is not None:
            try:
                extra = self.diagnose(case, expected, got)
            except Exception:  # a diagnosis is a bonus; never let it hide the failure
                extra = None
            if extra and extra not in out:
                out.append(extra)
        return out


def _matcher(compare: Comparator) -> Callable[[Any, Any], bool]:
    """Whether two answers are the same for a diagnosis: numbers to 1e-6 relative (a learner's
    slip computed in another order still matches), anything else by the exercise's comparator."""
    loose = close(rtol=1e-6, atol=1e-9)

    def same(a: Any, b: Any) -> bool:
        try:
            if _numeric(a) and _numeric(b):
                return loose(a, b) is None
            return compare(a, b) is None
        except Exception:
            return False
    return same


def _numeric(x: Any) -> bool:
    if _is_number(x):
        return True
    try:
        arr = np.asarray(x)
    except Exception:
        return False
    return arr.dtype.kind in "iuf" and arr.size > 0


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
        return self.correct / self.cases if self.cases and self.status in ("passed", "failed") else 0.0

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "name": self.name, "status": self.status, "score": self.score,
                "cases": self.cases, "correct": self.correct, "message": self.message, "failure": self.failure}

    def __repr__(self) -> str:
        return f"CheckResult({self.exercise!r}, {self.status}, score={self.score:.2f})"


# -- comparators -----------------------------------------------------------------------------
def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _low_precision(got: Any) -> str | None:
    """The name of ``got``'s float type when it is coarser than float64 (float32, float16)."""
    dt = getattr(got, "dtype", None)
    if dt is None and isinstance(got, (list, tuple)) and got:
        dt = getattr(got[0], "dtype", None)
    if dt is not None and np.dtype(dt).kind == "f" and np.dtype(dt).itemsize < 8:
        return np.dtype(dt).name
    return None


def _dtype_note(got: Any, e: np.ndarray, g: np.ndarray) -> str:
    """Says so when a coarse float type explains the difference (within ~100 of its epsilons)."""
    name = _low_precision(got)
    if name is None:
        return ""
    eps = float(np.finfo(name).eps)
    with np.errstate(invalid="ignore"):
        explained = np.all(np.abs(g - e) <= 100 * eps * np.maximum(1.0, np.abs(e)))
    if not explained:
        return f" (your answer is {name})"
    return (f"; your answer is {name}, precise to about {eps:.0e} relative while the check's tolerance is "
            f"tighter: compute in float64 (numpy's default; drop the dtype={name} or .astype({name}))")


def close(rtol: float = 1e-9, atol: float = 1e-9) -> Comparator:
    """Numbers, or arrays of numbers, equal within ``atol + rtol * |expected|``."""
    def compare(expected: Any, got: Any) -> str | None:
        if _is_number(expected):
            if not _is_number(got):
                return f"expected a number, got {type(got).__name__} {_short(got)}"
            e, g = float(expected), float(got)
            if e == g or (math.isfinite(e) and abs(g - e) <= atol + rtol * abs(e)):
                return None
            return f"expected {e:.10g}, got {g:.10g} (off by {g - e:+.4g})" + _dtype_note(got, np.float64(e), np.float64(g))
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
        return (f"{int(bad.sum())} entr{'y differs' if bad.sum() == 1 else 'ies differ'}; first at [{at}]: "
                f"expected {e[i]:.10g}, got {g[i]:.10g}" + _dtype_note(got, e, g))
    return compare


def exact() -> Comparator:
    """Equal by ``==`` (integers, strings, tuples, sets)."""
    def compare(expected: Any, got: Any) -> str | None:
        ok = expected == got
        if isinstance(ok, np.ndarray):
            ok = bool(ok.all()) and np.shape(expected) == np.shape(got)
        return None if ok else f"expected {_short(expected)}, got {_short(got)}"
    return compare


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
    """The exercise with this id; `UsageError` (one line, lists the known ids) when unknown."""
    ex_id = str(ex_id)
    if ex_id not in REGISTRY:
        _load_chapter_modules()
    if ex_id not in REGISTRY:
        raise UsageError(f"unknown exercise {ex_id!r}; known: {', '.join(e.id for e in exercises())}")
    return REGISTRY[ex_id]


def instance(ex_id: str, i: int, seed: int = 0) -> Case:
    """Rebuild instance ``i`` of a check, to debug a failure: ``f(*case.args, **case.kwargs)``."""
    return get(ex_id).case(i, seed)


# -- judging answers (the same code for `check` and for the grader, which runs it outside the submission)
def error_line(exc: BaseException) -> str:
    """One line for an exception raised by the learner's function, with where it was raised."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (line {tb[-1].lineno} of {tb[-1].name})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"[:500]


def assess(ex: Exercise, cases: Sequence[Case], outcomes: Sequence[Outcome], *, seed_text: str = "") -> CheckResult:
    """Judge the learner's ``outcomes`` on ``cases`` (one each, in order) against the reference.

    ``seed_text`` is how the rebuild line names the seed (``", seed=3"``; empty for seed 0, or a
    placeholder where the seed is the grader's secret). A ``NotImplementedError`` on the first
    instance makes the exercise *not attempted*.
    """
    total = len(cases)
    if outcomes and outcomes[0].not_implemented:
        return CheckResult(ex.id, ex.name, NOT_ATTEMPTED, total, 0,
                           f"{ex.id} {ex.name}: not attempted (the function raises NotImplementedError)")
    correct, failing = 0, []
    for i, (case, out) in enumerate(zip(cases, outcomes)):
        if out.not_implemented:
            problem = "raised NotImplementedError on this instance"
        elif out.error is not None:
            problem = f"raised {out.error}"
        else:
            problem = ex.compare(ex.solve(case), out.got)
        if problem is None:
            correct += 1
        else:
            failing.append((i, case, out, problem))
    if not failing:
        return CheckResult(ex.id, ex.name, "passed", total, correct, f"{ex.id} {ex.name}: passed, {correct}/{total} instances right")
    i, case, out, problem = failing[0]
    diagnosis = _diagnosis(ex, failing)
    failure = {"instance": i, "case": case.text, "problem": problem, "expected": _short(ex.solve(case)),
               "got": None if out.error is not None or out.not_implemented else _short(out.got), "diagnosis": diagnosis}
    lines = [f"{ex.id} {ex.name}: failed on {len(failing)} of {total} instances (score {correct / total:.2f})",
             f"  first failing instance #{i}: {case.text}", f"  {problem}"]
    if diagnosis:
        lines.append(f"  diagnosis: {diagnosis}")
    if ex.hint:
        lines.append(f"  hint: {ex.hint}")
    lines.append(f"  rebuild it: from devplace_course.exercises import instance; c = instance({ex.id!r}, {i}{seed_text}); "
                 f"{ex.name}(*c.args, **c.kwargs)")
    return CheckResult(ex.id, ex.name, "failed", total, correct, "\n".join(lines), failure)


def _diagnosis(ex: Exercise, failing: list) -> str | None:
    """The diagnosis that explains the most failing instances (a coincidence on one instance
    loses to the mistake that explains them all), with how many it explains."""
    counts: Counter[str] = Counter()
    judged = 0
    for _, case, out, _ in failing:
        if out.error is not None or out.not_implemented:
            continue
        judged += 1
        counts.update(dict.fromkeys(ex.diagnoses(case, out.got), 1))
    if not counts:
        return None
    message, hits = counts.most_common(1)[0]  # ties: the first seen, i.e. the first slip listed
    return message if judged == 1 or hits == judged else f"{message} (fits {hits} of the {judged} wrong answers)"


# -- check -----------------------------------------------------------------------------------
class CheckTimeout(BaseException):
    """Raised in the learner's function when `check`'s time is up; a BaseException so that a
    learner's ``except Exception`` lets it through."""


@contextmanager
def _alarm(seconds: float | None) -> Iterator[bool]:
    """Raise `CheckTimeout` after ``seconds`` of wall time; yields whether a timer is armed (it
    needs the main thread of a POSIX process, as in a notebook's kernel)."""
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield False
        return

    def ring(signum, frame):
        raise CheckTimeout()
    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_learner(fn: Callable, case: Case) -> Outcome:
    """Call the learner's function on a copy of ``case``; an exception is a finding, not a crash."""
    try:
        return Outcome(got=fn(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs)))
    except NotImplementedError:
        return Outcome(not_implemented=True)
    except Exception as exc:  # the learner's bug is the finding
        return Outcome(error=error_line(exc))


def check(ex_id: str, fn: Callable, *, n: int | None = None, seed: int = 0, quiet: bool = False,
          timeout: float | None = CHECK_TIMEOUT) -> CheckResult:
    """Run ``fn`` against the reference of exercise ``ex_id`` on ``n`` seeded instances.

    Prints a short report (unless ``quiet``) and returns a `CheckResult`. The report of a
    failure names the first failing instance (how to rebuild it), the expected and the
    returned value, a diagnosis when the answers fit a typical mistake, and the exercise's
    hint. A function raising ``NotImplementedError`` on the first instance is *not attempted*:
    score 0, nothing raised. ``fn`` gets ``timeout`` seconds over all instances (``None``: no
    limit; the timer needs the main thread of a POSIX process); past them the check stops with
    status ``timeout`` and says so.

    Inside the grader's sandbox (environment ``DEVPLACE_GRADING`` set) a submission's own
    ``check`` calls return at once, status ``skipped``: the grader checks, outside the submission.

    Examples
    --------
    >>> from devplace_course.exercises import check
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
    if os.environ.get(GRADING_ENV):
        return CheckResult(ex.id, ex.name, "skipped", total, 0, f"{ex.id} {ex.name}: check skipped while grading")
    cases, outcomes, result = [], [], None
    budget = None if timeout is None else float(timeout)
    for i in range(total):
        case = ex.case(i, seed)
        start = time.perf_counter()
        try:
            with _alarm(budget):
                outcome = run_learner(fn, case)
        except CheckTimeout:
            result = CheckResult(ex.id, ex.name, "timeout", total, 0,
                                 f"{ex.id} {ex.name}: stopped after {timeout:g} s, the time check() gives the function "
                                 f"(timeout={timeout:g}), on instance #{i} of {total}: an endless loop, or too slow for "
                                 f"instances this small? Pass check(..., timeout=...) to allow more.")
            break
        if budget is not None:
            budget = max(budget - (time.perf_counter() - start), 1e-3)
        cases.append(case)
        outcomes.append(outcome)
        if i == 0 and outcome.not_implemented:
            break
    if result is None:
        result = assess(ex, cases, outcomes, seed_text=f", seed={seed}" if seed else "")
        if result.status == NOT_ATTEMPTED:
            result.cases = total
    if not quiet:
        print(result.message, file=sys.stdout)
    return result
