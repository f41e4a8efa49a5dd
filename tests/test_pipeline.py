"""The one road's pieces not covered by test_plan.py: the torch.fx route's splitter (skip
activations carried, refusals), the one tracer, the practitioners' splits scored on a plan
(`with_method`), and GPipe, 1F1B and inference runs under torchrun that equal the unsplit model
(gloo, two processes)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.errors import UsageError  # noqa: E402
from devplace_lite.graph import GraphError  # noqa: E402
from devplace_lite.pipeline.capture import capture, to_device  # noqa: E402
from devplace_lite.pipeline.measure import _whole, measure_segments  # noqa: E402
from devplace_lite.pipeline.tracer import Tracer  # noqa: E402
from devplace_lite.pipeline.baseline_splits import even_split, method_split, with_method  # noqa: E402
from devplace_lite.pipeline.planner import plan, plan_graph  # noqa: E402
from devplace_lite.pipeline.resources import check_resources  # noqa: E402
from devplace_lite.pipeline.segments import segment_graph  # noqa: E402
from devplace_lite.pipeline.split import split_module  # noqa: E402
from devplace_lite.pipeline.torchrun import launch  # noqa: E402

HERE = Path(__file__).parent
import plan_models  # noqa: E402


def _trace(model: nn.Module) -> torch.fx.GraphModule:
    return torch.fx.GraphModule(model, Tracer().trace(model))


@pytest.fixture(scope="module")
def skippy():
    model, (x,) = plan_models.skippy(batch=8)
    return model, x


# -- the torch.fx route's splitter (one process) ----------------------------------------------------
def test_split_carries_skip_activations_through_middle_stages(skippy):
    model, x = skippy
    sp = split_module(_trace(model), {"a": 0, "relu": 0, "b": 1, "tanh": 1, "c": 2, "add": 2, "d": 2}, (x[:2],))
    assert sp.num_stages == 3
    assert "relu" in sp.carried[0] and "relu" in sp.carried[1]  # the skip crosses stage 1 untouched
    assert sp.replicated["size"] == [2]  # a shape is recomputed where it is read, never sent
    with torch.no_grad():
        assert torch.allclose(sp.run_sequential(x), model(x))


@pytest.fixture(scope="module")
def inception():
    from devplace_lite.zoo import get

    z = get("inception")
    net = z.build("tiny")
    x = z.example_input("tiny", batch=1)
    with torch.no_grad():
        return net, x, _trace(net), net(*x)


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


def test_split_refuses_backward_edges_shared_weights_unknown_names_and_untraced_models(skippy):
    model, x = skippy
    gm = _trace(model)
    with pytest.raises(GraphError, match="stages must form a chain"):
        split_module(gm, {"a": 1, "relu": 0}, (x,))

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    with pytest.raises(GraphError, match="shared weights"):
        split_module(_trace(Tied()), {"lin": 0, "relu": 0, "lin_1": 1}, (torch.randn(2, 4),))
    with pytest.raises(GraphError, match="not a node"):
        split_module(gm, {"nope": 0}, (x,))
    with pytest.raises(GraphError, match="traced model"):
        split_module(model, {"a": 0}, (x,))


def test_the_one_tracer_keeps_named_classed_and_marked_modules_whole():
    class Block(nn.Module):
        devplace_layer = True

        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x))

    net = nn.Sequential(Block(), Block(), nn.Sequential(nn.Linear(4, 4), nn.Tanh()))

    def whole(tracer: Tracer) -> list[str]:
        return [str(n.target) for n in tracer.trace(net).nodes if n.op == "call_module"]

    assert whole(Tracer()) == ["0.lin", "1.lin", "2.0", "2.1"]
    assert whole(Tracer(blocks=True)) == ["0", "1", "2.0", "2.1"]
    assert whole(Tracer(leaves={"2"})) == ["0.lin", "1.lin", "2"]
    assert whole(Tracer(classes=(nn.Sequential,))) == ["0.lin", "1.lin", "2"]


# -- the practitioners' splits on one plan ------------------------------------------------------------
@pytest.fixture(scope="module")
def unequal_plan():
    model, x = plan_models.unequal(batch=8)
    cap = capture(model, tuple(t[:2] for t in x))
    graph = segment_graph(cap, measure_segments(cap, training=True, repeats=1, warmup=0))
    return plan_graph(graph, k=3, microbatches=4, schedule="1f1b")


@pytest.mark.parametrize("method", ["dp", "time", "parameters", "uniform"])
def test_every_method_split_is_a_chain_scored_by_the_plans_cost_model(unequal_plan, method):
    p = unequal_plan
    q = with_method(p, method)
    assert q.stage_of == sorted(q.stage_of) and q.num_stages <= 3  # split points in program order
    assert q.method == method and q.result.status == "feasible"
    assert q.result.objective >= p.result.objective - 1e-9  # the DP's least bottleneck is optimal
    assert max(q.load_ms) == pytest.approx(q.result.objective)
    assert q.step_ms() > 0 and len(q.stage_memory()) == q.num_stages
    if method == "dp":
        assert q.result.objective == pytest.approx(p.result.objective)


def test_even_split_and_method_split_agree_on_the_segment_count(unequal_plan):
    n = len(unequal_plan.names)
    assert even_split(unequal_plan.graph, 3) == [min(2, i * 3 // n) for i in range(n)]
    assert len(method_split(unequal_plan, "uniform")) == n


# -- runs under torchrun: 2 processes, gloo ------------------------------------------------------------
@pytest.fixture
def on_path(monkeypatch):
    """torchrun's processes import the test models by spec: put this folder on their path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_a_model_only_torch_fx_captures_runs_over_two_ranks(tmp_path, on_path):
    """The torch.fx route's stages (`rank.own_split`, `rank._own_stage`) under torchrun: a model whose forward
    branches on data, split in two, computes the unsplit model's outputs and gradients."""
    model, x = plan_models.branchy_wide(batch=8)
    p = plan(model, x, k=2, microbatches=4, model_spec="plan_models:branchy_wide", repeats=1)
    assert p.capture.how == "torch.fx" and p.num_stages == 2
    run = launch(p.write(tmp_path)["plan"], steps=1, warmup=0, check=True, timeout=400)
    assert run["stages"] == run["ranks"] == 2
    assert run["check"]["outputs_allclose"] and run["check"]["grads_allclose"], run["check"]


@pytest.mark.slow
def test_gpipe_1f1b_and_inference_runs_equal_the_unsplit_model(skippy, tmp_path, on_path):
    """One profile, three plans: GPipe and 1F1B training (outputs and every gradient checked)
    and GPipe inference; GPipe keeps all four micro-batches' activations on rank 0, 1F1B two."""
    model, x = skippy
    p = plan(model, (x,), k=2, microbatches=4, schedule="gpipe", model_spec="plan_models:skippy", repeats=1)
    q = plan_graph(p.graph, k=2, microbatches=4, schedule="1f1b")
    q.model_spec = p.model_spec
    runs = {}
    for name, pl in (("gpipe", p), ("1f1b", with_method(q, "dp"))):
        runs[name] = launch(pl.write(tmp_path / name)["plan"], steps=2, warmup=0, check=True, timeout=400)
    for name, run in runs.items():
        assert run["check"]["outputs_allclose"] and run["check"]["grads_allclose"], (name, run["check"])
        assert run["check"]["parameters_checked"] == 8 and run["loss"] is not None
        assert len(run["steps_ms"]) == 2 and run["ranks"] == 2
        kinds = {(e[0], e[1]) for ev in run["events"] for e in ev}
        assert kinds == {(k, s) for k in "FB" for s in (0, 1)}
        assert sum(len(ev) for ev in run["events"]) == 2 * 2 * 4  # stages x (F, B) x micro-batches, last step
    assert runs["gpipe"]["activation_peak_bytes"][0] > runs["1f1b"]["activation_peak_bytes"][0] > 0

    inference = plan(model, (x,), k=2, microbatches=2, schedule="gpipe", training=False,
                     model_spec="plan_models:skippy", repeats=1)
    run = launch(inference.write(tmp_path / "inference")["plan"], steps=1, warmup=0, check=True, timeout=400)
    assert run["check"]["outputs_allclose"] and run["loss"] is None
    assert run["stage_backward_cpu_ms"] == [0.0, 0.0]


# -- clear errors -----------------------------------------------------------------------------------
def test_a_captured_segment_moved_to_a_device_makes_its_tensors_there():
    """torch.export bakes the device it traced on into ops that make tensors (the zoo GPT's
    position ids: ``torch.arange(t, device=ids.device)``); on an H100, `plan --device cuda`
    failed with 'index is on cpu' until the segments' graphs were moved with their weights."""
    from devplace_lite.zoo import load

    model, inputs = load("gpt", batch=2)
    cap = capture(model, inputs)

    def baked(m: nn.Module) -> list:
        return [n.kwargs["device"] for sub in m.modules() if isinstance(getattr(sub, "graph", None), torch.fx.Graph)
                for n in sub.graph.nodes if n.op == "call_function" and "device" in n.kwargs]

    assert cap.how == "torch.export" and torch.device("cpu") in baked(cap.modules[0])
    moved = [to_device(m, "meta") for m in cap.modules]
    assert {d for m in moved for d in baked(m)} == {torch.device("meta")}
    assert all(p.is_meta for m in moved for p in m.parameters())


def test_captured_rnns_are_exported_in_training_mode_and_the_model_is_untouched():
    """cuDNN refuses an RNN's backward in eval mode, and an export fixes the mode into the graph
    (``aten.lstm(..., train)``): on an H100, `benchmarks.pipeline.run --device cuda` failed on
    GNMT's training profile ('cudnn RNN backward can only be called in training mode')."""
    from devplace_lite.zoo import load

    model, inputs = load("gnmt", batch=2)
    with warnings.catch_warnings(record=True) as caught:  # nor torch.export's about their _flat_weights
        warnings.simplefilter("always")
        cap = capture(model, inputs)
    assert not [str(w.message)[:80] for w in caught]
    flags = [n.args[6] for m in cap.modules for sub in m.modules() if isinstance(getattr(sub, "graph", None), torch.fx.Graph)
             for n in sub.graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.lstm.input]
    assert flags and all(f is True for f in flags)
    assert not any(m.training for m in model.modules())
    whole = _whole(cap).modules[0]  # without dropout an RNN computes the same in both modes
    with torch.no_grad():
        out = whole(*inputs)
        assert torch.allclose(out[0] if isinstance(out, tuple) else out, model(*inputs))


def test_a_torch_error_while_timing_a_segment_is_one_line_naming_it(monkeypatch):
    """On an H100 the cuDNN refusal above reached the user as a traceback through the profile."""
    import devplace_lite.pipeline.measure as measure_module

    cap = capture(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), (torch.randn(2, 4),))

    def refuse(*args, **kwargs):
        raise RuntimeError("cudnn RNN backward can only be called in training mode\nC++ frames ...")

    monkeypatch.setattr(measure_module, "_timed_pass", refuse)
    with pytest.raises(GraphError, match=rf"^torch failed timing segment {cap.names[0]} on cpu: cudnn RNN backward "
                                         "can only be called in training mode$"):
        measure_segments(cap, training=True, repeats=1)


def test_more_gpu_ranks_than_gpus_is_one_line():
    with pytest.raises(GraphError, match="GPUs"):
        check_resources(torch.cuda.device_count() + 1, "cuda")


def test_the_second_road_is_gone(capsys):
    assert main(["pipeline", "run", "--model", "gnmt", "--method", "time", "-k", "2"]) == 2
    assert "invalid choice: 'pipeline'" in capsys.readouterr().err


# -- the profiler's cost model on the road: roofline segments ------------------------------------------
def test_roofline_segments_cost_what_the_profiler_counts_for_their_layers():
    """A segment's roofline forward is the profiler's roofline of the layer inside it (the same
    kernels counted the same way), deterministic, with transfers over the GPU's link."""
    from devplace_lite.devices import SPECS
    from devplace_lite.pipeline.profile import profile

    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64), nn.Tanh(), nn.Linear(64, 8))
    x = torch.randn(16, 64)
    cap = capture(net, (x,), "layer")
    times = [measure_segments(cap, training=True, spec="A100") for _ in range(2)]
    assert times[0].forward_ms == times[1].forward_ms and times[0].backward_ms == times[1].backward_ms
    g = profile(net, x, spec="A100", training=True, granularity="layer", progress=False)
    for i, name in enumerate(cap.names):
        node = f"_{name}"
        assert times[0].forward_ms[i] == pytest.approx(g.node(node).p_acc, rel=1e-4), name
        # the backward differs by what the pipeline adds: the stage input's gradient, the gradients' accumulation
        assert 0.5 <= times[0].backward_ms[i] / g.node(f"{node}.grad").p_acc <= 2.0, name
    graph = segment_graph(cap, times[0])
    assert graph.meta["times"] == "roofline" and graph.meta["spec"]["link"] == SPECS["A100"].link
    with pytest.raises(UsageError, match="unknown accelerator spec"):
        measure_segments(cap, spec="Z80")


def test_plan_on_a_roofline_is_the_same_on_every_run(capsys, tmp_path):
    argv = ["plan", "gpt", "-k", "2", "--spec", "H100", "--schedule", "gpipe", "--json"]
    answers = []
    for run in range(2):
        assert main(argv + ["--out", str(tmp_path / str(run))]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0]["forecast"]["compute_ms"] == answers[1]["forecast"]["compute_ms"]
    assert answers[0]["split_points"] == answers[1]["split_points"] and "--spec H100" in answers[0]["command"]
    assert answers[0]["forecast"]["clock"].startswith("roofline")
    assert main(["plan", "gpt", "-k", "2", "--spec", "A100", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "give one" in capsys.readouterr().err
