"""The grader's worker: the one process that runs a submission's code, inside the sandbox.

Started by `devplace_course.exercises.sandbox` (never import it to grade in your own process)::

    python -m devplace_course.exercises.worker --fds IN,OUT [--uid U [--keep-reading]] --limits JSON

Before any of the submission's code runs it sets its resource limits (inherited by every process
the submission starts), gives up root when started as root (``--uid``: an unprivileged uid of
its own, so the process limit holds), reads the submission and inspects it statically
(`devplace_course.exercises.guard`), and arms the runtime copy guard. Then it loads the submission
and answers the grader's requests, one at a time.

What is executed: a ``.py`` file whole, as a module would be (``__name__`` is
``"__submission__"``, so code under ``if __name__ == "__main__":`` does not run); a notebook
(``.ipynb``, or a MyST ``.md`` read with jupytext) only for its top-level imports, ``def`` and
``class`` statements (their decorators and default values included) and assignments of literal
constants, statement by statement, so that a chapter's computations are not re-run and one
failing import does not hide the functions after it. Several files share one namespace, in order.

The channel: requests come on ``IN`` as length-prefixed pickles written by the grader (the
instances: trusted data); replies go on ``OUT`` as JSON lines (`devplace_course.exercises.answers`),
the only thing that leaves. The submission's own output goes to stdout/stderr, which the grader
reads apart and caps. Replies: ``{"event": "ready"}`` (confined, its own imports done: a worker
that ends before it is the grader's failure, not the submission's), ``{"event": "static", ...}``, ``{"event": "loaded", "notes",
"defined"}``, ``{"event": "answer", "id", "i", "value" | "error" | "not_implemented"}``,
``{"event": "copy", "id", "what"}`` (the guard, when it trips), ``{"event": "ended", "id"}``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pickle
import resource
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

SUFFIXES = (".py", ".ipynb", ".md")
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: resource limits: name in the --limits JSON -> rlimit (values in the units the kernel wants)
RLIMITS = {"address_space": resource.RLIMIT_AS, "cpu_seconds": resource.RLIMIT_CPU,
           "processes": resource.RLIMIT_NPROC, "file_size": resource.RLIMIT_FSIZE,
           "open_files": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}


def read_frame(stream: BinaryIO) -> Any:
    """One request: an 8-byte length, then a pickle (written by the grader, never by the submission)."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


def write_frame(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


#: Linux's capability numbers and calls (linux/capability.h, linux/prctl.h)
_CAP_DAC_READ_SEARCH, _CAP_VERSION_3, _PR_SET_KEEPCAPS, _PR_CAP_AMBIENT_CLEAR_ALL = 2, 0x20080522, 8, (47, 4)


def confine(limits: dict[str, int], uid: int | None, keep_reading: bool = False) -> None:
    """Set the limits (soft = hard, so the submission cannot raise them) and give up root.

    ``keep_reading`` (only without a sandbox): the unprivileged uid keeps one capability,
    reading (``CAP_DAC_READ_SEARCH``), since the Python, its environment and the package may
    sit below a folder only root can enter (``mktemp -d``, root's home, a checkout made with
    umask 077) and the worker must import them there. Without a sandbox it is documented to read
    what the grader can, so this adds nothing. It writes, signals and starts processes as the
    unprivileged uid, and a program it starts (``execve``) has no capability at all. Never in the
    sandbox: with it a process can open any file of a mounted file system by its handle
    (``open_by_handle_at``), outside what the sandbox shows; there the folders above the ones
    shown are made anew, open to all, and a folder shown that others cannot read is refused by
    the grader with the fix (`devplace_course.exercises.sandbox.worker_failed`)."""
    for name, value in limits.items():
        resource.setrlimit(RLIMITS[name], (int(value), int(value)))
    if uid is not None and os.getuid() == 0:
        libc = _libc() if keep_reading else None
        if libc is not None:
            libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root: every capability goes with it, but for the kept ones below
        if os.getuid() != uid or os.geteuid() != uid:
            raise SystemExit("could not give up root")
        if libc is not None:
            _keep_only_reading(libc)
        if _permitted() & ~(1 << _CAP_DAC_READ_SEARCH if libc is not None else 0):
            raise SystemExit("could not give up root's capabilities")  # never more than reading


def _libc() -> Any:
    """The C library through ctypes on Linux (None elsewhere: no capabilities to keep)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _keep_only_reading(libc: Any) -> None:
    """Capabilities: only ``CAP_DAC_READ_SEARCH``, effective and permitted; none inheritable or
    ambient. Where the kernel refuses, none at all (what `os.setuid` left), and the grader says so
    if the worker then cannot read its package."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    keep = 1 << _CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(Header(_CAP_VERSION_3, 0)), (Data * 2)(Data(keep, keep, 0))) != 0:
        libc.capset(ctypes.byref(Header(_CAP_VERSION_3, 0)), (Data * 2)())  # drop what KEEPCAPS kept
    libc.prctl(*_PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)


def _permitted() -> int:
    """This process's permitted capabilities (``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapPrm:"))
    except (OSError, StopIteration):  # no /proc (macOS): no capabilities either
        return 0


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


def read_submission(paths: list[Path]) -> tuple[list[tuple[Path, ast.Module, str]], list[str]]:
    """What will run, file by file and statement by statement: ``(file, code as AST, where)``; notes
    say what could not be read."""
    units, notes = [], []
    for path in paths:
        try:
            if path.suffix == ".py":
                units.append((path, ast.parse(path.read_text(encoding="utf-8"), str(path)), path.name))
                continue
            for k, cell in enumerate(notebook_code_cells(path)):
                try:
                    units += [(path, ast.Module([node], []), f"{path.name} cell {k}, line {node.lineno}")
                              for node in definitions(cell)]
                except SyntaxError as e:
                    notes.append(f"{path.name} cell {k}: skipped, syntax error: {e.msg} (line {e.lineno})")
        except (OSError, UnicodeDecodeError, ValueError, SyntaxError, ImportError, KeyError, TypeError) as e:
            notes.append(f"{path.name}: cannot read it: {type(e).__name__}: {str(e)[:200]}")
    return units, notes


def load(units: list[tuple[Path, ast.Module, str]], notes: list[str]) -> dict[str, Any]:
    """Execute the submission into a fresh namespace; a broken statement costs only what it defines."""
    ns: dict[str, Any] = {"__name__": "__submission__", "__builtins__": __builtins__}
    for path, tree, where in units:
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))  # a submission may import its own helper modules
        ns["__file__"] = str(path)
        try:
            exec(compile(tree, str(path), "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the submission's own doing
            notes.append(f"{where}: {type(e).__name__}: {str(e)[:300]}")
    return ns


class Channel:
    """JSON lines to the grader (flushed as they are written)."""

    def __init__(self, fd: int) -> None:
        self.out = os.fdopen(fd, "w", encoding="utf-8", buffering=1)

    def emit(self, **event: Any) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()


def serve(requests: BinaryIO, channel: Channel) -> None:
    from . import answers
    from .core import run_learner
    from .guard import Guard, inspect_statically

    channel.emit(event="ready")  # confined and importing what it needs: whatever fails later is the submission's
    setup = read_frame(requests)
    exercises: dict[str, tuple[str, list[str]]] = setup["exercises"]
    units, notes = read_submission([Path(p) for p in setup["files"]])
    report = inspect_statically([tree for _, tree, _ in units], exercises)
    channel.emit(event="static", copies=report.copies, review=report.review)
    guard = Guard({ex: list(patterns) for ex, (_, patterns) in exercises.items()},
                  report=lambda ex, what: channel.emit(event="copy", id=ex, what=what))
    ns = load(units, notes)
    defined = sorted(name for name, (fname, _) in exercises.items() if callable(ns.get(fname)))
    channel.emit(event="loaded", notes=notes, defined=defined)
    while True:
        try:
            request = read_frame(requests)
        except EOFError:
            return
        if request["op"] == "call":
            ex_id, case = request["id"], request["case"]
            fn = ns.get(exercises[ex_id][0])
            guard.refresh()
            guard.current = ex_id
            try:
                outcome = run_learner(fn, case)
            finally:
                guard.current = None
            reply: dict[str, Any] = {"event": "answer", "id": ex_id, "i": request["i"]}
            if outcome.not_implemented:
                reply["not_implemented"] = True
            elif outcome.error is not None:
                reply["error"] = outcome.error
            else:
                try:
                    reply["value"] = answers.encode(outcome.got)
                except answers.AnswerError as e:
                    reply["error"] = f"returned {e}"
            channel.emit(**reply)
        elif request["op"] == "end":
            channel.emit(event="ended", id=request["id"])
        elif request["op"] == "quit":
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devplace_course.exercises.worker")
    p.add_argument("--fds", required=True, help="IN,OUT: the request and reply descriptors")
    p.add_argument("--uid", type=int, default=None, help="the unprivileged uid to run as (when started as root)")
    p.add_argument("--keep-reading", action="store_true",
                   help="with --uid and no sandbox: keep the right to read every file (confine)")
    p.add_argument("--limits", default="{}", help="resource limits, JSON")
    args = p.parse_args(argv)
    confine(json.loads(args.limits), args.uid, args.keep_reading)
    fd_in, fd_out = (int(x) for x in args.fds.split(","))
    with os.fdopen(fd_in, "rb") as requests:
        serve(requests, Channel(fd_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
