"""Exercises of chapter 07 (Placeto: returns, advantages, and the simulator's run time).

The references are numpy, so importing this module does not import torch: 07.2 is the
returns-to-go of `devplace_lite.rl.train` (the chapter asserts that the two agree), 07.3 the
lines of `train` that turn a batch of rewards into the weights of the log-probabilities, and
07.4 calls the simulator itself (`devplace_lite.sim.Simulator`).
"""

from __future__ import annotations

import numpy as np

from devplace_lite.cost import max_load
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.rl.env import returns_to_go
from devplace_lite.sim import SimParams, Simulator
from .core import Case, close, register

# -- 07.2  returns-to-go ------------------------------------------------------------------------


_HAND = [[0.5], [0.0], [-0.25], [1.0]]


def _rewards(rng: np.random.Generator, i: int) -> tuple[list, float]:
    if i < 4:  # a hand example, then the discount, one step, and gamma = 0
        return ([[2.0, -1.0]] if i == 2 else _HAND), (1.0, 0.5, 0.9, 0.0)[i]
    T, B = int(rng.integers(2, 16)), int(rng.integers(1, 5))
    gamma = float(rng.choice([1.0, 0.99, 0.9, 0.5]))
    return np.round(rng.normal(0.0, 1.0, size=(T, B)), 2).tolist(), gamma


def _returns_cases(rng: np.random.Generator, i: int) -> Case:
    R, gamma = _rewards(rng, i)
    return Case((np.array(R), gamma), text=f"rewards = np.array({R}); gamma = {gamma}")


def _returns_slips(case: Case) -> list:
    R, gamma = case.args
    T = len(R)
    powers = gamma ** np.arange(T)[:, None]
    return [(np.cumsum(R, axis=0), "that is the sum of the rewards *up to* step t; the return counts those from t on"),
             (np.broadcast_to(R.sum(axis=0), R.shape),
              "every step got the whole episode's total: the return from t leaves out the rewards before t"),
             (returns_to_go(R, 1.0), "that ignores gamma: discount the reward s steps ahead by gamma^(s - t)"),
             (returns_to_go(R * powers, 1.0), "that discounts by gamma^s; the reward at s is worth gamma^(s - t) at t")]


register(id="07.2", name="my_returns", title="returns-to-go of a batch of episodes",
         reference=returns_to_go, cases=_returns_cases, compare=close(rtol=1e-9, atol=1e-12),
         slips=_returns_slips, fixed=4, n=20, forbidden=("devplace_lite.rl.env:returns_to_go", "devplace_lite.rl.train"),
         hint="walk backwards: G[T-1] = r[T-1], then G[t] = r[t] + gamma * G[t+1], for every episode (column) at once")

# -- 07.3  the advantages of one REINFORCE update --------------------------------------------------


def advantages(rewards, rho0, gamma: float) -> np.ndarray:
    """What `train` weighs ``log pi(a_t | s_t)`` by on the first update on a graph.

    Returns over the initial run times, minus the per-step baseline (the mean over the batch's
    episodes at each step), divided by their standard deviation over the whole batch.
    """
    G = returns_to_go(rewards, gamma) / np.asarray(rho0, dtype=float)[None, :]
    adv = G - G.mean(axis=1, keepdims=True)
    return adv / (adv.std() + 1e-8)


def _advantage_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the hand example of 07.2, twice, from two different starting run times
        R, rho0, gamma = [[0.5, 1.0], [0.0, -0.5], [-0.25, 0.0], [1.0, 0.5]], [10.0, 8.0], 1.0
    else:
        T, B = int(rng.integers(2, 13)), int(rng.integers(2, 9))
        rho0 = np.round(rng.uniform(5.0, 50.0, size=B), 1).tolist()
        R = np.round(rng.normal(0.0, 0.05, size=(T, B)) * np.array(rho0), 2).tolist()
        gamma = float(rng.choice([1.0, 1.0, 0.9]))
    return Case((np.array(R), np.array(rho0), gamma),
                text=f"rewards = np.array({R}); rho0 = np.array({rho0}); gamma = {gamma}")


def _advantage_slips(case: Case) -> list:
    R, rho0, gamma = case.args
    G = returns_to_go(R, gamma) / rho0[None, :]
    unscaled = returns_to_go(R, gamma)
    norm = lambda x: x / (x.std() + 1e-8)  # noqa: E731
    return [(G - G.mean(axis=1, keepdims=True), "right up to the last step: divide by the standard deviation "
                                                  "of all the advantages of the batch"),
             (norm(G - G.mean()), "one baseline for all steps: the baseline of step t is the mean return *from "
                                  "step t* over the episodes (a mean over axis 1, per row)"),
             (norm(G - G.mean(axis=0, keepdims=True)), "the baseline averaged over the steps of each episode; "
                                                       "average over the episodes at each step instead"),
             (norm(unscaled - unscaled.mean(axis=1, keepdims=True)),
              "the returns are not divided by each episode's initial run time rho0"),
             ((G - G.mean(axis=1, keepdims=True)) / ((G - G.mean(axis=1, keepdims=True)).std(ddof=1) + 1e-8),
              "that is the sample standard deviation (ddof=1); train uses numpy's default, ddof=0")]


register(id="07.3", name="my_advantages", title="the normalised advantages of one REINFORCE update",
         reference=advantages, cases=_advantage_cases, compare=close(rtol=1e-6, atol=1e-9),
         slips=_advantage_slips, fixed=1, n=20, forbidden=("devplace_lite.rl.train",),
         hint="G = returns-to-go / rho0 (per column); subtract each row's mean (the per-step baseline); "
              "divide everything by the standard deviation of the whole array (+ 1e-8)")

# -- 07.4  one sample's run time in the simulator ----------------------------------------------------


def sim_makespan(graph: Graph, cluster: Cluster, assignment) -> float:
    """One sample's run time under the default `SimParams` (links beside the devices)."""
    return Simulator(graph, cluster).runtime(np.asarray(assignment))


def _makespan_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the simulator's docstring example
        g = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=2)], [("a", "b")])
        text = 'graph = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=2)], [("a", "b")])'
        k, a = 2, np.array([0, 1])
    elif i == 1:  # a fork whose two consumers sit on two other devices: the sender's link queues
        g = Graph([Node("a", p_acc=1, comm=2), Node("b", p_acc=1), Node("c", p_acc=1)], [("a", "b"), ("a", "c")])
        text = ('graph = Graph([Node("a", p_acc=1, comm=2), Node("b", p_acc=1), Node("c", p_acc=1)], '
                '[("a", "b"), ("a", "c")])')
        k, a = 3, np.array([0, 1, 2])
    else:
        family = str(rng.choice(["layered", "series_parallel", "skip_chain", "cells", "random"]))
        n, seed, k = int(rng.integers(4, 13)), int(rng.integers(0, 1000)), int(rng.integers(2, 5) if i > 2 else 1)
        g = generate(family, n, seed=seed)
        text = f"graph = generate({family!r}, {n}, seed={seed})"
        a = rng.integers(0, k, size=g.n)
    return Case((g, Cluster(accelerators=k), a),
                text=f"{text}; cluster = Cluster(accelerators={k}); assignment = np.array({a.tolist()})")


def _makespan_slips(case: Case) -> list:
    graph, cluster, a = case.args
    return [(max_load(graph, cluster, a), "that is the cost model's max-load (time per sample of a pipeline in "
                                           "steady state), not one sample's run time"),
             (Simulator(graph, cluster, SimParams.calls()).runtime(a),
              "that charges transfers to the devices at both ends (SimParams.calls()); here each device's link "
              "sends while the device computes, and the receiver pays nothing"),
             (float(np.bincount(a, weights=graph.p_acc).max()), "that is the busiest device's compute alone: a node "
                                                                "also waits for its inputs")]


register(id="07.4", name="my_makespan", title="one sample's run time in Placeto's simulator",
         reference=sim_makespan, cases=_makespan_cases, compare=close(rtol=1e-9, atol=1e-9),
         slips=_makespan_slips, fixed=3, n=20, forbidden=("devplace_lite.sim", "devplace_lite.rl.compare"),
         hint="simulate events in time order; a device (or link) that is free starts the task that became ready "
              "first, ties by topological position (then destination); handle every event of one instant before "
              "any device picks its next task; one transfer per (producer, other device with a consumer)")
