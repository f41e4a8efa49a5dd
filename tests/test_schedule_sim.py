"""The schedule simulator: torch's action orders, the replay's rules, and the closed formulas.

The orders are checked against torch's own classes (GPipe's IR in full, 1F1B's sequence of
kinds); the replay against the recurrence of `devplace_lite.schedules.timeline.gpipe` for any stage times,
against the closed formulas where they are exact (equal stages, no transfer), against the
schedules' textbook in-flight counts for memory, and against its own invariants (dependencies
met, one action at a time per rank, monotone in every time) on random instances. Activation
recomputation: never a shorter step, never a higher peak where a stage's input is no larger
than its activations, the peak each rank's order alone decides, and the closed forms on equal
stages.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.schedules import timeline as schedule
from devplace_lite.errors import UsageError
from devplace_lite.schedules.simulate import (SCHEDULES, Action, action_order, message_ends, plot_gantt, rank_memory,
                                             rank_peaks, replay, simulate, stage_to_rank, stages_per_rank)

MULTI = [s for s, sp in SCHEDULES.items() if sp.per_rank > 1]


def _times(n, f, b, i=None, w=None):
    i = [x / 2 for x in b] if i is None else i
    w = [x - y for x, y in zip(b, i)] if w is None else w
    return {"F": list(f), "B": list(b), "I": list(i), "W": list(w)}


def _torch_ir(cls_name, ranks, m):
    import types

    import torch.distributed.pipelining.schedules as ts

    stage = types.SimpleNamespace(num_stages=ranks, group_size=ranks, group_rank=0, stage_index=0, submod=None)
    sched = getattr(ts, cls_name)(stage, m, loss_fn=lambda o, t: o)
    return {r: [a for a in acts if a is not None and a.computation_type.value in "FB"]
            for r, acts in sched.pipeline_order.items()}


@pytest.mark.parametrize("ranks,m", [(1, 1), (2, 4), (3, 5), (4, 4), (4, 8)])
def test_gpipe_order_is_torchs_ir(ranks, m):
    ir = _torch_ir("ScheduleGPipe", ranks, m)
    ours = action_order("gpipe", ranks, m)
    for r in range(ranks):
        assert [(a.computation_type.value, a.stage_index, a.microbatch_index) for a in ir[r]] == \
               [(a.kind, a.stage, a.microbatch) for a in ours[r]]


@pytest.mark.parametrize("ranks,m", [(2, 2), (2, 5), (3, 4), (4, 8)])
def test_1f1b_kinds_are_torchs_ir(ranks, m):
    """The kinds in torch's 1F1B IR, in order (its micro-batch numbers are off past rank 0)."""
    ir = _torch_ir("Schedule1F1B", ranks, m)
    ours = action_order("1f1b", ranks, m)
    for r in range(ranks):
        assert [a.computation_type.value for a in ir[r]] == [a.kind for a in ours[r]]
        assert sorted(a.microbatch for a in ours[r] if a.kind == "F") == list(range(m))


@pytest.mark.parametrize("sched", MULTI)
def test_multi_stage_orders_are_complete(sched):
    p, m = 2, 4
    order = action_order(sched, p, m)
    ranks = stage_to_rank(sched, p)
    split = SCHEDULES[sched].split_backward
    for s in range(p * stages_per_rank(sched)):
        acts = [a for a in order[ranks[s]] if a.stage == s]
        assert sorted(a.microbatch for a in acts if a.kind == "F") == list(range(m))
        full = [a.microbatch for a in acts if a.kind == "B"]
        ins = [a.microbatch for a in acts if a.kind == "I"]
        ws = [a.microbatch for a in acts if a.kind == "W"]
        assert sorted(full + ins) == list(range(m)) and sorted(ins) == sorted(ws)
        assert split or not ins
    # the replay runs every order to its end: no deadlock in torch's orders
    sim = simulate(sched, p, m, _times(p * stages_per_rank(sched), [1.0] * 4, [2.0] * 4))
    assert sim.step_ms > 0 and len(sim.events) == sum(len(v) for v in order.values())


def test_stage_maps_are_torchs():
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    for p in (1, 2, 3, 4):
        for sched in SCHEDULES:
            v = stages_per_rank(sched)
            want = generate_stage_to_rank_mapping(p, p * v, style=SCHEDULES[sched].style)
            assert stage_to_rank(sched, p) == [want[s] for s in range(p * v)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), st.floats(0.1, 10), st.floats(0.1, 10))
def test_equal_stages_match_closed_formulas(p, m, tf, tb):
    """Equal stages, no transfer: GPipe and 1F1B step ``(m + p - 1)(t_F + t_B)``; the looped
    schedules ``(m v + p - 1)(t_F + t_B)`` when ``m >= p`` (and torch takes the count)."""
    g = simulate("gpipe", p, m, {"F": [tf] * p, "B": [tb] * p})
    assert g.step_ms == pytest.approx(schedule.gpipe_formula([tf] * p, m) + schedule.gpipe_formula([tb] * p, m))
    if m >= p:
        one = simulate("1f1b", p, m, {"F": [tf] * p, "B": [tb] * p})
        assert one.step_ms == pytest.approx(schedule.gpipe_formula([tf + tb] * p, m))
        for sched in ("interleaved-1f1b", "looped-bfs"):
            for v in (2, 3):
                try:
                    sim = simulate(sched, p, m, {"F": [tf] * (p * v), "B": [tb] * (p * v)}, per_rank=v)
                except UsageError:  # torch's own refusal (micro-batches not a multiple of the rounds)
                    continue
                assert sim.step_ms == pytest.approx(schedule.interleaved_formula(tf + tb, p, v, m))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_gpipe_replay_is_the_gpipe_recurrence(data):
    """Any stage times: the replay of GPipe is `schedule.gpipe`'s recurrence, to the event."""
    p = data.draw(st.integers(1, 5))
    m = data.draw(st.integers(1, 6))
    f = data.draw(st.lists(st.floats(0.0, 5.0), min_size=p, max_size=p))
    b = data.draw(st.lists(st.floats(0.0, 5.0), min_size=p, max_size=p))
    sim = simulate("gpipe", p, m, {"F": f, "B": b})
    tasks = schedule.gpipe(f, m, backward=b)
    assert sim.step_ms == pytest.approx(schedule.makespan(tasks))
    want = sorted((int(lane.split()[1]), label, start) for lane, start, _, label, _ in tasks)
    got = sorted((r, f"{a.kind}{a.microbatch}", start) for r, a, start, _ in sim.events)
    assert [w[:2] for w in want] == [g[:2] for g in got]
    assert [w[2] for w in want] == pytest.approx([g[2] for g in got])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_replay_invariants(data):
    """Dependencies met (with transfers between ranks), one action at a time per rank, idle =
    step - busy, and a longer action never shortens the step."""
    sched = data.draw(st.sampled_from(sorted(SCHEDULES)))
    p = data.draw(st.integers(1, 3))
    v = stages_per_rank(sched)
    n = p * v
    m = data.draw(st.sampled_from([p * v * 2, 2 * p, 4 * p]))
    fl = st.floats(0.05, 4.0)
    f = data.draw(st.lists(fl, min_size=n, max_size=n))
    i = data.draw(st.lists(fl, min_size=n, max_size=n))
    w = data.draw(st.lists(fl, min_size=n, max_size=n))
    tr = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n - 1, max_size=n - 1))
    times = _times(n, f, [a + b for a, b in zip(i, w)], i, w)
    try:
        sim = simulate(sched, p, m, times, transfer_ms=tr)
    except UsageError:
        return  # a count torch refuses
    ranks = stage_to_rank(sched, p)
    end = {}
    for r, a, s, e in sim.events:
        end[(a.kind, a.stage, a.microbatch)] = e
    for r, a, s, e in sim.events:
        j, st_ = a.microbatch, a.stage
        if a.kind == "F" and st_ > 0:
            assert s >= end[("F", st_ - 1, j)] + (tr[st_ - 1] if ranks[st_ - 1] != r else 0) - 1e-9
        if a.kind in "BI":
            assert s >= end[("F", st_, j)] - 1e-9
            if st_ < n - 1:
                g = end.get(("B", st_ + 1, j), end.get(("I", st_ + 1, j)))
                assert s >= g + (tr[st_] if ranks[st_ + 1] != r else 0) - 1e-9
        if a.kind == "W":
            assert s >= end[("I", st_, j)] - 1e-9
    for r in range(p):
        mine = sorted((s, e) for rr, _, s, e in sim.events if rr == r)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(mine, mine[1:]))
        assert sim.rank_idle_ms[r] == pytest.approx(sim.step_ms - sim.rank_busy_ms[r])
    k = data.draw(st.sampled_from(sorted({"F", "I", "W"} if SCHEDULES[sched].split_backward else {"F", "B"})))
    s_ = data.draw(st.integers(0, n - 1))
    longer = {key: list(val) for key, val in times.items()}
    longer[k][s_] += data.draw(st.floats(0.01, 3.0))
    if k in "IW":
        longer["B"][s_] = longer["I"][s_] + longer["W"][s_]
    assert simulate(sched, p, m, longer, transfer_ms=tr).step_ms >= sim.step_ms - 1e-9


@pytest.mark.parametrize("p,m", [(2, 4), (3, 3), (4, 6)])
def test_memory_in_flight(p, m):
    """Peak activations: ``m`` micro-batches per stage under GPipe, ``min(m, p - s)`` under 1F1B."""
    static, act = [100.0 * (s + 1) for s in range(p)], [10.0 + s for s in range(p)]
    f, b = [1.0 + 0.3 * s for s in range(p)], [2.0 - 0.1 * s for s in range(p)]
    g = simulate("gpipe", p, m, {"F": f, "B": b}, static_bytes=static, activation_bytes=act)
    assert g.rank_peak_bytes == pytest.approx([static[s] + m * act[s] for s in range(p)])
    o = simulate("1f1b", p, m, {"F": f, "B": b}, static_bytes=static, activation_bytes=act)
    assert o.rank_peak_bytes == pytest.approx([static[s] + min(m, p - s) * act[s] for s in range(p)])
    inf = simulate("gpipe", p, m, {"F": f, "B": b}, training=False, static_bytes=static, activation_bytes=act)
    assert inf.rank_peak_bytes == pytest.approx([static[s] + act[s] for s in range(p)])


def test_zero_bubble_beats_1f1b_and_frees_at_w():
    """Equal F = I = W: ZB-V leaves less idle time than 1F1B on the same work; its activations
    stay until W."""
    p, m = 2, 8
    one = simulate("1f1b", p, m, {"F": [2.0] * 2, "B": [4.0] * 2})
    zbv = simulate("zbv", p, m, _times(4, [1.0] * 4, [2.0] * 4))
    assert zbv.step_ms < one.step_ms
    order = {0: [Action("F", 0, 0), Action("I", 0, 0), Action("F", 0, 1), Action("W", 0, 0), Action("I", 0, 1),
                 Action("W", 0, 1)]}
    sim = replay(order, [0], {"F": [1.0], "I": [1.0], "W": [1.0]}, activation_bytes=[5.0])
    assert sim.rank_peak_bytes == [10.0]


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown schedule"):
        action_order("pipedream", 2, 4)
    with pytest.raises(UsageError, match="exactly 2"):
        stages_per_rank("zbv", 3)
    with pytest.raises(UsageError, match="multiple of the number of rounds"):
        action_order("interleaved-1f1b", 2, 5)
    with pytest.raises(UsageError, match="micro-batches"):
        action_order("1f1b", 4, 2)
    with pytest.raises(UsageError, match="I and W"):
        simulate("zbv", 2, 4, {"F": [1.0] * 4, "B": [1.0] * 4})
    with pytest.raises(UsageError, match="deadlocks"):
        replay({0: [Action("B", 0, 0), Action("F", 0, 0)]}, [0], {"F": [1.0], "B": [1.0]})
    with pytest.raises(UsageError, match="stage"):
        simulate("gpipe", 2, 2, {"F": [1.0], "B": [1.0]})


def test_import_stays_torch_free():
    code = ("import sys, devplace_lite.schedules.simulate as s; s.simulate('1f1b', 2, 4, {'F': [1, 1], 'B': [1, 1]}); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gantt_draws_forecast_and_measured():
    import matplotlib

    matplotlib.use("Agg")
    sim = simulate("1f1b", 2, 4, {"F": [1.0, 1.5], "B": [2.0, 2.5]})
    measured = [(r, a, s * 1.1, e * 1.1) for r, a, s, e in sim.events]
    fig = plot_gantt(sim, measured)
    assert len(fig.axes) == 2 and all(len(ax.patches) == len(sim.events) for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["F: forward", "B: backward"]
    zb = plot_gantt(simulate("zbv", 2, 4, {"F": [1.0] * 4, "I": [1.0] * 4, "W": [1.0] * 4}))
    assert [t.get_text() for t in zb.axes[0].get_legend().get_texts()] == ["F: forward", "I: input gradient",
                                                                            "W: weight gradient"]


def test_in_flight_counts_match_the_planners():
    from devplace_lite.pipeline.costs import in_flight

    for sched in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (3, 7), (4, 4)):
            sim = simulate(sched, p, m, {"F": [1.0] * p, "B": [1.5] * p})
            assert sim.stage_in_flight == [in_flight(sched, m, p, s, True) for s in range(p)]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_recomputation_costs_time_and_saves_memory(data):
    """Recomputing more stages never shortens the step; where a stage's kept inputs and what
    its backward holds beyond them add up to at most its activations it never raises a rank's
    peak; and a rank's peak is what its own order and its own stages' flags give
    (`rank_peaks`), whatever the times."""
    sched = data.draw(st.sampled_from(sorted(SCHEDULES)))
    p = data.draw(st.integers(1, 3))
    n = p * stages_per_rank(sched)
    m = data.draw(st.sampled_from([2 * n, 2 * p, 4 * p]))
    fl = st.floats(0.05, 4.0)
    f, i, w = (data.draw(st.lists(fl, min_size=n, max_size=n)) for _ in range(3))
    tr = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n - 1, max_size=n - 1))
    times = _times(n, f, [a + b for a, b in zip(i, w)], i, w)
    act = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    inp = [data.draw(st.integers(0, a)) for a in act]
    # what a backward holds beyond the inputs: one segment's activations, at most the stage's
    again = [data.draw(st.integers(0, a - i)) for a, i in zip(act, inp)]
    static = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    some = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    more = [a or data.draw(st.booleans()) for a in some]  # a superset of ``some``
    mem = dict(static_bytes=static, activation_bytes=act, input_bytes=inp, recompute_bytes=again, transfer_ms=tr)
    try:
        plain = simulate(sched, p, m, times, **mem)
    except UsageError:
        return  # a count torch refuses
    few = simulate(sched, p, m, times, recompute=some, **mem)
    many = simulate(sched, p, m, times, recompute=more, **mem)
    assert plain.step_ms <= few.step_ms * (1 + 1e-12) + 1e-12 and few.step_ms <= many.step_ms * (1 + 1e-12) + 1e-12
    assert all(a >= b - 1e-9 for a, b in zip(plain.rank_peak_bytes, few.rank_peak_bytes))
    assert few.recompute == some and few.stage_in_flight == plain.stage_in_flight
    order, ranks = action_order(sched, p, m), stage_to_rank(sched, p)
    assert rank_peaks(order, ranks, static, act, inp, some, again)[0] == pytest.approx(few.rank_peak_bytes)
    slower = {k: [x * 3 for x in v] for k, v in times.items()}
    assert simulate(sched, p, m, slower, recompute=some, **mem).rank_peak_bytes == pytest.approx(few.rank_peak_bytes)
    # a rank whose stages' flags are unchanged keeps its peak
    for r in range(p):
        if all(some[s] == more[s] for s in range(n) if ranks[s] == r):
            assert many.rank_peak_bytes[r] == pytest.approx(few.rank_peak_bytes[r])
    # inference has no backward: nothing to recompute
    inf = simulate(sched, p, m, times, training=False, recompute=more, **mem)
    assert inf.step_ms == pytest.approx(simulate(sched, p, m, times, training=False, **mem).step_ms)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_memory_over_time_peaks_where_rank_peaks_says(data):
    """`rank_memory`: each rank's bytes over the step start and end at its static bytes (a
    training step frees every activation), its corners run forward in time within the step,
    and its highest corner is the rank's peak, with or without recomputation."""
    sched = data.draw(st.sampled_from(sorted(SCHEDULES)))
    p = data.draw(st.integers(1, 3))
    n = p * stages_per_rank(sched)
    m = data.draw(st.sampled_from([n, 2 * p, 4 * p]))
    fl = st.floats(0.05, 4.0)
    f, i, w = (data.draw(st.lists(fl, min_size=n, max_size=n)) for _ in range(3))
    times = _times(n, f, [a + b for a, b in zip(i, w)], i, w)
    act = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    inp = [data.draw(st.integers(0, a)) for a in act]
    static = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    flags = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    mem = dict(static_bytes=static, activation_bytes=act, input_bytes=inp)
    try:
        sim = simulate(sched, p, m, times, recompute=flags, **mem)
    except UsageError:
        return  # a count torch refuses
    ranks = stage_to_rank(sched, p)
    curves = rank_memory(sim, ranks, **mem)
    assert len(curves) == p
    for r, pts in enumerate(curves):
        held = sum(static[s] for s in range(n) if ranks[s] == r)
        assert pts[0] == (0.0, held) and pts[-1] == (sim.step_ms, pytest.approx(held))
        assert all(a[0] <= b[0] for a, b in zip(pts, pts[1:])) and pts[-1][0] <= sim.step_ms
        assert max(b for _, b in pts) == pytest.approx(sim.rank_peak_bytes[r])


@pytest.mark.parametrize("p,m", [(2, 4), (3, 3), (4, 6)])
def test_recomputation_closed_forms_on_equal_stages(p, m):
    """Every stage recomputing, equal stages, no transfer: the step is the formula's with each
    backward one forward longer, ``(m + p - 1)(2 t_F + t_B)``; a rank's peak is its static bytes
    plus ``(c - 1)`` inputs and one micro-batch's activations, ``c`` the micro-batches in flight
    (``m`` under GPipe, ``min(m, p - s)`` under 1F1B); recomputed one segment at a time, ``c``
    inputs and what one segment holds beyond its input."""
    tf, tb, static, act, inp = 1.0, 2.0, 100.0, 40.0, 8.0
    mem = dict(static_bytes=[static] * p, activation_bytes=[act] * p, input_bytes=[inp] * p, recompute=[True] * p)
    for sched, fly in (("gpipe", lambda s: m), ("1f1b", lambda s: min(m, p - s))):
        sim = simulate(sched, p, m, {"F": [tf] * p, "B": [tb] * p}, **mem)
        assert sim.step_ms == pytest.approx((m + p - 1) * (2 * tf + tb))
        assert sim.rank_peak_bytes == pytest.approx([static + (fly(s) - 1) * inp + act for s in range(p)])
        # per segment: every micro-batch's segment inputs kept, one segment's activations beyond them
        seg = simulate(sched, p, m, {"F": [tf] * p, "B": [tb] * p}, recompute_bytes=[act / 4] * p, **mem)
        assert seg.rank_peak_bytes == pytest.approx([static + fly(s) * inp + act / 4 for s in range(p)])
    zb = simulate("zbv", p, m, _times(2 * p, [tf] * 2 * p, [tb] * 2 * p), recompute=[True] * 2 * p,
                  activation_bytes=[act] * 2 * p, input_bytes=[inp] * 2 * p)
    plain = simulate("zbv", p, m, _times(2 * p, [tf] * 2 * p, [tb] * 2 * p), activation_bytes=[act] * 2 * p)
    assert zb.step_ms > plain.step_ms and max(zb.rank_peak_bytes) < max(plain.rank_peak_bytes)


def test_recomputation_goes_before_the_input_pass():
    """Split backward: ``I`` runs the forward again (``I + F``), ``W`` does not, and the
    recomputed activations stay from ``I`` until ``W``."""
    order = {0: [Action("F", 0, 0), Action("F", 0, 1), Action("I", 0, 0), Action("I", 0, 1), Action("W", 0, 0),
                 Action("W", 0, 1)]}
    sim = replay(order, [0], {"F": [1.0], "I": [2.0], "W": [3.0]}, activation_bytes=[10.0], input_bytes=[1.0],
                 recompute=[True])
    dur = {str(a): e - s for _, a, s, e in sim.events}
    assert dur["I0@0"] == dur["I1@0"] == 3.0 and dur["W0@0"] == 3.0
    assert sim.rank_peak_bytes == [20.0]  # both recomputed graphs wait for their W
    with pytest.raises(UsageError, match="recomputation flags"):
        replay(order, [0], {"F": [1.0], "I": [2.0], "W": [3.0]}, recompute=[True, False])


@pytest.mark.parametrize("sched", list(SCHEDULES))
def test_a_message_is_priced_on_each_pass_that_exchanges_it(sched):
    """``message_ms`` is what a pass pays per neighbouring stage on another rank: every F, B
    and I duration grows by exactly that many prices (W and one stage pay none), whatever the
    schedule; a recomputing pass pays once, not once more for its forward again."""
    p, m = 2, 4
    n = p * stages_per_rank(sched)
    split = SCHEDULES[sched].split_backward
    times = {"F": [1.0 + s for s in range(n)], "B": [3.0 + s for s in range(n)]}
    if split:
        times.update(I=[1.0 + s / 2 for s in range(n)], W=[2.0 + s / 2 for s in range(n)])
    ends = message_ends(stage_to_rank(sched, p))
    for rec in (None, [True] * n):
        plain = simulate(sched, p, m, times, recompute=rec)
        priced = simulate(sched, p, m, times, recompute=rec, message_ms=0.25)
        dur = {(a.kind, a.stage): t1 - t0 for _, a, t0, t1 in plain.events}
        for _, a, t0, t1 in priced.events:
            paid = 0 if a.kind == "W" else ends[a.stage]
            assert t1 - t0 == pytest.approx(dur[(a.kind, a.stage)] + 0.25 * paid)
        assert priced.step_ms > plain.step_ms
    assert simulate(sched, 1, m, {k: v[:stages_per_rank(sched)] for k, v in times.items()}, message_ms=5.0).step_ms == \
        simulate(sched, 1, m, {k: v[:stages_per_rank(sched)] for k, v in times.items()}).step_ms  # all on one rank
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="message_ms must be a finite number >= 0"):
            simulate(sched, p, m, times, message_ms=bad)


def test_a_middle_stage_of_a_loop_talks_to_both_sides_and_a_v_hands_over_inside_its_rank():
    assert message_ends(stage_to_rank("gpipe", 2)) == [1, 1]
    assert message_ends(stage_to_rank("interleaved-1f1b", 3)) == [1, 2, 2, 2, 2, 1]
    assert message_ends(stage_to_rank("zbv", 3)) == [1, 2, 1, 1, 2, 1]  # stages 2 and 3 share rank 2
    assert message_ends([0]) == [0]
