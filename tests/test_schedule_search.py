"""The schedule-aware split search: its bounds never exceed a replayed step, and its answer
is the least step over every split (an exhaustive replay written here), memory cap included."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.errors import UsageError
from devplace_lite.schedules.search import SegmentCosts, _Split, evaluate, global_bound, search
from devplace_lite.schedules.simulate import SCHEDULES, stage_to_rank, stages_per_rank


def _instance(data, n_lo=2, n_hi=7):
    n = data.draw(st.integers(n_lo, n_hi))
    fl = st.floats(0.05, 5.0)
    f = data.draw(st.lists(fl, min_size=n, max_size=n))
    b = data.draw(st.lists(fl, min_size=n, max_size=n))
    i = [x * data.draw(st.floats(0.1, 0.9)) for x in b]
    static = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    act = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    cut = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n - 1, max_size=n - 1))
    return SegmentCosts(f, b, i, static, act, cut)


def _all_splits(c, schedule, ranks, m, training=True):
    v = stages_per_rank(schedule)
    counts = [(p, p) for p in range(1, min(ranks, c.n) + 1)] if SCHEDULES[schedule].fixed and v == 1 else \
        [(ranks, ranks * v)]
    for p, s in counts:
        if schedule == "1f1b" and m < p:
            continue
        for cuts in itertools.combinations(range(1, c.n), s - 1):
            yield list(cuts), p, evaluate(c, list(cuts), schedule, p, m, training=training)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_search_is_exhaustively_optimal_and_bounds_hold(data):
    schedule = data.draw(st.sampled_from(sorted(SCHEDULES)))
    v = stages_per_rank(schedule)
    ranks = data.draw(st.integers(1, 3))
    c = _instance(data, n_lo=ranks * v, n_hi=ranks * v + 3)
    m = data.draw(st.sampled_from([ranks, 2 * ranks, 3 * ranks]))
    training = data.draw(st.booleans())
    try:
        every = list(_all_splits(c, schedule, ranks, m, training))
    except UsageError:
        return  # a count torch refuses
    sp = _Split(c, training, SCHEDULES[schedule].split_backward)
    for cuts, p, sim in every:  # every per-split bound is below that split's replay
        assert sp.split_bound(cuts, stage_to_rank(schedule, p), m) <= sim.step_ms * (1 + 1e-9)
    least = min(sim.step_ms for *_, sim in every)
    counts = sorted({s for cuts, _, _ in every for s in [len(cuts) + 1]})
    assert global_bound(c, counts, m, training, SCHEDULES[schedule].split_backward) <= least * (1 + 1e-9)
    r = search(c, schedule, ranks, m, training=training)
    assert r.status == "optimal" and r.step_ms == pytest.approx(least)
    assert r.bound_ms <= r.step_ms * (1 + 1e-9)
    cap = data.draw(st.sampled_from(sorted({max(s.rank_peak_bytes) for *_, s in every})))
    fits = [s.step_ms for *_, s in every if max(s.rank_peak_bytes) <= cap]
    rc = search(c, schedule, ranks, m, training=training, memory=cap)
    assert rc.status == "optimal" and rc.step_ms == pytest.approx(min(fits))
    assert max(rc.simulation.rank_peak_bytes) <= cap
    below = search(c, schedule, ranks, m, training=training, memory=min(max(s.rank_peak_bytes) for *_, s in every) - 1)
    assert below.status == "infeasible" and below.stage_of is None


def test_budget_and_local_search_state_their_bound(monkeypatch):
    import devplace_lite.schedules.search as ss

    c = SegmentCosts([1.0 + (i % 3) for i in range(12)], [2.0 + (i % 5) for i in range(12)])
    full = search(c, "1f1b", 3, 6)
    cut = search(c, "1f1b", 3, 6, max_replays=1)
    assert cut.status in ("feasible", "optimal") and cut.bound_ms <= full.step_ms + 1e-9 <= cut.step_ms + 1e-9
    monkeypatch.setattr(ss, "ENUMERATE", 1)
    local = search(c, "1f1b", 3, 6, start=full.stage_of)
    assert local.method.startswith("local search") and local.step_ms == pytest.approx(full.step_ms)
    assert local.bound_ms <= full.step_ms + 1e-9 and local.gap is not None


def test_too_few_segments_is_one_line():
    with pytest.raises(UsageError, match="needs 4 stages"):
        search(SegmentCosts([1.0] * 3, [1.0] * 3), "zbv", 2, 4)
