"""Placeto's Markov decision process: improve a placement one node at a time.

Problem: an episode starts from a complete placement ``p_0`` and visits every placement unit
once (a node, or a colocation class of a training graph), in topological order of its first
node. At step ``t`` the agent sees the graph with per-node features and picks the device of unit
``t``; the placement becomes ``p_{t+1}``. The objective ``rho(p)`` is the simulated run time
(one sample's makespan, or the steady-state time per sample when ``samples > 1``), multiplied
by ``1 + excess / cap`` when some accelerator's peak memory ``cap`` is exceeded by ``excess``.

Rewards (``reward="step"``): ``r_t = rho(p_t) - rho(p_{t+1})``, so the rewards of an episode
telescope to ``rho(p_0) - rho(p_T)``. With ``reward="end"`` every reward is 0 except the last,
which is that same total: the sum is equal, but the agent no longer learns which step helped.

Node features (`PlacementEnv.features`), each scaled to be of order one on any graph: compute
time on its current device and output transfer time (both over the graph's mean compute time),
is-current, is-visited, start time in the current placement (over the current run time), and
the current device one-hot.

Complexity: one simulation per step that changes the placement, so at most ``T + 1`` per
episode (`Simulator.calls` counts them).

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> env = PlacementEnv(layered(6, seed=0), Cluster(accelerators=2))
>>> rho0 = env.reset()
>>> total = sum(env.step(t % 2)[0] for t in range(env.steps))
>>> abs(total - (rho0 - env.runtime)) < 1e-9
True

Reference: Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms for
Distributed Machine Learning", NeurIPS 2019, section 3.
"""

from __future__ import annotations

import math

import numpy as np

from ..cost import Placement, as_assignment
from ..devices import Cluster
from ..errors import GraphError, UsageError
from ..graph import Graph
from ..sim import SimParams, SimResult, Simulator

BASE_FEATURES = 5  # compute, output, is-current, is-visited, start time; then one-hot device


def returns_to_go(rewards, gamma: float) -> np.ndarray:
    """``G_t = sum_{s >= t} gamma^(s - t) r_s`` for rewards of shape ``(T, B)`` (B episodes):
    what REINFORCE weighs the action at step ``t`` by."""
    R = np.asarray(rewards, dtype=float)
    G = np.zeros_like(R)
    acc = np.zeros(R.shape[1:])
    for t in range(len(R) - 1, -1, -1):
        acc = R[t] + gamma * acc
        G[t] = acc
    return G


def unit_steps(graph: Graph) -> list[np.ndarray]:
    """The nodes of each placement unit, units ordered by their first node in topological order."""
    order = graph.topological_order()
    units = graph.units
    seen: dict[int, int] = {}
    for v in order.tolist():
        seen.setdefault(int(units[v]), len(seen))
    steps: list[list[int]] = [[] for _ in seen]
    for v in order.tolist():
        steps[seen[int(units[v])]].append(v)
    return [np.array(s, dtype=np.int64) for s in steps]


def feature_count(devices: int) -> int:
    return BASE_FEATURES + devices


class PlacementEnv:
    """The MDP on one graph and cluster (see the module docstring).

    ``start``: ``"single"`` (every unit on its first allowed device), ``"random"`` (a random
    allowed device per unit, from ``seed``) or an explicit placement. ``samples > 1`` scores
    placements by their steady-state time per sample instead of one sample's run time.
    """

    def __init__(self, graph: Graph, cluster: Cluster, params: SimParams | None = None, *,
                 reward: str = "step", start: str | Placement = "single", samples: int = 1,
                 seed: int | None = None, simulator: Simulator | None = None):
        if reward not in ("step", "end"):
            raise UsageError(f"reward must be 'step' or 'end', got {reward!r}")
        self.graph, self.cluster = graph, cluster
        self.sim = simulator or Simulator(graph, cluster, params)
        self.reward_mode, self.start, self.samples = reward, start, int(samples)
        self.rng = np.random.default_rng(seed)
        self.unit_nodes = unit_steps(graph)
        allowed = self.sim.allowed()
        self.allowed = np.array([allowed[nodes].all(axis=0) for nodes in self.unit_nodes])  # (T, D)
        empty = np.flatnonzero(~self.allowed.any(axis=1))
        if len(empty):
            v = self.unit_nodes[empty[0]][0]
            raise GraphError(f"node {graph.nodes[v].id}: its colocation class fits on no device")
        self.unit_of = np.empty(graph.n, dtype=np.int64)
        for t, nodes in enumerate(self.unit_nodes):
            self.unit_of[nodes] = t
        finite = np.where(allowed, self.sim.durations, np.inf).min(axis=1)
        self.scale = float(np.mean(finite)) if graph.n else 1.0
        self.scale = self.scale if self.scale > 0 else 1.0
        self.assignment = np.zeros(graph.n, dtype=np.int64)
        self.t = 0
        self.result: SimResult | None = None
        self.runtime = math.nan
        self.initial = math.nan
        self.best = math.nan
        self.best_assignment = self.assignment

    @property
    def steps(self) -> int:
        """Episode length: the number of placement units (= nodes on an inference graph)."""
        return len(self.unit_nodes)

    @property
    def devices(self) -> int:
        return self.cluster.size

    def objective(self, result: SimResult) -> float:
        """rho: run time (or time per sample), penalised by accelerator memory overflow."""
        value = result.makespan if self.samples == 1 else result.per_sample
        cap = self.cluster.memory
        if math.isfinite(cap) and self.cluster.k:
            excess = np.clip(result.peak_memory[: self.cluster.k] - cap, 0.0, None).sum()
            value *= 1.0 + excess / cap
        return float(value)

    def _score(self) -> float:
        self.result = self.sim.run(self.assignment, samples=self.samples, trace=False)
        value = self.objective(self.result)
        if not value >= self.best:  # also true while best is nan
            self.best, self.best_assignment = value, self.assignment.copy()
        return value

    def reset(self, start: str | Placement | None = None) -> float:
        """Start an episode; returns rho(p_0)."""
        start = self.start if start is None else start
        if isinstance(start, str):
            if start == "single":
                dev = self.allowed.argmax(axis=1)
            elif start == "random":
                dev = np.array([self.rng.choice(np.flatnonzero(row)) for row in self.allowed])
            else:
                raise UsageError(f"start must be 'single', 'random' or a placement, got {start!r}")
            a = np.empty(self.graph.n, dtype=np.int64)
            for t, nodes in enumerate(self.unit_nodes):
                a[nodes] = dev[t]
        else:
            a = as_assignment(self.graph, self.cluster, start).copy()
        self.assignment = a
        self.t = 0
        self.best = math.nan
        self.runtime = self.initial = self._score()
        return self.initial

    def step(self, action: int) -> tuple[float, bool]:
        """Place unit ``t`` on device ``action``; returns (reward, done)."""
        if self.t >= self.steps:
            raise UsageError("episode is over: call reset()")
        action = int(action)
        if not (0 <= action < self.devices) or not self.allowed[self.t, action]:
            v = self.unit_nodes[self.t][0]
            raise UsageError(f"device {action} is not allowed for node {self.graph.nodes[v].id}")
        nodes = self.unit_nodes[self.t]
        before = self.runtime
        if np.any(self.assignment[nodes] != action):
            self.assignment[nodes] = action
            self.runtime = self._score()
        self.t += 1
        done = self.t == self.steps
        if self.reward_mode == "step":
            return before - self.runtime, done
        return (self.initial - self.runtime if done else 0.0), done

    def features(self) -> np.ndarray:
        """(n, 5 + D) float32 node features of the current state (see the module docstring)."""
        n, D = self.graph.n, self.devices
        X = np.zeros((n, feature_count(D)), dtype=np.float32)
        a = self.assignment
        X[:, 0] = self.sim.durations[np.arange(n), a] / self.scale
        X[:, 1] = self.sim.transfer_times[np.arange(n), a] / self.scale
        if self.t < self.steps:
            X[self.unit_nodes[self.t], 2] = 1.0
        X[:, 3] = self.unit_of < self.t
        X[:, 4] = self.result.start / max(self.result.makespan, 1e-12)
        X[np.arange(n), BASE_FEATURES + a] = 1.0
        return X
