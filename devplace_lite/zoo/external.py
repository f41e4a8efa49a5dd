"""Models nobody here wrote: torchvision, timm and Hugging Face networks built from configs.

Each function returns ``(model, example_inputs)`` with random weights drawn from ``seed`` and
nothing downloaded, so it can be named wherever a model spec ``module:function`` is accepted::

    devplace plan devplace_lite.zoo.external:gpt2 -k 4

The sizes are reduced (fewer layers, narrower, small images and short sequences) so that a
2-core CPU profiles and runs each in seconds; the code paths are those of the full networks.
The packages come from the ``models`` extra (``pip install devplace_lite[models]``).

torchvision's wheel on PyPI is built against CUDA torch: beside the CPU build its compiled
operators (``nms``, ``roi_align``) do not load and ``import torchvision`` fails while
registering their shape functions. The classification models are pure Python and need none of
them, so `import_torchvision` tolerates exactly those failed registrations (and nothing else).

Example
-------
>>> model, (x,) = resnet18(batch=2)   # doctest: +SKIP
>>> tuple(model(x).shape)             # doctest: +SKIP
(2, 10)
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from typing import Any, Callable

import torch
from torch import nn

from ..errors import UsageError

#: model name -> family: the ten external models of the benchmarks.
MODELS = {
    "resnet18": "torchvision", "mobilenet_v3_small": "torchvision", "vit": "torchvision",
    "convnext_tiny": "torchvision", "efficientnet_b0": "timm", "deit_tiny": "timm",
    "bert": "Hugging Face encoder", "gpt2": "Hugging Face decoder", "opt": "Hugging Face decoder",
    "t5": "Hugging Face encoder-decoder",
}


#: The start of tqdm's warning when tqdm.auto is imported in Jupyter without ipywidgets: its
#: text progress bar works there, and no progress bar of an import is shown anyway.
TQDM_NO_WIDGETS = r"IProgress not found"


@contextlib.contextmanager
def _tolerate_missing_torchvision_ops():
    real = torch.library.register_fake

    def register_fake(op: Any, *args: Any, **kwargs: Any):
        deco = real(op, *args, **kwargs)
        if not (isinstance(op, str) and op.startswith("torchvision::")):
            return deco

        def tolerant(fn: Callable) -> Callable:
            try:
                return deco(fn)
            except RuntimeError as e:  # the CUDA-built operator library did not load
                if "does not exist" not in str(e):
                    raise
                return fn

        return tolerant

    torch.library.register_fake = register_fake
    try:
        yield
    finally:
        torch.library.register_fake = real


def import_torchvision():
    """``torchvision``, imported beside a CPU torch even when its compiled operators do not load."""
    with _tolerate_missing_torchvision_ops():
        return _require("torchvision")


#: What to do when torchvision's compiled operators do not load beside this torch.
TORCHVISION_FIX = ("pip install --force-reinstall --no-deps torchvision=={tv}+cpu "
                   "--index-url https://download.pytorch.org/whl/cpu")


def torchvision_mismatch(err: BaseException) -> str | None:
    """The one-line explanation and fix when ``err`` is torchvision's compiled operators failing
    to load (``operator torchvision::nms does not exist``: a CUDA-built torchvision beside a CPU
    torch), else ``None``."""
    text = f"{err} {err.__cause__ or ''} {err.__context__ or ''}"
    if not ("torchvision::" in text and "does not exist" in text) and "Couldn't load custom C++ ops" not in text:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        tv = version("torchvision").split("+")[0]
    except PackageNotFoundError:  # pragma: no cover - the message came from torchvision
        tv = "<the version matching your torch>"
    return (f"torchvision {tv} here is built for CUDA torch and its compiled operators (nms, roi_align) do not "
            f"load beside torch {torch.__version__}; the models of torchvision.models need none of them, but "
            f"torchvision.ops does: install the CPU build, {TORCHVISION_FIX.format(tv=tv)}")


@contextlib.contextmanager
def torchvision_tolerated(spec: str):
    """Import and build a user's model (``spec``) so that its ``import torchvision`` works beside
    a CPU torch (`import_torchvision`'s tolerance, also for packages that import torchvision, as
    transformers does); a use of the operators that did not load is one `UsageError` that says
    why and how to install the matching build."""
    try:
        with _tolerate_missing_torchvision_ops(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=TQDM_NO_WIDGETS)
            yield
    except Exception as e:  # noqa: BLE001 - only the torchvision mismatch is translated
        why = torchvision_mismatch(e)
        if why is None:
            raise
        raise UsageError(f"model spec {spec}: {why}") from None


def _require(name: str, extra: str = "models"):
    try:
        with warnings.catch_warnings():  # tqdm.auto, imported by transformers, in a notebook without ipywidgets
            warnings.filterwarnings("ignore", message=TQDM_NO_WIDGETS)
            return importlib.import_module(name)
    except ImportError as e:
        raise UsageError(f"model needs the package {name} ({e}); install the extra: pip install "
                         f"'devplace_lite[{extra}]'") from None


def _image(batch: int, size: int, seed: int) -> tuple[torch.Tensor]:
    return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed)),)


def _tokens(batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def vision_model(build: Callable[[], nn.Module], batch: int, size: int, seed: int) -> tuple[nn.Module, tuple]:
    """``build()`` seeded with ``seed`` (random weights), in eval mode, and a batch of ``batch``
    random ``size`` x ``size`` RGB images: how this module's image models are made, for a
    benchmark's or a user's own torchvision or timm model."""
    torch.manual_seed(seed)
    return build().eval(), _image(batch, size, seed)


def resnet18(batch: int = 8, seed: int = 0):
    """torchvision ResNet-18 (in-place ReLUs everywhere), 10 classes, 64x64 images."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.resnet18(num_classes=10), batch, 64, seed)


def mobilenet_v3_small(batch: int = 8, seed: int = 0):
    """torchvision MobileNetV3-Small (in-place Hardswish, squeeze-excitation), 10 classes, 64x64."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.mobilenet_v3_small(num_classes=10), batch, 64, seed)


def convnext_tiny(batch: int = 8, seed: int = 0):
    """torchvision ConvNeXt-Tiny (layer scale: parameters used outside module calls), 64x64."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.convnext_tiny(num_classes=10), batch, 64, seed)


def vit(batch: int = 8, seed: int = 0):
    """torchvision VisionTransformer (class token and position embedding: parameters used
    outside module calls), 6 layers of width 128, 32x32 images in 8x8 patches."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=6, num_heads=4,
                                                            hidden_dim=128, mlp_dim=512, num_classes=10),
                        batch, 32, seed)


def efficientnet_b0(batch: int = 8, seed: int = 0):
    """timm EfficientNet-B0 (depthwise separable blocks, SiLU, squeeze-excitation), 64x64."""
    import_torchvision()  # timm imports torchvision
    timm = _require("timm")
    return vision_model(lambda: timm.create_model("efficientnet_b0", pretrained=False, num_classes=10), batch, 64, seed)


def deit_tiny(batch: int = 8, seed: int = 0):
    """timm DeiT-Tiny (a vision transformer written apart from torchvision's: fused qkv, timm's
    own blocks), 6 layers of width 192, 32x32 images in 8x8 patches, 10 classes."""
    import_torchvision()  # timm imports torchvision
    timm = _require("timm")
    return vision_model(lambda: timm.create_model("deit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32,
                                                  patch_size=8, depth=6), batch, 32, seed)


class LogitsOf(nn.Module):
    """A Hugging Face model called with positional token tensors, returning its logits: what a
    pipeline stage can send (tensors, not a ModelOutput), without the key-value cache."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        kwargs = dict(zip(self.names, tensors))
        return self.model(**kwargs, use_cache=False, return_dict=True).logits


def hf_model(config_name: str, model_name: str, names: tuple[str, ...], batch: int, seq: int, seed: int,
             **config: Any) -> tuple[nn.Module, tuple]:
    """Hugging Face ``model_name`` built from ``config_name(**config)`` with random weights
    (seeded; eager attention, nothing downloaded), called with the token tensors ``names``
    (`LogitsOf`), and a batch of ``batch`` x ``seq`` random tokens for each of them."""
    with contextlib.suppress(UsageError):  # some transformers modules import torchvision when it is there
        import_torchvision()
    tr = _require("transformers")
    cfg = getattr(tr, config_name)(**config)
    cfg._attn_implementation = "eager"  # the same arithmetic on every machine
    torch.manual_seed(seed)
    model = LogitsOf(getattr(tr, model_name)(cfg), names).eval()
    vocab = config["vocab_size"]
    return model, tuple(_tokens(batch, seq, vocab, seed + i) for i in range(len(names)))


def bert(batch: int = 8, seed: int = 0):
    """Hugging Face BERT with its masked-LM head (tied to the word embedding): 4 layers, width 128, 32 tokens."""
    return hf_model("BertConfig", "BertForMaskedLM", ("input_ids",), batch, 32, seed, vocab_size=2000,
                    hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
                    max_position_embeddings=64)


def gpt2(batch: int = 8, seed: int = 0):
    """Hugging Face GPT-2 with its LM head (tied to the token embedding): 4 layers, width 128, 32 tokens."""
    return hf_model("GPT2Config", "GPT2LMHeadModel", ("input_ids",), batch, 32, seed, vocab_size=2000, n_embd=128,
                    n_layer=4, n_head=4, n_positions=64, bos_token_id=1999, eos_token_id=1999)  # in the vocabulary


def opt(batch: int = 8, seed: int = 0):
    """Hugging Face OPT with its LM head (tied to the token embedding; learned positions with
    OPT's offset of 2, pre-norm blocks): 4 layers, width 128, 32 tokens."""
    return hf_model("OPTConfig", "OPTForCausalLM", ("input_ids",), batch, 32, seed, vocab_size=2000, hidden_size=128,
                    num_hidden_layers=4, ffn_dim=512, num_attention_heads=4, max_position_embeddings=64,
                    word_embed_proj_dim=128, pad_token_id=1, bos_token_id=2, eos_token_id=2)


def t5(batch: int = 8, seed: int = 0):
    """Hugging Face T5 encoder-decoder (shared embedding, tied head): 3 + 3 layers, width 128,
    32 source and 32 target tokens."""
    return hf_model("T5Config", "T5ForConditionalGeneration", ("input_ids", "decoder_input_ids"), batch, 32, seed,
                    vocab_size=2000, d_model=128, d_kv=32, d_ff=512, num_layers=3, num_decoder_layers=3, num_heads=4,
                    tie_word_embeddings=True)


#: Decoder language models of today (issue 40), apart from `MODELS`: the benchmarks of
#: `MODELS` keep their rows. Each is tiny (width 64, 4 layers, 16 tokens of a 512-token
#: vocabulary), with the family's own blocks: rotary embeddings computed once and read by every
#: layer, grouped-query attention, gated MLPs, sliding windows, mixtures of experts, a state space.
DECODERS = {
    "llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral", "gemma2": "Gemma 2",
    "gemma3": "Gemma 3 (text)", "phi3": "Phi-3", "gpt_neox": "GPT-NeoX", "olmo2": "OLMo 2", "stablelm": "StableLM",
    "falcon": "Falcon", "mixtral": "Mixtral (mixture of experts)", "qwen3_moe": "Qwen3-MoE (mixture of experts)",
    "mamba": "Mamba (state space)",
}

#: What every tiny decoder shares (a config ignores the names it does not know).
_DECODER = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def decoder(config_name: str, model_name: str, batch: int, seed: int, layers: int = 4,
            **config: Any) -> tuple[nn.Module, tuple]:
    """A tiny decoder LM (`hf_model` on ``input_ids``, 16 tokens): `_DECODER`'s sizes with
    ``layers`` layers, ``config`` added or overriding them."""
    return hf_model(config_name, model_name, ("input_ids",), batch, 16, seed,
                    **{**_DECODER, "num_hidden_layers": layers, **config})


def llama(batch: int = 4, seed: int = 0, layers: int = 4):
    """Llama: RMSNorm, rotary embeddings, grouped-query attention (4 heads, 2 key-value), SwiGLU."""
    return decoder("LlamaConfig", "LlamaForCausalLM", batch, seed, layers)


def qwen2(batch: int = 4, seed: int = 0, layers: int = 4):
    """Qwen2: Llama's blocks with biases on the query, key and value projections; tied head."""
    return decoder("Qwen2Config", "Qwen2ForCausalLM", batch, seed, layers, tie_word_embeddings=True)


def qwen3(batch: int = 4, seed: int = 0, layers: int = 4):
    """Qwen3: RMSNorm on each head's queries and keys, head width 16."""
    return decoder("Qwen3Config", "Qwen3ForCausalLM", batch, seed, layers, head_dim=16)


def mistral(batch: int = 4, seed: int = 0, layers: int = 4):
    """Mistral: Llama's blocks with sliding-window attention (a window of 8 of the 16 tokens)."""
    return decoder("MistralConfig", "MistralForCausalLM", batch, seed, layers, sliding_window=8)


def gemma2(batch: int = 4, seed: int = 0, layers: int = 4):
    """Gemma 2: sliding and global attention layers in turn, logit soft-capping, norms before and
    after each sub-block, embeddings scaled by the width, tied head."""
    return decoder("Gemma2Config", "Gemma2ForCausalLM", batch, seed, layers, head_dim=16, sliding_window=8,
                   query_pre_attn_scalar=16)


def gemma3(batch: int = 4, seed: int = 0, layers: int = 4):
    """Gemma 3 (text): two rotary embeddings (local and global layers), RMSNorm on queries and
    keys, sliding windows, tied head."""
    return decoder("Gemma3TextConfig", "Gemma3ForCausalLM", batch, seed, layers, head_dim=16, sliding_window=8,
                   query_pre_attn_scalar=16)


def phi3(batch: int = 4, seed: int = 0, layers: int = 4):
    """Phi-3: fused query-key-value and gate-up projections, rotary embeddings."""
    return decoder("Phi3Config", "Phi3ForCausalLM", batch, seed, layers)


def gpt_neox(batch: int = 4, seed: int = 0, layers: int = 4):
    """GPT-NeoX (Pythia): parallel attention and MLP, partial rotary embeddings (a quarter of each head)."""
    return decoder("GPTNeoXConfig", "GPTNeoXForCausalLM", batch, seed, layers)


def olmo2(batch: int = 4, seed: int = 0, layers: int = 4):
    """OLMo 2: norms after attention and MLP, RMSNorm on queries and keys."""
    return decoder("Olmo2Config", "Olmo2ForCausalLM", batch, seed, layers)


def stablelm(batch: int = 4, seed: int = 0, layers: int = 4):
    """StableLM: LayerNorm, partial rotary embeddings (a quarter of each head)."""
    return decoder("StableLmConfig", "StableLmForCausalLM", batch, seed, layers)


def falcon(batch: int = 4, seed: int = 0, layers: int = 4):
    """Falcon: the new decoder architecture (grouped key-value heads, parallel attention and MLP), rotary."""
    return decoder("FalconConfig", "FalconForCausalLM", batch, seed, layers, new_decoder_architecture=True, num_kv_heads=2,
                   alibi=False, parallel_attn=True, bias=False)


def mixtral(batch: int = 4, seed: int = 0, layers: int = 4):
    """Mixtral: a sparse mixture of 4 SwiGLU experts per layer, 2 chosen per token."""
    return decoder("MixtralConfig", "MixtralForCausalLM", batch, seed, layers, num_local_experts=4, num_experts_per_tok=2)


def qwen3_moe(batch: int = 4, seed: int = 0, layers: int = 4):
    """Qwen3-MoE: a sparse mixture of 4 experts per layer (width 64), 2 chosen per token."""
    return decoder("Qwen3MoeConfig", "Qwen3MoeForCausalLM", batch, seed, layers, head_dim=16, num_experts=4,
                   num_experts_per_tok=2, moe_intermediate_size=64, decoder_sparse_step=1)


def mamba(batch: int = 4, seed: int = 0, layers: int = 4):
    """Mamba: selective state-space blocks (no attention), the sequential scan of its slow path."""
    return decoder("MambaConfig", "MambaForCausalLM", batch, seed, layers, state_size=8, expand=2, conv_kernel=4)


def torchtitan_llama3(batch: int = 8, seed: int = 0, layers: int = 4):
    """torchtitan's own Llama 3 (its ``debugmodel``, narrowed to width 64, 4 heads and a 512-token
    vocabulary; 16 tokens): the model a torchtitan user trains, named as torchtitan names it
    (``tok_embeddings``, ``layers.N``, ``norm``, ``output``), its weights from torchtitan's own
    ``init_weights``. Needs the extra ``titan`` (`devplace_lite.pipeline.titan`)."""
    import dataclasses

    _require("torchtitan", extra="titan")
    from torchtitan.models.llama3 import llama3_args
    from torchtitan.models.llama3.model.model import Transformer

    args = dataclasses.replace(llama3_args["debugmodel"], dim=64, n_layers=layers, n_heads=4, vocab_size=512,
                               max_seq_len=64)
    torch.manual_seed(seed)
    model = Transformer(args)
    with torch.no_grad():  # torchtitan initialises in place, its parameters being leaves
        model.init_weights()
    return model, (_tokens(batch, 16, 512, seed),)


def meta_lm(config_name: str, model_name: str, batch: int, seq: int, dtype: torch.dtype = torch.bfloat16,
            **config: Any) -> tuple[nn.Module, tuple]:
    """A Hugging Face causal LM of any size built from ``config_name(**config)`` on the meta device
    (shapes and dtypes, no weights allocated, nothing downloaded), in ``dtype`` as such models
    train, with a meta batch of ``batch`` x ``seq`` tokens: what a laptop plans for a cluster on
    a roofline spec (``devplace plan ... --spec H100``), as `LogitsOf` (fused attention where the
    family has it, no cache).

    Examples
    --------
    >>> model, (x,) = meta_lm("LlamaConfig", "LlamaForCausalLM", 8, 4096, **LLAMA3_70B)   # doctest: +SKIP
    >>> x.device, sum(p.numel() for p in model.parameters()) / 1e9                         # doctest: +SKIP
    (device(type='meta'), 70.55...)
    """
    with contextlib.suppress(UsageError):  # some transformers modules import torchvision when it is there
        import_torchvision()
    tr = _require("transformers")
    cfg = getattr(tr, config_name)(**config)
    cfg.use_cache = False
    cls = getattr(tr, model_name)
    # torch's scaled-dot-product attention, which a roofline prices as the fused kernel GPUs run
    # (`profile.FusedAttention`): eager attention would write, upcast and save every score; a
    # family whose attention torch's kernel cannot run (Gemma 2's soft-capped scores) stays eager
    cfg._attn_implementation = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    with torch.device("meta"):
        model = LogitsOf(cls(cfg), ("input_ids",)).to(dtype)
    return model, (torch.zeros(batch, seq, dtype=torch.long, device="meta"),)


#: Llama-3-70B's published configuration (the ``config.json`` of meta-llama/Meta-Llama-3-70B).
LLAMA3_70B = dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                  rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001)


def llama3_70b(batch: int = 1024, seq: int = 4096):
    """Llama-3-70B (80 layers, width 8,192, 64 heads, 8 key-value heads, MLP 28,672, a 128,256-token
    vocabulary) on the meta device in bfloat16 (`meta_lm`), ``batch`` sequences of ``seq`` tokens:
    ``devplace plan devplace_lite.zoo.external:llama3_70b --devices 1024 --spec H100``."""
    return meta_lm("LlamaConfig", "LlamaForCausalLM", batch, seq, **LLAMA3_70B)


def get(name: str):
    """The factory of external model ``name`` (of `MODELS` or `DECODERS`); a one-line error lists the known names."""
    if name not in MODELS and name not in DECODERS:
        raise UsageError(f"unknown external model {name!r}; known: {', '.join([*MODELS, *DECODERS])}")
    return globals()[name]
