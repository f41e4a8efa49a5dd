"""The discrete-event simulator: hand-computed cases, and agreement with the cost model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.throughput.baselines import balance_by_time
from devplace_lite.cost import device_loads, max_load
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, GraphError, Node
from devplace_lite.sim import SimParams, Simulator, simulate
from devplace_lite.errors import UsageError

TWO = Cluster(accelerators=2)


def chain3() -> Graph:
    return Graph([Node("a", p_acc=1, comm=0.5, out_bytes=10, memory=100),
                  Node("b", p_acc=2, comm=0.5, out_bytes=20, memory=100),
                  Node("c", p_acc=3, comm=0.5, out_bytes=30, memory=100)], [("a", "b"), ("b", "c")])


def fork() -> Graph:
    return Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=2), Node("c", p_acc=2)],
                 [("a", "b"), ("a", "c")])


def test_chain_on_one_device_runs_back_to_back():
    r = simulate(chain3(), TWO, [0, 0, 0])
    assert r.start.tolist() == [0, 1, 3]
    assert r.finish.tolist() == [1, 3, 6]
    assert r.makespan == 6 == max_load(chain3(), TWO, [0, 0, 0])
    assert r.transfers == []


def test_chain_memory_peak_counts_live_outputs():
    # a's output dies when b finishes; c starts while b's output lives: 20 + 30 at the peak
    r = simulate(chain3(), TWO, [0, 0, 0])
    assert r.peak_memory.tolist() == [300 + 50, 0]


def test_fork_with_overlap_sends_on_the_link():
    # a: 0-1 on acc0; b: 1-3 on acc0; a's output on acc0's link 1-1.5; c on acc1 1.5-3.5
    r = simulate(fork(), TWO, [0, 0, 1])
    assert r.finish.tolist() == [1, 3, 3.5]
    assert r.transfers == [(0, 0, 1, 1.0, 1.5)]
    assert r.link_busy.tolist() == [0.5, 0]
    assert r.makespan == 3.5


def test_fork_without_overlap_charges_both_ends():
    # acc0: a 0-1, send a 1-1.5 (a precedes b in topological order), b 1.5-3.5
    # acc1: receive a 1.5-2, c 2-4
    g = fork()
    r = simulate(g, TWO, [0, 0, 1], SimParams.calls())
    assert r.finish.tolist() == [1, 3.5, 4]
    assert r.makespan == 4
    compute, comm = device_loads(g, TWO, np.array([0, 0, 1]))
    assert r.busy.tolist() == (compute + comm).tolist() == [3.5, 2.5]


def test_transfer_bandwidth_latency_speed_and_overhead():
    g = Graph([Node("a", p_acc=1, out_bytes=1e6), Node("b", p_acc=1)], [("a", "b")])
    # 1e6 bytes at 1e9 bytes/s = 1 ms, plus 0.2 ms latency on the sender's link
    r = simulate(g, TWO, [0, 1], SimParams(bandwidth=1e9, latency=0.2))
    assert r.makespan == pytest.approx(1 + 1.2 + 1)
    # acc1 twice as fast, 0.1 ms launch overhead per op
    r = simulate(g, TWO, [0, 1], SimParams(bandwidth=1e9, latency=0.2, speed=(1.0, 2.0), overhead=0.1))
    assert r.makespan == pytest.approx(1.1 + 1.2 + 0.6)


def test_link_is_a_queue():
    # two producers on acc0 feed c on acc1; the second transfer waits for the first
    g = Graph([Node("a", p_acc=1, comm=1), Node("b", p_acc=1, comm=1), Node("c", p_acc=1)],
              [("a", "c"), ("b", "c")])
    r = simulate(g, TWO, [0, 0, 1])
    assert [t[3:] for t in r.transfers] == [(1.0, 2.0), (2.0, 3.0)]
    assert r.makespan == 4


def test_cpu_to_cpu_is_free_and_cpu_times_are_used():
    g = Graph([Node("a", p_acc=1, p_cpu=4, comm=9), Node("b", p_acc=1, p_cpu=5)], [("a", "b")])
    r = simulate(g, Cluster(accelerators=1, cpus=2), [1, 2])
    assert r.makespan == 9 and r.transfers == []


def test_pipelined_chain_matches_the_cost_model():
    # two stages of a path: loads 1.5 and 3.5; one sample takes their sum, a stream max-load
    g = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=3)], [("a", "b")])
    sim = Simulator(g, TWO, SimParams.calls())
    assert sim.run([0, 1]).makespan == 5
    r = sim.run([0, 1], samples=4)
    assert r.makespan == 5 + 3 * 3.5
    assert r.per_sample == 3.5 == max_load(g, TWO, [0, 1])
    assert sim.run([0, 1], samples=4, window=1).makespan == 4 * 5
    assert sim.calls == 3


@pytest.mark.parametrize("family", ["layered", "series_parallel", "cells", "skip_chain"])
@pytest.mark.parametrize("seed", [0, 1])
def test_steady_state_of_chain_splits_is_max_load(family, seed):
    g = generate(family, 25, seed=seed)
    c = Cluster(accelerators=3)
    a = balance_by_time(g, c).assignment
    r = Simulator(g, c, SimParams.calls()).run(a, samples=40)
    assert r.per_sample == pytest.approx(max_load(g, c, a), rel=1e-9)
    compute, comm = device_loads(g, c, a)
    # one sample: each device still does all its work, so at most the sum of the loads
    assert Simulator(g, c, SimParams.calls()).runtime(a) <= (compute + comm).sum() + 1e-9


@st.composite
def placed(draw):
    family = draw(st.sampled_from(["layered", "series_parallel", "cells", "skip_chain", "random"]))
    g = generate(family, draw(st.integers(3, 18)), seed=draw(st.integers(0, 10_000)),
                 training=draw(st.booleans()))
    c = Cluster(accelerators=draw(st.integers(1, 3)), cpus=draw(st.integers(0, 2)))
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    a = rng.integers(0, c.size, size=g.n)
    return g, c, a


@settings(max_examples=40, deadline=None, derandomize=True)
@given(placed(), st.integers(1, 4))
def test_busy_time_per_sample_is_the_analytical_load(case, samples):
    g, c, a = case
    r = Simulator(g, c, SimParams.calls()).run(a, samples=samples)
    compute, comm = device_loads(g, c, a)
    assert np.allclose(r.busy / samples, compute + comm)
    # no device does two things at once, so the stream lasts at least samples x max-load
    assert r.makespan >= samples * max_load(g, c, a) - 1e-9


@settings(max_examples=40, deadline=None, derandomize=True)
@given(placed(), st.booleans())
def test_schedule_respects_dependencies_and_devices(case, overlap):
    g, c, a = case
    sim = Simulator(g, c, SimParams(overlap=overlap, latency=0.05, overhead=0.01))
    r = sim.run(a)
    dur = sim.durations[np.arange(g.n), a]
    assert np.allclose(r.finish - r.start, dur)
    for u, w in zip(g.src, g.dst):
        assert r.start[w] >= r.finish[u] - 1e-9
    for d in range(c.size):  # the compute queue runs one op at a time
        on = np.flatnonzero(a == d)
        spans = sorted(zip(r.start[on], r.finish[on]))
        assert all(s1 >= f0 - 1e-9 for (_, f0), (s1, _) in zip(spans, spans[1:]))
    assert r.makespan == pytest.approx(r.finish.max())
    # on one device the run time is the device's total work
    assert sim.runtime(np.zeros(g.n, dtype=np.int64)) == pytest.approx(sim.durations[:, 0].sum())


def test_one_device_equals_max_load():
    g = generate("layered", 30, seed=4)
    c = Cluster(accelerators=4)
    zero = np.zeros(g.n, dtype=np.int64)
    assert simulate(g, c, zero).makespan == pytest.approx(max_load(g, c, zero))


def test_bad_inputs_are_one_line_errors():
    g = Graph([Node("a", p_acc=1, supported=False, p_cpu=2), Node("b", p_acc=1)], [("a", "b")])
    c = Cluster(accelerators=1, cpus=1)
    with pytest.raises(GraphError, match="node a cannot run on acc0"):
        simulate(g, c, [0, 0])
    with pytest.raises(UsageError, match="speed"):
        Simulator(g, c, SimParams(speed=(1.0, 2.0, 3.0)))
    with pytest.raises(UsageError, match="bandwidth"):
        Simulator(g, c, SimParams(bandwidth=0.0))
    with pytest.raises(UsageError, match="samples"):
        simulate(g, c, [1, 0], samples=0)
    assert math.isfinite(simulate(g, c, [1, 0]).makespan)
