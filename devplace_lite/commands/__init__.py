"""The `devplace` commands: one module per command (``HELP``, ``add_arguments(parser)``,
``run(args) -> int``), found and imported by `devplace_lite.cli` only for the command named; a
module whose name starts with ``_`` is shared code, not a command. Adding a command is adding a
module here, or, from another package, naming a module of the same shape in the entry-point
group ``devplace_lite.commands`` (as the course does for ``grade``). Below: what every command
shares (the answer's JSON, its text formatting, the progress option)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def json_safe(x: Any) -> Any:
    """``x`` with every non-finite float as ``None``: ``NaN`` and ``Infinity`` are not JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def print_json(obj: Any) -> None:
    json.dump(json_safe(obj), sys.stdout, indent=1)
    sys.stdout.write("\n")


def emit(answer: dict[str, Any], args: argparse.Namespace) -> bool:
    """Save ``answer`` to ``--out`` (atomically) when given, and print it with ``--json``.
    True when it was printed, so the caller prints its text summary only otherwise."""
    from ..io import write_json_atomic

    answer = json_safe(answer)
    if getattr(args, "out", None):
        write_json_atomic(args.out, answer)
        # stderr: stdout may carry the --json answer
        print(f"wrote {args.out} (this answer as JSON)", file=sys.stderr)
    if getattr(args, "json", False):
        print_json(answer)
        return True
    return False


def fmt(x: float | None) -> str:
    """A number in a text answer (``-`` for none)."""
    return "-" if x is None else f"{x:.6g}"


def size(nbytes: float) -> str:
    """Bytes as a reader reads them: B, kB, MB or GB (powers of 1000), exact bytes beside."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit} ({nbytes:,.0f} bytes)"
    return f"{nbytes:,.0f} bytes"


def say(note: dict | None) -> None:
    """A text answer's line on what was clamped (stderr: stdout keeps the answer)."""
    from ..options import clamp_message

    if note:
        print(clamp_message(note), file=sys.stderr)


def add_quiet(s: argparse.ArgumentParser) -> None:
    from ..progress import DELAY

    s.add_argument("-q", "--quiet", action="store_true",
                   help=f"no progress bar (otherwise one appears on stderr once a run lasts {DELAY:g} s)")
