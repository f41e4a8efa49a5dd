"""Training Placeto with REINFORCE, checkpoints, and placing new graphs with a trained policy.

Problem: find policy weights ``theta`` that maximise the expected improvement of the simulated
run time over the episodes of the MDP in `devplace_lite.rl.env`, on a family of graphs, so that
the policy places graphs of that family it has never seen.

Algorithm (REINFORCE, Williams 1992, as in Addanki et al. 2019): for each update draw one
training graph, run ``batch`` episodes on it in lockstep, and take a gradient step on

    loss = - mean_{episodes, t} (G_t - b_t) log pi(a_t | s_t) - beta * mean H(pi(. | s_t))

where ``G_t`` is the return from step ``t`` (the rewards from ``t`` on, over ``rho(p_0)`` so
that graphs of every size weigh alike), ``b_t`` the per-step baseline: the mean return at step
``t`` over the recent episodes on the same graph (this batch included), and ``beta`` the
entropy bonus. The advantages ``G_t - b_t`` are divided by their standard deviation in the
batch, gradients are clipped, and the learning rate and ``beta`` fall linearly to a tenth over
training (explore early, settle late; without the decay, longer runs were unstable).

Everything is seeded (`numpy`, `torch.manual_seed`), torch runs on ``threads`` CPU threads, and a
tqdm bar shows progress. Cost: ``episodes * (steps + 1)`` simulator calls at most, one batched
forward pass per step of a batch and one backward pass per update.

Reference: R. J. Williams, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning", Machine Learning 1992; Addanki et al., NeurIPS 2019.

Example
-------
>>> cfg = TrainConfig(family="layered", sizes=(6, 8), graphs=4, accelerators=2, episodes=16,
...                   batch=4, hidden=8, progress=False)
>>> model = train(cfg)
>>> len(model.history["ratio"]) == 16 // 4
True
"""

from __future__ import annotations

import io
import math
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..cost import Placement
from ..devices import Cluster
from ..files import read_input, write_atomic
from ..generators import FAMILIES, generate
from ..errors import ClusterError, GraphError, UsageError
from ..graph import Graph
from ..sim import SimParams, Simulator
from .env import PlacementEnv, feature_count, returns_to_go
from .policy import GraphTensors, Placer

CHECKPOINT_FORMAT = "devplace-placeto"
CHECKPOINT_VERSION = 1
HELD_OUT_SEED = 10_000  # held-out graphs: generator seeds 10_000_000 + i; training runs use seeds below 10_000


@dataclass
class TrainConfig:
    """Everything a training run depends on (saved in the checkpoint)."""

    family: str = "layered"
    sizes: tuple[int, int] = (8, 24)      # node counts drawn uniformly from this range
    graphs: int = 32                      # training graphs (seeds seed*1000 + 0..graphs-1)
    accelerators: int = 3
    cpus: int = 0
    params: dict = field(default_factory=lambda: SimParams().to_dict())
    episodes: int = 2000
    batch: int = 8                        # episodes per update, run in lockstep on one graph
    lr: float = 3e-3
    entropy: float = 0.02
    hidden: int = 32
    message_passing: bool = True
    device_head: bool = True
    reward: str = "step"
    start: str = "single"
    samples: int = 1
    baseline_window: int = 32             # recent episodes per graph averaged by the baseline
    normalize: bool = True                # divide advantages by their batch standard deviation
    discount: float = 1.0                 # gamma of the returns-to-go
    clip: float = 1.0                     # gradient norm clipping
    seed: int = 0
    threads: int = 1
    progress: bool = True

    def sim_params(self) -> SimParams:
        p = dict(self.params)
        for key in ("speed", "bandwidth", "latency"):
            if isinstance(p.get(key), list):
                p[key] = tuple(p[key])
        return SimParams(**p)

    def cluster(self) -> Cluster:
        return Cluster(accelerators=self.accelerators, cpus=self.cpus)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["sizes"] = list(self.sizes)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        out = cls(**{k: v for k, v in d.items() if k in known})
        out.sizes = tuple(out.sizes)
        return out


def family_graphs(family: str, sizes: Sequence[int], count: int, seed: int) -> list[Graph]:
    """``count`` graphs of a generator family, sizes uniform in ``sizes``, from seed ``seed``.

    Graph ``i`` gets generator seed ``seed * 1000 + i`` (``count <= 1000``); `held_out` uses
    ``seed = HELD_OUT_SEED``, so it never shares a graph with a training run seeded below that.
    """
    if family not in FAMILIES:
        raise UsageError(f"unknown graph family {family!r}; known: {', '.join(FAMILIES)}")
    lo, hi = int(sizes[0]), int(sizes[-1])
    if not 2 <= lo <= hi:
        raise UsageError(f"graph sizes must satisfy 2 <= min <= max, got {lo}..{hi}")
    if not 1 <= count <= 1000:
        raise UsageError(f"the number of graphs must be 1..1000, got {count}")
    rng = np.random.default_rng(seed)
    return [generate(family, int(rng.integers(lo, hi + 1)), seed=seed * 1000 + i) for i in range(count)]


def held_out(family: str, sizes: Sequence[int], count: int) -> list[Graph]:
    """Graphs of the family never seen in training (generator seeds ``HELD_OUT_SEED * 1000 + i``)."""
    return family_graphs(family, sizes, count, HELD_OUT_SEED)


@dataclass
class Model:
    """A policy with the configuration it was trained under and its training history."""

    net: Placer
    config: TrainConfig
    history: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0        # wall time of training
    cpu_seconds: float = 0.0    # CPU time of the training process (the honest figure on a shared machine)
    sim_calls: int = 0

    def save(self, path: str | Path) -> None:
        """Write a checkpoint atomically (a torch zip: weights, config, history), creating its
        folder; see `devplace_lite.files.write_atomic`."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        obj = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "config": self.config.to_dict(),
               "state_dict": self.net.state_dict(), "history": self.history,
               "seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "sim_calls": self.sim_calls,
               "torch": str(torch.__version__)}
        write_atomic(p, lambda f: torch.save(obj, f))


def load(path: str | Path) -> Model:
    """Read a checkpoint written by `Model.save` (weights only: nothing is executed)."""
    if not Path(path).exists():
        raise GraphError(f"checkpoint {path} does not exist")
    data = read_input(path)  # a regular file of bounded size, never a FIFO or a device
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds on a file that is not a checkpoint
        raise GraphError(f"{path}: not a placeto checkpoint ({type(e).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
        raise GraphError(f"{path}: not a placeto checkpoint (no '{CHECKPOINT_FORMAT}' format tag)")
    if obj.get("version") != CHECKPOINT_VERSION:
        raise GraphError(f"{path}: checkpoint version {obj.get('version')} is not {CHECKPOINT_VERSION}")
    cfg = TrainConfig.from_dict(obj["config"])
    net = _make_net(cfg)
    net.load_state_dict(obj["state_dict"])
    return Model(net, cfg, obj.get("history", {}), obj.get("seconds", 0.0), obj.get("cpu_seconds", 0.0),
                 obj.get("sim_calls", 0))


def _make_net(cfg: TrainConfig) -> Placer:
    D = cfg.accelerators + cfg.cpus
    return Placer(feature_count(D), D, hidden=cfg.hidden, message_passing=cfg.message_passing,
                  device_head=cfg.device_head)


class _Graphs:
    """Per training graph: lockstep environments, policy tensors, baseline history."""

    def __init__(self, graph: Graph, cfg: TrainConfig, cluster: Cluster, params: SimParams, seed: int):
        sim = Simulator(graph, cluster, params)
        self.envs = [PlacementEnv(graph, cluster, reward=cfg.reward, start=cfg.start, samples=cfg.samples,
                                  seed=seed * 100 + b, simulator=sim) for b in range(cfg.batch)]
        self.sim = sim
        self.tensors = GraphTensors.build(self.envs[0])
        self.returns: deque[np.ndarray] = deque(maxlen=cfg.baseline_window)


def rollout(net: Placer, envs: list[PlacementEnv], gt: GraphTensors, greedy: bool = False,
            generator: torch.Generator | None = None, start: str | Placement | None = None):
    """Run one episode in each env in lockstep; returns (features (T, B, n, F), actions (T, B),
    rewards (T, B), initial run times (B,))."""
    T = envs[0].steps
    rho0 = np.array([env.reset(start) for env in envs])
    Xs, acts, rews = [], [], []
    with torch.no_grad():
        for t in range(T):
            X = torch.from_numpy(np.stack([env.features() for env in envs]))
            logits = net(X, gt, torch.full((len(envs),), t, dtype=torch.long))
            if greedy:
                a = logits.argmax(dim=1)
            else:
                a = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
            r = [env.step(int(x))[0] for env, x in zip(envs, a)]
            Xs.append(X)
            acts.append(a)
            rews.append(r)
    return torch.stack(Xs), torch.stack(acts), np.array(rews, dtype=float), rho0


def train(cfg: TrainConfig, graphs: Sequence[Graph] | None = None, callback=None) -> Model:
    """Train a policy on ``graphs`` (default: ``cfg.graphs`` graphs of ``cfg.family``).

    ``callback(update, model)`` is called after every update (for custom logging). The history
    holds, per update, ``ratio`` = mean final run time over the initial one, ``best`` = the best
    run time seen over the initial one, and ``entropy``.
    """
    from tqdm import tqdm

    if cfg.episodes < cfg.batch or cfg.batch < 1:
        raise UsageError(f"need episodes >= batch >= 1, got episodes={cfg.episodes}, batch={cfg.batch}")
    t0, c0 = time.perf_counter(), time.process_time()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    cluster, params = cfg.cluster(), cfg.sim_params()
    graphs = list(graphs) if graphs is not None else family_graphs(cfg.family, cfg.sizes, cfg.graphs, cfg.seed)
    if not graphs:
        raise UsageError("no training graphs")
    states = [_Graphs(g, cfg, cluster, params, cfg.seed * 7919 + i) for i, g in enumerate(graphs)]
    net = _make_net(cfg)
    updates = cfg.episodes // cfg.batch
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    # learning rate and entropy bonus both fall linearly to a tenth: explore early, settle late
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 - 0.9 * i / max(updates - 1, 1))
    history: dict[str, list[float]] = defaultdict(list)
    bar = tqdm(range(updates), desc="placeto", disable=not cfg.progress, leave=False)
    for it in bar:
        st = states[int(rng.integers(len(states)))]
        X, A, R, rho0 = rollout(net, st.envs, st.tensors, generator=gen)
        T, B = A.shape
        G = returns_to_go(R, cfg.discount) / rho0[None, :]  # returns-to-go, scaled
        for b in range(B):
            st.returns.append(G[:, b])
        base = np.mean(np.stack(st.returns), axis=0)
        adv = G - base[:, None]
        if cfg.normalize:
            adv = adv / (adv.std() + 1e-8)
        adv = torch.from_numpy(adv.astype(np.float32))
        steps = torch.arange(T).repeat_interleave(B)
        logits = net(X.flatten(0, 1), st.tensors, steps)
        logp_all = torch.log_softmax(logits, dim=1)
        logp = logp_all.gather(1, A.reshape(-1, 1)).squeeze(1)
        probs = logp_all.exp()
        ent = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(1)
        beta = cfg.entropy * (1.0 - 0.9 * it / max(updates - 1, 1))
        loss = -(adv.reshape(-1) * logp).mean() - beta * ent.mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.clip)
        opt.step()
        sched.step()
        final = np.array([env.runtime for env in st.envs])
        best = np.array([env.best for env in st.envs])
        history["ratio"].append(float(np.mean(final / rho0)))
        history["best"].append(float(np.mean(best / rho0)))
        history["entropy"].append(float(ent.detach().mean()))
        if cfg.progress:
            bar.set_postfix(ratio=f"{history['ratio'][-1]:.3f}")
        if callback is not None:
            callback(it, net)
    model = Model(net, cfg, dict(history), time.perf_counter() - t0, time.process_time() - c0,
                  sum(s.sim.calls for s in states))
    return model


@dataclass
class PolicyPlacement:
    """A policy's answer on one graph: the best placement it simulated, and what that cost."""

    assignment: np.ndarray
    runtime: float
    initial: float
    sim_calls: int
    episodes: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


def place(model: Model, graph: Graph, cluster: Cluster | None = None, *, samples: int = 0, seed: int = 0,
          start: str | Placement | None = None, params: SimParams | None = None,
          simulator: Simulator | None = None) -> PolicyPlacement:
    """Place ``graph`` with a trained policy, no training: one greedy episode, plus ``samples``
    sampled episodes when asked; returns the best placement simulated along the way.

    Every placement the episodes pass through is simulated anyway (the features need its start
    times), so the best of them costs nothing extra; ``sim_calls`` counts them all. The
    simulator defaults to the checkpoint's parameters.
    """
    t0 = time.perf_counter()
    cfg = model.config
    if simulator is not None:
        graph, cluster = simulator.graph, simulator.cluster
    cluster = cluster or cfg.cluster()
    if cluster.size != cfg.accelerators + cfg.cpus:
        raise ClusterError(f"the checkpoint places on {cfg.accelerators + cfg.cpus} devices, "
                         f"the cluster has {cluster.size}")
    torch.set_num_threads(cfg.threads)
    sim = simulator or Simulator(graph, cluster, params or cfg.sim_params())
    calls0 = sim.calls
    mk = lambda s: PlacementEnv(graph, cluster, reward=cfg.reward, start=cfg.start,  # noqa: E731
                                samples=cfg.samples, seed=s, simulator=sim)
    envs = [mk(seed)]
    model.net.eval()
    gt = GraphTensors.build(envs[0])
    rollout(model.net, envs, gt, greedy=True, start=start)
    if samples:
        gen = torch.Generator().manual_seed(seed)
        envs += [mk(seed + 1 + b) for b in range(samples)]
        rollout(model.net, envs[1:], gt, generator=gen, start=start)
    best = min(envs, key=lambda e: e.best)
    greedy = envs[0]
    return PolicyPlacement(best.best_assignment.copy(), float(best.best), float(greedy.initial), sim.calls - calls0,
                      1 + samples, time.perf_counter() - t0,
                      extra={"greedy_final": float(greedy.runtime), "greedy_best": float(greedy.best)})


def scorer(model: Model, samples: int = 0, seed: int = 0, name: str = "placeto"):
    """A function ``Simulator -> Scored`` for `devplace_lite.rl.compare.compare`."""
    from .compare import Scored

    def run(sim: Simulator) -> Scored:
        p = place(model, simulator=sim, graph=sim.graph, samples=samples, seed=seed)
        return Scored(name, p.assignment, p.runtime, p.sim_calls, p.seconds, extra=p.extra)
    return run


def ratio_summary(values: Sequence[float]) -> float:
    """Geometric mean of ratios (the mean that treats 2x better and 2x worse symmetrically)."""
    v = np.asarray(values, dtype=float)
    return float(math.exp(np.mean(np.log(v)))) if len(v) else math.nan
