"""The library under measure, wherever a module of it lives in the checkout being measured.

A benchmark run with ``--baseline DIR`` measures an earlier commit's library with this commit's
script. The package was laid out by problem in commit 0a6121e (``dp`` became
``throughput.dp``, ...), so a module is looked up where it lives now and, in a checkout from
before that commit, where it lived then.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

#: Where a module the benchmarks import lived before the layout by problem.
BEFORE_ROOMS = {"throughput.dp": "dp", "throughput.ideals": "ideals", "course.reference": "reference"}


def module(name: str) -> ModuleType:
    """``devplace_lite.<name>`` of the checkout first on the path (its older home if it has one).

    The home is looked up in that checkout's files: an editable install of another checkout
    would otherwise answer for a subpackage the older checkout does not have."""
    import devplace_lite

    base = Path(devplace_lite.__file__).parent / name.replace(".", "/")
    if name in BEFORE_ROOMS and not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
        name = BEFORE_ROOMS[name]
    return importlib.import_module(f"devplace_lite.{name}")
