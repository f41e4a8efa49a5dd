"""Progress bars for long runs: tqdm on stderr, shown by the ``devplace`` command line.

The library is silent unless asked: `shown` turns bars on for a block (the CLI does, except with
``--quiet``). A bar appears only once its run has lasted `DELAY` seconds, so a short command
never even imports tqdm, and it goes to stderr, never to stdout, so a ``--json`` answer stays
clean.

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
import sys
import time
from typing import Any, Iterator

#: Seconds a run lasts before its bar appears.
DELAY = 2.0

_enabled = False


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
    """A bar over ``total`` steps that appears after `DELAY` seconds when bars are shown.

    ``update(done)`` takes the number of steps done so far (not an increment).
    """

    def __init__(self, total: int, desc: str, unit: str = "it") -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.started = time.monotonic()
        self.bar: Any = None

    def update(self, done: int) -> None:
        if self.bar is None:
            if not _enabled or time.monotonic() - self.started < DELAY:
                return
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=done, desc=self.desc, unit=self.unit, file=sys.stderr,
                            leave=False, dynamic_ncols=True, unit_scale=self.total >= 10_000)
        else:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
