"""Progress bars for long runs: tqdm on stderr, shown by the ``devplace`` command line.

The library is silent unless asked: `shown` turns bars on for a block (the CLI does, except with
``--quiet``). A bar appears only once its run has lasted `DELAY` seconds, so a short command
never even imports tqdm, and it goes to stderr, never to stdout, so a ``--json`` answer stays
clean. It is drawn only when stderr is a terminal (`terminal`): a bar redraws itself with
carriage returns, which a log file or a pipe would keep as they are.

Example
-------
>>> with shown(False):
...     with Progress(total=10, desc="dp", unit="ideal") as bar:
...         bar.update(10)
>>> bar.bar is None
True
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Any, Iterator

#: Seconds a run lasts before its bar appears.
DELAY = 2.0

_enabled = False


def enabled() -> bool:
    """Whether bars are shown now (a solver hooks its callbacks only then)."""
    return _enabled


def terminal() -> bool:
    """Whether stderr is a terminal, where a bar can redraw itself in place."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


@contextlib.contextmanager
def shown(on: bool = True) -> Iterator[None]:
    """Show (or hide) the bars of the runs inside the block."""
    global _enabled
    before, _enabled = _enabled, on
    try:
        yield
    finally:
        _enabled = before


class Progress:
    """A bar over ``total`` steps (``None``: open-ended) that appears after `DELAY` seconds when
    bars are shown.

    ``update(done)`` takes the number of steps done so far (not an increment); ``note(text)``
    sets the text after the bar (a solver's incumbent and bound). ``unit="s"``: the steps are a
    solver's seconds (no rate shown); ``unit="%"``: they are shares of the work out of ``total``,
    shown as a percentage and the time elapsed (no count, no rate).
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it") -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.started = time.monotonic()
        self.shown_at = -math.inf
        self.bar: Any = None

    def update(self, done: int) -> None:
        if self.bar is None:
            if not _enabled or time.monotonic() - self.started < DELAY or not terminal():
                return
            from tqdm import tqdm

            clock = ({"bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} s{postfix}" if self.total
                      else "{desc}: {n} s{postfix}"} if self.unit == "s"  # a solver's seconds: no rate
                     else {"bar_format": "{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}"} if self.unit == "%"
                     else {})
            self.bar = tqdm(total=self.total, initial=done, desc=self.desc, unit=self.unit, file=sys.stderr,
                            leave=False, dynamic_ncols=True, unit_scale=(self.total or 0) >= 10_000, **clock)
        else:
            self.bar.update(done - self.bar.n)

    def note(self, text: str) -> None:
        if self.bar is not None and text != self.bar.postfix:
            self.bar.set_postfix_str(text, refresh=False)
            if time.monotonic() - self.shown_at >= 0.5:  # solvers call back often: redraw twice a second
                self.bar.refresh()
                self.shown_at = time.monotonic()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
