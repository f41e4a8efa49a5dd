"""CLI plugins: one module per extra `devplace` command (see devplace_lite.cli), and the one way
every command writes its answer."""

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
