"""The exceptions of the library: one base, one class per kind of wrong input.

Every error the library raises on purpose derives from `DevplaceError` (itself a `ValueError`,
so ``except ValueError`` in older code keeps working). The command line turns any of them into
one line on stderr and exit status 2; the message names the culprit (file, node id, field,
option) and, where there is one, the way out.

* `GraphError`: a graph, a placement or a file that breaks the model.
* `ClusterError`: devices that cannot exist (negative counts, no device, a bad memory cap, an
  unknown device name or accelerator spec).
* `UsageError`: an option or argument out of range, an unknown method, a bad combination.
* `LimitError`: an input too large for the method asked for (ideals past the limit, a file
  past the size the loader reads); the message says which method or limit does scale.

Example
-------
>>> try:
...     raise ClusterError("cluster: needs at least one device")
... except DevplaceError as e:
...     print(type(e).__name__, isinstance(e, ValueError))
ClusterError True
"""

from __future__ import annotations


class DevplaceError(ValueError):
    """Base of every error the library raises on purpose; its message is one line for the user."""


class GraphError(DevplaceError):
    """A graph, a placement or a file that breaks the model; the message names the culprit."""


class ClusterError(DevplaceError):
    """A cluster that cannot exist, or a device name it does not have."""


class UsageError(DevplaceError):
    """An option out of range, an unknown method or a combination that makes no sense."""


class LimitError(DevplaceError):
    """An input too large for the method asked for; the message names one that scales."""


def read_logs(logs: list) -> list[str]:
    """The whole output of each process's log file (binary, written by the process), closing
    each: what `rank_error` reads after a group of processes ended.

    >>> import tempfile
    >>> log = tempfile.TemporaryFile()
    >>> _ = log.write(b"[rank0]: ValueError: bad shape\\n")
    >>> rank_error(read_logs([log])), log.closed
    ('ValueError: bad shape', True)
    """
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read().decode(errors="replace"))
        log.close()
    return texts


def rank_error(texts: "list[str] | tuple[str, ...]", width: int = 300) -> str:
    """The most telling line of a group of processes' output (torchrun ranks): the first
    exception that is not a lost connection (the failing rank's own error, not what it caused
    on the others), else the last line printed; at most ``width`` characters.

    >>> rank_error(["[rank1]: ConnectionError: peer closed", "[rank0]: ValueError: bad shape"])
    'ValueError: bad shape'
    """
    import re

    found = []
    for text in texts:
        for ln in text.splitlines():
            m = re.match(r"^([\w.]+(?:Error|Exception)): (.*)", re.sub(r"^\[rank\d+\]:\s*", "", ln.strip()))
            if m and "ChildFailedError" not in m.group(1):
                found.append(f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}"[:width])
    quiet = [f for f in found if "onnection" not in f and "peer" not in f]
    if quiet or found:
        return (quiet or found)[0]
    tail = [ln for t in texts for ln in t.splitlines() if ln.strip()]
    return tail[-1][:width] if tail else "no output"
