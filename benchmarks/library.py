"""The library under measure, wherever a module of it lives in the checkout being measured.

A benchmark run with ``--baseline DIR`` measures an earlier commit's library with this commit's
script. The package was laid out by problem in commit 0a6121e (``dp`` became
``throughput.dp``, ...), so a module is looked up where it lives now and, in a checkout from
before that commit, where it lived then.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Where a module the benchmarks import lived before the layout by problem.
BEFORE_ROOMS = {"throughput.dp": "dp", "throughput.ideals": "ideals", "course.reference": "reference"}


def module(name: str) -> ModuleType:
    """``devplace_lite.<name>`` of the checkout first on the path (its older home if it has one)."""
    try:
        return importlib.import_module(f"devplace_lite.{name}")
    except ModuleNotFoundError as e:
        if name not in BEFORE_ROOMS or not (e.name or "").startswith("devplace_lite."):
            raise
        return importlib.import_module(f"devplace_lite.{BEFORE_ROOMS[name]}")
