"""The schedule-aware split search: its bounds never exceed a replayed step, and its answer
is the least step over every split (an exhaustive replay written here), memory cap included."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.errors import UsageError
from devplace_lite.schedules.search import SegmentCosts, _Split, evaluate, global_bound, search
from devplace_lite.schedules.simulate import SCHEDULES, simulate, stage_to_rank, stages_per_rank


def _instance(data, n_lo=2, n_hi=7):
    n = data.draw(st.integers(n_lo, n_hi))
    fl = st.floats(0.05, 5.0)
    f = data.draw(st.lists(fl, min_size=n, max_size=n))
    b = data.draw(st.lists(fl, min_size=n, max_size=n))
    i = [x * data.draw(st.floats(0.1, 0.9)) for x in b]
    static = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    act = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    cut = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n - 1, max_size=n - 1))
    # torch's weight pass measured apart (I + W above or below B), or W taken as B - I
    w = data.draw(st.one_of(st.none(), st.lists(fl, min_size=n, max_size=n)))
    # torch's runtime priced around each pass, or not: the bounds leave it out and must still hold
    o = data.draw(st.sampled_from([0.0, 0.0, 0.3, 2.0]))
    return SegmentCosts(f, b, i, static, act, cut, weight_ms=w, action_ms=o)


def _all_splits(c, schedule, ranks, m, training=True):
    v = stages_per_rank(schedule)
    counts = [(p, p) for p in range(1, min(ranks, c.n) + 1)] if SCHEDULES[schedule].fixed and v == 1 else \
        [(ranks, ranks * v)]
    for p, s in counts:
        if schedule == "1f1b" and m < p:
            continue
        for cuts in itertools.combinations(range(1, c.n), s - 1):
            yield list(cuts), p, evaluate(c, list(cuts), schedule, p, m, training=training)


def _every_split(data):
    """A random schedule, rank count, instance, micro-batch count and mode, with every split's
    replay (`_all_splits`); ``None`` where torch refuses the micro-batch count."""
    schedule = data.draw(st.sampled_from(sorted(SCHEDULES)))
    v = stages_per_rank(schedule)
    ranks = data.draw(st.integers(1, 3))
    c = _instance(data, n_lo=ranks * v, n_hi=ranks * v + 3)
    m = data.draw(st.sampled_from([ranks, 2 * ranks, 3 * ranks]))
    training = data.draw(st.booleans())
    try:
        return schedule, ranks, c, m, training, list(_all_splits(c, schedule, ranks, m, training))
    except UsageError:
        return None


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_search_is_exhaustively_optimal_and_bounds_hold(data):
    case = _every_split(data)
    if case is None:
        return  # a count torch refuses
    schedule, ranks, c, m, training, every = case
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


def test_the_search_replays_compute_alone_and_prices_each_message_once():
    c = SegmentCosts([1, 1], [4, 4], input_ms=[1, 1], weight_ms=[4, 4], action_ms=0.5)
    plain = SegmentCosts([1, 1], [4, 4], input_ms=[1, 1], weight_ms=[4, 4])
    assert _Split(c, True, True).times([1]) == _Split(plain, True, True).times([1])
    for sched, cuts, p in (("1f1b", [1], 2), ("zbv", [1, 2, 3], 2), ("interleaved-1f1b", [1, 2, 3], 2)):
        c4 = SegmentCosts([1, 2, 1, 2], [4, 3, 4, 3], input_ms=[1, 1, 2, 1], weight_ms=[3, 3, 2, 2], action_ms=0.5)
        times = _Split(c4, True, SCHEDULES[sched].split_backward).times(cuts)
        assert evaluate(c4, cuts, sched, p, 4).step_ms == simulate(sched, p, 4, times, message_ms=0.5).step_ms
    assert evaluate(c, [1], "1f1b", 2, 4).step_ms > evaluate(plain, [1], "1f1b", 2, 4).step_ms
    assert evaluate(c, [], "1f1b", 1, 4).step_ms == evaluate(plain, [], "1f1b", 1, 4).step_ms  # one stage: no messages
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="action_ms must be a finite number >= 0"):
            SegmentCosts([1, 1], [4, 4], action_ms=bad)


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


def _recompute_instance(data, n_lo, n_hi):
    c = _instance(data, n_lo, n_hi)
    c.cut_bytes = data.draw(st.lists(st.integers(0, 60), min_size=c.n - 1, max_size=c.n - 1))
    c.first_input_bytes = data.draw(st.integers(0, 60))
    c.step_bytes = data.draw(st.integers(0, 30))
    return c


def _recompute_case(data):
    """A random schedule, rank count, instance with bytes, micro-batch count and every split's
    replay (`_all_splits`); ``None`` where torch refuses the micro-batch count."""
    schedule = data.draw(st.sampled_from(sorted(SCHEDULES)))
    v = stages_per_rank(schedule)
    ranks = data.draw(st.integers(1, 3 if v == 1 else 2))
    c = _recompute_instance(data, ranks * v, ranks * v + 2)
    m = data.draw(st.sampled_from([ranks, 2 * ranks, 3 * ranks]))
    try:
        return schedule, ranks, c, m, list(_all_splits(c, schedule, ranks, m))
    except UsageError:
        return None


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_recomputation_on_every_stage_is_exhaustively_optimal(data):
    """``recompute="all"`` (Megatron-LM's full recomputation): the least step over every split
    with every stage recomputing (brute force here), under a memory cap or none; every stage is
    flagged and the bound stays below the step."""
    case = _recompute_case(data)
    if case is None:
        return  # a count torch refuses
    schedule, ranks, c, m, splits = case
    every = []
    for cuts, p, _ in splits:
        sim = evaluate(c, cuts, schedule, p, m, recompute=[True] * (len(cuts) + 1))
        every.append((sim.step_ms, max(sim.rank_peak_bytes)))
    cap = data.draw(st.one_of(st.none(), st.sampled_from(sorted({pk for _, pk in every}))))
    r = search(c, schedule, ranks, m, memory=cap, recompute="all")
    assert r.status == "optimal" and all(r.recompute) and r.bound_ms <= r.step_ms
    assert r.step_ms == pytest.approx(min(step for step, pk in every if cap is None or pk <= cap))
    assert r.step_ms >= search(c, schedule, ranks, m, recompute="never").step_ms * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_recomputation_choice_is_exhaustively_optimal(data):
    """Under a memory cap, the search with recomputation allowed gives the least step over every
    split and every one of the ``2^S`` recomputation flag vectors that fits (brute force here),
    and is infeasible exactly when none fits; a plan that needs no recomputation gets none."""
    case = _recompute_case(data)
    if case is None:
        return  # a count torch refuses
    schedule, ranks, c, m, splits = case
    every = []  # (step, peak, flags)
    for cuts, p, _ in splits:
        s = len(cuts) + 1
        for flags in itertools.product([False, True], repeat=s):
            sim = evaluate(c, cuts, schedule, p, m, recompute=list(flags))
            every.append((sim.step_ms, max(sim.rank_peak_bytes), flags))
    peaks = sorted({pk for _, pk, _ in every})
    cap = data.draw(st.sampled_from(peaks[:-1] or peaks))
    fits = [(step, sum(fl)) for step, pk, fl in every if pk <= cap]
    r = search(c, schedule, ranks, m, memory=cap, recompute="auto")
    assert r.status == "optimal" and r.step_ms == pytest.approx(min(fits)[0])
    assert max(r.simulation.rank_peak_bytes) <= cap and r.recompute == r.simulation.recompute
    plain = [step for step, pk, fl in every if pk <= cap and not any(fl)]
    if plain and min(plain) <= min(fits)[0] * (1 + 1e-12):
        assert not any(r.recompute)  # equal steps prefer no recomputation
    if any(r.recompute):
        assert any("only with activation recomputation" in note for note in r.notes)
    below = search(c, schedule, ranks, m, memory=peaks[0] - 1, recompute="auto")
    assert below.status == "infeasible" and "with or without activation recomputation" in below.notes[0]


def test_recomputation_past_the_choice_cap_states_its_bound(monkeypatch):
    """Over `MAX_CHOICES` combinations a rank takes its cheapest minimal set: the answer still
    fits, its bound is a lower bound of the exhaustive answer, and optimal is claimed only when
    the step meets the bound."""
    import devplace_lite.schedules.search as ss

    c = SegmentCosts([1.0, 1.2, 0.8, 1.1, 0.9, 1.3, 1.0, 0.7], [2.0] * 8, [1.0] * 8, [0] * 8, [40] * 8,
                     cut_bytes=[5] * 7, first_input_bytes=5)
    cap = min(max(sim.rank_peak_bytes) for *_, sim in _all_splits(c, "interleaved-1f1b", 2, 4)) - 1
    assert search(c, "interleaved-1f1b", 2, 4, memory=cap).status == "infeasible"
    full = search(c, "interleaved-1f1b", 2, 4, memory=cap, recompute="auto")
    assert full.status == "optimal" and any(full.recompute)
    monkeypatch.setattr(ss, "MAX_CHOICES", 0)
    cut = search(c, "interleaved-1f1b", 2, 4, memory=cap, recompute="auto")
    assert max(cut.simulation.rank_peak_bytes) <= cap
    assert cut.bound_ms <= full.step_ms * (1 + 1e-12) <= cut.step_ms * (1 + 1e-12)
    assert any("minimal recomputation sets" in note for note in cut.notes)
    assert cut.status == ("optimal" if cut.step_ms <= cut.bound_ms * (1 + 1e-12) else "feasible")
    monkeypatch.setattr(ss, "MAX_CHOICES", 64)
    monkeypatch.setattr(ss, "ENUMERATE", 1)  # the local search chooses recomputation the same way
    local = search(c, "interleaved-1f1b", 2, 4, memory=cap, recompute="auto", start=full.stage_of)
    assert local.method.startswith("local search") and max(local.simulation.rank_peak_bytes) <= cap
    assert local.step_ms == pytest.approx(full.step_ms) and local.recompute == full.recompute
    assert local.bound_ms <= local.step_ms * (1 + 1e-12)
    with pytest.raises(UsageError, match="unknown recompute"):
        search(c, "1f1b", 2, 4, recompute="always")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_search_out_of_time_keeps_a_fitting_incumbent_and_a_true_bound(data):
    """A time limit of 0 s stops the search after its first fitting replay, never before: the
    answer fits the cap, its step is its split's replay, and its bound is below the least step
    of every fitting split (the exhaustive replay) while the step is above it."""
    case = _every_split(data)
    if case is None:
        return  # a count torch refuses
    schedule, ranks, c, m, training, every = case
    cap = data.draw(st.sampled_from(sorted({max(s.rank_peak_bytes) for *_, s in every})))
    least = min(s.step_ms for *_, s in every if max(s.rank_peak_bytes) <= cap)
    r = search(c, schedule, ranks, m, training=training, memory=cap, time_limit=0)
    assert r.stage_of is not None and max(r.simulation.rank_peak_bytes) <= cap
    cuts = [i for i in range(1, c.n) if r.stage_of[i] != r.stage_of[i - 1]]
    assert evaluate(c, cuts, schedule, r.ranks, m, training=training).step_ms == pytest.approx(r.step_ms, rel=1e-12)
    assert r.bound_ms <= least * (1 + 1e-9) and least <= r.step_ms * (1 + 1e-9)
    assert r.status in ("time_limit", "optimal")
    assert (r.status == "optimal") == (r.step_ms <= r.bound_ms * (1 + 1e-12))


def test_a_limit_that_runs_out_while_bounding_the_splits_falls_back_to_local_search():
    """9,139 splits: bounding them is timed too, and a limit of 0 s ends it after the first
    4,096; the local search from the start split keeps that split's step and a true bound."""
    c = SegmentCosts([1.0 + (i % 3) for i in range(40)], [2.0 + (i % 5) for i in range(40)])
    full = search(c, "1f1b", 4, 8)
    assert full.status == "optimal" and full.method.startswith("enumeration")
    for start in (None, full.stage_of):
        cut = search(c, "1f1b", 4, 8, time_limit=0, start=start)
        assert cut.method.startswith("local search") and any("while bounding" in n for n in cut.notes)
        assert cut.status in ("time_limit", "feasible", "optimal") and cut.bound_ms <= full.step_ms * (1 + 1e-9)
        assert full.step_ms <= cut.step_ms * (1 + 1e-9)
    assert cut.step_ms == pytest.approx(full.step_ms, rel=1e-12)  # started from the optimum, it keeps it
