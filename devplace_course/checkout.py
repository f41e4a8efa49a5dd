"""Where the project's own files are: the checkout the book, course and data tools work in.

The chapters, ``data/graphs`` and ``build/`` belong to a clone of the project, not to the
installed package, so these tools find them from where they are run (or ``DEVPLACE_ROOT``),
never from where the package happens to be installed.
"""

from __future__ import annotations

import os
from pathlib import Path

from devplace_lite.errors import UsageError

#: The line a checkout's ``pyproject.toml`` holds.
MARK = 'name = "devplace_lite"'


def _is_checkout(folder: Path) -> bool:
    try:
        return MARK in (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False


def find_checkout(start: Path | None = None) -> Path | None:
    """The project checkout: ``DEVPLACE_ROOT`` if set, else the nearest folder at or above
    ``start`` (default: the current folder) whose ``pyproject.toml`` names ``devplace_lite``;
    ``None`` when there is none.

    Examples
    --------
    >>> import tempfile
    >>> find_checkout(Path(tempfile.gettempdir()) / "no-such-folder") is None or "DEVPLACE_ROOT" in os.environ
    True
    """
    env = os.environ.get("DEVPLACE_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    return next((d for d in (here, *here.parents) if _is_checkout(d)), None)


def checkout(start: Path | None = None) -> Path:
    """`find_checkout`, or a `UsageError` that says how to point at one.

    Raises
    ------
    UsageError
        When no checkout is found.
    """
    root = find_checkout(start)
    if root is None:
        raise UsageError("no devplace_lite checkout here: run this inside a clone of the project "
                         "(a folder whose pyproject.toml names devplace_lite), or set DEVPLACE_ROOT to one")
    return root
