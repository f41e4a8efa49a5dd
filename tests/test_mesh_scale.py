"""Planning for machines you do not have: a model on the meta device, priced on a GPU's roofline,
planned for a cluster (issue 41, item 5). CPU time on one torch thread, never wall time."""

from __future__ import annotations

import importlib
import resource

import pytest
import torch

import devplace_lite as dl
from devplace_lite.errors import UsageError

pytest.importorskip("transformers")
capture = importlib.import_module("devplace_lite.pipeline.capture")  # the package re-exports a function of that name
measure = importlib.import_module("devplace_lite.pipeline.measure")
GIB = 2 ** 30


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _measured(model, x):
    cap = capture.capture(model, (x,))
    return measure.measure_segments(cap, training=True, spec="H100")


def test_the_meta_device_prices_a_decoder_as_its_real_weights_do():
    """A tiny Llama on the meta device: every segment's roofline times, saved activations and shared
    saves equal those of the same model with real weights (fake tensors' device queries are no
    kernels; distinct saved tensors with no data are told apart)."""
    from devplace_lite.zoo.external import llama

    model, (x,) = llama(batch=2)
    real = _measured(model, x[:1])
    meta = _measured(model.to("meta"), x[:1].to("meta"))
    for f in ("forward_ms", "backward_ms", "backward_input_ms", "backward_weight_ms", "activation_bytes",
              "param_bytes", "output_bytes", "shared_saves"):
        assert getattr(meta, f) == getattr(real, f), f
    assert len(set(real.activation_bytes[1:4])) == 1 and real.activation_bytes[1] > 0  # three equal layers


@pytest.mark.parametrize("name", ["llama", "gemma2", "gpt2"])
def test_repeated_layers_priced_once_give_what_pricing_each_gives(monkeypatch, name):
    """The signature shortcut (`measure._signature`) changes no figure (Gemma 2 alternates sliding
    and global attention layers; GPT-2 ties its head to its embedding); on Llama's capture (the
    exported graph cut by devplace's splitter) it prices fewer segments than the model has."""
    from devplace_lite.zoo import external

    model, (x,) = getattr(external, name)(batch=2)
    cap = capture.capture(model, (x[:1],))
    timed = []
    real = measure._timed_pass
    monkeypatch.setattr(measure, "_timed_pass", lambda *a, **k: timed.append(a[0]) or real(*a, **k))
    fast = measure.measure_segments(cap, training=True, spec="H100")
    if name == "llama":
        assert cap.how == capture.HOW_EXPORT_SPLIT and len({id(m) for m in timed}) < cap.num_segments
    monkeypatch.setattr(measure, "_signature", lambda *a: None)
    slow = measure.measure_segments(cap, training=True, spec="H100")
    assert fast == slow


def test_a_meta_model_without_a_spec_is_refused_in_one_line():
    from devplace_lite.zoo.external import llama

    model, (x,) = llama(batch=2)
    with pytest.raises(UsageError, match="meta device.*--spec"):
        dl.plan(model.to("meta"), (x.to("meta"),), devices=2)
