"""The grader's worker: load one submission, check its functions, write one JSON line per event.

Run by `devplace_lite.exercises.grading` in a child process (never import it to grade in
your own process: a submission may hang, exit or crash)::

    python -m devplace_lite.exercises.runner SUBMISSION... --ids 01.2,01.3 --out events.jsonl
        [--seed 0] [--timeout 30]

What is executed: a ``.py`` file whole, as a module would be; a notebook (``.ipynb``, or a
MyST ``.md`` read with jupytext) only for its definitions: top-level imports, ``def`` and
``class`` statements and assignments of literal constants, statement by statement, so that a
chapter's computations, plots and checks are not re-run and one failing import does not hide
the functions after it. Several files (a submission folder) share one namespace, in order.

Events, one JSON object per line, flushed as they happen so that the parent keeps what was
done before a crash: ``{"event": "loaded", "notes": [...]}``, ``{"event": "start", "id": ...}``,
``{"event": "result", "id": ..., "status": ..., "score": ..., "message": ...}``.
Statuses: those of `check` (``passed``, ``failed``, ``not attempted``) and ``missing`` (no
function of that name), ``timeout`` (over ``--timeout`` seconds), ``error`` (the function
ended the process's normal flow, e.g. ``sys.exit``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

SUFFIXES = (".py", ".ipynb", ".md")
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that a learner's ``except Exception`` lets it through."""


_HAS_ALARM = hasattr(signal, "setitimer")  # not on Windows: there the parent's hard limit alone applies


def _alarm(seconds: float) -> None:
    def handler(signum, frame):
        raise _Timeout()
    if _HAS_ALARM:
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm() -> None:
    if _HAS_ALARM:
        signal.setitimer(signal.ITIMER_REAL, 0)


def notebook_code_cells(path: Path) -> list[str]:
    """Sources of the code cells of an ``.ipynb`` or a jupytext/MyST ``.md`` notebook."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
    else:
        import jupytext  # the book's dependency; only notebooks in .md need it

        nb = jupytext.read(path)
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def definitions(source: str) -> list[ast.stmt]:
    """Top-level imports, defs, classes and literal assignments of one cell (magics dropped)."""
    lines = [("pass" if ln.lstrip().startswith(("%", "!")) else ln) for ln in source.splitlines()]
    tree = ast.parse("\n".join(lines))
    keep = []
    for node in tree.body:
        if isinstance(node, _DEFINITIONS):
            keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            keep.append(node)
    return keep


def load(paths: list[Path], timeout: float) -> tuple[dict[str, Any], list[str]]:
    """Execute the submission into a fresh namespace; notes say what went wrong on the way."""
    ns: dict[str, Any] = {"__name__": "__submission__", "__builtins__": __builtins__}
    notes: list[str] = []
    for path in paths:
        sys.path.insert(0, str(path.parent))  # a submission may import its own helper modules
        ns["__file__"] = str(path)
        try:
            if path.suffix == ".py":
                units = [(compile(path.read_text(encoding="utf-8"), str(path), "exec"), path.name)]
            else:
                units = []
                for k, cell in enumerate(notebook_code_cells(path)):
                    try:
                        units += [(compile(ast.Module([node], []), f"{path.name} cell {k}", "exec"),
                                   f"{path.name} cell {k}, line {node.lineno}") for node in definitions(cell)]
                    except SyntaxError as e:
                        notes.append(f"{path.name} cell {k}: skipped, syntax error: {e.msg} (line {e.lineno})")
        except (OSError, UnicodeDecodeError, ValueError, SyntaxError, ImportError) as e:
            notes.append(f"{path.name}: cannot read it: {type(e).__name__}: {e}")
            continue
        for code, where in units:
            _alarm(timeout)
            try:
                exec(code, ns)
            except _Timeout:
                notes.append(f"{where}: loading stopped after {timeout:g} s; what was defined before is graded")
                break
            except BaseException as e:  # a broken statement costs only what it defines
                notes.append(f"{where}: {type(e).__name__}: {e}")
            finally:
                _disarm()
    return ns, notes


def _emit(out, **event: Any) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def grade(ns: dict[str, Any], ids: list[str], seed: int, timeout: float, out) -> None:
    from .core import check, get

    for ex_id in ids:
        ex = get(ex_id)
        _emit(out, event="start", id=ex_id)
        fn = ns.get(ex.name)
        if not callable(fn):
            _emit(out, event="result", id=ex_id, status="missing", score=0.0,
                  message=f"{ex_id} {ex.name}: the submission defines no function {ex.name}")
            continue
        _alarm(timeout)
        try:
            res = check(ex_id, fn, seed=seed, quiet=True)
            record = {"status": res.status, "score": res.score, "message": res.message}
        except _Timeout:
            record = {"status": "timeout", "score": 0.0,
                      "message": f"{ex_id} {ex.name}: stopped after {timeout:g} s (an endless loop?)"}
        except BaseException as e:  # SystemExit and friends: the function's fault, not the grader's
            record = {"status": "error", "score": 0.0, "message": f"{ex_id} {ex.name}: {type(e).__name__}: {e}"}
        finally:
            _disarm()
        _emit(out, event="result", id=ex_id, **record)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devplace_lite.exercises.runner")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--ids", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    with open(args.out, "a", encoding="utf-8") as out:
        ns, notes = load([x.resolve() for x in args.paths], args.timeout)
        _emit(out, event="loaded", notes=notes)
        grade(ns, [i for i in args.ids.split(",") if i], args.seed, args.timeout, out)
        out.flush()
        os.fsync(out.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
