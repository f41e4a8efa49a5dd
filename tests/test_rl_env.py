"""Placeto's MDP (numpy only): episode length, reward telescoping, features, simulator yardsticks."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.devices import Cluster
from devplace_lite.generators import generate, layered
from devplace_lite.graph import Graph, Node
from devplace_lite.rl.compare import exhaustive_search, random_search, registry_baselines
from devplace_lite.rl.env import BASE_FEATURES, PlacementEnv
from devplace_lite.sim import SimParams, Simulator
from devplace_lite.errors import UsageError


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from(["layered", "series_parallel", "cells", "skip_chain"]), st.integers(3, 16),
       st.integers(0, 1000), st.sampled_from(["step", "end"]), st.sampled_from(["single", "random"]),
       st.integers(1, 2))
def test_episode_length_and_telescoping(family, n, seed, reward, start, samples):
    g = generate(family, n, seed=seed)
    env = PlacementEnv(g, Cluster(accelerators=3), reward=reward, start=start, samples=samples, seed=seed)
    rng = np.random.default_rng(seed)
    rho0 = env.reset()
    rewards, done, steps = [], False, 0
    while not done:
        r, done = env.step(int(rng.integers(3)))
        rewards.append(r)
        steps += 1
    assert steps == env.steps == g.n
    assert sum(rewards) == pytest.approx(rho0 - env.runtime, abs=1e-9)
    if reward == "end":
        assert all(r == 0 for r in rewards[:-1])
    assert env.best <= min(rho0, env.runtime) + 1e-12
    sim_value = env.sim.run(env.assignment, samples=samples)
    assert env.runtime == pytest.approx(sim_value.makespan if samples == 1 else sim_value.per_sample)
    with pytest.raises(UsageError, match="episode is over"):
        env.step(0)


def test_training_graph_visits_each_colocation_class_once():
    g = generate("layered", 8, seed=2, training=True)
    env = PlacementEnv(g, Cluster(accelerators=2))
    env.reset()
    assert env.steps == g.n // 2
    for t in range(env.steps):
        env.step(t % 2)
    units = g.units
    for u in set(units.tolist()):  # a forward op and its gradient end on one device
        assert len(set(env.assignment[units == u].tolist())) == 1


def test_features_describe_the_state():
    g = layered(10, seed=3)
    env = PlacementEnv(g, Cluster(accelerators=3))
    env.reset()
    for t in range(4):
        env.step(t % 3)
    X = env.features()
    assert X.shape == (g.n, BASE_FEATURES + 3) and X.dtype == np.float32
    assert np.all(X[:, BASE_FEATURES:].sum(axis=1) == 1)
    assert np.array_equal(X[:, BASE_FEATURES:].argmax(axis=1), env.assignment)
    assert X[:, 2].sum() == 1 and X[env.unit_nodes[4][0], 2] == 1
    assert X[:, 3].sum() == 4
    assert np.all((X[:, 4] >= 0) & (X[:, 4] < 1))  # start times over the run time
    assert X[:, 0].mean() == pytest.approx(1.0, rel=1e-6)  # compute over the mean compute time


def test_memory_overflow_is_penalised():
    g = Graph([Node("a", p_acc=1, memory=60), Node("b", p_acc=1, memory=60)], [])
    roomy = PlacementEnv(g, Cluster(accelerators=2))
    tight = PlacementEnv(g, Cluster(accelerators=2, memory=100))
    assert roomy.reset() == 2 and tight.reset() == 2 * (1 + 20 / 100)
    assert tight.step(1)[0] == pytest.approx(2 * 1.2 - 1)  # splitting fixes memory and halves the time


def test_forbidden_devices():
    g = Graph([Node("a", p_acc=1, p_cpu=3), Node("b", p_acc=1, supported=False, p_cpu=2)], [("a", "b")])
    env = PlacementEnv(g, Cluster(accelerators=1, cpus=1))
    env.reset()
    assert env.assignment.tolist() == [0, 1]  # single start: each unit's first allowed device
    env.step(1)
    with pytest.raises(UsageError, match="not allowed for node b"):
        env.step(0)


def test_env_does_not_import_torch():
    import subprocess

    code = "import sys, devplace_lite.rl.env, devplace_lite.rl.compare, devplace_lite.sim; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exhaustive_is_the_simulator_optimum(seed):
    g = layered(6, seed=seed)
    c = Cluster(accelerators=3)
    sim = Simulator(g, c)
    best = exhaustive_search(sim)
    # symmetry breaking tried about a sixth of the 3^6 placements and missed nothing
    assert best.extra["symmetric"] and best.sim_calls < 3 ** 6 / 4
    brute = min(sim.runtime(np.array(np.unravel_index(i, (3,) * g.n))) for i in range(3 ** g.n))
    assert best.runtime == pytest.approx(brute)
    assert best.runtime == pytest.approx(sim.runtime(best.assignment))
    assert random_search(sim, samples=30, seed=seed).runtime >= best.runtime - 1e-12
    for scored in registry_baselines(sim, ("single", "greedy", "time")).values():
        assert scored.sim_calls == 1 and scored.runtime >= best.runtime - 1e-12


def test_heterogeneous_devices_are_not_collapsed():
    g = layered(5, seed=1)
    fast = SimParams(speed=(1.0, 3.0))
    best = exhaustive_search(Simulator(g, Cluster(accelerators=2), fast))
    assert not best.extra["symmetric"] and best.sim_calls == 2 ** g.n
    assert best.runtime < exhaustive_search(Simulator(g, Cluster(accelerators=2))).runtime


def test_unregistered_method_is_reported_not_raised():
    sim = Simulator(layered(4, seed=0), Cluster(accelerators=2))
    out = registry_baselines(sim, ("no-such-method",))
    assert out["no-such-method"].status == "unavailable" and math.isnan(out["no-such-method"].runtime)
    assert "unknown method" in out["no-such-method"].extra["reason"]
