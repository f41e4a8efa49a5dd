"""The integer-program layer: the HiGHS child process (`devplace_lite.mip.highs_child`: the same
answers as in-process, a hard deadline that keeps what the child last reported), and models
whose coefficients are far from 1 (rescaled, or refused in one line)."""

import sys
import textwrap

import numpy as np
import pytest

from devplace_lite.throughput.bounds.stages import stage_mip
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
    """A child command line running ``body`` with ``send`` to the message pipe at hand.

    ``send`` writes `highs_child.send`'s framing (one pickle, flushed) without importing the
    package, and ``-I`` skips site-packages: the child talks within a fraction of a second even
    on a loaded machine (importing devplace_lite there took over 1.5 s under load 13, past the
    deadline of a test that expected the messages)."""
    prelude = ("import os, pickle, sys, time\n"
               "def send(out, message):\n"
               "    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)\n"
               "    out.flush()\n"
               "out = os.fdopen(os.dup(1), 'wb')\n")
    return [sys.executable, "-I", "-c", prelude + textwrap.dedent(body)]


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
    s = S._run_highs_child(m, 5.0, 0.0, 0, 1, None, False, command=_fake_child(f"""
        send(out, ("incumbent", 118.0, {ones}))
        send(out, ("bound", 118.0, 40.0))
        send(out, ("bound", 118.0, 45.5))
        time.sleep(60)
        """))
    assert s.status == "time_limit" and s.objective == 118.0 and s.bound == 45.5
    assert s.values.tolist() == ones


def test_an_incumbent_that_is_not_a_point_of_the_model_is_dropped():
    m = _cover()
    s = S._run_highs_child(m, 5.0, 0.0, 0, 1, None, False, command=_fake_child(f"""
        send(out, ("incumbent", 0.0, {[0.0] * m.n_vars}))
        send(out, ("bound", 0.0, 12.0))
        time.sleep(60)
        """))
    assert s.values is None and s.objective is None and s.bound == 12.0


def test_a_child_that_dies_says_so_in_one_line():
    with pytest.raises(RuntimeError, match="exit code 3 and no answer: boom"):
        S._run_highs_child(_cover(), 10.0, 0.0, 0, 1, None, False,
                           command=_fake_child("sys.stderr.write('boom\\n'); sys.exit(3)"))


# -- coefficients far from 1: rescaled, or refused in one line ----------------------------------------
def _times_scaled(tmp_path, factor: float, every: int = 1):
    """``layered(12, seed=1)`` with the times of every ``every``-th node multiplied by ``factor``."""
    import json

    from devplace_lite.io import load_graph, save_graph

    p = tmp_path / f"g{factor:g}-{every}.json"
    save_graph(layered(12, seed=1), p)
    doc = json.loads(p.read_text())
    for i, node in enumerate(doc["nodes"]):
        if i % every == 0:
            for key in ("p_acc", "p_cpu", "comm"):
                node[key] *= factor
    p.write_text(json.dumps(doc))
    return p, load_graph(p)


@pytest.mark.parametrize("solver", S.SOLVERS)
@pytest.mark.parametrize("factor", [1e9, 1e13, 1e290])  # the loader refuses totals past 1e300
def test_times_in_any_unit_give_the_same_split(tmp_path, solver, factor):
    """Times of 1e9 made HiGHS call a split of 70x the optimum optimal, SCIP one of 22x; from
    1e15 on both errored. The model is rescaled, so the optimum scales with the times."""
    from devplace_lite.throughput.ip import throughput_ip

    _, base = _times_scaled(tmp_path, 1.0)
    _, big = _times_scaled(tmp_path, factor)
    c = Cluster(3, 1)
    want = throughput_ip(base, c, "noncontiguous", solver=solver, warm_start=None)
    got = throughput_ip(big, c, "noncontiguous", solver=solver, warm_start=None)
    assert want.status == got.status == "optimal"
    assert got.objective == pytest.approx(want.objective * factor, rel=1e-6)
    assert got.bound == pytest.approx(want.bound * factor, rel=1e-6)


def test_scaling_keeps_a_model_and_its_solution():
    m = S.LinearModel()
    x = m.add_vars(3, integer=True, ub=1.0)
    t = m.add_vars(1)[0]
    m.obj[t] = 1.0
    m.add_row([(x[0], 1.0), (x[1], 1.0), (x[2], 1.0)], lo=1.0, hi=1.0)
    for i, p in enumerate([3e12, 5e12, 4e12]):
        m.add_row([(x[i], p), (t, -1.0)], hi=0.0)
    scaled, col, obj = m.scaled()
    assert scaled is not m and scaled.magnitude() <= 2.0
    for solver in S.SOLVERS:
        s = S.solve(m, solver)
        assert s.status == "optimal" and s.objective == pytest.approx(3e12) and s.bound == pytest.approx(3e12)
        assert s.values[t] == pytest.approx(3e12) and m.violation(s.values) <= 1e-9
    assert S.LinearModel().scaled()[0].n_vars == 0 and _cover().scaled()[0] is not None


def test_times_too_far_apart_are_refused_in_one_line(tmp_path, capsys):
    """A few nodes 1e16 times slower than the rest: after scaling the small times fall below
    what HiGHS keeps (a stage relaxation then proved a bound above the optimum). The IP
    methods refuse; a heuristic's certifying bound keeps the bounds that need no IP."""
    from devplace_lite.cli import main
    from devplace_lite.errors import LimitError
    from devplace_lite.throughput.ip import throughput_ip

    p, g = _times_scaled(tmp_path, 1e16, every=4)
    with pytest.raises(LimitError, match="too far apart"):
        throughput_ip(g, Cluster(3, 1), "noncontiguous")
    assert main(["partition", str(p), "--method", "ip", "-k", "3", "--cpus", "1", "-q"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "too far apart" in err
    assert main(["partition", str(p), "--method", "time", "-k", "3", "--cpus", "1", "-q", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and '"bound"' in out


def test_huge_times_reach_no_solver_unscaled(tmp_path, capsys):
    """Times of 1e20 through `bound --method best` and `latency --method ip`: answers, not SCIP's
    or HiGHS's errors (tracebacks before)."""
    from devplace_lite.cli import main

    p, _ = _times_scaled(tmp_path, 1e20)
    for argv in (["bound", str(p), "-k", "3", "--cpus", "1"], ["latency", str(p), "--method", "ip", "-k", "3"],
                 ["partition", str(p), "--method", "ip-contig", "-k", "3"]):
        assert main(argv + ["-q", "--json", "--time-limit", "20"]) == 0, argv
        out, err = capsys.readouterr()
        assert err == "" and ("e+20" in out or "e+21" in out), (argv, out, err)
