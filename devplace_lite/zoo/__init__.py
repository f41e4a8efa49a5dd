"""The model zoo: five well-known networks, defined in this project, to profile into graphs.

Each entry of `MODELS` names a module of this package that defines ``build(config) ->
nn.Module`` and ``example_input(config, batch, generator) -> tuple of tensors``, and two
configurations: ``"tiny"`` (seconds to profile, for tests and chapters) and ``"full"`` (the
published size). Importing this package does not import torch; `ZooModel.build` does.

========  =====================================================  ================================
name      network                                                full configuration
========  =====================================================  ================================
resnet50  ResNet-50 v1.5 (He et al. 2016)                        224x224, 1000 classes
inception Inception-v3 (Szegedy et al. 2016), branchy            299x299, 1000 classes
bert      BERT-base encoder with a masked-LM head (Devlin 2019)  12 layers, 768 wide, 128 tokens
gnmt      GNMT LSTM encoder-decoder (Wu et al. 2016; MLPerf)     4+4 layers, 1024 units, 50 tokens
gpt       GPT-2 small decoder (Radford et al. 2019)              12 layers, 768 wide, 1024 tokens
========  =====================================================  ================================

Example
-------
>>> from devplace_lite.zoo import MODELS
>>> sorted(MODELS)
['bert', 'gnmt', 'gpt', 'inception', 'resnet50']
>>> MODELS["bert"].config("tiny")["layers"]
2
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

from ..graph import GraphError

SIZES = ("tiny", "full")


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: where the definition lives and its named configurations."""

    name: str
    module: str
    description: str
    configs: dict[str, dict[str, Any]]

    def config(self, size: str = "tiny", **overrides: Any) -> dict[str, Any]:
        """The configuration of ``size`` (``"tiny"`` or ``"full"``) with ``overrides`` applied."""
        if size not in self.configs:
            raise GraphError(f"model {self.name}: unknown size {size!r}; known: {', '.join(self.configs)}")
        unknown = set(overrides) - set(self.configs[size])
        if unknown:
            raise GraphError(f"model {self.name}: unknown setting(s) {sorted(unknown)}; "
                             f"known: {', '.join(self.configs[size])}")
        return {**self.configs[size], **overrides}

    def _impl(self):
        return importlib.import_module(f"devplace_lite.zoo.{self.module}")

    def build(self, size: str = "tiny", *, seed: int = 0, device: Any = None, **overrides: Any):
        """The model in eval mode, weights drawn from ``seed``; ``device="meta"`` allocates none
        (enough for roofline profiles, which need shapes only)."""
        import torch

        cfg = self.config(size, **overrides)
        torch.manual_seed(seed)
        with torch.device(device or "cpu"):
            model = self._impl().build(cfg)
        return model.eval()

    def example_input(self, size: str = "tiny", batch: int = 1, *, seed: int = 0, **overrides: Any) -> tuple:
        """A tuple of input tensors for a batch of ``batch`` samples, drawn from ``seed``."""
        import torch

        if int(batch) != batch or batch < 1:
            raise GraphError(f"batch must be a positive integer, got {batch!r}")
        gen = torch.Generator().manual_seed(seed)
        return tuple(self._impl().example_input(self.config(size, **overrides), int(batch), gen))


MODELS: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("resnet50", "resnet", "ResNet-50 v1.5: bottleneck residual blocks, stride in the 3x3 conv",
             {"tiny": dict(blocks=(1, 1, 1, 1), width=8, num_classes=10, image=64),
              "full": dict(blocks=(3, 4, 6, 3), width=64, num_classes=1000, image=224)}),
    ZooModel("inception", "inception", "Inception-v3: parallel factorised-convolution branches joined by concat",
             {"tiny": dict(width=0.0625, blocks=(1, 1, 1), num_classes=10, image=107),
              "full": dict(width=1.0, blocks=(3, 4, 2), num_classes=1000, image=299)}),
    ZooModel("bert", "bert", "BERT encoder (post-LayerNorm) with a tied masked-language-model head",
             {"tiny": dict(layers=2, hidden=32, heads=2, ffn=64, vocab=128, max_len=32, seq=16),
              "full": dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, max_len=512, seq=128)}),
    ZooModel("gnmt", "gnmt", "GNMT: bidirectional then residual LSTM encoder, attention LSTM decoder",
             {"tiny": dict(layers=3, hidden=16, vocab=64, src_len=7, tgt_len=5),
              "full": dict(layers=4, hidden=1024, vocab=32000, src_len=50, tgt_len=50)}),
    ZooModel("gpt", "gpt", "GPT-2 style decoder: pre-LayerNorm causal blocks, tied LM head",
             {"tiny": dict(layers=2, dim=32, heads=2, vocab=128, max_len=32, seq=16),
              "full": dict(layers=12, dim=768, heads=12, vocab=50257, max_len=1024, seq=1024)}),
)}


def get(name: str) -> ZooModel:
    """The zoo entry called ``name``; a one-line error lists the known names."""
    if name not in MODELS:
        raise GraphError(f"unknown zoo model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def load(spec: str, *, size: str = "tiny", batch: int = 4, seed: int = 0) -> tuple[Any, tuple]:
    """``(model, example inputs of the whole batch)`` from a model spec.

    ``spec`` is a zoo name (``gpt``: built at ``size`` with ``batch`` samples) or
    ``module:function``: the module is imported (nothing else is) and the function called,
    with ``batch=`` and ``seed=`` when it takes them; it must return an ``nn.Module`` and a
    tensor or a tuple of tensors. Anything else is a `UsageError` in one line.

    Examples
    --------
    >>> load("os:getcwd")
    Traceback (most recent call last):
    ...
    devplace_lite.errors.UsageError: model spec os:getcwd: os.getcwd is a builtin_function_or_method, not a Python function (def) returning (model, example inputs)
    """
    from ..errors import UsageError

    if ":" not in spec:
        if spec not in MODELS:
            raise UsageError(f"unknown model {spec!r}: give a zoo name ({', '.join(sorted(MODELS))}) or "
                             "module:function returning (model, example inputs)")
        z = MODELS[spec]
        return z.build(size, seed=seed), z.example_input(size, batch=batch, seed=seed)
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"model spec {spec}: expected module:function")
    import os

    # the current folder is importable, as with `python -m`: mynet:build finds ./mynet.py
    if os.getcwd() not in [os.path.abspath(p or ".") for p in sys.path]:
        sys.path.insert(0, os.getcwd())
    from .external import torchvision_tolerated

    try:
        with torchvision_tolerated(spec):
            mod = importlib.import_module(module)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to import the user's module is one line
        raise UsageError(f"model spec {spec}: cannot import {module} ({type(e).__name__}: {e})".splitlines()[0]) from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise UsageError(f"model spec {spec}: {module} has no function {name}")
    import contextlib
    import inspect

    # a builder is a Python function: a builtin (os.fork, os.abort, input, exit) never returns a
    # model, and calling one would fork, crash or wait on stdin before the spec could be refused
    if not inspect.isfunction(fn):
        raise UsageError(f"model spec {spec}: {module}.{name} is a {type(fn).__name__}, not a Python function "
                         "(def) returning (model, example inputs)")
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in (("batch", batch), ("seed", seed)) if k in params}
    import torch

    # a builder that draws its weights from torch's global generator without seeding it (a
    # Hugging Face model built from its config) draws the same ones in every process
    torch.manual_seed(seed)
    try:
        # what the builder prints is not the command's answer: stdout carries --json
        with contextlib.redirect_stdout(sys.stderr), torchvision_tolerated(spec):
            got = fn(**kwargs)
    except UsageError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's function failed or exited: one line
        raise UsageError(f"model spec {spec}: {module}.{name}() failed ({type(e).__name__}: {e})".splitlines()[0]) from None
    ok = isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], torch.nn.Module)
    inputs = got[1] if ok else None
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else inputs
    if not ok or not isinstance(inputs, (tuple, list)) or not inputs or \
            not all(isinstance(t, torch.Tensor) for t in inputs):
        raise UsageError(f"model spec {spec}: {module}.{name}() returned {type(got).__name__}, not (model, example "
                         "inputs): the function must return an nn.Module and a tensor or a tuple of tensors")
    return got[0], tuple(inputs)
