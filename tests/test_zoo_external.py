"""`devplace_lite.zoo.external`: the models nobody here wrote, built from configs with random
weights (nothing downloaded), cover the families issue 27 asks for, are the same for the same
seed, and are captured into segments that, run in order, compute the model."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from devplace_lite.errors import UsageError  # noqa: E402
from devplace_lite.zoo import external, load  # noqa: E402

PACKAGE = {"torchvision": "torchvision", "timm": "timm"}
#: Kinds of model the benchmarks must hold at least one of (issue 27, item 4).
KINDS = {"torchvision", "timm", "Hugging Face encoder", "Hugging Face decoder", "Hugging Face encoder-decoder"}


def _needs(name: str):
    family = external.MODELS[name]
    package = PACKAGE.get(family, "transformers")
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"{package} is not installed (the models extra)")


def test_ten_models_cover_every_family():
    assert len(external.MODELS) >= 10
    assert KINDS <= set(external.MODELS.values())
    assert all(callable(external.get(name)) for name in external.MODELS)
    with pytest.raises(UsageError, match="unknown external model 'gpt3'; known: resnet18"):
        external.get("gpt3")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_needs(n)) for n in external.MODELS])
def test_each_model_builds_offline_from_its_seed(name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a config, never a download
    model, x = external.get(name)(batch=2, seed=3)
    again, y = external.get(name)(batch=2, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(x, y))
    weights = again.state_dict()
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())  # weights drawn from the seed
    with torch.no_grad():
        out = model(*x)
    assert out.shape[0] == 2 and torch.isfinite(out).all()


@pytest.mark.parametrize("name", [pytest.param(n, marks=_needs(n)) for n in ("deit_tiny", "opt")])
def test_the_new_models_are_captured_into_segments_that_compute_the_model(name):
    from devplace_lite.pipeline.capture import _run_in_order, capture

    model, x = load(f"devplace_lite.zoo.external:{name}", batch=2)
    cap = capture(model, x)
    assert cap.how == "torch.export" and cap.num_segments >= 6  # block granularity: every layer a split point
    outs = {}
    for i, m, args, _ in _run_in_order(cap, x):
        outs[i] = m(*args)
    last = outs[cap.num_segments - 1]
    last = last[0] if isinstance(last, tuple) else last
    with torch.no_grad():
        assert torch.allclose(last, model(*x), atol=1e-5)
