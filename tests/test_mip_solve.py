"""The integer-program layer's HiGHS child process (`devplace_lite.mip.highs_child`): the same
answers as in-process, and a hard deadline that keeps what the child last reported."""

import sys
import textwrap

import numpy as np
import pytest

from devplace_lite.bounds.stages import stage_mip
from devplace_lite.devices import Cluster
from devplace_lite.generators import layered
from devplace_lite.mip import solve as S


def _cover(n: int = 30) -> S.LinearModel:
    """min sum c x over binaries with x[i] + x[i+1] >= 1: optimum 52 for these costs."""
    m = S.LinearModel()
    x = m.add_vars(n, integer=True, ub=1.0)
    m.obj[x] = np.arange(n) % 7 + 1.0
    m.add_rows(np.stack([x[:-1], x[1:]], 1), [1.0, 1.0], lo=1.0)
    return m


def _fake_child(body: str) -> list[str]:
    """A child command line running ``body`` with `send` to the message pipe at hand."""
    prelude = ("import os, sys, time\nfrom devplace_lite.mip.highs_child import send\n"
               "out = os.fdopen(os.dup(1), 'wb')\n")
    return [sys.executable, "-c", prelude + textwrap.dedent(body)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_child_answers_as_highs_in_process(monkeypatch, seed):
    g, c = layered(40, seed=seed), Cluster(accelerators=3)
    monkeypatch.setattr(S, "ISOLATE_NNZ", 10**12)
    here = stage_mip(g, c, time_limit=30)
    monkeypatch.setattr(S, "ISOLATE_NNZ", 0)
    there = stage_mip(g, c, time_limit=30)
    assert here.status == there.status == "optimal"
    assert there.objective == pytest.approx(here.objective, rel=1e-9)
    assert there.bound == pytest.approx(here.bound, rel=1e-6)


def test_a_warm_start_reaches_the_child():
    m = _cover()
    start = np.ones(m.n_vars)  # feasible, cost 118
    s = S._run_highs_child(m, 10.0, 0.0, 0, 1, start, False)
    assert s.start_accepted is True and s.status == "optimal" and s.objective == 52.0
    assert m.violation(s.values) <= 1e-9


def test_a_child_that_never_answers_is_killed_at_the_deadline():
    # not killed, it would end after 60 s with no answer: a RuntimeError, not a time_limit
    s = S._run_highs_child(_cover(), 0.5, 0.0, 0, 1, None, False,
                           command=_fake_child("time.sleep(60)"))
    assert (s.status, s.stop, s.values, s.objective, s.bound) == ("time_limit", "time", None, None, None)


def test_a_killed_child_leaves_its_last_incumbent_and_bound():
    m = _cover()
    ones = [1.0] * m.n_vars
    s = S._run_highs_child(m, 1.0, 0.0, 0, 1, None, False, command=_fake_child(f"""
        send(out, ("incumbent", 118.0, {ones}))
        send(out, ("bound", 118.0, 40.0))
        send(out, ("bound", 118.0, 45.5))
        time.sleep(60)
        """))
    assert s.status == "time_limit" and s.objective == 118.0 and s.bound == 45.5
    assert s.values.tolist() == ones


def test_an_incumbent_that_is_not_a_point_of_the_model_is_dropped():
    m = _cover()
    s = S._run_highs_child(m, 1.0, 0.0, 0, 1, None, False, command=_fake_child(f"""
        send(out, ("incumbent", 0.0, {[0.0] * m.n_vars}))
        send(out, ("bound", 0.0, 12.0))
        time.sleep(60)
        """))
    assert s.values is None and s.objective is None and s.bound == 12.0


def test_a_child_that_dies_says_so_in_one_line():
    with pytest.raises(RuntimeError, match="exit code 3 and no answer: boom"):
        S._run_highs_child(_cover(), 10.0, 0.0, 0, 1, None, False,
                           command=_fake_child("sys.stderr.write('boom\\n'); sys.exit(3)"))
