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


def test_meta_attention_is_priced_as_the_fused_kernel_torch_runs():
    """Scaled-dot-product attention on meta tensors: under `FusedAttention` it is the one fused
    kernel torch's CPU runs on real tensors (same FLOPs, bytes and backward), with the FLOP count
    of `torch.utils.flop_counter`'s flash formula, and it saves the inputs, the output and its
    log-sum-exp; the math fallback the meta device takes alone writes and saves every score."""
    from torch.utils.flop_counter import sdpa_flop_count

    from devplace_lite.pipeline.profile import FusedAttention, KernelLog

    def priced(device, fused, mask=None):
        q = torch.ones(2, 4, 256, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        k = torch.ones(2, 2, 256, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        fwd, bwd, saved = KernelLog(), KernelLog(), measure._Saved(set())
        with fused, fwd, torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=True)
        with bwd:
            o.backward(torch.ones_like(o))
        return fwd.kernels, bwd.kernels, saved.total

    import contextlib

    meta_f, meta_b, meta_saved = priced("meta", FusedAttention())
    cpu_f, cpu_b, cpu_saved = priced("cpu", contextlib.nullcontext())
    assert (meta_f, meta_b, meta_saved) == (cpu_f, cpu_b, cpu_saved)
    assert len(meta_f) == 1 and meta_f[0][0] == sdpa_flop_count((2, 4, 256, 32), (2, 2, 256, 32), (2, 2, 256, 32))
    q_bytes, kv_bytes, lse = 2 * 4 * 256 * 32 * 2, 2 * 2 * 256 * 32 * 2, 2 * 4 * 256 * 4
    # reads q and k (key and value here), writes the output and its log-sum-exp, and keeps them all
    assert meta_f[0][1] == meta_saved == 2 * q_bytes + kv_bytes + lse
    math_f, _, math_saved = priced("meta", contextlib.nullcontext())
    assert len(math_f) > 5 and math_saved > 3 * meta_saved

    # a causal mask broadcast over the heads (as a decoder's export passes it) is read and kept once
    mask = torch.ones(2, 1, 256, 256, dtype=torch.bool, device="meta").tril().expand(2, 4, 256, 256)
    masked_f, _, masked_saved = priced("meta", FusedAttention(), mask)
    assert masked_saved - meta_saved == 2 * 256 * 256 * 2       # its bf16 bias, one head's worth
    assert sum(f for f, _ in masked_f) - meta_f[0][0] == 2 * 256 * 256 * 2  # the bias built: fill, mask


def test_a_meta_decoder_with_fused_attention_is_cheaper_and_splits_the_same():
    """`meta_lm` builds decoders with torch's scaled-dot-product attention: on the roofline their
    layers take less time and save fewer bytes than the same layers with eager attention, and
    the tensor-parallel groups found (degrees, shares) are the same."""
    from devplace_lite.pipeline.mesh_plan import mesh_profile
    from devplace_lite.zoo.external import meta_lm

    sizes = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, ffn_dim=1024, vocab_size=1000,
                 max_position_embeddings=512, word_embed_proj_dim=256, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    model, (x,) = meta_lm("OPTConfig", "OPTForCausalLM", 4, 512, **sizes)
    assert model.model.config._attn_implementation == "sdpa"
    fused, fused_shares, fused_tp, _, _ = mesh_profile(model, (x,), microbatches=4, spec="A100-80GB")
    model.model.config._attn_implementation = "eager"  # the layers read the one config at each call
    eager, eager_shares, eager_tp, _, _ = mesh_profile(model, (x,), microbatches=4, spec="A100-80GB")
    f, e = fused.meta["segments"], eager.meta["segments"]
    for key in ("forward_ms", "backward_ms", "activation_bytes"):
        assert all(a < b for a, b in zip(f[key][1:3], e[key][1:3])), key
    assert fused_tp.degrees() == eager_tp.degrees() == [1, 2, 4]
    assert fused_shares["share"] == pytest.approx(eager_shares["share"], abs=0.01)
