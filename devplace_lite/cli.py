"""The ``devplace`` command line: the contract that scripts, exercises and graders rely on.

Every command is a module of `devplace_lite.commands` (``HELP``, ``add_arguments(parser)``,
``run(args) -> int``), imported only for its own command so that the non-torch commands never
import torch; another installed package adds a command with a module of the same shape, named
in the entry-point group ``devplace_lite.commands`` (the course's ``devplace grade``, from
`devplace_course`: the library never imports it). This module parses, runs the one command,
and keeps the promises below. The
answers come from the library (`devplace_lite.solve` for ``partition``, ``latency``, ``bound``).

Errors: one line on stderr naming the problem, exit status 2, no traceback. Ctrl-C ends with
``devplace: interrupted`` and status 130, SIGTERM with ``devplace: terminated`` and 143, both
after removing what was half-written. While a command runs, file descriptor 1 points at
/dev/null and only the command's own answer reaches stdout (`_stdout_for_answers`): a solver's
console output cannot break a ``--json`` answer. ``--time-limit`` is the wall time of the whole
command, from the start of `main` (`devplace_lite.solve`). A run that lasts more than two seconds shows a
progress bar on stderr (`devplace_lite.progress`), unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import threading
import time
import warnings
from importlib.metadata import entry_points
from typing import Iterator, Sequence

from . import progress
from .errors import DevplaceError, UsageError
from .files import check_apart, check_output

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UsageError(message if self.prog == "devplace" else f"{self.prog}: {message}")


#: The entry-point group in which another package names its commands' modules.
GROUP = "devplace_lite.commands"


def _plugins() -> dict[str, str]:
    """Every command by its name on the command line, with the module that holds it: the
    library's own, then those other installed packages register in `GROUP` (one of the
    library's names cannot be taken over)."""
    from . import commands

    own = {m.name.replace("_", "-"): f"devplace_lite.commands.{m.name}"
           for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")}
    extra = {ep.name: ep.value for ep in entry_points(group=GROUP) if ep.name not in own}
    return dict(sorted({**extra, **own}.items()))


def _load(cmd: str, module: str):
    """The module of command ``cmd``; a `UsageError` when the package that registered it is gone."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if module.startswith("devplace_lite.") or e.name is None or not module.startswith(e.name):
            raise  # a missing dependency of an installed command is that command's error, not this one
        raise UsageError(f"{cmd}: its package {e.name} is registered but not importable; reinstall it "
                         "(in a clone of the project: pip install -e .)") from None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog="devplace", description="Place the operators of a DNN graph on devices.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    # plugins: only the one named on the command line is imported (with its heavy dependencies);
    # all of them when none is named, for the help's list of commands
    wanted = next((a for a in (argv or []) if not a.startswith("-")), None)
    for cmd, module in _plugins().items():
        if wanted not in (cmd, None):
            sub.add_parser(cmd).add_argument("rest", nargs=argparse.REMAINDER)
            continue
        mod = _load(cmd, module)
        s = sub.add_parser(cmd, help=mod.HELP)
        mod.add_arguments(s)
        s.set_defaults(func=mod.run)
    return p


class _Terminated(BaseException):
    """SIGTERM, raised where the program is so that cleanups run (a BaseException like Ctrl-C:
    ``except Exception`` in library code does not swallow it)."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into `_Terminated` while the command runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _stdout_for_answers() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null and ``sys.stdout`` at a copy of the real stdout.

    The answer is printed through ``sys.stdout`` as before; what native code writes to fd 1
    goes nowhere. SCIP, for one, prints its Ctrl-C notice on fd 1 whatever its verbosity, which
    broke ``--json``. Where ``sys.stdout`` is not fd 1 (a test's capture), only fd 1 moves.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no usable fd 1: nothing to protect
        yield
        return
    try:
        ours = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        ours = False
    old = sys.stdout
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    if ours:
        # backslashreplace: a name read from a file may hold a lone surrogate, which UTF-8 cannot encode
        sys.stdout = open(saved, "w", buffering=1 if old.line_buffering else -1, encoding=old.encoding,
                          errors="backslashreplace", closefd=False)
    try:
        yield
    finally:
        try:
            sys.stdout.flush()
        finally:
            if ours:
                sys.stdout = old
            os.dup2(saved, 1)
            os.close(saved)


_INPUTS = ("graph", "input", "placement", "checkpoint", "submissions", "seed_file", "course")
_OUTPUTS = ("out", "output", "csv")


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that names no file, exists and is not a regular file,
    or is one of the command's inputs (the same file through any link) or inside an input folder.
    (``grade --results-json``, a file or a folder, is checked by ``grade`` itself.)"""
    inputs = []
    for name in _INPUTS:
        value = getattr(args, name, None)
        inputs.extend(value if isinstance(value, list) else [value] if isinstance(value, str) else [])
    for name in _OUTPUTS:
        out = getattr(args, name, None)
        if not isinstance(out, str):
            continue
        check_output(out)  # before any work: a folder, a device, a missing folder, no file name
        check_apart(out, inputs)


def _one_line(message: str) -> str:
    """A message as one line: ids and paths may hold newlines or control characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return text if len(text) <= 1000 else text[:997] + "..."


def _os_message(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename is not None else ""
    return f"{where}{e.strerror or e}"


def _process_started() -> float:
    """When this process started, on the `time.monotonic` clock where the system says (Linux:
    its start in clock ticks since boot), else now: a ``--time-limit`` covers the interpreter's
    start and the imports too, which take seconds on a busy machine."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:  # the fields after the command's closing parenthesis
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0.0 <= age < 600.0 else now  # a forked test runner's age is not the command's


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is 0 (answered), 2 (refused: one line on stderr), 130
    (Ctrl-C), 141 (the reader of stdout went away, silently) or 143 (SIGTERM)."""
    started = _process_started() if argv is None else time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    status = 2
    with _sigterm_raises():
        try:
            args = build_parser(argv).parse_args(argv)
            args.started = started
            _check_outputs(args)
            with _stdout_for_answers(), progress.shown(not getattr(args, "quiet", False)), \
                    warnings.catch_warnings():
                # numpy's notes on inf - inf and empty slices are not part of any answer
                warnings.simplefilter("ignore", RuntimeWarning)
                return int(args.func(args) or 0)
        except DevplaceError as e:
            message = f"error: {e}"
        except KeyboardInterrupt:
            message = "interrupted"
            status = 130
        except _Terminated:
            message = "terminated"
            status = 143
        except MemoryError:
            message = "error: out of memory"
        except BrokenPipeError:  # the reader left (`devplace ... | head`): not an error of the input
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
            return 141  # as a shell reports a process ended by SIGPIPE
        except OSError as e:
            message = f"error: {_os_message(e)}"
        print(f"devplace: {_one_line(message)}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
