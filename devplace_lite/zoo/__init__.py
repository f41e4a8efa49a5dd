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
