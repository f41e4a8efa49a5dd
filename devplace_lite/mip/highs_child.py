"""A HiGHS solve in a process of its own, so that a time limit can be enforced by killing it.

HiGHS checks its time limit and its cancel flag at its callbacks, and some phases call none for
minutes: probing every fractional binary in the root's implied-bound separation
(``HighsImplications::separateImpliedBounds``) ran 60 s past a 20 s limit on BERT's operator
graph at k = 32. `devplace_lite.mip.solve` therefore runs large time-limited HiGHS solves as
``python -m devplace_lite.mip.highs_child``: the parent writes one pickled request to the
child's stdin (the `LinearModel`, options, warm start, time limit); the child streams pickled
messages on the pipe it was given as stdout:

* ``("bound", primal, dual)``: at HiGHS's interrupt callback, at most every `BOUND_EVERY` s;
* ``("incumbent", objective, values)``: every improving solution, in the original columns;
* ``("done", status, objective, values, dual, nodes)``: the end (``status``: the name of
  HiGHS's ``HighsModelStatus``).

The parent keeps the last of each and kills the child at the deadline; what it last heard is
then the answer (an incumbent and a bound proven at that moment). The child ignores Ctrl-C (the
parent, which gets it too, kills the child) and dies with its parent (Linux). HiGHS's own
console output goes to stderr, never to the message pipe.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from typing import Any, BinaryIO

#: Seconds between two ``bound`` messages (the interrupt callback fires far more often).
BOUND_EVERY = 0.2


def send(out: BinaryIO, message: tuple) -> None:
    """Write one message to the parent (a pickle, flushed at once)."""
    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def receive(stream: BinaryIO) -> tuple | None:
    """The next message from the child, or ``None`` at the end of its output (or once the parent
    has closed the pipe: it stops listening when it kills the child)."""
    try:
        return pickle.load(stream)
    except (EOFError, pickle.UnpicklingError, OSError, ValueError):
        return None


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    out = os.fdopen(os.dup(1), "wb")  # the message pipe; fd 1 becomes stderr for HiGHS's output
    os.dup2(2, 1)
    req: dict[str, Any] = pickle.load(sys.stdin.buffer)
    import highspy

    model = req["model"]
    h = model.highs(req["gap"], req["threads"], req["seed"], req["verbose"])
    if req["start"] is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(req["start"])
        sol.value_valid = True
        send(out, ("start", h.setSolution(sol) == highspy.HighsStatus.kOk))
    if req["time_limit"] is not None:
        h.setOptionValue("time_limit", float(req["time_limit"]))
    last = [0.0]

    def on_bound(event) -> None:
        now = time.monotonic()
        if now - last[0] >= BOUND_EVERY:
            last[0] = now
            send(out, ("bound", event.data_out.mip_primal_bound, event.data_out.mip_dual_bound))

    def on_incumbent(event) -> None:
        send(out, ("incumbent", float(event.data_out.objective_function_value),
                   list(event.data_out.mip_solution)))

    h.cbMipInterrupt.subscribe(on_bound)
    h.cbMipImprovingSolution.subscribe(on_incumbent)
    h.run()
    info = h.getInfo()
    values = list(h.getSolution().col_value) if info.primal_solution_status == 2 else None
    send(out, ("done", h.getModelStatus().name, float(info.objective_function_value), values,
               float(info.mip_dual_bound), int(max(info.mip_node_count, 0))))


if __name__ == "__main__":
    main()
