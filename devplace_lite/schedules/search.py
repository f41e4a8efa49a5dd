"""The split of a chain of segments that a pipeline schedule runs fastest, with a proof.

Problem
-------
``n`` segments in order, each with forward, backward (and backward-for-inputs) times per
micro-batch, static bytes and saved-activation bytes, and the transfer time of every cut
between two neighbours. Cut the chain into ``S`` contiguous stages (``S = p v``: ``p`` ranks of
``v`` stages each, placed on ranks as torch's class places them; for GPipe and 1F1B any
``S <= p``) so that the schedule's step time, as `devplace_lite.schedules.simulate` replays it, is
least, with every rank's peak memory within a cap.

Method and proof
----------------
Every split has a lower bound on its step time that needs no replay (`split_bound`): a stage
``s`` cannot start before its forward prefix (``sum_{t<s} F_t``) has run, then runs all its
``m`` forwards and backwards one at a time, and its last backward (its last input-gradient
pass, for zero-bubble) must still travel down to stage 0; and a rank runs all its stages'
work one after another. The replay is monotone in every time, so dropping the transfers keeps
the bound valid. Splits are enumerated when there are at most `ENUMERATE` of them, sorted by
that bound, and replayed in that order until the next bound reaches the best step found: the
incumbent is then optimal, proven by exhaustion. A time or replay budget that runs out first
leaves the incumbent with the least bound not yet ruled out (status ``feasible``, the gap
stated). Past `ENUMERATE`, a boundary-moving local search from the given start split runs,
and the bound is the least per-stage bound over all splits, found by a DP over cut positions
in ``O(S n^2)`` (`global_bound`), or the rank-work bound ``m W / p``, whichever is larger.

Complexity: ``O(C S)`` for the bounds of ``C = sum_S binom(n - 1, S - 1)`` splits, plus one
replay (``O(m S)``) per split tried.

Example
-------
>>> c = SegmentCosts(forward_ms=[1, 1, 2, 2], backward_ms=[2, 2, 4, 4])
>>> r = search(c, "1f1b", ranks=2, microbatches=4)
>>> r.stage_of, r.status, r.step_ms == r.bound_ms
([0, 0, 0, 1], 'optimal', True)
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import UsageError
from .simulate import SCHEDULES, Simulation, simulate, stage_to_rank, stages_per_rank

#: Splits enumerated (and sorted by bound) at most; past it, local search and the DP bound.
ENUMERATE = 200_000
#: Replays at most in one search.
MAX_REPLAYS = 20_000


@dataclass
class SegmentCosts:
    """Per segment (lists of length ``n``): times in ms per micro-batch, bytes; ``cut_ms[i]``:
    the transfer time of a cut after segment ``i`` (forward; ``cut_back_ms`` the gradients');
    ``step_bytes``: what the last stage holds for the whole step (outputs and targets)."""

    forward_ms: Sequence[float]
    backward_ms: Sequence[float]
    input_ms: Sequence[float] | None = None
    static_bytes: Sequence[float] | None = None
    activation_bytes: Sequence[float] | None = None
    cut_ms: Sequence[float] | None = None
    cut_back_ms: Sequence[float] | None = None
    step_bytes: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.forward_ms)
        if n == 0:
            raise UsageError("no segments to split")
        for name in ("backward_ms", "input_ms", "static_bytes", "activation_bytes"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise UsageError(f"{name} has {len(v)} values for {n} segments")
        for name in ("cut_ms", "cut_back_ms"):
            v = getattr(self, name)
            if v is not None and len(v) != n - 1:
                raise UsageError(f"{name} has {len(v)} values for {n - 1} cuts")

    @property
    def n(self) -> int:
        return len(self.forward_ms)


@dataclass
class SplitSearch:
    """The best split found: ``stage_of[i]`` is segment ``i``'s stage; ``status`` ``optimal``
    (proven), ``feasible`` (``bound_ms`` proven, gap stated) or ``infeasible`` (proven: no split
    fits the memory)."""

    stage_of: list[int] | None
    ranks: int
    simulation: Simulation | None
    bound_ms: float
    status: str
    method: str
    replays: int
    splits: int | None
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def step_ms(self) -> float | None:
        return None if self.simulation is None else self.simulation.step_ms

    @property
    def gap(self) -> float | None:
        if self.step_ms is None or not math.isfinite(self.bound_ms):
            return None
        return 0.0 if self.step_ms <= 0 else max(0.0, (self.step_ms - self.bound_ms) / self.step_ms)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "step_ms": self.step_ms, "bound_ms": self.bound_ms, "gap": self.gap,
                "method": self.method, "replays": self.replays, "splits": self.splits, "seconds": self.seconds,
                "notes": self.notes}


def _prefix(xs: Sequence[float]) -> list[float]:
    out = [0.0]
    for x in xs:
        out.append(out[-1] + float(x))
    return out


class _Split:
    """Stage sums of a split by prefix sums (cuts: the first segment of stages 1..S-1)."""

    def __init__(self, c: SegmentCosts, training: bool, split_backward: bool) -> None:
        n = c.n
        self.c, self.training, self.split = c, training, split_backward
        self.pf = _prefix(c.forward_ms)
        self.pb = _prefix(c.backward_ms if training else [0.0] * n)
        self.pi = _prefix(c.input_ms if c.input_ms is not None else [b / 2 for b in c.backward_ms])
        self.ps = _prefix(c.static_bytes or [0.0] * n)
        self.pa = _prefix(c.activation_bytes or [0.0] * n)

    def bounds(self, cuts: Sequence[int]) -> list[tuple[int, int]]:
        edges = [0, *cuts, self.c.n]
        return list(zip(edges, edges[1:]))

    def times(self, cuts: Sequence[int]) -> dict[str, list[float]]:
        b = self.bounds(cuts)
        f = [self.pf[j] - self.pf[i] for i, j in b]
        out = {"F": f}
        if self.training:
            bb = [self.pb[j] - self.pb[i] for i, j in b]
            ii = [min(self.pi[j] - self.pi[i], x) for (i, j), x in zip(b, bb)]
            out.update(B=bb, I=ii, W=[x - y for x, y in zip(bb, ii)])
        return out

    def stage_bound(self, i: int, j: int, m: int) -> float:
        """Least time by which a stage of segments ``i..j-1`` can be done with (see the module)."""
        f = self.pf[j] - self.pf[i]
        if not self.training:
            return self.pf[i] + m * f + (self.pf[-1] - self.pf[j])
        b = self.pb[j] - self.pb[i]
        g, gpre = (min(self.pi[j] - self.pi[i], b), self.pi[i]) if self.split else (b, self.pb[i])
        return max(self.pf[i] + m * (f + g) + gpre, self.pf[i] + m * (f + b))

    def split_bound(self, cuts: Sequence[int], ranks: Sequence[int], m: int) -> float:
        b = self.bounds(cuts)
        best = max(self.stage_bound(i, j, m) for i, j in b)
        work: dict[int, float] = {}
        first: dict[int, float] = {}
        for (i, j), r in zip(b, ranks):
            work[r] = work.get(r, 0.0) + (self.pf[j] - self.pf[i]) + (self.pb[j] - self.pb[i])
            first[r] = min(first.get(r, math.inf), self.pf[i])
        return max(best, max(first[r] + m * work[r] for r in work))


def _cut_times(c: SegmentCosts, cuts: Sequence[int]) -> tuple[list[float], list[float]]:
    fwd = [float(c.cut_ms[x - 1]) if c.cut_ms is not None else 0.0 for x in cuts]
    back = [float(c.cut_back_ms[x - 1]) if c.cut_back_ms is not None else f for x, f in zip(cuts, fwd)]
    return fwd, back


def evaluate(c: SegmentCosts, cuts: Sequence[int], schedule: str, ranks: int, microbatches: int,
             per_rank: int | None = None, training: bool = True) -> Simulation:
    """Replay ``schedule`` on the split whose stages begin at segments ``cuts`` (sorted, in ``1..n-1``).

    Examples
    --------
    >>> c = SegmentCosts(forward_ms=[1, 1, 1, 1], backward_ms=[2, 2, 2, 2])
    >>> evaluate(c, [2], "gpipe", 2, 2).step_ms
    18.0
    """
    sp = _Split(c, training, SCHEDULES[schedule].split_backward)
    fwd, back = _cut_times(c, cuts)
    b = sp.bounds(cuts)
    return simulate(schedule, ranks, microbatches, sp.times(cuts), per_rank=per_rank, training=training,
                    transfer_ms=fwd, transfer_back_ms=back,
                    static_bytes=[sp.ps[j] - sp.ps[i] + (c.step_bytes if j == c.n else 0.0) for i, j in b],
                    activation_bytes=[sp.pa[j] - sp.pa[i] for i, j in b])


def global_bound(c: SegmentCosts, stages: Sequence[int], microbatches: int, training: bool = True,
                 split_backward: bool = False) -> float:
    """Least, over all splits into any of ``stages`` stage counts, of the largest per-stage
    bound (a DP over cut positions, ``O(S n^2)``): a lower bound on every split's step time.

    Examples
    --------
    >>> global_bound(SegmentCosts([1, 1], [2, 2]), [2], microbatches=2)
    9.0
    """
    sp = _Split(c, training, split_backward)
    n = c.n
    best = math.inf
    for s_count in stages:
        if s_count > n:
            continue
        row = [sp.stage_bound(0, j, microbatches) for j in range(n + 1)]  # one stage over 0..j-1
        for _ in range(s_count - 1):
            nxt = [math.inf] * (n + 1)
            for j in range(1, n + 1):
                nxt[j] = min((max(row[i], sp.stage_bound(i, j, microbatches)) for i in range(1, j)), default=math.inf)
            row = nxt
        best = min(best, row[n])
    return best


def _counts(schedule: str, ranks: int, per_rank: int | None, n: int, microbatches: int) -> list[tuple[int, int]]:
    """(ranks used, stages) pairs the schedule may run: fewer ranks for the one-stage schedules."""
    v = stages_per_rank(schedule, per_rank)
    if v == 1 and SCHEDULES[schedule].fixed:
        out = [(p, p) for p in range(1, min(ranks, n) + 1) if schedule != "1f1b" or microbatches >= p]
        if not out:
            raise UsageError(f"{schedule} with {microbatches} micro-batch(es) runs on no rank count up to {ranks}")
        return out
    if ranks * v > n:
        raise UsageError(f"{schedule} with {v} stage(s) on each of {ranks} rank(s) needs {ranks * v} stages, but the "
                         f"model has {n} segment(s); way out: fewer ranks (-k), fewer stages per rank, or "
                         "--granularity layer")
    return [(ranks, ranks * v)]


def search(c: SegmentCosts, schedule: str, ranks: int, microbatches: int, *, per_rank: int | None = None,
           training: bool = True, memory: float | None = None, start: Sequence[int] | None = None,
           time_limit: float = 10.0, max_replays: int = MAX_REPLAYS) -> SplitSearch:
    """The split of ``c`` with the least replayed step time under ``schedule`` (see the module).

    Parameters
    ----------
    c : SegmentCosts
    schedule : str
        A key of `devplace_lite.schedules.simulate.SCHEDULES`.
    ranks, microbatches : int
    per_rank : int, optional
        Stages per rank where the schedule takes several.
    training : bool
    memory : float, optional
        Bytes per rank; splits whose replayed peak exceeds it are ruled out.
    start : sequence of int, optional
        A segment -> stage list to start from (and to keep when nothing beats it).
    time_limit : float
        Seconds for the whole search; the incumbent and its bound are returned when it runs out.
    max_replays : int

    Returns
    -------
    SplitSearch

    Raises
    ------
    UsageError
        A stage count the model or torch's class cannot take.
    """
    t0 = time.perf_counter()
    v = stages_per_rank(schedule, per_rank)
    split_b = SCHEDULES[schedule].split_backward
    sp = _Split(c, training, split_b)
    n, m = c.n, int(microbatches)
    counts = _counts(schedule, ranks, per_rank, n, m)
    total = sum(math.comb(n - 1, s - 1) for _, s in counts)
    best: tuple[float, float, list[int], int, Simulation] | None = None  # (step, max load, cuts, ranks, sim)
    replays = 0

    def load_max(cuts: Sequence[int]) -> float:
        return max((sp.pf[j] - sp.pf[i]) + (sp.pb[j] - sp.pb[i]) for i, j in sp.bounds(cuts))

    def consider(cuts: list[int], p: int) -> None:
        nonlocal best, replays
        replays += 1
        sim = evaluate(c, cuts, schedule, p, m, v, training)
        if memory is not None and max(sim.rank_peak_bytes) > memory:
            return
        key = (sim.step_ms, load_max(cuts))
        if best is None or key < best[:2]:
            best = (sim.step_ms, key[1], list(cuts), p, sim)

    notes: list[str] = []
    start_cuts = None
    if start is not None and len(start) == n:
        start_cuts = [i for i in range(1, n) if start[i] != start[i - 1]]
    if total <= ENUMERATE:
        cand = []
        for p, s in counts:
            maps = stage_to_rank(schedule, p, v)
            for cuts in itertools.combinations(range(1, n), s - 1):
                cand.append((sp.split_bound(cuts, maps, m), cuts, p))
        cand.sort(key=lambda x: x[0])
        bound, status, k = math.inf, "optimal", 0
        for k, (lb, cuts, p) in enumerate(cand):
            if best is not None and lb >= best[0] * (1 - 1e-12):
                bound = best[0]
                break
            if replays >= max_replays or time.perf_counter() - t0 > time_limit:
                bound, status = lb, "feasible"
                notes.append(f"stopped after {replays} replays of {total} splits (budget); bound: the least "
                             "bound among the splits not replayed")
                break
            consider(list(cuts), p)
        else:
            if best is None:
                return SplitSearch(None, ranks, None, math.inf, "infeasible", "enumeration", replays, total,
                                   time.perf_counter() - t0, ["no split fits the memory (every split replayed)"])
            bound = best[0]
        if best is not None and status == "feasible":
            bound = min(bound, best[0])
        method = f"enumeration of {total} splits in bound order"
    else:
        method = "local search (boundary moves) from the start split"
        p, s = counts[-1]
        cuts = start_cuts if start_cuts is not None and len(start_cuts) == s - 1 else \
            [round(i * n / s) for i in range(1, s)]
        consider(cuts, p)
        improved = True
        while improved and replays < max_replays and time.perf_counter() - t0 <= time_limit:
            improved = False
            cur = best[2] if best is not None else cuts
            for idx in range(len(cur)):
                for d in (-1, 1):
                    nc = list(cur)
                    nc[idx] += d
                    if not (0 < nc[idx] < n) or len(set(nc)) < len(nc) or nc != sorted(nc):
                        continue
                    before = best[:2] if best is not None else None
                    consider(nc, p)
                    if best is not None and best[:2] != before:
                        improved = True
        bound = max(global_bound(c, [st for _, st in counts], m, training, split_b),
                    m * (sp.pf[-1] + sp.pb[-1]) / max(p for p, _ in counts))
        status = "feasible"
        if best is None:
            return SplitSearch(None, ranks, None, bound, "unknown", method, replays, total,
                               time.perf_counter() - t0, ["no split tried fits the memory"])
        if best[0] <= bound * (1 + 1e-12):
            status = "optimal"
    step, _, cuts, p, sim = best
    stage_of = [0] * n
    for s, (i, j) in enumerate(sp.bounds(cuts)):
        for x in range(i, j):
            stage_of[x] = s
    return SplitSearch(stage_of, p, sim, min(bound, step), "optimal" if step <= bound * (1 + 1e-12) else status,
                       method, replays, total, time.perf_counter() - t0, notes)
