"""The learned placer: embedding, training (seeded, improves on a tiny family), checkpoints, placing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from devplace_lite.devices import Cluster  # noqa: E402
from devplace_lite.generators import layered, series_parallel  # noqa: E402
from devplace_lite.graph import Graph, GraphError, Node  # noqa: E402
from devplace_lite.rl.env import PlacementEnv, feature_count  # noqa: E402
from devplace_lite.rl.policy import GraphTensors, Placer  # noqa: E402
from devplace_lite.rl.train import (TrainConfig, family_graphs, held_out, load, place,  # noqa: E402
                                    ratio_summary, train)
from devplace_lite.sim import Simulator  # noqa: E402
from devplace_lite.errors import ClusterError

TINY = dict(family="layered", sizes=(6, 10), graphs=8, accelerators=3, batch=8, hidden=16, progress=False)


@pytest.fixture(scope="module")
def trained():
    return train(TrainConfig(episodes=240, **TINY))


def test_training_improves_over_random_placement(trained):
    """Seeded: on held-out graphs, one greedy episode of the trained policy beats a random
    placement (the mean of 30) and the same network untrained, and training lowered the run
    time the episodes reach."""
    untrained = train(TrainConfig(episodes=8, lr=0.0, **TINY))
    c = trained.config.cluster()
    ours, rand, fresh = [], [], []
    for i, g in enumerate(held_out("layered", (6, 10), 8)):
        sim = Simulator(g, c)
        p = place(trained, g, c)
        assert p.runtime == pytest.approx(sim.runtime(p.assignment))
        ours.append(p.runtime)
        rng = np.random.default_rng(i)
        rand.append(np.mean([sim.runtime(rng.integers(0, c.size, g.n)) for _ in range(30)]))
        fresh.append(place(untrained, g, c).runtime)
    assert ratio_summary(np.array(ours) / np.array(rand)) < 0.92
    assert ratio_summary(np.array(ours) / np.array(fresh)) < 0.95
    h = trained.history["ratio"]
    assert np.mean(h[-4:]) < np.mean(h[:4])


def test_training_is_reproducible():
    a = train(TrainConfig(episodes=16, **TINY))
    b = train(TrainConfig(episodes=16, **TINY))
    assert a.history["ratio"] == b.history["ratio"]
    for x, y in zip(a.net.parameters(), b.net.parameters()):
        assert torch.equal(x, y)


def test_held_out_graphs_are_not_training_graphs():
    train_names = {g.name for g in family_graphs("layered", (6, 10), 8, 0)}
    assert not train_names & {g.name for g in held_out("layered", (6, 10), 8)}


def test_checkpoint_round_trip(trained, tmp_path):
    path = tmp_path / "policy.pt"
    trained.save(path)
    again = load(path)
    assert again.config == trained.config and again.history == trained.history
    g = series_parallel(12, seed=5)  # another family: the policy places any graph
    p1, p2 = place(trained, g), place(again, g)
    assert np.array_equal(p1.assignment, p2.assignment) and p1.runtime == p2.runtime
    (tmp_path / "junk.pt").write_text("{}")
    with pytest.raises(GraphError, match="not a placeto checkpoint"):
        load(tmp_path / "junk.pt")
    with pytest.raises(GraphError, match="does not exist"):
        load(tmp_path / "missing.pt")


def test_place_reports_what_it_simulated(trained):
    g = layered(12, seed=77)
    c = trained.config.cluster()
    p = place(trained, g, c, samples=3)
    assert p.runtime == pytest.approx(Simulator(g, c).runtime(p.assignment))
    assert p.runtime <= p.initial
    assert p.episodes == 4 and 1 <= p.sim_calls <= 4 * (g.n + 1)
    with pytest.raises(ClusterError, match="places on 3 devices"):
        place(trained, g, Cluster(accelerators=2))


def _net_and_env(message_passing: bool):
    g = Graph([Node(x, p_acc=1, comm=0.1) for x in "abcde"],
              [("a", "b"), ("b", "c"), ("a", "d"), ("c", "e"), ("d", "e")])
    env = PlacementEnv(g, Cluster(accelerators=2))
    env.reset()
    torch.manual_seed(0)
    return g, env, Placer(feature_count(2), 2, hidden=8, message_passing=message_passing)


def test_pooling_sets():
    g, env, _ = _net_and_env(True)
    gt = GraphTensors.build(env)
    i = g.index
    t = int(env.unit_of[i["b"]])
    self_, anc, desc, par = (gt.pools[t, j] > 0 for j in range(4))
    assert self_.tolist() == [False, True, False, False, False]
    assert anc.nonzero().flatten().tolist() == [i["a"]]
    assert sorted(desc.nonzero().flatten().tolist()) == [i["c"], i["e"]]
    assert par.nonzero().flatten().tolist() == [i["d"]]
    assert torch.allclose(gt.pools[t].sum(dim=1), torch.ones(4))


@pytest.mark.parametrize("message_passing", [True, False])
def test_message_passing_carries_information_along_edges(message_passing):
    g, env, net = _net_and_env(message_passing)
    gt = GraphTensors.build(env)
    X = torch.from_numpy(env.features())[None]
    Y = X.clone()
    Y[0, g.index["a"], 0] += 5.0  # the source's compute cost
    e = g.index["e"]
    changed = not torch.allclose(net.embeddings(X, gt)[0, e], net.embeddings(Y, gt)[0, e])
    assert changed == message_passing  # only the sweeps let the sink see the source


def test_forbidden_devices_get_no_probability():
    g = Graph([Node("a", p_acc=1, p_cpu=3), Node("b", p_acc=1, supported=False, p_cpu=2)], [("a", "b")])
    env = PlacementEnv(g, Cluster(accelerators=1, cpus=1))
    env.reset()
    net = Placer(feature_count(2), 2, hidden=8)
    gt = GraphTensors.build(env)
    logits = net(torch.from_numpy(env.features())[None].repeat(2, 1, 1), gt, torch.tensor([0, 1]))
    assert torch.isfinite(logits[0]).all() and logits[1, 0] == float("-inf")
