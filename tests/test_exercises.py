"""Self-grading exercises: `check` feedback on right, wrong, crashing and unattempted functions,
and the registry's agreement with the chapters."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from devplace_lite.schedules import timeline as schedule
from devplace_course.exercises import check, exercises, get, instance
from devplace_course.exercises.core import Case, Exercise, close, exact, register
from devplace_lite.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
ALL = exercises()
CHECK_CALL = re.compile(r"""check\(\s*["'](\d\d\.\w+)["']\s*,\s*(\w+)""")


def stub(*args, **kwargs):
    raise NotImplementedError


# -- every registered exercise ----------------------------------------------------------------
@pytest.mark.parametrize("ex", ALL, ids=[e.id for e in ALL])
def test_reference_passes_its_own_check(ex, capsys):
    res = check(ex.id, ex.reference)
    assert res.passed and res.score == 1.0 and res.correct == res.cases == ex.n
    assert f"{ex.id} {ex.name}: passed" in capsys.readouterr().out


@pytest.mark.parametrize("ex", ALL, ids=[e.id for e in ALL])
def test_stub_is_not_attempted_and_raises_nothing(ex, capsys):
    res = check(ex.id, stub)
    assert res.status == "not attempted" and not res.passed and res.score == 0.0 and not res.attempted
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("ex", ALL, ids=[e.id for e in ALL])
def test_wrong_answer_gets_the_instance_both_values_and_the_hint(ex):
    def off(*args, **kwargs):
        value = ex.reference(*args, **kwargs)
        if isinstance(value, tuple):  # (latency, splits) of 04.3: both parts off
            return tuple(v + 1 for v in value)
        return value + 1 if not isinstance(value, np.ndarray) else value + 1.0
    res = check(ex.id, off, quiet=True)
    assert res.status == "failed" and res.score == 0.0
    first = res.failure
    assert first["instance"] == 0 and first["case"] == ex.case(0).text
    assert "expected" in first["problem"] and "got" in first["problem"]
    assert ex.hint and ex.hint in res.message and "rebuild it" in res.message


@pytest.mark.parametrize("ex", ALL, ids=[e.id for e in ALL])
def test_instances_are_reproducible(ex):
    for i in range(3):
        a, b = ex.case(i, seed=5), instance(ex.id, i, seed=5)
        assert a.text == b.text and a.text
        assert ex.compare(ex.reference(*a.args, **a.kwargs), ex.reference(*b.args, **b.kwargs)) is None
    assert any(ex.case(i, 0).text != ex.case(i, 1).text for i in range(ex.n)), "the seed changes nothing"


def test_every_exercise_is_in_its_chapter_with_a_solution():
    """Each registered id is checked in its chapter with the registered function name, and each
    check call in the chapters names a registered exercise; the solution cell defines the name."""
    import jupytext

    calls = {}
    for md in sorted(CHAPTERS.glob("[0-9][0-9]_*.md")):
        nb = jupytext.read(md)
        solutions = "\n".join(c.source for c in nb.cells
                              if c.cell_type == "code" and "solution" in c.metadata.get("tags", []))
        for c in nb.cells:
            if c.cell_type != "code":
                continue
            for ex_id, name in CHECK_CALL.findall(c.source):
                if name == "lambda":  # a demonstration of feedback, not an exercise
                    continue
                calls[ex_id] = (md.name, name)
                assert get(ex_id).name == name, f"{md.name}: check({ex_id!r}, {name}) but {ex_id} expects {get(ex_id).name}"
                assert re.search(rf"^def {name}\(", solutions, re.M), f"{md.name}: no solution cell defines {name}"
    chapters_present = {md.name[:2] for md in CHAPTERS.glob("[0-9][0-9]_*.md")}
    for ex in ALL:
        if ex.chapter in chapters_present:
            assert ex.id in calls, f"exercise {ex.id} ({ex.name}) is registered but its chapter never checks it"


# -- feedback on the chapter 01 exercises ----------------------------------------------------------
def per_edge_max_load(graph, cluster, assignment):
    """A typical slip: one transfer per crossing edge instead of per producer and device."""
    load = np.zeros(cluster.size)
    for i, v in enumerate(graph.nodes):
        d = assignment[i]
        load[d] += v.p_acc if d < cluster.k else v.p_cpu
    for u, w in zip(graph.src, graph.dst):
        if assignment[u] != assignment[w]:
            for d in (assignment[u], assignment[w]):
                if d < cluster.k:
                    load[d] += graph.comm[u]
    return load.max()


def test_max_load_slip_is_diagnosed():
    res = check("01.2", per_edge_max_load, quiet=True)
    assert res.status == "failed" and 0 < res.score < 1  # right wherever no producer has two consumers across
    assert "once per crossing edge" in res.failure["diagnosis"]
    assert "diagnosis:" in res.message


def test_equal_stage_formula_passes_equal_stages_only():
    res = check("01.3", lambda t, m: (m + len(t) - 1) * max(t), quiet=True)
    assert res.status == "failed" and res.correct >= 6  # the equal-stage instances come first
    assert res.failure["instance"] >= 6 and "equal stages" in res.failure["diagnosis"]


def test_an_exception_is_a_finding_not_a_crash():
    res = check("01.2", lambda graph, cluster, assignment: 1 / 0, quiet=True)
    assert res.status == "failed" and res.score == 0.0
    assert "ZeroDivisionError" in res.failure["problem"] and res.failure["got"] is None


def test_a_function_that_mutates_its_input_cannot_spoil_the_comparison():
    from devplace_lite.cost import max_load

    def vandal(graph, cluster, assignment):
        value = max_load(graph, cluster, np.asarray(assignment))
        assignment[:] = 0
        return value
    assert check("01.2", vandal, quiet=True).passed


def test_late_not_implemented_counts_as_a_failure():
    calls = []

    def half(t, m):
        calls.append(1)
        if len(calls) > 3:
            raise NotImplementedError
        return schedule.makespan(schedule.gpipe(t, m))
    res = check("01.3", half, quiet=True)
    assert res.status == "failed" and res.correct == 3 and "NotImplementedError" in res.failure["problem"]


def test_unknown_exercise_and_non_function():
    with pytest.raises(UsageError, match="unknown exercise '99.9'; known: 00.1"):
        check("99.9", stub)
    with pytest.raises(TypeError, match="my_max_load"):
        check("01.2", 42)
    with pytest.raises(ValueError, match="at least one instance"):
        check("01.2", stub, n=0)


def test_comparators():
    assert close()(1.0, 1.0 + 1e-12) is None
    assert "off by +0.5" in close()(1.0, 1.5)
    assert "expected a number" in close()(1.0, "1.0")
    assert "shape" in close()(np.zeros(3), np.zeros(4))
    assert "first at [2]" in close()(np.zeros(3), np.array([0, 0, 1.0]))
    assert exact()(3, 3) is None and "expected 3, got 4" in exact()(3, 4)


def test_register_refuses_duplicates():
    ex = get("01.2")
    with pytest.raises(ValueError, match="registered twice"):
        register(ex)
    with pytest.raises(ValueError, match="already used"):
        register(Exercise(id="99.1", name="my_max_load", title="t", reference=len,
                          cases=lambda rng, i: Case(((),))))


# -- the references themselves -----------------------------------------------------------------
@settings(derandomize=True, max_examples=60, deadline=None)
@given(p=st.integers(1, 64), target=st.fractions(min_value=Fraction(1, 200), max_value=1, max_denominator=1000))
def test_fewest_microbatches_is_the_least_m(p, target):
    m = get("01.4").reference(p, float(target))
    bubble = lambda k: Fraction(p - 1, k + p - 1)  # noqa: E731
    t = Fraction(str(float(target)))
    assert m >= 1 and bubble(m) <= t and (m == 1 or bubble(m - 1) > t)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(t=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=8), m=st.integers(1, 40))
def test_gpipe_step_equals_the_formula(t, m):
    assert abs(get("01.3").reference(t, m) - schedule.gpipe_formula(t, m)) <= 1e-9 * (1 + sum(t) * m)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(devices=st.integers(1, 256), degrees=st.sets(st.integers(1, 16), min_size=1, max_size=4),
       m=st.integers(1, 64), segments=st.integers(1, 40), nbytes=st.floats(0, 1e11))
def test_the_mesh_exercises_agree_with_the_planner(devices, degrees, m, segments, nbytes):
    """09.6 and 09.7's torch-free references against what `mesh_plan` plans with."""
    from devplace_lite.pipeline.mesh_plan import shapes
    from devplace_lite.pipeline.tp_cost import allreduce_ms

    got = get("09.7").reference(devices, sorted(degrees), m, segments)
    want = sorted((s.dp, s.pp, s.tp) for s in shapes(devices, sorted(degrees), m, segments, ["1f1b"]))
    assert [tuple(r) for r in got.tolist()] == want
    assert get("09.6").reference(nbytes, devices, 50e9) == pytest.approx(allreduce_ms(nbytes, devices, 50e9), rel=1e-12)


# -- wrong ideas fail most instances, and are named ------------------------------------------------
WITH_SLIPS = [e for e in ALL if e.slips is not None]


def slip_learner(ex, message):
    """A learner who makes exactly one typical mistake: the slip's value where it applies, else right."""
    def learner(*args, **kwargs):
        case = Case(args, kwargs)
        return next((value for value, msg in ex.slips(case) if msg == message), ex.reference(*args, **kwargs))
    return learner


@pytest.mark.parametrize("ex", WITH_SLIPS, ids=[e.id for e in WITH_SLIPS])
def test_each_typical_mistake_fails_most_instances_and_is_named(ex):
    messages = list(dict.fromkeys(msg for i in range(ex.fixed, ex.n) for _, msg in ex.slip_values(ex.case(i))))
    assert messages
    for message in messages:
        res = check(ex.id, slip_learner(ex, message), quiet=True)
        assert res.status == "failed" and res.score <= 0.35, (message, res.score)
        assert res.failure["diagnosis"].startswith(message), (message, res.failure["diagnosis"])


def test_charging_a_transfer_per_edge_scores_little():
    """The issue's example: per-edge transfers scored 0.87 on instances most of which it got right."""
    res = check("01.2", per_edge_max_load, quiet=True)
    assert res.score <= 0.2


def forgetful_latency_with_floor(convex=True, feasible=True):
    """04.3 as a learner writes it, with the convexity or the violations filter forgotten."""
    import itertools

    from devplace_lite.cost import max_load, violations
    from devplace_lite.single_sample.model import evaluate_latency, reachability

    def my_latency_with_floor(graph, cluster, floor):
        R = reachability(graph)
        best, count = np.inf, 0
        for labels in itertools.product(range(cluster.size), repeat=graph.n):
            a = np.array(labels)
            if feasible and violations(graph, cluster, a):
                continue
            if max_load(graph, cluster, a) > floor + 1e-9 * max(1.0, floor):
                continue
            if convex and any(np.any(R[s].any(axis=0) & R[:, s].any(axis=1) & ~s)
                              for s in (a == d for d in range(cluster.k)) if s.any()):
                continue
            count += 1
            best = min(best, evaluate_latency(graph, cluster, a, np.where(a < cluster.k, 0, -1)).latency)
        return best, count
    return my_latency_with_floor


def test_the_slips_that_used_to_pass_fail():
    assert check("04.3", forgetful_latency_with_floor(), quiet=True).passed  # the learner's shape is right
    res = check("04.3", forgetful_latency_with_floor(convex=False), quiet=True)
    assert res.status == "failed" and res.score <= 0.35 and "convex" in res.failure["diagnosis"]
    res = check("04.3", forgetful_latency_with_floor(feasible=False), quiet=True)
    assert res.status == "failed" and res.score <= 0.35 and "violation" in res.failure["diagnosis"]

    def exactly_k_blocks(graph, cluster, order):
        from devplace_lite.cost import device_loads
        from devplace_lite.devices import Cluster

        n = len(order)

        def block(i, j):
            side = np.ones(graph.n, dtype=int)
            side[list(order[i:j])] = 0
            compute, comm = device_loads(graph, Cluster(accelerators=2), side)
            return compute[0] + comm[0]
        F = [0.0] + [np.inf] * n
        for _ in range(cluster.k):  # every block non-empty: F[0] is no longer reachable after a round
            F = [np.inf] + [min(max(F[i], block(i, j)) for i in range(j)) for j in range(1, n + 1)]
        return F[n]
    res = check("05.3", exactly_k_blocks, quiet=True)
    assert res.status == "failed" and res.score <= 0.35 and "exactly k blocks" in res.failure["diagnosis"]


def test_the_two_wrong_diagnoses_are_right_now():
    def principal_ideals(graph):  # the empty set and the down-closure of each node
        closures = set()
        for v in range(graph.n):
            seen, todo = {v}, [v]
            while todo:
                for u in graph.pred[todo.pop()]:
                    if u not in seen:
                        seen.add(u)
                        todo.append(u)
            closures.add(frozenset(seen))
        return len(closures) + 1
    res = check("02.2", principal_ideals, quiet=True)  # on the diamond, one short of the 6 ideals
    assert res.failure["instance"] == 0 and res.failure["diagnosis"].startswith("that is n + 1")

    def fused(forward, backward, microbatches):
        fb = [f + b for f, b in zip(forward, backward)]
        return sum(fb) + (microbatches - 1) * max(fb)
    res = check("08.3", fused, quiet=True)
    assert res.failure["diagnosis"].startswith("that is the fused estimate"), res.failure["diagnosis"]


def test_a_float32_answer_is_told_why_it_fails():
    from devplace_lite.cost import max_load

    res = check("01.2", lambda graph, cluster, assignment: np.float32(max_load(graph, cluster, assignment)), quiet=True)
    assert res.status == "failed" and "float32" in res.failure["problem"] and "float64" in res.failure["problem"]
    res = check("06.2", lambda graph, cluster, order: get("06.2").reference(graph, cluster, order).astype(np.float32),
                quiet=True)
    assert "float32" in res.failure["problem"]
    assert "float32" not in close()(1.0, 2.0)


def test_check_has_a_timeout_and_says_so():
    def endless(graph):
        while True:
            pass
    res = check("00.1", endless, quiet=True, timeout=1.0)
    assert res.status == "timeout" and res.score == 0.0 and not res.passed
    assert "stopped after 1 s" in res.message and "timeout=" in res.message


def test_check_is_skipped_inside_the_grader(monkeypatch):
    monkeypatch.setenv("DEVPLACE_GRADING", "1")
    res = check("01.2", stub, quiet=True)
    assert res.status == "skipped" and not res.passed


@pytest.mark.parametrize("ex_id", ["01.2", "04.3", "05.3"])
def test_hidden_seeds_give_other_discriminating_instances(ex_id):
    ex = get(ex_id)
    book, hidden = ex.case(ex.n - 1, 0), ex.case(ex.n - 1, 987654321)
    assert book.text != hidden.text and hidden.text == ex.case(ex.n - 1, 987654321).text
    assert all(ex.compare(hidden.expected, value) is not None for value, _ in ex.slip_values(hidden))
