"""The real pipeline: fx splitting, planning from a placement, and runs with torch's engine on
CPU processes (gloo, 2 processes): outputs and gradients equal the unsplit model's."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.cost import chain_order  # noqa: E402
from devplace_lite.devices import Cluster  # noqa: E402
from devplace_lite.graph import Graph, GraphError, Node  # noqa: E402
from devplace_lite.pipeline import (build_plan, check_resources, measure_stages, run_pipeline,  # noqa: E402
                                    run_pipelines, split_module, stage_map)
from devplace_lite.pipeline.profile import profile, trace  # noqa: E402


class Skippy(nn.Module):
    """Unequal layers, a skip connection over a layer, a shape read (``x.size(0)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 32)
        self.b = nn.Linear(32, 64)
        self.c = nn.Linear(64, 32)
        self.d = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        g = torch.tanh(self.b(h))
        k = self.c(g) + h
        return self.d(k).view(x.size(0), -1)


TWO_STAGES = {"a": 0, "relu": 0, "b": 0, "tanh": 1, "c": 1, "add": 1, "d": 1, "view": 1}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Skippy().eval()


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=gen), torch.randn(8, 4, generator=gen)


# -- splitting (one process) ----------------------------------------------------------------------
def test_split_carries_skip_activations_through_middle_stages(model, batch):
    x, _ = batch
    sp = split_module(model, {"a": 0, "relu": 0, "b": 1, "tanh": 1, "c": 2, "add": 2, "d": 2}, (x[:2],))
    assert sp.num_stages == 3
    assert "relu" in sp.carried[0] and "relu" in sp.carried[1]  # the skip crosses stage 1 untouched
    assert sp.replicated["size"] == [2]  # a shape is recomputed where it is read, never sent
    assert torch.allclose(sp.run_sequential(x), model(x))


@pytest.fixture(scope="module")
def inception():
    from devplace_lite.zoo import get

    z = get("inception")
    net = z.build("tiny")
    x = z.example_input("tiny", batch=1)
    with torch.no_grad():
        return net, x, trace(net, "layer"), net(*x)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_chain_split_computes_the_model(inception, data):
    """Random chain splits of a branchy model (inception, tiny): stage by stage = the model."""
    net, x, gm, ref = inception
    p = data.draw(st.integers(2, 4))
    stage: dict[str, int] = {}
    for n in gm.graph.nodes:  # fx order is topological: a stage at least its inputs' largest
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        low = max((stage.get(a.name, 0) for a in n.all_input_nodes), default=0)
        stage[n.name] = data.draw(st.integers(low, min(p - 1, low + 1)))
    sp = split_module(gm, stage, x, num_stages=max(stage.values()) + 1)
    with torch.no_grad():
        assert torch.allclose(sp.run_sequential(*x), ref, atol=1e-6)


def test_split_refuses_backward_edges_shared_weights_and_unknown_names(model, batch):
    x, _ = batch
    with pytest.raises(GraphError, match="stages must form a chain"):
        split_module(model, {"a": 1, "relu": 0}, (x,))

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    with pytest.raises(GraphError, match="shared weights"):
        split_module(Tied(), {"lin": 0, "relu": 0, "lin_1": 1}, (torch.randn(2, 4),))
    with pytest.raises(GraphError, match="not a node"):
        split_module(model, {"nope": 0}, (x,))


# -- planning from a placement of the profiled graph ----------------------------------------------
def test_plan_follows_the_chain_order_of_a_placement(model, batch):
    x, _ = batch
    g = profile(model, (x[:2],), spec="A100", training=True, progress=False)
    c = Cluster(accelerators=2)
    ids = g.ids
    # everything up to relu on acc1, the rest on acc0: stage 0 must be acc1
    early = {"x", "a", "relu", "a.grad", "relu.grad"}
    a = np.array([1 if v in early else 0 for v in ids])
    plan = build_plan(model, (x[:2],), g, c, a)
    assert plan.devices == [1, 0] == chain_order(g, c, a)
    assert plan.split.stage_of["a"] == 0 and plan.split.stage_of["d"] == 1
    assert sum(plan.predicted_ms) > 0 and len(plan.predicted_memory) == 2
    assert np.allclose(np.add(plan.predicted_forward_ms, plan.predicted_backward_ms), plan.predicted_ms)
    assert torch.allclose(plan.split.run_sequential(x), model(x))


def test_stage_map_refuses_a_placement_that_is_not_a_chain():
    g = Graph([Node(v, p_acc=1.0) for v in "abcd"], [("a", "b"), ("c", "d")])
    with pytest.raises(GraphError, match="not a chain"):
        stage_map(g, Cluster(accelerators=2), {"a": "acc0", "d": "acc0", "b": "acc1", "c": "acc1"})


def test_measure_stages_times_every_stage(model, batch):
    x, y = batch
    sp = split_module(model, TWO_STAGES, (x[:2],))
    t = measure_stages(sp.stages, (x[:2],), target=y[:2], loss_fn=F.mse_loss, repeats=2, warmup=1)
    assert len(t.stage_ms) == 2 and all(f > 0 for f in t.forward_ms) and all(b > 0 for b in t.backward_ms)
    assert t.predicted_throughput() == pytest.approx(1000.0 * 2 / t.bottleneck_ms)


# -- real runs: 2 processes, gloo ------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(model, batch):
    x, y = batch
    model.zero_grad(set_to_none=True)
    out = model(x)
    loss = F.mse_loss(out, y)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out.detach(), float(loss.detach()), grads


@pytest.fixture(scope="module")
def runs(model, batch):
    """Both schedules in training and GPipe inference, in one start of the 2 processes."""
    x, y = batch
    sp = split_module(model, TWO_STAGES, (x[:2],))
    train = dict(stages=sp.stages, inputs=(x,), target=y, loss_fn=F.mse_loss, microbatches=4, steps=2,
                 return_grads=True)
    gpipe, one_f_one_b, infer = run_pipelines([{**train, "schedule": "gpipe"}, {**train, "schedule": "1f1b"},
                                               dict(stages=sp.stages, inputs=(x,), microbatches=2, steps=1)])
    return {"gpipe": gpipe, "1f1b": one_f_one_b, "inference": infer}


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipelined_training_equals_the_unsplit_model(runs, reference, schedule):
    out, loss, grads = reference
    run = runs[schedule]
    assert torch.allclose(run.output, out, rtol=1e-5, atol=1e-6)
    assert run.loss == pytest.approx(loss, rel=1e-5)
    assert set(run.grads) == set(grads)
    for name, g in grads.items():
        assert torch.allclose(run.grads[name], g, rtol=1e-4, atol=1e-6), name


def test_runs_report_consistent_measurements(runs):
    for run in (runs["gpipe"], runs["1f1b"]):
        assert run.num_stages == 2 and len(run.steps_ms) == 2
        assert {(s, k) for s, k, *_ in run.events} == {(s, k) for s in (0, 1) for k in "FB"}
        assert len(run.events) == 2 * 2 * 4  # stages x (F, B) x micro-batches, last step
        assert 0.0 <= run.bubble < 1.0 and run.formula_bubble == pytest.approx(1 / 5)
        for busy, step in zip(run.busy_ms, run.steps_ms):
            assert max(busy) <= step  # no stage computes longer than the step lasts
    # GPipe keeps all 4 micro-batches' activations before the first backward; 1F1B at most 2 on stage 0
    assert runs["gpipe"].activation_bytes[0] > runs["1f1b"].activation_bytes[0] > 0


def test_pipelined_inference_equals_the_unsplit_model(model, batch, runs):
    x, _ = batch
    run = runs["inference"]
    with torch.no_grad():
        assert torch.allclose(run.output, model(x), rtol=1e-5, atol=1e-6)
    assert run.backward_ms == [0.0, 0.0] and run.loss is None


# -- clear errors -----------------------------------------------------------------------------------
def test_errors_before_any_process_starts(model, batch):
    x, y = batch
    sp = split_module(model, TWO_STAGES, (x[:2],))
    with pytest.raises(GraphError, match="CPU cores"):
        check_resources(100_000, "cpu")
    with pytest.raises(GraphError, match="over the memory cap"):
        run_pipeline(sp.stages, (x,), target=y, loss_fn=F.mse_loss, memory=100.0)
    with pytest.raises(GraphError, match="1F1B needs"):
        run_pipeline(sp.stages, (x,), target=y, loss_fn=F.mse_loss, schedule="1f1b", microbatches=1)
    with pytest.raises(GraphError, match="equal micro-batches"):
        run_pipeline(sp.stages, (x,), microbatches=3)


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_refuses_more_stages_than_cores(capsys):
    code, out, err = _cli(capsys, "pipeline", "run", "--model", "gnmt", "--method", "time", "-k", 1024)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "CPU cores" in err


@pytest.mark.parametrize("action", ["run", "stages"])
def test_cli_stage_count_is_bounded_like_plans(capsys, action):
    """``stages -k 10**12`` sized arrays by it and answered 'out of memory'."""
    code, out, err = _cli(capsys, "pipeline", action, "--model", "gnmt", "--method", "time", "-k", 10**12)
    assert (code, out) == (2, "")
    assert err == f"devplace: error: devplace pipeline {action}: argument -k/--stages: expected an integer in " \
                  "[1, 1024], got '1000000000000'\n"


def test_cli_refuses_a_stage_over_its_memory_cap(capsys):
    code, out, err = _cli(capsys, "pipeline", "run", "--model", "gnmt", "--method", "time", "-k", 2,
                          "--spec", "A100", "--memory", 1000)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "over its cap" in err


def test_cli_run_json(capsys):
    code, out, err = _cli(capsys, "pipeline", "run", "--model", "gnmt", "--method", "time", "-k", 2,
                          "--spec", "A100", "--training", "--schedule", "1f1b", "--microbatches", 2, "--batch", 4,
                          "--steps", 1, "--check", "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["check"]["outputs_allclose"] and ans["check"]["grads_allclose"]
    run, plan = ans["run"], ans["plan"]
    assert run["stages"] == plan["stages"] == 2 and run["schedule"] == "1f1b" and run["training"]
    for key in ("step_ms", "throughput", "stage_ms", "bubble", "formula_ms", "peak_memory", "formula_bubble"):
        assert key in run
    assert len(ans["forecast"]["predicted_ms"]) == len(ans["forecast"]["measured_ms"]) == 2
    assert ans["command"].startswith("devplace pipeline run --model gnmt")


def test_cli_stages_from_a_placement_file(capsys, tmp_path):
    """profile -> devplace partition --out -> devplace pipeline stages --placement: one process."""
    from devplace_lite.io import save_graph
    from devplace_lite.zoo import get

    z = get("gnmt")
    gpath, ppath = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(profile(z.build("tiny"), z.example_input("tiny", batch=4), spec="A100", progress=False), gpath)
    assert _cli(capsys, "partition", gpath, "--method", "dp", "-k", 2, "--out", ppath)[0] == 0
    code, out, err = _cli(capsys, "pipeline", "stages", "--model", "gnmt", "--placement", ppath, "--graph", gpath,
                          "-k", 2, "--repeats", 2, "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["plan"]["stages"] == len(ans["stages"]["stage_ms"]) == 2 and ans["method"] == "placement"
    assert ans["forecast"]["clock"] == "cpu" and ans["predicted_throughput"] > 0
    assert "--placement" in ans["command"]
