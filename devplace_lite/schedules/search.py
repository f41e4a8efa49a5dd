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
leaves the incumbent with the least bound not yet ruled out, the gap stated (status
``time_limit`` when the time ran out, ``feasible`` for the replay budget); the time limit stops
the search only once it holds an incumbent (a split that fits), the replay budget always. Past
`ENUMERATE` (or when the time runs out while the splits are bounded), a boundary-moving local
search from the given start split runs, and the bound is the least per-stage bound over all
splits, found by a DP over cut positions in ``O(S n^2)`` (`global_bound`), or the rank-work
bound ``m W / p``, whichever is larger.

Activation recomputation (``recompute="auto"``, with a memory cap): a split that does not fit
may fit when some stages recompute their activations in the backward (torch.utils.checkpoint
around each segment, one at a time; `stage_bytes` gives what such a stage keeps and
`devplace_lite.schedules.simulate` models its time and memory). The choice per split is exact
by a dominance, not by trying all ``2^S`` flag vectors: a rank's peak depends on its own
stages' flags only (`rank_peaks`: it follows the rank's own action order, whatever the times),
and the replayed step never decreases when one more stage recomputes (times only grow, the
replay is monotone). So from any fitting choice, dropping every flag that its rank does not
need to fit keeps it fitting and does not lengthen the step: some least-step choice recomputes,
on each rank, a *minimal* set of that rank's stages with which the rank fits. The search
replays every combination of the ranks' minimal fitting sets (with one stage per rank there is
one: recompute exactly the stages whose rank does not fit without it), at most
`MAX_CHOICES` per split; past that (several stages per rank and many ranks with several
minimal sets) each rank takes its minimal set of least recomputed forward time and the search
is no longer exhaustive (status ``feasible``, said in the notes). The split bounds leave
recomputation out, which only lengthens steps, so they stay lower bounds and the enumeration in
bound order stays a proof. Equal steps prefer fewer recomputing stages.

Complexity: ``O(C S)`` for the bounds of ``C = sum_S binom(n - 1, S - 1)`` splits, plus one
replay (``O(m S)``) per split tried; with recomputation, for a split over the cap, ``2^v``
peak counts (``v`` stages per rank) and one replay per combination of minimal sets.

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
from .simulate import SCHEDULES, Simulation, action_order, rank_peaks, simulate, stage_to_rank, stages_per_rank

#: Splits enumerated (and sorted by bound) at most; past it, local search and the DP bound.
ENUMERATE = 200_000
#: Replays at most in one search.
MAX_REPLAYS = 20_000
#: Recomputation choices (combinations of the ranks' minimal fitting sets) replayed per split at most.
MAX_CHOICES = 64
#: ``recompute`` values of `search`: never, where the memory cap needs it, or on every stage (as
#: Megatron-LM's published runs recompute every layer).
RECOMPUTE = ("never", "auto", "all")


@dataclass
class SegmentCosts:
    """Per segment (lists of length ``n``): times in ms per micro-batch, bytes; ``cut_ms[i]``:
    the transfer time of a cut after segment ``i`` (forward; ``cut_back_ms`` the gradients');
    ``step_bytes``: what the last stage holds for the whole step (outputs and targets);
    ``cut_bytes[i]``: the bytes of one micro-batch crossing a cut after segment ``i`` and
    ``first_input_bytes`` the model inputs the first stage reads (a recomputing stage keeps, per
    micro-batch, what crosses into each of its segments: its input and its inner cuts);
    ``input_ms`` and ``weight_ms``: torch's
    input- and weight-gradient passes, measured (without ``weight_ms``, W is B - I; without
    either, I and W are half of B each); ``action_ms``: what a forward or backward (or
    input-gradient) pass pays on the wall clock beyond its own time per message it exchanges
    with another rank (torch's schedule runtime, its messages' waits, the ranks' interference:
    `devplace_lite.pipeline.calibration.message_price` measures it), the replay's ``message_ms``;
    ``shared_saves``: ``(bytes, segments)`` of each value that several segments save for their
    backward (one tensor inside a stage: counted once per stage, `stage_bytes`)."""

    forward_ms: Sequence[float]
    backward_ms: Sequence[float]
    input_ms: Sequence[float] | None = None
    static_bytes: Sequence[float] | None = None
    activation_bytes: Sequence[float] | None = None
    cut_ms: Sequence[float] | None = None
    cut_back_ms: Sequence[float] | None = None
    step_bytes: float = 0.0
    cut_bytes: Sequence[float] | None = None
    first_input_bytes: float = 0.0
    weight_ms: Sequence[float] | None = None
    action_ms: float = 0.0
    shared_saves: Sequence[tuple[float, Sequence[int]]] | None = None

    def __post_init__(self) -> None:
        n = len(self.forward_ms)
        if n == 0:
            raise UsageError("no segments to split")
        if not (self.action_ms >= 0 and math.isfinite(self.action_ms)):
            raise UsageError(f"action_ms must be a finite number >= 0, got {self.action_ms}")
        for name in ("backward_ms", "input_ms", "weight_ms", "static_bytes", "activation_bytes"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise UsageError(f"{name} has {len(v)} values for {n} segments")
        for name in ("cut_ms", "cut_back_ms", "cut_bytes"):
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
    fits the memory, with recomputation where it was allowed); ``recompute[s]``: stage ``s``
    recomputes its activations in its backward."""

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
    recompute: list[bool] | None = None

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
                "notes": self.notes, "recompute": self.recompute}


def _prefix(xs: Sequence[float]) -> list[float]:
    out = [0.0]
    for x in xs:
        out.append(out[-1] + float(x))
    return out


class _Split:
    """Stage sums of a split by prefix sums (cuts: the first segment of stages 1..S-1).

    Per stage, ``I`` and ``W`` are the measured input- and weight-gradient passes when the
    costs have both (their sum is more than ``B`` in torch), else ``W`` is the rest of the
    backward; torch's first stage runs no input pass, its weight pass is its whole backward."""

    def __init__(self, c: SegmentCosts, training: bool, split_backward: bool) -> None:
        n = c.n
        self.c, self.training, self.split = c, training, split_backward
        back = list(c.backward_ms) if training else [0.0] * n
        inp = list(c.input_ms) if c.input_ms is not None else [b / 2 for b in back]
        self.pf = _prefix(c.forward_ms)
        self.pb = _prefix(back)
        self.pi = _prefix(inp)
        self.pw = _prefix(c.weight_ms) if c.weight_ms is not None and training else None
        # bound terms per segment: the least backward work a schedule runs for it (a split
        # backward may cost less than B in a measurement), and the least part of it that a
        # later stage's input pass waits for (an input pass, or the first stage's whole backward)
        work = back if not split_backward or self.pw is None else \
            [min(b, i + w) for b, i, w in zip(back, inp, c.weight_ms)]
        self.pwork = _prefix(work)
        self.ptail = _prefix([min(i, b) for i, b in zip(inp, back)])

    def bounds(self, cuts: Sequence[int]) -> list[tuple[int, int]]:
        edges = [0, *cuts, self.c.n]
        return list(zip(edges, edges[1:]))

    def _input(self, i: int, j: int) -> float:
        """``I`` of a stage of segments ``i..j-1``."""
        if i == 0:
            return 0.0
        x = self.pi[j] - self.pi[i]
        return x if self.pw is not None else min(x, self.pb[j] - self.pb[i])

    def times(self, cuts: Sequence[int]) -> dict[str, list[float]]:
        """Per stage: F, and B, I, W in training, compute alone (the replay adds the price of
        the messages, ``action_ms``; the bounds leave it out, which keeps them lower bounds:
        the replay is monotone)."""
        b = self.bounds(cuts)
        out = {"F": [self.pf[j] - self.pf[i] for i, j in b]}
        if self.training:
            bb = [self.pb[j] - self.pb[i] for i, j in b]
            ii = [self._input(i, j) for i, j in b]
            ww = [x - y for x, y in zip(bb, ii)] if self.pw is None else \
                [x if i == 0 else self.pw[j] - self.pw[i] for (i, j), x in zip(b, bb)]
            out.update(B=bb, I=ii, W=ww)
        return out

    def stage_bound(self, i: int, j: int, m: int) -> float:
        """Least time by which a stage of segments ``i..j-1`` can be done with (see the module)."""
        f = self.pf[j] - self.pf[i]
        if not self.training:
            return self.pf[i] + m * f + (self.pf[-1] - self.pf[j])
        b = self.pb[j] - self.pb[i]
        g, gpre = (self._input(i, j), self.ptail[i]) if self.split else (b, self.pb[i])
        return max(self.pf[i] + m * (f + g) + gpre, self.pf[i] + m * (f + self.pwork[j] - self.pwork[i]))

    def split_bound(self, cuts: Sequence[int], ranks: Sequence[int], m: int) -> float:
        b = self.bounds(cuts)
        best = max(self.stage_bound(i, j, m) for i, j in b)
        work: dict[int, float] = {}
        first: dict[int, float] = {}
        for (i, j), r in zip(b, ranks):
            work[r] = work.get(r, 0.0) + (self.pf[j] - self.pf[i]) + (self.pwork[j] - self.pwork[i])
            first[r] = min(first.get(r, math.inf), self.pf[i])
        return max(best, max(first[r] + m * work[r] for r in work))


def stage_times(c: SegmentCosts, cuts: Sequence[int], training: bool = True) -> dict[str, list[float]]:
    """Per stage of the split whose stages begin at segments ``cuts``: ``F`` and, in training,
    ``B``, ``I`` and ``W`` as the replay takes them (see `SegmentCosts`; torch's first stage
    runs no input pass: its ``W`` is its whole backward).

    Examples
    --------
    >>> stage_times(SegmentCosts([1, 1], [4, 4], input_ms=[1, 1], weight_ms=[4, 4]), [1])
    {'F': [1.0, 1.0], 'B': [4.0, 4.0], 'I': [0.0, 1.0], 'W': [4.0, 4.0]}
    """
    return _Split(c, training, False).times(cuts)


def _cut_times(c: SegmentCosts, cuts: Sequence[int]) -> tuple[list[float], list[float]]:
    fwd = [float(c.cut_ms[x - 1]) if c.cut_ms is not None else 0.0 for x in cuts]
    back = [float(c.cut_back_ms[x - 1]) if c.cut_back_ms is not None else f for x, f in zip(cuts, fwd)]
    return fwd, back


def stage_bytes(c: SegmentCosts, cuts: Sequence[int]) -> dict[str, list[float]]:
    """Per stage of the split at ``cuts``: ``static_bytes`` (the last stage's step bytes
    included), ``activation_bytes``, ``input_bytes`` and ``recompute_bytes`` (one micro-batch),
    as `simulate` takes them. A recomputing stage checkpoints each of its segments: it keeps
    the inputs of every segment (its input and what crosses each inner cut; a value read
    further on counts at every cut it crosses, though the run keeps it once: an upper bound),
    and its backward recomputes one segment at a time, holding beyond them the largest
    segment's activations less that segment's input (which they hold where its first operator
    saves it).

    Examples
    --------
    >>> c = SegmentCosts([1, 1], [2, 2], activation_bytes=[8, 6], cut_bytes=[3], first_input_bytes=2)
    >>> b = stage_bytes(c, [1])
    >>> b["input_bytes"], b["recompute_bytes"]
    ([2.0, 3.0], [6.0, 3.0])
    >>> b = stage_bytes(c, [])  # one stage: the inputs of both segments kept, the larger recomputed
    >>> b["input_bytes"], b["recompute_bytes"]
    ([5.0], [6.0])
    >>> c = SegmentCosts([1, 1], [2, 2], activation_bytes=[8, 6], shared_saves=[(4, [0, 1])])
    >>> stage_bytes(c, [])["activation_bytes"], stage_bytes(c, [1])["activation_bytes"]
    ([10.0], [8.0, 6.0])
    """
    edges = [0, *cuts, c.n]
    pairs = list(zip(edges, edges[1:]))
    ps, pa = _prefix(c.static_bytes or [0.0] * c.n), _prefix(c.activation_bytes or [0.0] * c.n)

    def repeats(i: int, j: int) -> float:
        """Bytes counted more than once in the stage of segments ``i..j-1``: a value several of
        them save is one tensor there."""
        inside = ((b, sum(1 for x in segs if i <= x < j)) for b, segs in c.shared_saves or ())
        return float(sum(b * (k - 1) for b, k in inside if k > 1))

    def into(k: int) -> float:
        """What crosses into segment ``k`` (the model's inputs into the first)."""
        return float(c.first_input_bytes) if k == 0 else (float(c.cut_bytes[k - 1]) if c.cut_bytes is not None
                                                          else 0.0)

    act = c.activation_bytes or [0.0] * c.n
    return {"static_bytes": [ps[j] - ps[i] + (c.step_bytes if j == c.n else 0.0) for i, j in pairs],
            "activation_bytes": [pa[j] - pa[i] - repeats(i, j) for i, j in pairs],
            "input_bytes": [sum(into(k) for k in range(i, j)) for i, j in pairs],
            "recompute_bytes": [max(max(float(act[k]) - into(k), 0.0) for k in range(i, j)) for i, j in pairs]}


def evaluate(c: SegmentCosts, cuts: Sequence[int], schedule: str, ranks: int, microbatches: int,
             per_rank: int | None = None, training: bool = True, recompute: Sequence[bool] | None = None) -> Simulation:
    """Replay ``schedule`` on the split whose stages begin at segments ``cuts`` (sorted, in ``1..n-1``),
    the stages flagged in ``recompute`` recomputing their activations.

    Examples
    --------
    >>> c = SegmentCosts(forward_ms=[1, 1, 1, 1], backward_ms=[2, 2, 2, 2])
    >>> evaluate(c, [2], "gpipe", 2, 2).step_ms, evaluate(c, [2], "gpipe", 2, 2, recompute=[True, True]).step_ms
    (18.0, 24.0)
    """
    sp = _Split(c, training, SCHEDULES[schedule].split_backward)
    fwd, back = _cut_times(c, cuts)
    return simulate(schedule, ranks, microbatches, sp.times(cuts), per_rank=per_rank, training=training,
                    transfer_ms=fwd, transfer_back_ms=back, recompute=recompute, message_ms=c.action_ms,
                    **stage_bytes(c, cuts))


def recompute_choices(c: SegmentCosts, cuts: Sequence[int], schedule: str, ranks: int, microbatches: int,
                      memory: float, per_rank: int | None = None, limit: int = MAX_CHOICES
                      ) -> tuple[list[list[bool]], bool]:
    """The recomputation flag vectors a least-step fitting choice is among (see the module
    docstring: every combination of the ranks' minimal fitting sets of stages), and whether that
    list is complete (``False``: over ``limit`` combinations, each rank's minimal set of least
    recomputed forward time alone). ``[]``: some rank fits under no choice.

    Examples
    --------
    >>> c = SegmentCosts([1, 1], [2, 2], activation_bytes=[10, 10], cut_bytes=[1], first_input_bytes=1)
    >>> recompute_choices(c, [1], "gpipe", 2, 4, memory=20)
    ([[True, True]], True)
    >>> recompute_choices(c, [1], "gpipe", 2, 4, memory=5)
    ([], True)
    """
    v = stages_per_rank(schedule, per_rank)
    order = action_order(schedule, ranks, microbatches, per_rank)
    s2r = stage_to_rank(schedule, ranks, per_rank)
    mem = stage_bytes(c, cuts)
    mine = [[s for s in range(len(s2r)) if s2r[s] == r] for r in range(ranks)]
    fits: list[list[int]] = [[] for _ in range(ranks)]  # per rank: the masks over its stages that fit
    for mask in range(1 << v):
        flags = [False] * len(s2r)
        for r in range(ranks):
            for b, s in enumerate(mine[r]):
                flags[s] = bool(mask >> b & 1)
        peaks, _ = rank_peaks(order, s2r, recompute=flags, **mem)
        for r in range(ranks):
            if peaks[r] <= memory:
                fits[r].append(mask)
    minimal = [[x for x in f if not any(y != x and y & x == y for y in f)] for f in fits]
    if any(not x for x in minimal):
        return [], True
    fwd = _Split(c, True, False).times(cuts)["F"]
    complete = math.prod(len(x) for x in minimal) <= limit
    if not complete:
        minimal = [[min(x, key=lambda mk, r=r: (sum(fwd[s] for b, s in enumerate(mine[r]) if mk >> b & 1), mk))]
                   for r, x in enumerate(minimal)]
    out = []
    for combo in itertools.product(*minimal):
        flags = [False] * len(s2r)
        for r, mask in enumerate(combo):
            for b, s in enumerate(mine[r]):
                flags[s] = bool(mask >> b & 1)
        out.append(flags)
    return out, complete


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


def quick_bound(c: SegmentCosts, schedule: str, ranks: int, microbatches: int, training: bool = True) -> float:
    """A lower bound on the replayed step of every split of ``c`` over ``ranks`` ranks, in ``O(n)``
    and without a search: a rank runs its stages' ``m`` forwards and backwards one after another,
    so the busiest rank works at least the average ``m W / p``, and the rank holding segment
    ``k`` at least ``m (F_k + B_k)`` (the backward's least form, as `global_bound` counts it). It
    lets a caller weighing many rank counts (`devplace_lite.pipeline.mesh_plan`) skip those
    whose bound no split can bring below a step already found.

    Examples
    --------
    >>> quick_bound(SegmentCosts([1, 1, 4], [2, 2, 8]), "1f1b", ranks=2, microbatches=4)
    48.0
    """
    sp = _Split(c, training, SCHEDULES[schedule].split_backward)
    m = int(microbatches)
    work = [sp.pf[k + 1] - sp.pf[k] + sp.pwork[k + 1] - sp.pwork[k] for k in range(c.n)]
    return max(m * (sp.pf[-1] + sp.pwork[-1]) / ranks, m * max(work))


def _counts(schedule: str, ranks: int, per_rank: int | None, n: int, microbatches: int,
            least: int = 1) -> list[tuple[int, int]]:
    """(ranks used, stages) pairs the schedule may run: fewer ranks for the one-stage schedules,
    ``least`` of them at least."""
    v = stages_per_rank(schedule, per_rank)
    if v == 1 and SCHEDULES[schedule].fixed:
        out = [(p, p) for p in range(max(1, least), min(ranks, n) + 1) if schedule != "1f1b" or microbatches >= p]
        if not out:
            raise UsageError(f"{schedule} with {microbatches} micro-batch(es) on {n} segment(s) runs on no rank count "
                             f"from {max(1, least)} to {ranks}")
        return out
    if ranks * v > n:
        raise UsageError(f"{schedule} with {v} stage(s) on each of {ranks} rank(s) needs {ranks * v} stages, but the "
                         f"model has {n} segment(s); way out: fewer ranks (-k), fewer stages per rank, or "
                         "--granularity layer")
    return [(ranks, ranks * v)]


def _bounded_splits(sp: _Split, counts: Sequence[tuple[int, int]], schedule: str, v: int, n: int, m: int,
                    until: float) -> list[tuple[float, tuple[int, ...], int]] | None:
    """Every split as ``(bound, cuts, ranks)`` in bound order, or None when `time.perf_counter`
    passes ``until`` first (up to `ENUMERATE` bounds take a second or two of CPU)."""
    cand = []
    for p, s in counts:
        maps = stage_to_rank(schedule, p, v)
        for j, cuts in enumerate(itertools.combinations(range(1, n), s - 1)):
            if j % 4096 == 4095 and time.perf_counter() > until:
                return None
            cand.append((sp.split_bound(cuts, maps, m), cuts, p))
    cand.sort(key=lambda x: x[0])
    return cand


def search(c: SegmentCosts, schedule: str, ranks: int, microbatches: int, *, per_rank: int | None = None,
           training: bool = True, memory: float | None = None, start: Sequence[int] | None = None,
           time_limit: float = 10.0, max_replays: int = MAX_REPLAYS, recompute: str = "never",
           least_ranks: int = 1) -> SplitSearch:
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
        Seconds for the whole search; the incumbent and its bound are returned when it runs out
        (status ``time_limit``), once there is one: the first fitting split is always replayed.
    max_replays : int
    recompute : ``"never"``, ``"auto"`` or ``"all"``
        ``"auto"``: a split over ``memory`` may recompute activations on some stages (the least
        step among the fitting choices; see the module docstring); ``"all"``: every stage
        recomputes (the bounds, which count no recomputation, stay lower bounds). Training only.
    least_ranks : int
        The fewest ranks a one-stage-per-rank schedule may use (default 1; a checked run asks
        for 2, so that what it checks is split). The bound and status are over those splits.

    Returns
    -------
    SplitSearch

    Raises
    ------
    UsageError
        A stage count the model or torch's class cannot take, or an unknown ``recompute``.
    """
    if recompute not in RECOMPUTE:
        raise UsageError(f"unknown recompute choice {recompute!r}; known: {', '.join(RECOMPUTE)}")
    t0 = time.perf_counter()
    v = stages_per_rank(schedule, per_rank)
    split_b = SCHEDULES[schedule].split_backward
    sp = _Split(c, training, split_b)
    n, m = c.n, int(microbatches)
    counts = _counts(schedule, ranks, per_rank, n, m, least_ranks)
    total = sum(math.comb(n - 1, s - 1) for _, s in counts)
    # (step, max load, stages recomputing), cuts, ranks, sim
    best: tuple[tuple[float, float, int], list[int], int, Simulation] | None = None
    replays = 0
    partial_choice = False  # a split whose recomputation choices were over MAX_CHOICES
    partial_lb = math.inf  # the least bound of such splits: their best choice may not have been replayed

    def load_max(cuts: Sequence[int]) -> float:
        return max((sp.pf[j] - sp.pf[i]) + (sp.pb[j] - sp.pb[i]) for i, j in sp.bounds(cuts))

    def keep(cuts: list[int], p: int, sim: Simulation) -> None:
        nonlocal best
        key = (sim.step_ms, load_max(cuts), sum(sim.recompute))
        if best is None or key < best[0]:
            best = (key, list(cuts), p, sim)

    def consider(cuts: list[int], p: int, lb: float = -math.inf) -> None:
        nonlocal replays, partial_choice, partial_lb
        replays += 1
        every = [True] * (p * v) if recompute == "all" and training else None
        sim = evaluate(c, cuts, schedule, p, m, v, training, recompute=every)
        if memory is None or max(sim.rank_peak_bytes) <= memory:
            keep(cuts, p, sim)
            return
        if recompute != "auto" or not training:
            return
        choices, complete = recompute_choices(c, cuts, schedule, p, m, memory, v, limit=MAX_CHOICES)
        if not complete:
            partial_choice, partial_lb = True, min(partial_lb, lb)
        for flags in choices:
            replays += 1
            keep(cuts, p, evaluate(c, cuts, schedule, p, m, v, training, recompute=flags))

    notes: list[str] = []
    start_cuts = None
    if start is not None and len(start) == n:
        start_cuts = [i for i in range(1, n) if start[i] != start[i - 1]]
    cand = _bounded_splits(sp, counts, schedule, v, n, m, t0 + time_limit) if total <= ENUMERATE else None
    if total <= ENUMERATE and cand is None:
        notes.append(f"the time limit ran out while bounding the {total} splits: local search instead")
    if cand is not None:
        bound, status, k = math.inf, "optimal", 0
        for k, (lb, cuts, p) in enumerate(cand):
            if best is not None and lb >= best[0][0] * (1 - 1e-12):
                bound = best[0][0]
                break
            late = time.perf_counter() - t0 > time_limit
            if best is not None and (replays >= max_replays or late):  # never stopped without an incumbent
                bound, status = lb, "time_limit" if late else "feasible"
                notes.append(f"stopped after {replays} replays of {total} splits "
                             f"({'time limit' if late else 'replay budget'}); bound: the least bound among the "
                             "splits not replayed")
                break
            if replays >= max_replays:  # no split among those the budget replayed fits
                return SplitSearch(None, ranks, None, lb, "unknown", "enumeration", replays, total,
                                   time.perf_counter() - t0, [f"no split of the {replays} replayed fits the memory "
                                                              "(replay budget)"])
            consider(list(cuts), p, lb)
        else:
            if best is None:
                with_rc = " with or without activation recomputation" if recompute == "auto" and training else ""
                return SplitSearch(None, ranks, None, math.inf, "infeasible", "enumeration", replays, total,
                                   time.perf_counter() - t0, [f"no split fits the memory{with_rc} (every split "
                                                              "replayed)"])
            bound = best[0][0]
        if best is not None and status != "optimal":
            bound = min(bound, best[0][0])
        bound = min(bound, partial_lb)
        method = f"enumeration of {total} splits in bound order"
    else:
        method = "local search (boundary moves) from the start split"
        p, s = counts[-1]
        cuts = start_cuts if start_cuts is not None and len(start_cuts) == s - 1 else \
            [round(i * n / s) for i in range(1, s)]
        consider(cuts, p)
        improved, late = True, False
        while improved and replays < max_replays and not (late := time.perf_counter() - t0 > time_limit):
            improved = False
            cur = best[1] if best is not None else cuts
            for idx in range(len(cur)):
                for d in (-1, 1):
                    nc = list(cur)
                    nc[idx] += d
                    if not (0 < nc[idx] < n) or len(set(nc)) < len(nc) or nc != sorted(nc):
                        continue
                    before = best[0] if best is not None else None
                    consider(nc, p)
                    if best is not None and best[0] != before:
                        improved = True
        bound = max(global_bound(c, [st for _, st in counts], m, training, split_b),
                    m * (sp.pf[-1] + sp.pwork[-1]) / max(p for p, _ in counts))
        status = "time_limit" if improved and late else "feasible"
        if best is None:
            return SplitSearch(None, ranks, None, bound, "unknown", method, replays, total,
                               time.perf_counter() - t0, ["no split tried fits the memory"])
        if best[0][0] <= bound * (1 + 1e-12):
            status = "optimal"
    (step, _, n_rc), cuts, p, sim = best
    stage_of = [0] * n
    for s, (i, j) in enumerate(sp.bounds(cuts)):
        for x in range(i, j):
            stage_of[x] = s
    status = "optimal" if step <= bound * (1 + 1e-12) else ("feasible" if status == "optimal" else status)
    if partial_choice:
        notes.append(f"some split had more than {MAX_CHOICES} combinations of the ranks' minimal recomputation sets: "
                     "each rank took its set of least recomputed forward time there; the bound counts such a "
                     "split at its own bound")
    if n_rc and recompute == "all":
        notes.append("every stage recomputes its activations (each of their backwards runs its forward again), "
                     "as asked")
    elif n_rc:
        notes.append(f"fits {memory:.0f} bytes per device only with activation recomputation on stage(s) "
                     f"{[s for s, x in enumerate(sim.recompute) if x]} (each of their backwards runs its forward "
                     "again)")
    return SplitSearch(stage_of, p, sim, min(bound, step), status, method, replays, total,
                       time.perf_counter() - t0, notes, recompute=list(sim.recompute))
