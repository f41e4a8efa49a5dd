"""The runtime re-balancer: never a worse measured bottleneck, always a pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.cost import device_loads, evaluate
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import GraphError
from devplace_lite.throughput.heuristics import etf, kl
from devplace_lite.throughput.rebalance import measure_with, perturbed, rebalance
from devplace_lite.errors import UsageError


def _check_run(g, c, out):
    h = out.history
    assert all(b <= a for a, b in zip(h, h[1:])), h  # the measured bottleneck never rises
    assert h[-1] <= h[0]
    ev = evaluate(g, c, out.assignment)
    assert ev.split == "chain" and ev.feasible, ev.violations
    assert len(out.rounds) <= 1 + 40


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(20, 120), st.integers(0, 10_000), st.booleans(),
       st.integers(2, 4), st.floats(0.0, 0.6), st.integers(1, 30))
def test_never_worse_under_simulated_measurements(family, n, seed, training, k, sigma, window):
    g, c = generate(family, n, seed=seed, training=training), Cluster(accelerators=k)
    start = kl(g, c).assignment
    measure = measure_with(perturbed(g, sigma, seed=seed + 1, window=window), c)
    out = rebalance(g, c, start, measure, rounds=40)
    _check_run(g, c, out)
    # the record is the truth: the final placement measures what the last round says
    assert np.isclose(measure(out.assignment).max(), out.history[-1])


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(20, 80), st.integers(0, 10_000), st.integers(0, 10_000))
def test_never_worse_even_when_measurements_are_noise(family, n, seed, noise_seed):
    """Measurements that do not even repeat: the rule still keeps only non-worse rounds."""
    g, c = generate(family, n, seed=seed, training=True), Cluster(accelerators=3)
    rng = np.random.default_rng(noise_seed)

    def measure(a):
        return np.sum(device_loads(g, c, a), axis=0) * rng.uniform(0.5, 1.5, size=c.size)

    out = rebalance(g, c, kl(g, c).assignment, measure, rounds=40)
    _check_run(g, c, out)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(3, 8), st.integers(0, 10_000), st.booleans())
def test_never_below_the_re_solved_optimum(family, n, seed, training):
    g, c = generate(family, n, seed=seed, training=training), Cluster(accelerators=2)
    truth = perturbed(g, 0.5, seed=seed)
    out = rebalance(g, c, kl(g, c).assignment, measure_with(truth, c), rounds=20)
    best = exhaustive(truth, c, kind="chain").objective
    assert out.history[-1] >= best - 1e-9 * max(1.0, best)


def test_recovers_from_a_skewed_model():
    """Model says the second half of a chain is cheap; it is not. Rebalancing must help."""
    g, c = generate("skip_chain", 200, seed=3, training=True), Cluster(accelerators=4)
    truth = perturbed(g, 0.4, seed=7, window=60)
    measure = measure_with(truth, c)
    out = rebalance(g, c, kl(g, c).assignment, measure, rounds=30)
    assert out.history[-1] < out.history[0]
    assert out.accepted >= 1


def test_perturbation():
    g = generate("layered", 50, seed=1)
    assert np.array_equal(perturbed(g, 0.0).p_acc, g.p_acc)
    t = perturbed(g, 0.3, seed=2, window=10)
    assert np.array_equal(t.comm, g.comm) and not np.array_equal(t.p_acc, g.p_acc)
    with pytest.raises(UsageError, match="sigma"):
        perturbed(g, -1.0)
    with pytest.raises(UsageError, match="window"):
        perturbed(g, 0.1, window=0)


def test_needs_a_pipeline():
    g, c = generate("layered", 40, seed=0), Cluster(accelerators=3)
    a = etf(g, c).assignment
    if evaluate(g, c, a).split == "chain":  # ETF happened to give a chain: break it by hand
        a = np.arange(g.n) % 3
    with pytest.raises(GraphError, match="chain"):
        rebalance(g, c, a, measure_with(g, c))
