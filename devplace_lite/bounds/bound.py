"""What every lower-bound method returns: the bound, how it was proven, and at what cost."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

BOUND_STATUSES = ("optimal", "time_limit", "infeasible", "trivial")


@dataclass
class Bound:
    """A proven lower bound on the optimal largest device load (ms).

    ``status``: ``"optimal"`` when the bounding problem was solved to optimality (for a
    relaxation: its optimum was reached, so this bound cannot be raised by more solver time;
    for the exact MIP: the bound *is* the optimum), ``"time_limit"`` when the solver stopped at
    its time limit and ``bound`` is its best proven dual bound so far, ``"infeasible"`` when no
    placement of the asked kind exists (``bound`` is ``inf``), ``"trivial"`` for closed-form
    bounds that involve no solver. ``kind`` says which optimum is bounded: ``"any"`` (valid for
    every split, hence also for chains) or ``"chain"`` (valid for chain-of-ideals splits only).
    ``extra`` holds method details (per-stage bounds, incumbent of a MIP, components).
    """

    bound: float
    method: str
    seconds: float
    status: str
    kind: str = "any"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in BOUND_STATUSES:
            raise ValueError(f"unknown bound status {self.status!r}")
        if self.kind not in ("any", "chain"):
            raise ValueError(f"unknown split kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        """The ``devplace bound --json`` answer: ``bound`` (null when infinite), ``method``,
        ``seconds``, ``status``, ``kind`` and the method's extra fields."""
        out: dict[str, Any] = {
            "bound": self.bound if math.isfinite(self.bound) else None,
            "method": self.method,
            "seconds": round(self.seconds, 6),
            "status": self.status,
            "kind": self.kind,
        }
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out
