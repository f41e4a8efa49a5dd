"""Every pipeline schedule torch runs, replayed: step time, idle time and peak memory per rank.

Problem
-------
A pipeline step of ``m`` micro-batches over ``S`` stages on ``p`` ranks is a list of compute
actions per rank, run in that order: a forward ``F``, a full backward ``B``, or, in the
zero-bubble schedules, a backward for the stage's inputs ``I`` followed later by one for its
weights ``W``. Given how long each action takes on each stage (and how long an activation or a
gradient takes to reach the next rank), when does the step end, how long does each rank sit
idle, and how many bytes does each rank hold at its worst moment?

The action order
----------------
`action_order` asks torch 2.13's own schedule classes (imported only there, so ``import
devplace_lite`` stays torch-free). The multi-stage schedules (``ScheduleInterleaved1F1B``,
``ScheduleLoopedBFS``, ``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``,
``ScheduleDualPipeV``) run exactly their ``pipeline_order_with_comms``, a list built in their
constructor, which needs only the stages' count, group size and rank: they are built here
around stand-in stages and the compute actions are read off (an ``OVERLAP_F_B`` action runs its
sub-actions one after the other, as the runtime does without a registered overlap function).
The single-stage classes ``ScheduleGPipe`` and ``Schedule1F1B`` run a hand-written loop
(``_step_microbatches``) rather than their IR, and their IR is not what that loop runs (torch
2.13's ``Schedule1F1B.pipeline_order`` names micro-batch ``m`` on ranks past the first), so
their order is generated here from the loop: GPipe runs every forward, then every backward;
1F1B runs ``min(m, p - s)`` forwards, then alternates backward and forward, then the
remaining backwards. A test checks both against torch's IR where the IR is right (GPipe
entirely; 1F1B's sequence of kinds).

The replay
----------
Each rank takes its actions in order; an action starts when its rank is free and its inputs
are there: ``F(s, j)`` after ``F(s-1, j)`` (plus the forward transfer when the stages sit on
different ranks), ``B(s, j)`` or ``I(s, j)`` after ``F(s, j)`` and after ``B``/``I`` of
``(s+1, j)`` (plus the backward transfer), ``W(s, j)`` after ``I(s, j)``. Sends do not block
(torch posts them and waits at the end of the step), so a transfer only delays its receiver.
The step time is the last action's end; a rank's idle time is the step time less its busy
time. Memory per rank: its stages' static bytes (weights, gradients, optimizer state) plus,
for every micro-batch, the stage's saved activations from the start of its forward until the
end of the backward that frees them (``B``, or ``W`` when the backward is split: torch's
input-gradient pass keeps the graph for the weight pass). A rank runs its actions one after
another, so this count follows the rank's own order alone, whatever the times: each rank's
peak depends only on its own stages (the recomputation choice below rests on this).

Activation recomputation
------------------------
A stage that recomputes (``recompute[s]``, torch.utils.checkpoint around each of its
segments, one layer at a time as Megatron-LM and torchtitan's full activation checkpointing
do) keeps only its segments' inputs (``input_bytes[s]``) per micro-batch from its forward to
the backward that frees them; its backward first runs the forward again, which costs one more
``F`` (``B + F``; with a split backward the recomputation goes before the input-gradient
pass: ``I + F``, ``W`` unchanged), one segment at a time, and holds beyond the kept inputs one
segment's activations (``recompute_bytes[s]``: the most a segment's activations exceed its
input, which they hold when its first operator saves it; by default ``activations - input``,
the stage one segment) from the start of that backward (``B`` or ``I``) to its end (``B`` or
``W``: the recomputed graph serves the weight pass too). So recomputation never shortens a
step (times only grow) and, where each segment's input is no larger than its activations,
never raises a rank's peak: with ``c`` micro-batches in flight it holds ``c inputs +
recompute_bytes <= c activations``.

What a message costs
--------------------
On the wall clock a pass that sends or receives pays more than its compute: torch's runtime
posts and waits for each message, and a receive posted after its send waits for the sender's
side to move the data (`devplace_lite.pipeline.run_figures.wall_price` measures it). ``message_ms``
prices that per message a pass exchanges with another rank: a stage's ``F``, ``B`` and ``I``
each pay it once per neighbouring stage on another rank (``W`` exchanges none). A stage in the
middle of a loop schedule sends and receives on both sides, so interleaved 1F1B over four
stages pays half again what a two-stage split pays per pass; the V schedules hand the middle
stage's activations over inside a rank, which costs no message.

Exactness: the replay is exact for its model (a max-plus recurrence over the actions). All
times enter through ``max`` and ``+`` only, so the step time never decreases when an action or a
transfer gets longer (the planner's bound rests on this). With equal stages and no transfers
it equals the closed formulas of `devplace_lite.schedules.timeline` (GPipe and 1F1B:
``(m + p - 1)(t_F + t_B)``), a property test says so.

Complexity: ``O(A)`` for ``A = m S (2 or 3)`` actions after the order is built (the order is
cached per schedule, ranks, micro-batches and stages per rank).

Reference: torch.distributed.pipelining.schedules (torch 2.13); Narayanan et al. 2021
(interleaved 1F1B), Qi et al. 2024 (zero bubble, ZB-V), DeepSeek-V3 report (DualPipe).

Example
-------
>>> order = action_order("gpipe", ranks=2, microbatches=2)
>>> [str(a) for a in order[0]]
['F0@0', 'F1@0', 'B0@0', 'B1@0']
>>> sim = simulate("gpipe", ranks=2, microbatches=2, times={"F": [1.0, 1.0], "B": [2.0, 2.0]})
>>> sim.step_ms, sim.rank_idle_ms
(9.0, [3.0, 3.0])
>>> times, acts = {"F": [1.0, 1.0], "B": [2.0, 2.0]}, dict(activation_bytes=[10, 10], input_bytes=[1, 1])
>>> simulate("gpipe", 2, 2, times, **acts).rank_peak_bytes
[20.0, 20.0]
>>> sim = simulate("gpipe", 2, 2, times, recompute=[True, False], **acts)
>>> sim.step_ms, sim.rank_peak_bytes
(11.0, [11.0, 20.0])
"""

from __future__ import annotations

import functools
import operator
import types
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from ..errors import UsageError


class Spec(NamedTuple):
    """A schedule: torch's class, stages per rank (default; ``fixed`` when it takes no other),
    whether it splits the backward into ``I`` and ``W``, and the stage-to-rank style."""

    torch_class: str
    per_rank: int
    fixed: bool
    split_backward: bool
    style: str


#: The schedules of torch 2.13, by the name ``devplace plan --schedule`` takes.
SCHEDULES: dict[str, Spec] = {
    "gpipe": Spec("ScheduleGPipe", 1, True, False, "loop"),
    "1f1b": Spec("Schedule1F1B", 1, True, False, "loop"),
    "interleaved-1f1b": Spec("ScheduleInterleaved1F1B", 2, False, False, "loop"),
    "looped-bfs": Spec("ScheduleLoopedBFS", 2, False, False, "loop"),
    "interleaved-zb": Spec("ScheduleInterleavedZeroBubble", 2, False, True, "loop"),
    "zbv": Spec("ScheduleZBVZeroBubble", 2, True, True, "v"),
    "dualpipev": Spec("ScheduleDualPipeV", 2, True, True, "v"),
}

#: Most stages one rank may hold (a guard on the size of the simulated order).
MAX_PER_RANK = 8


class Action(NamedTuple):
    """One compute action: ``kind`` in ``F``, ``B``, ``I``, ``W``."""

    kind: str
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}@{self.stage}"


def spec(schedule: str) -> Spec:
    """The `Spec` of ``schedule``; `UsageError` naming the known ones otherwise."""
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    return SCHEDULES[schedule]


def stages_per_rank(schedule: str, per_rank: int | None = None) -> int:
    """Stages each rank holds under ``schedule`` (its default, or ``per_rank`` where it takes several).

    Raises
    ------
    UsageError
        ``per_rank`` out of ``1..MAX_PER_RANK``, or other than the only count the schedule takes.

    Examples
    --------
    >>> stages_per_rank("zbv"), stages_per_rank("interleaved-1f1b", 3)
    (2, 3)
    """
    sp = spec(schedule)
    if per_rank is None:
        return sp.per_rank
    if int(per_rank) != per_rank or not 1 <= per_rank <= MAX_PER_RANK:
        raise UsageError(f"stages per rank must be an integer in 1..{MAX_PER_RANK}, got {per_rank}")
    if sp.fixed and per_rank != sp.per_rank:
        raise UsageError(f"{schedule} ({sp.torch_class}) runs exactly {sp.per_rank} stage(s) per rank, not {per_rank}")
    return int(per_rank)


def stage_to_rank(schedule: str, ranks: int, per_rank: int | None = None) -> list[int]:
    """Rank of every stage, as torch maps them (``generate_stage_to_rank_mapping``): stage ``s``
    on rank ``s mod p`` (loop), or down and back up the ranks (V: rank ``r`` holds ``r`` and
    ``2p - 1 - r``).

    Examples
    --------
    >>> stage_to_rank("interleaved-1f1b", 2), stage_to_rank("zbv", 2)
    ([0, 1, 0, 1], [0, 1, 1, 0])
    """
    v = stages_per_rank(schedule, per_rank)
    n = ranks * v
    if spec(schedule).style == "loop":
        return [s % ranks for s in range(n)]
    out, r = [], 0
    for s in range(n):
        out.append(r)
        if (s + 1) % ranks:
            r += 1 if (s // ranks) % 2 == 0 else -1
    return out


@functools.lru_cache(maxsize=256)
def _single_stage_order(schedule: str, ranks: int, m: int) -> tuple[tuple[Action, ...], ...]:
    """GPipe and 1F1B as their ``_step_microbatches`` loops run them (see the module docstring),
    per rank; kept, as a plan's search replays one order for every split it weighs."""
    out: list[tuple[Action, ...]] = []
    for s in range(ranks):
        acts: list[Action] = []
        if schedule == "gpipe":
            acts = [Action("F", s, j) for j in range(m)] + [Action("B", s, j) for j in range(m)]
        else:
            warm = min(m, ranks - s)
            acts = [Action("F", s, j) for j in range(warm)]
            f, b = warm, 0
            while True:
                acts.append(Action("B", s, b))
                b += 1
                if f == m:
                    break
                acts.append(Action("F", s, f))
                f += 1
            acts += [Action("B", s, j) for j in range(b, m)]
        out.append(tuple(acts))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _torch_order(schedule: str, ranks: int, m: int, v: int) -> tuple[tuple[Action, ...], ...]:
    import torch.distributed.pipelining.schedules as ts

    cls = getattr(ts, SCHEDULES[schedule].torch_class)
    n = ranks * v

    def stand_ins(rank: int) -> list[Any]:
        return [types.SimpleNamespace(num_stages=n, group_size=ranks, group_rank=rank, stage_index=None, submod=None)
                for _ in range(v)]

    try:
        sched = cls(stand_ins(0), m, loss_fn=lambda out, target: out)
    except (ValueError, AssertionError, RuntimeError) as e:
        raise UsageError(f"{SCHEDULES[schedule].torch_class} refuses {ranks} rank(s) x {v} stage(s) with {m} "
                         f"micro-batch(es): {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    kinds = {"F": "F", "B": "B", "I": "I", "W": "W"}
    rows = []
    for rank in range(ranks):
        acts: list[Action] = []
        for a in sched.pipeline_order_with_comms[rank]:
            for sub in (a.sub_actions or ()) if a.computation_type.value == "OVERLAP_F_B" else (a,):
                kind = kinds.get(sub.computation_type.value)
                if kind is not None:
                    acts.append(Action(kind, int(sub.stage_index), int(sub.microbatch_index)))
        rows.append(tuple(acts))
    return tuple(rows)


def action_order(schedule: str, ranks: int, microbatches: int, per_rank: int | None = None,
                 training: bool = True) -> dict[int, list[Action]]:
    """The compute actions each rank runs, in torch's order (see the module docstring).

    Parameters
    ----------
    schedule : str
        A key of `SCHEDULES`.
    ranks, microbatches : int
        Pipeline ranks ``p >= 1`` and micro-batches per step ``m >= 1``.
    per_rank : int, optional
        Stages per rank where the schedule takes several (default: the schedule's).
    training : bool
        ``False``: the forwards alone, in the same order.

    Returns
    -------
    dict
        Rank -> list of `Action`.

    Raises
    ------
    UsageError
        An unknown schedule, or a count torch's class refuses (the line says its reason).

    Examples
    --------
    >>> [str(a) for a in action_order("1f1b", 2, 3)[1]]
    ['F0@1', 'B0@1', 'F1@1', 'B1@1', 'F2@1', 'B2@1']
    """
    v = stages_per_rank(schedule, per_rank)
    for name, value in (("ranks", ranks), ("microbatches", microbatches)):
        if int(value) != value or value < 1:
            raise UsageError(f"{name} must be an integer >= 1, got {value}")
    if SCHEDULES[schedule].per_rank == 1 and SCHEDULES[schedule].fixed:
        if schedule == "1f1b" and microbatches < ranks:
            raise UsageError(f"Schedule1F1B needs at least as many micro-batches as stages ({microbatches} < {ranks})")
        order = {r: list(acts) for r, acts in enumerate(_single_stage_order(schedule, int(ranks), int(microbatches)))}
    else:
        order = {r: list(acts) for r, acts in enumerate(_torch_order(schedule, int(ranks), int(microbatches), v))}
    if not training:
        order = {r: [a for a in acts if a.kind == "F"] for r, acts in order.items()}
    return order


@dataclass
class Simulation:
    """A replayed step: times in ms, memory in bytes; ``events`` are
    ``(rank, action, start, end)`` in start order."""

    step_ms: float
    rank_busy_ms: list[float]
    rank_idle_ms: list[float]
    rank_peak_bytes: list[float]
    events: list[tuple[int, Action, float, float]] = field(default_factory=list)
    #: Most micro-batches whose activations each stage holds at once.
    stage_in_flight: list[int] = field(default_factory=list)
    #: Whether each stage recomputes its activations in its backward (see the module docstring).
    recompute: list[bool] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"step_ms": self.step_ms, "rank_busy_ms": self.rank_busy_ms, "rank_idle_ms": self.rank_idle_ms,
                "rank_peak_bytes": self.rank_peak_bytes, "stage_in_flight": self.stage_in_flight,
                "recompute": self.recompute}


def _durations(times: Mapping[str, Sequence[float]], n: int, split: bool,
               recompute: Sequence[bool] = ()) -> dict[str, list[float]]:
    """Per-kind stage times; ``B = I + W`` when only the split is given, and a split backward
    asked of ``B`` alone is refused (how ``B`` divides is a measurement, not a guess). A
    recomputing stage's ``B`` and ``I`` run its forward again first."""
    out = {k: [float(x) for x in v] for k, v in times.items()}
    for k, v in out.items():
        if k not in "FBIW" or len(k) != 1:
            raise UsageError(f"unknown action kind {k!r} in stage times (known: F, B, I, W)")
        if len(v) != n:
            raise UsageError(f"{k} times for {len(v)} stage(s), the schedule has {n}")
        if any(not (x >= 0) or x == float("inf") for x in v):
            raise UsageError(f"{k} times must be finite and >= 0")
    if "F" not in out:
        raise UsageError("stage times need F (forward) times")
    if "B" not in out and "I" in out and "W" in out:
        out["B"] = [i + w for i, w in zip(out["I"], out["W"])]
    if split and not ("I" in out and "W" in out):
        if "B" not in out:
            raise UsageError("a zero-bubble schedule needs I and W (or B with I and W) times")
        raise UsageError("a zero-bubble schedule splits the backward: give I and W times per stage")
    for st, again in enumerate(recompute):
        if again:
            for k in ("B", "I"):
                if k in out:
                    out[k][st] += out["F"][st]
    return out


def message_ends(stage_rank: Sequence[int]) -> list[int]:
    """Per stage, how many of its neighbouring stages sit on another rank: the messages each of
    its ``F``, ``B`` and ``I`` passes exchanges.

    Examples
    --------
    >>> message_ends(stage_to_rank("interleaved-1f1b", 2)), message_ends(stage_to_rank("zbv", 2))
    ([1, 2, 2, 1], [1, 1, 1, 1])
    """
    n = len(stage_rank)
    return [int(s > 0 and stage_rank[s - 1] != stage_rank[s]) + int(s < n - 1 and stage_rank[s + 1] != stage_rank[s])
            for s in range(n)]


def _price_messages(t: dict[str, list[float]], stage_rank: Sequence[int], message_ms: float) -> None:
    """Add ``message_ms`` per message to each stage's ``F``, ``B`` and ``I`` in ``t``."""
    if not (message_ms >= 0 and message_ms != float("inf")):
        raise UsageError(f"message_ms must be a finite number >= 0, got {message_ms}")
    for s, k in enumerate(message_ends(stage_rank)):
        for kind in ("F", "B", "I"):
            if kind in t:
                t[kind][s] += k * message_ms


def _flags(recompute: Sequence[bool] | None, n: int) -> list[bool]:
    if recompute is None:
        return [False] * n
    if len(recompute) != n:
        raise UsageError(f"recomputation flags for {len(recompute)} stage(s), the schedule has {n}")
    return [bool(x) for x in recompute]


#: A replay's events (rank, action, start, end) in order of start, then rank.
_BY_START = operator.itemgetter(2, 0)


def replay(order: Mapping[int, Sequence[Action]], stage_rank: Sequence[int], times: Mapping[str, Sequence[float]], *,
           transfer_ms: Sequence[float] | None = None, transfer_back_ms: Sequence[float] | None = None,
           static_bytes: Sequence[float] | None = None, activation_bytes: Sequence[float] | None = None,
           input_bytes: Sequence[float] | None = None, recompute: Sequence[bool] | None = None,
           recompute_bytes: Sequence[float] | None = None, message_ms: float = 0.0) -> Simulation:
    """Replay a per-rank action ``order`` (see the module docstring).

    Parameters
    ----------
    order : mapping rank -> actions
        As `action_order` gives it (or any order of the same kinds).
    stage_rank : sequence of int
        Rank of each stage.
    times : mapping kind -> per-stage ms
        ``F`` and ``B`` (and ``I``, ``W`` where the order has them).
    transfer_ms, transfer_back_ms : sequence of float, optional
        Time for stage ``s``'s output to reach stage ``s + 1`` (and its gradient to come
        back), paid only between different ranks; zero by default.
    static_bytes, activation_bytes : sequence of float, optional
        Per stage: weights + gradients + optimizer state; saved activations of one micro-batch.
    input_bytes : sequence of float, optional
        Per stage: what a recomputing stage keeps of one micro-batch, the inputs of its
        segments (zero by default).
    recompute : sequence of bool, optional
        Per stage: recompute its activations in its backward (none by default; training only).
    recompute_bytes : sequence of float, optional
        Per stage: what a recomputing backward holds beyond the kept inputs, its largest
        segment's activations beyond that segment's input (by default ``activation_bytes -
        input_bytes``, at least 0: the stage recomputed as one segment).
    message_ms : float
        What a pass pays per message it exchanges with another rank, beyond its own time (see
        the module docstring; zero by default). A recomputing pass pays it once.

    Returns
    -------
    Simulation

    Raises
    ------
    UsageError
        Times that do not fit the stages, a ``message_ms`` that is not a finite number >= 0,
        or an order that waits on itself (deadlock).
    """
    n = len(stage_rank)
    kinds = {a.kind for acts in order.values() for a in acts}
    rec = _flags(recompute, n) if kinds - {"F"} else [False] * n  # inference keeps nothing to recompute
    t = _durations(times, n, split=bool(kinds & {"I", "W"}), recompute=rec)
    _price_messages(t, stage_rank, message_ms)
    for k in kinds:
        if k not in t:
            raise UsageError(f"the order has {k} actions but no {k} times were given")
    fwd = [0.0] * max(n - 1, 0) if transfer_ms is None else [float(x) for x in transfer_ms]
    bwd = list(fwd) if transfer_back_ms is None else [float(x) for x in transfer_back_ms]
    if len(fwd) != max(n - 1, 0) or len(bwd) != max(n - 1, 0):
        raise UsageError(f"transfer times for {len(fwd)} boundaries, the schedule has {max(n - 1, 0)}")
    ranks = sorted(order)
    # when each (stage, micro-batch) ended its forward, and its input gradient was ready (B or I),
    # keyed stage * m + micro-batch: the inner loop below runs once per action of a step
    m = 1 + max((a.microbatch for acts in order.values() for a in acts), default=0)
    end_f: dict[int, float] = {}
    end_g: dict[int, float] = {}
    free = {r: 0.0 for r in ranks}
    pos = {r: 0 for r in ranks}
    busy = {r: 0.0 for r in ranks}
    events: list[tuple[int, Action, float, float]] = []
    total = sum(len(v) for v in order.values())
    done = 0
    while done < total:
        moved = False
        for r in ranks:
            acts, p, f, b = order[r], pos[r], free[r], busy[r]
            while p < len(acts):
                a = acts[p]
                s, kind = a.stage, a.kind
                key = s * m + a.microbatch
                if kind == "F":  # the previous stage's output, over the link where it is another rank's
                    dep = 0.0
                    if s > 0:
                        e = end_f.get(key - m)
                        if e is None:
                            break
                        dep = e + (fwd[s - 1] if stage_rank[s - 1] != r else 0.0)
                elif kind in ("B", "I"):  # its own forward and the next stage's input gradient
                    dep = end_f.get(key)
                    if dep is None:
                        break
                    if s < n - 1:
                        g = end_g.get(key + m)
                        if g is None:
                            break
                        g += bwd[s] if stage_rank[s + 1] != r else 0.0
                        if g > dep:  # max(dep, g), without the call: this loop is the search's cost
                            dep = g
                else:  # W: its input-gradient pass
                    dep = end_g.get(key)
                    if dep is None:
                        break
                start = f if f >= dep else dep
                dur = t[kind][s]
                f = start + dur
                b += dur
                if kind == "F":
                    end_f[key] = f
                elif kind != "W":
                    end_g[key] = f
                events.append((r, a, start, f))
                p += 1
                done += 1
                moved = True
            pos[r], free[r], busy[r] = p, f, b
        if not moved:
            stuck = {r: str(order[r][pos[r]]) for r in ranks if pos[r] < len(order[r])}
            raise UsageError(f"the action order deadlocks: every rank waits ({stuck})")
    step = max((e for *_, e in events), default=0.0)
    peaks, flying = rank_peaks(order, stage_rank, static_bytes, activation_bytes, input_bytes, rec, recompute_bytes)
    events.sort(key=_BY_START)
    return Simulation(step_ms=step, rank_busy_ms=[busy[r] for r in ranks],
                      rank_idle_ms=[step - busy[r] for r in ranks], rank_peak_bytes=peaks, events=events,
                      stage_in_flight=flying, recompute=rec)


def _stage_memory(n: int, static_bytes: Sequence[float] | None, activation_bytes: Sequence[float] | None,
                  input_bytes: Sequence[float] | None, recompute_bytes: Sequence[float] | None = None
                  ) -> tuple[list[float], list[float], list[float], list[float]]:
    static = [0.0] * n if static_bytes is None else [float(x) for x in static_bytes]
    act = [0.0] * n if activation_bytes is None else [float(x) for x in activation_bytes]
    inp = [0.0] * n if input_bytes is None else [float(x) for x in input_bytes]
    # the default: the stage recomputed as one segment, its input among its activations
    again = [max(a - i, 0.0) for a, i in zip(act, inp)] if recompute_bytes is None else \
        [float(x) for x in recompute_bytes]
    if len(static) != n or len(act) != n or len(inp) != n or len(again) != n:
        raise UsageError(f"memory for {len(static)}/{len(act)}/{len(inp)}/{len(again)} stage(s), "
                         f"the schedule has {n}")
    return static, act, inp, again


def _allocations(actions: Sequence[Action], act: Sequence[float], inp: Sequence[float], again: Sequence[float],
                 rec: Sequence[bool], training: bool):
    """Per action of one rank, in its order: ``(action, bytes taken when it starts, bytes
    given back when it ends)`` (see the module docstring)."""
    for a in actions:
        s = a.stage
        kept = inp[s] if rec[s] else act[s]  # per micro-batch, forward to backward
        extra = again[s] if rec[s] else 0.0  # on top of it during a recomputing backward
        if a.kind == "F":  # inference keeps one micro-batch's activations while it runs
            yield a, (kept if training else act[s]), (0.0 if training else act[s])
        else:  # the recomputation runs first, one segment at a time; I keeps the graph for W
            yield a, (extra if a.kind in ("B", "I") else 0.0), (kept + extra if a.kind in ("B", "W") else 0.0)


def rank_peaks(order: Mapping[int, Sequence[Action]], stage_rank: Sequence[int],
               static_bytes: Sequence[float] | None = None, activation_bytes: Sequence[float] | None = None,
               input_bytes: Sequence[float] | None = None, recompute: Sequence[bool] | None = None,
               recompute_bytes: Sequence[float] | None = None) -> tuple[list[float], list[int]]:
    """Each rank's peak bytes (ranks in sorted order) and each stage's most micro-batches in
    flight, from the ranks' action order alone (see the module docstring: a rank runs its
    actions one at a time, so its allocations and frees come in that order whatever the times).

    Examples
    --------
    >>> order = action_order("1f1b", 2, 4)
    >>> rank_peaks(order, [0, 1], activation_bytes=[10, 10])
    ([20.0, 10.0], [2, 1])
    >>> rank_peaks(order, [0, 1], activation_bytes=[10, 10], input_bytes=[4, 4], recompute=[True, True])
    ([14.0, 10.0], [2, 1])
    """
    n = len(stage_rank)
    static, act, inp, again = _stage_memory(n, static_bytes, activation_bytes, input_bytes, recompute_bytes)
    training = any(a.kind != "F" for acts in order.values() for a in acts)
    rec = _flags(recompute, n) if training else [False] * n
    out = []
    flying = [0] * n
    count = [0] * n
    for r in sorted(order):
        live = peak = 0.0
        for a, take, give in _allocations(order[r], act, inp, again, rec, training):
            live += take
            if live > peak:
                peak = live
            live -= give
            if a.kind == "F":
                count[a.stage] += 1
                if count[a.stage] > flying[a.stage]:
                    flying[a.stage] = count[a.stage]
            if a.kind in ("B", "W") or (a.kind == "F" and not training):
                count[a.stage] -= 1
        out.append(sum(static[s] for s in range(n) if stage_rank[s] == r) + peak)
    return out, flying


def rank_memory(sim: Simulation, stage_rank: Sequence[int], static_bytes: Sequence[float] | None = None,
                activation_bytes: Sequence[float] | None = None, input_bytes: Sequence[float] | None = None,
                recompute_bytes: Sequence[float] | None = None) -> list[list[tuple[float, float]]]:
    """Each rank's bytes over the step of a replayed ``sim``: the corners ``(ms, bytes)`` of a
    step function, from 0 to the step's end. An action takes its bytes when it starts and gives
    back what it frees when it ends (`rank_peaks`' rules, on the replay's clock); the stages'
    static bytes are held throughout. Its highest corner is `rank_peaks`' peak.

    Parameters
    ----------
    sim : Simulation
        A replay (`simulate`, `replay`) of the stages ``stage_rank``; its recomputation flags apply.
    stage_rank : sequence of int
    static_bytes, activation_bytes, input_bytes, recompute_bytes : sequence of float, optional
        Per stage, as `replay` takes them.

    Returns
    -------
    list of list of (float, float)
        One list per rank (sorted).

    Raises
    ------
    UsageError
        Memory given for another number of stages.

    Examples
    --------
    >>> sim = simulate("gpipe", 2, 2, {"F": [1.0, 1.0], "B": [2.0, 2.0]})
    >>> rank_memory(sim, [0, 1], activation_bytes=[10, 10])[1]
    [(0.0, 0.0), (1.0, 0.0), (1.0, 10.0), (2.0, 10.0), (2.0, 20.0), (5.0, 20.0), (5.0, 10.0), (7.0, 10.0), (7.0, 0.0), (9.0, 0.0)]
    """
    n = len(stage_rank)
    static, act, inp, again = _stage_memory(n, static_bytes, activation_bytes, input_bytes, recompute_bytes)
    training = any(a.kind != "F" for _, a, _, _ in sim.events)
    rec = list(sim.recompute) if sim.recompute else [False] * n
    out = []
    for r in sorted(set(stage_rank)):
        events = [(a, s, e) for rank, a, s, e in sim.events if rank == r]  # in start order: the rank's order
        live = sum(static[s] for s in range(n) if stage_rank[s] == r)
        points = [(0.0, live)]
        for (a, start, end), (_, take, give) in zip(events, _allocations([a for a, _, _ in events], act, inp, again,
                                                                         rec, training)):
            if take:
                points += [(start, live), (start, live + take)]
                live += take
            if give:
                points += [(end, live), (end, live - give)]
                live -= give
        out.append(points + [(sim.step_ms, live)])
    return out


def simulate(schedule: str, ranks: int, microbatches: int, times: Mapping[str, Sequence[float]], *,
             per_rank: int | None = None, training: bool = True, transfer_ms: Sequence[float] | None = None,
             transfer_back_ms: Sequence[float] | None = None, static_bytes: Sequence[float] | None = None,
             activation_bytes: Sequence[float] | None = None, input_bytes: Sequence[float] | None = None,
             recompute: Sequence[bool] | None = None, recompute_bytes: Sequence[float] | None = None,
             message_ms: float = 0.0) -> Simulation:
    """`replay` of ``schedule``'s torch order on ``ranks`` ranks (see `action_order`, `stage_to_rank`).

    Examples
    --------
    >>> sim = simulate("1f1b", 2, 4, {"F": [1.0, 1.0], "B": [2.0, 2.0]}, activation_bytes=[10, 10])
    >>> sim.step_ms, sim.rank_peak_bytes
    (15.0, [20.0, 10.0])
    """
    order = action_order(schedule, ranks, microbatches, per_rank, training)
    return replay(order, stage_to_rank(schedule, ranks, per_rank), times, transfer_ms=transfer_ms,
                  transfer_back_ms=transfer_back_ms, static_bytes=static_bytes, activation_bytes=activation_bytes,
                  input_bytes=input_bytes, recompute=recompute, recompute_bytes=recompute_bytes,
                  message_ms=message_ms)


def run_events(events: Sequence[Sequence[Sequence[Any]]]) -> list[tuple[int, Action, float, float]]:
    """A torchrun run's ``events`` (per rank: ``[kind, stage, micro-batch, start ms, end ms]``
    of its last step, wall clock from the step's start) in a `Simulation`'s shape.

    Examples
    --------
    >>> run_events([[["F", 0, 0, 0.0, 1.5]], [["F", 1, 0, 2.0, 3.0]]])[1]
    (1, Action(kind='F', stage=1, microbatch=0), 2.0, 3.0)
    """
    out = [(r, Action(str(k), int(s), int(j)), float(a), float(b)) for r, evs in enumerate(events)
           for k, s, j, a, b in evs]
    return sorted(out, key=lambda ev: (ev[2], ev[0]))


#: Colours of the action kinds in `gantt_tasks`.
KIND_COLORS = {"F": "#8fb8de", "B": "#f4a582", "I": "#f4a582", "W": "#b8e186"}
#: What each action kind is, as `plot_gantt`'s legend names it.
KIND_NAMES = {"F": "F: forward", "B": "B: backward", "I": "I: input gradient", "W": "W: weight gradient"}


def gantt_tasks(events: Sequence[tuple[int, Action, float, float]], prefix: str = "rank") -> list[tuple]:
    """``events`` of a `Simulation` (or measured ones, same shape) as `devplace_lite.plot.gantt` tasks."""
    return [(f"{prefix} {r}", s, e - s, str(a), KIND_COLORS[a.kind]) for r, a, s, e in events]


def plot_gantt(forecast: Simulation, measured: Sequence[tuple[int, Action, float, float]] | None = None,
               title: str = "", ax: Any = None, sharex: bool = True) -> Any:
    """Draw the forecast's Gantt chart, and the measured events' below it (on the same time
    axis unless ``sharex=False``, for a run whose wall clock a loaded machine stretched).
    Boxes are labelled ``F0@3``: kind, micro-batch, stage; a legend beside the forecast names
    the kinds it draws (the measured chart uses the same colours).

    Returns the matplotlib figure (imported here only).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ..plot import gantt

    rows = 2 if measured is not None else 1
    if ax is None:
        fig, axes = plt.subplots(rows, 1, figsize=(9, 1.2 + 0.5 * len(forecast.rank_busy_ms) * rows), sharex=sharex,
                                 squeeze=False)
        axes = list(axes[:, 0])
    else:
        axes = list(ax) if rows == 2 else [ax]
        fig = axes[0].figure
    gantt(axes[0], gantt_tasks(forecast.events, "forecast rank"))
    axes[0].set_title(title or f"forecast step {forecast.step_ms:.2f} ms")
    kinds = [k for k in KIND_NAMES if any(a.kind == k for _, a, _, _ in [*forecast.events, *(measured or [])])]
    axes[0].legend(handles=[Patch(facecolor=KIND_COLORS[k], edgecolor="black", linewidth=0.4, label=KIND_NAMES[k])
                            for k in kinds], fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                   borderaxespad=0.0, frameon=False)
    if measured is not None:
        gantt(axes[1], gantt_tasks(measured, "measured rank"))
    return fig
