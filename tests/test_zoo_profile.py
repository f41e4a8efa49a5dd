"""The model zoo and the profiler: traced graphs are valid DAGs, training graphs pair every
backward node with its forward node, roofline graphs are byte-for-byte reproducible (and equal
data/graphs), measured profiles have positive times, untraceable models fail in one line, and
the counts match published figures (ResNet-50: 4.1 G multiply-adds at 224x224)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
import warnings

import networkx as nx
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from devplace_lite.cli import main  # noqa: E402
from devplace_course.data_build import DATA_DIR, build, plan  # noqa: E402
from devplace_lite.devices import SPECS  # noqa: E402
from devplace_lite.graph import GraphError  # noqa: E402
from devplace_lite.io import load_graph, save_graph  # noqa: E402
from devplace_lite.pipeline.profile import _rnn_kernels, profile, trace  # noqa: E402
from devplace_lite.zoo import MODELS  # noqa: E402

NAMES = sorted(MODELS)


def tiny(name: str, batch: int = 1):
    entry = MODELS[name]
    return entry.build("tiny"), entry.example_input("tiny", batch)


@pytest.fixture(scope="module")
def tiny_graphs():
    """Roofline graphs of every tiny model: {(name, granularity, training): Graph}."""
    out = {}
    for name in NAMES:
        model, x = tiny(name)
        for gran in ("layer", "op"):
            for training in (False, True):
                out[name, gran, training] = profile(model, x, granularity=gran, spec="A100", training=training,
                                                    progress=False, name=name)
    return out


def test_importing_zoo_cli_plugin_and_data_build_does_not_import_torch():
    code = ("import sys, devplace_lite.zoo, devplace_lite.commands.profile, devplace_course.data_build; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gran", ["layer", "op"])
def test_every_tiny_model_traces_into_a_connected_dag(tiny_graphs, name, gran):
    g = tiny_graphs[name, gran, False]
    assert g.n >= 10 and not g.is_training
    assert nx.is_weakly_connected(g.to_networkx())
    sinks = [v for v in range(g.n) if not g.succ[v]]
    assert len(sinks) == 1  # the model's single output
    assert (g.p_acc >= 0).all() and (g.p_cpu >= 0).all() and g.meta["flops"] > 0
    ran = np.array([v.flops > 0 for v in g.nodes])
    assert (g.p_acc[ran] > 0).all() and (g.p_cpu[ran] > 0).all()
    spec = SPECS["A100"]
    assert np.allclose(g.comm, g.out_bytes / spec.link * 1e3, rtol=1e-5)
    assert g.meta["model"] == name and g.meta["granularity"] == gran and g.meta["times"] == "roofline"


@pytest.mark.parametrize("name", NAMES)
def test_layer_and_op_graphs_count_the_same_forward_work(tiny_graphs, name):
    layer, op = tiny_graphs[name, "layer", False], tiny_graphs[name, "op", False]
    assert op.n >= layer.n
    assert layer.meta["flops"] == op.meta["flops"]
    if name in ("bert", "gpt"):  # attention blocks are one layer node but many operators
        assert op.n > layer.n


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gran", ["layer", "op"])
def test_training_graph_pairs_each_backward_node_with_its_forward_class(tiny_graphs, name, gran):
    g = tiny_graphs[name, gran, True]
    fwd = {v.id: v for v in g.nodes if not v.backward}
    bwd = [v for v in g.nodes if v.backward]
    assert bwd and g.is_training
    for b in bwd:
        f = fwd[b.id.removesuffix(".grad")]
        assert b.color is not None and b.color == f.color
        assert (f.id, b.id) in set(g.edges)  # the stashed activation
    colors = [v.color for v in fwd.values() if v.color is not None]
    assert len(colors) == len(set(colors)) == len(bwd)  # one class per forward node that trains
    edges = set(g.edges)
    for s, t in edges:
        if s in fwd and t in fwd and f"{s}.grad" in g.index and f"{t}.grad" in g.index:
            assert (f"{t}.grad", f"{s}.grad") in edges
    inputs = [v for v in fwd.values() if v.name.startswith("input")]
    assert all(f"{v.id}.grad" not in g.index for v in inputs)  # inputs need no gradient


@pytest.mark.parametrize("name", ["resnet50", "bert", "gnmt"])
def test_backward_of_matmul_and_conv_costs_about_twice_the_forward(tiny_graphs, name):
    g = tiny_graphs[name, "layer", True]
    ratios = []
    for v in g.nodes:
        if not v.backward and v.name in ("Conv2d", "Linear", "LSTM") and f"{v.id}.grad" in g.index:
            b = g.node(f"{v.id}.grad")
            if b.out_bytes > 0:  # it also computes the gradient of its input, not only of its weights
                ratios.append(b.flops / v.flops)
    assert ratios and all(1.9 <= r <= 2.1 for r in ratios)


def test_roofline_graphs_are_byte_for_byte_reproducible(tmp_path):
    model, x = tiny("gpt")
    for i in (1, 2):
        g = profile(model, x, granularity="op", spec="H100", training=True, progress=False)
        save_graph(g, tmp_path / f"{i}.json")
    assert (tmp_path / "1.json").read_bytes() == (tmp_path / "2.json").read_bytes()


def test_resnet50_full_counts_the_published_multiply_adds():
    entry = MODELS["resnet50"]
    model = entry.build("full", device="meta")
    g = profile(model, entry.example_input("full", 1), spec="V100", progress=False)
    macs = g.meta["flops"] / 2  # Node.flops counts a multiply-add as two
    assert abs(macs - 4.1e9) / 4.1e9 < 0.05
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # He et al. 2016 / torchvision
    assert g.n == 176  # 53 conv, 53 batch norm, 49 ReLU, 16 add, pool, flatten, pool, fc, input


def test_gpt2_small_has_its_published_parameter_count_and_tied_weights_count_once():
    entry = MODELS["gpt"]
    model = entry.build("full", device="meta")
    n = sum(p.numel() for p in model.parameters())
    assert n == 124_439_808  # GPT-2 small with the LM head tied to the token embedding
    small, x = tiny("gpt")
    g = profile(small, x, spec="A100", progress=False)
    assert g.meta["parameter_bytes"] == 4 * sum(p.numel() for p in small.parameters())


def test_lstm_kernels_match_torch_flop_counter_plus_one_pointwise_kernel_per_step():
    from torch.utils.flop_counter import FlopCounterMode

    lstm = nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 7, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
            out, (h, c) = lstm(x)
    fwd, bwd, (m_out, (m_h, m_c)) = _rnn_kernels(lstm, x.to("meta"))
    steps, batch, layers, dirs, gates, hidden = 7, 3, 2, 2, 4, 5
    pointwise = steps * layers * dirs * (batch * gates * hidden + 4 * batch * hidden)
    assert sum(f for f, _ in fwd) == counter.get_total_flops() + pointwise
    assert (m_out.shape, m_h.shape, m_c.shape) == (out.shape, h.shape, c.shape)
    assert 1.9 <= sum(f for f, _ in bwd) / sum(f for f, _ in fwd) <= 2.1


def test_user_module_profiles_and_node_flops_are_exact():
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    g = profile(net, torch.randn(4, 64), spec="A100", progress=False)
    assert g.ids == ["input_1", "_0", "_1", "_2"]  # fx renames a placeholder that shadows a builtin
    assert g.node("_0").flops == 2 * 4 * 64 * 64  # one multiply-add per weight and sample
    assert g.node("_2").out_bytes == 4 * 8 * 4
    assert g.node("_0").memory == 4 * (64 * 64 + 64) + 4 * 4 * 64  # weights + bias + output


@pytest.mark.parametrize("training", [False, True])
def test_measured_cpu_profile_has_positive_times_and_leaves_the_model_alone(training):
    model, x = tiny("resnet50")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = profile(model, x, spec="cpu-measured", training=training, repeats=2, warmup=1, threads=1, progress=False)
    work = [i for i, v in enumerate(g.nodes) if not v.name.startswith("input")]
    assert (g.p_cpu[work] > 0).all() and (g.p_acc[work] > 0).all()
    assert g.meta["times"] == "measured" and g.meta["torch"] == torch.__version__ and g.meta["device"]
    assert not model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BN stats untouched


def test_measured_cpu_profile_with_two_threads_runs_two_passes():
    net = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    g = profile(net, torch.randn(8, 32), spec="cpu-measured", repeats=2, warmup=0, threads=2, progress=False)
    assert (g.p_acc[1:] > 0).all() and (g.p_cpu[1:] > 0).all()
    assert "2 threads" in g.meta["device"] and "1 thread" in g.meta["cpu_device"]


class _Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent branch: fx cannot trace it
            return x
        return -x


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.gate = _Gate()

    def forward(self, x):
        return self.gate(self.proj(x))


@pytest.mark.parametrize("gran", ["layer", "op"])
def test_untraceable_model_gives_one_clear_line(gran):
    with pytest.raises(GraphError) as err:
        profile(_Branchy(), torch.randn(2, 4), granularity=gran, progress=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("cannot trace _Branchy") and "if x.sum() > 0:" in msg and "module 'gate'" in msg
    assert "control flow" in msg and "test_zoo_profile.py" in msg


def test_untraceable_module_can_be_kept_whole_and_is_counted_on_real_tensors():
    g = profile(_Branchy(), torch.randn(2, 4), leaf_modules=[_Gate], progress=False)
    assert [v.name for v in g.nodes] == ["input x", "Linear", "_Gate"]
    assert g.meta["counted_on"].startswith("cpu") and g.node("proj").flops == 2 * 2 * 4 * 4
    with pytest.raises(GraphError, match="meta"):  # without real weights there is nothing to run
        profile(_Branchy().to("meta"), torch.randn(2, 4), leaf_modules=[_Gate], progress=False)


def test_data_dependent_shapes_are_counted_on_the_example_input():
    class Mask(nn.Module):
        def forward(self, x):
            return x[x > 0].sum()

    g = profile(Mask(), torch.arange(-2.0, 3.0), progress=False)
    assert g.meta["counted_on"].startswith("cpu") and g.node("getitem").out_bytes == 2 * 4  # two positives


def test_a_model_that_fails_on_its_input_names_the_node():
    with pytest.raises(GraphError, match=r"at node proj .*: .*shapes cannot be multiplied"):
        profile(_Branchy(), torch.randn(2, 5), leaf_modules=[_Gate], progress=False)


def test_bad_arguments_are_graph_errors():
    model, x = tiny("bert")
    for kwargs in (dict(granularity="kernel"), dict(spec="TPU"), dict(repeats=0, spec="cpu-measured")):
        with pytest.raises(GraphError):
            profile(model, x, progress=False, **kwargs)
    with pytest.raises(GraphError, match="tensor"):
        profile(model, [1, 2, 3], progress=False)
    with pytest.raises(GraphError, match="unknown setting"):
        MODELS["bert"].config("tiny", depth=3)
    with pytest.raises(GraphError, match="meta"):
        profile(MODELS["bert"].build("tiny", device="meta"), x, spec="cpu-measured", progress=False)
    with pytest.raises(GraphError):
        trace(model, "coarse")


def test_cli_profile_writes_a_graph_and_reports_errors_in_one_line(tmp_path, capsys):
    out = tmp_path / "g.json"
    code = main(["profile", "gnmt", "--size", "tiny", "--spec", "H100", "--training", "--batch", "2",
                 "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    g = load_graph(out)
    assert summary["nodes"] == g.n and g.is_training and g.meta["batch"] == 2
    assert g.meta["command"] == ("devplace profile gnmt --granularity layer --spec H100 --batch 2 --size tiny "
                                 "--seed 0 --training")
    assert g.meta["config"]["size"] == "tiny" and g.defaults["memory"] == SPECS["H100"].memory
    assert main(["profile", "alexnet", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "alexnet" in err
    if not torch.cuda.is_available():
        argv = ["profile", "gpt", "--size", "tiny", "--spec", "cuda-measured", "--out", str(tmp_path / "y.json")]
        assert main(argv) == 2
        assert "CUDA" in capsys.readouterr().err and not (tmp_path / "y.json").exists()


def test_data_graphs_are_exactly_what_data_build_writes(tmp_path):
    if not DATA_DIR.is_dir():
        pytest.skip(f"no data/graphs at {DATA_DIR} (not a checkout)")
    names = [name for name, _ in plan()]
    assert sorted(p.name for p in DATA_DIR.glob("*.json")) == sorted(names)
    build(tmp_path)
    match, mismatch, errors = filecmp.cmpfiles(DATA_DIR, tmp_path, names, shallow=False)
    assert not mismatch and not errors, f"regenerate with `make data`: {mismatch + errors}"
    readme = (DATA_DIR.parent / "README.md").read_text()
    assert all(name in readme for name in names)


def test_cpu_measured_defaults_to_one_thread_and_says_so(capsys):
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    g = profile(net, torch.randn(4, 16), spec="cpu-measured", repeats=1, warmup=0, progress=False)
    assert g.meta["threads"] == 1 and "(1 thread)" in g.meta["device"]
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    assert "default 1" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name, training", [("resnet18", True), ("mobilenet_v3_small", True), ("vit", False)])
def test_measured_profiles_of_real_models(name, training):
    """In-place ReLU/Hardswish (torchvision) in training, and ViT's class token (a parameter
    used outside a module call) in inference: both used to fail."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (the models extra)")
    from devplace_lite.zoo import external

    model, x = external.get(name)(batch=2)
    g = profile(model, x, spec="cpu-measured", training=training, repeats=1, warmup=0, progress=False)
    work = [i for i, v in enumerate(g.nodes) if not v.name.startswith("input")]
    assert g.is_training == training and (g.p_acc[work] >= 0).all() and g.p_acc.sum() > 0
