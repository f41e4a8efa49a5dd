"""Decoder LMs of today capture, plan, run and check (issue 40, items 2 and 3).

torch's `pipeline()` cuts the rotary embedding of Llama-style decoders (computed once, read by
every layer) into stage modules that fail to run (pytorch/pytorch#184361), and torch.fx cannot
trace transformers' decoders: the capture's middle route exports the model and cuts the
exported graph with devplace's own splitter (`capture.export_split`). Every family of
`zoo.external.DECODERS` is captured, its segments run in order compute the model, in training
too (every parameter's gradient), and a few run under torchrun through the CLI with ``--check``.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from devplace_lite.errors import GraphError  # noqa: E402
from devplace_lite.pipeline.split import split_module  # noqa: E402
from devplace_lite.pipeline.split_points import candidates, module_calls  # noqa: E402
from devplace_lite.zoo import external  # noqa: E402

C = importlib.import_module("devplace_lite.pipeline.capture")  # the package re-exports the function `capture`

#: Families torch's own route captures (no rotary embedding shared by the layers).
TORCH_ROUTE = {"mamba"}
#: Families whose head is tied to the token embedding in these configs.
TIED = {"qwen2", "gemma2", "gemma3", "falcon", "mamba"}


def _in_order(cap, example: tuple):
    """The last segment's output, the segments run one after another on ``example``."""
    out = None
    for _, m, args, _ in C._run_in_order(cap, example):
        out = m(*args)
    return out


@pytest.mark.parametrize("name", list(external.DECODERS))
def test_each_decoder_is_captured_and_its_segments_compute_the_model(name):
    model, x = external.get(name)(batch=2)
    cap = C.capture(model, x)
    assert cap.how == (C.HOW_EXPORT if name in TORCH_ROUTE else C.HOW_EXPORT_SPLIT), cap.notes
    if cap.how == C.HOW_EXPORT_SPLIT:  # the notes say why torch's route was left
        assert any("pytorch/pytorch#184361" in n and "devplace's splitter" in n for n in cap.notes), cap.notes
    assert cap.names[1:] == [f"{cap.names[1].rsplit('.', 1)[0]}.{i}" for i in range(4)] + [cap.names[-1]]
    assert bool(cap.tied) == (name in TIED)
    with torch.no_grad():
        assert torch.allclose(_in_order(cap, x), model(*x), rtol=1e-5, atol=1e-6)


def test_the_new_route_cuts_a_model_torch_cuts_too_at_the_same_points():
    """Mamba (no rotary embedding) is captured by torch's route; the exported graph cut by
    devplace's splitter gives the same segments, and they compute the model."""
    model, x = external.mamba(batch=2)
    torch_cap = C.capture(model, x)
    ours = C._capture_export_split(model, x, candidates(model, *module_calls(model, x)), "block")
    assert ours.names == torch_cap.names and ours.tied == torch_cap.tied
    with torch.no_grad():
        assert torch.allclose(_in_order(ours, x), model(*x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["llama", "qwen2", "mixtral"])
def test_segments_in_order_train_as_the_model_every_parameter_keeps_its_name(name):
    """The stages cut from the export, run in order with a backward, give every parameter of
    the model (by its own FQN) the model's gradient; a tied weight's copies (one tensor here)
    gather both stages' parts."""
    model, x = external.get(name)(batch=2)
    sp, names, _ = C.export_split(model, x, candidates(model, *module_calls(model, x)))
    out = sp.run_sequential(*x)
    out.square().mean().backward()
    got = {n: p.grad for st in sp.stages for n, p in st.named_parameters()}
    model.zero_grad()
    model(*x).square().mean().backward()
    ref = dict(model.named_parameters(remove_duplicate=False))
    # every parameter, under one of the model's names for it (a tied one under any of its names)
    assert set(got) <= set(ref) and {id(ref[n]) for n in got} == {id(p) for p in model.parameters()}
    for n, g in got.items():
        assert torch.allclose(g, ref[n].grad, rtol=1e-4, atol=1e-6), n


def test_a_parameter_read_by_two_stages_is_replicated_only_when_asked():
    """split_module refuses a trainable weight read on two stages (it would train twice) unless
    the caller sums the copies' gradients, as the export route does for tied embeddings."""
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = self.w  # one read of the weight, used on both stages (a tied embedding and head)
            return (x @ w).relu() @ w.t()

    gm = torch.fx.symbolic_trace(Tied())
    ops = [n.name for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    stage_of = {n: int(i >= 2) for i, n in enumerate(ops)}
    x = torch.randn(2, 4)
    with pytest.raises(GraphError, match="parameter w is read by stages 0 and 1"):
        split_module(gm, stage_of, (x,))
    sp = split_module(gm, stage_of, (x,), replicate_parameters=True)
    assert sp.replicated["w"] == [0, 1] and torch.allclose(sp.run_sequential(x), gm(x))


def test_data_dependent_control_flow_in_a_decoder_is_refused_in_one_line_naming_its_line():
    """A model neither export nor fx captures (its own forward branches on a tensor's value, as a
    router might): one line naming the construct and the model's source line, no traceback."""
    class Routed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent routing
                return self.b(self.a(x))
            return self.a(x)

    with pytest.raises(GraphError) as err:
        C.capture(Routed(), (torch.ones(2, 4),))
    text = str(err.value)
    assert "\n" not in text and "cannot capture Routed" in text
    assert "test_decoder_families.py" in text and "`if x.sum() > 0:  # data-dependent routing`" in text
    assert "data-dependent" in text


def _cli_check(name: str, k: int, tmp_path) -> dict:
    """``devplace plan ... -k K --spec H100 --run --check --json`` (the H100 roofline prices the
    segments, so no message price is probed and the plan cuts the model; the run is here, on CPU)."""
    cmd = [sys.executable, "-m", "devplace_lite.cli", "plan", f"devplace_lite.zoo.external:{name}", "-k", str(k),
           "--spec", "H100", "--run", "--check", "--steps", "1", "--json", "--out", str(tmp_path / name)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("name,k", [("llama", 2), ("qwen2", 2), ("mixtral", 2), ("gemma3", 4)])
def test_the_cli_plans_runs_and_checks_a_decoder(name, k, tmp_path):
    a = _cli_check(name, k, tmp_path)
    assert a["capture"] == C.HOW_EXPORT_SPLIT and a["stages"] == k
    check = a["run"]["check"]
    assert check["outputs_allclose"] and check["grads_allclose"], check
    model, _ = external.get(name)(batch=2)
    # every parameter compared, a tied one once per stage holding it
    tied = sum(len(t["stages"]) - 1 for t in a["tied"] if len(t["stages"]) > 1)
    assert check["parameters_checked"] == len(list(model.parameters())) + tied
