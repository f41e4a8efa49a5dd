"""Pipeline schedules on paper: when each micro-batch runs on each stage.

A GPipe step with ``p`` stages and ``m`` micro-batches runs every forward, then every backward;
stage ``s`` starts micro-batch ``j`` once it has finished ``j - 1`` and stage ``s - 1`` has
handed ``j`` over. With stage times ``t_s`` the forward phase ends at about
``sum(t) + (m - 1) max(t)``; with equal stages the idle share (the *bubble*) is
``(p - 1) / (m + p - 1)``. Steady-state throughput tends to ``1 / max(t)`` as ``m`` grows, which is
why the placement problem minimises the largest stage load.
"""

from __future__ import annotations

from typing import Sequence

Task = tuple[str, float, float, str, str]


def gpipe(forward: Sequence[float], microbatches: int, backward: Sequence[float] | None = None) -> list[Task]:
    """Tasks ``(stage, start, duration, label, kind)`` of one GPipe step (kind ``F`` or ``B``).

    Example
    -------
    >>> tasks = gpipe([1.0, 2.0], microbatches=2)
    >>> makespan(tasks)
    5.0
    """
    p, m = len(forward), int(microbatches)
    if p == 0 or m < 1:
        raise ValueError("need at least one stage and one micro-batch")
    tasks: list[Task] = []
    done = [[0.0] * m for _ in range(p)]
    for s in range(p):
        free = 0.0
        for j in range(m):
            start = max(free, done[s - 1][j] if s else 0.0)
            done[s][j] = free = start + forward[s]
            tasks.append((f"stage {s}", start, forward[s], f"F{j}", "F"))
    if backward is not None:
        flush = max(done[p - 1])
        bdone = [[0.0] * m for _ in range(p)]
        free_at = [max(done[s]) for s in range(p)]
        for s in range(p - 1, -1, -1):
            free = max(free_at[s], flush if s == p - 1 else 0.0)
            for j in range(m):
                start = max(free, bdone[s + 1][j] if s < p - 1 else flush)
                bdone[s][j] = free = start + backward[s]
                tasks.append((f"stage {s}", start, backward[s], f"B{j}", "B"))
    return tasks


def makespan(tasks: Sequence[Task]) -> float:
    return max(start + dur for _, start, dur, _, _ in tasks)


def busy_fraction(tasks: Sequence[Task]) -> float:
    """Share of stage-time spent computing over the step (1 - bubble fraction)."""
    lanes = {t[0] for t in tasks}
    return sum(t[2] for t in tasks) / (len(lanes) * makespan(tasks))


def gpipe_formula(stage_times: Sequence[float], microbatches: int) -> float:
    """The step-time estimate ``sum(t) + (m - 1) max(t)`` of a forward (or fused) pipeline."""
    return float(sum(stage_times) + (microbatches - 1) * max(stage_times))


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share ``(p - 1) / (m + p - 1)`` of a GPipe step with equal stages."""
    return (stages - 1) / (microbatches + stages - 1)


def interleaved_formula(stage_time: float, ranks: int, per_rank: int, microbatches: int) -> float:
    """Step time ``(m v + p - 1) t`` of a looped schedule (interleaved 1F1B, looped BFS) whose
    ``p v`` stages each take ``t`` (forward + backward) per micro-batch; ``v = 1`` is GPipe's
    and 1F1B's ``(m + p - 1) t``. Exact for ``m >= p`` (`devplace_lite.schedules.simulate` replays it).

    Example
    -------
    >>> interleaved_formula(3.0, ranks=2, per_rank=2, microbatches=4)
    27.0
    """
    return float((microbatches * per_rank + ranks - 1) * stage_time)
