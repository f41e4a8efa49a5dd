"""Models for tests/test_plan.py that torchrun's processes load by spec (``plan_models:name``):
this folder is put on their PYTHONPATH."""

from __future__ import annotations

import torch
from torch import nn


class Gate(nn.Module):
    """A block whose forward branches on data: neither torch.export nor torch.fx can trace it.
    (The branch is the same for every micro-batch, so the pipeline computes the model.)"""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.abs().sum() >= 0:
            return torch.relu(self.lin(x))
        return torch.tanh(self.lin(x))


class Branchy(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(8, d), Gate(d), nn.Linear(d, d), nn.Linear(d, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def branchy(batch: int = 8, seed: int = 0, width: int = 16):
    torch.manual_seed(seed)
    return Branchy(width).eval(), (torch.randn(batch, 8, generator=torch.Generator().manual_seed(seed)),)


def branchy_wide(batch: int = 8, seed: int = 0):
    """`branchy` with passes of milliseconds: two stages beat one even with torch's runtime
    priced on every pass (a plan for a run measures and prices it)."""
    return branchy(batch, seed, width=2048)


class Unequal(nn.Module):
    """Layers of very unequal cost, a skip connection, a weight tied between first and last."""

    def __init__(self, d: int = 128) -> None:
        super().__init__()
        self.embed = nn.Linear(16, d, bias=False)
        self.layers = nn.ModuleList([nn.Linear(d, d * w) if i % 2 == 0 else nn.Linear(d * w, d)
                                     for i, w in enumerate((1, 1, 8, 8, 2, 2))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        skip = h
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return torch.nn.functional.linear(h + skip, self.embed.weight.t())  # the embedding, tied as a head


def unequal(batch: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return Unequal().eval(), (torch.randn(batch, 16, generator=torch.Generator().manual_seed(seed)),)


def unequal_profile(cap=None):
    """The training segment graph of `unequal` (batch 4) as `plan` measures it: the profile the
    planner tests share (``cap``: a capture of it already made)."""
    from devplace_lite.pipeline.capture import capture
    from devplace_lite.pipeline.measure import measure_segments
    from devplace_lite.pipeline.segments import segment_graph

    if cap is None:
        cap = capture(*unequal(batch=4))
    return segment_graph(cap, measure_segments(cap, training=True, repeats=2, warmup=0))


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


def skippy(batch: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return Skippy().eval(), (torch.randn(batch, 8, generator=torch.Generator().manual_seed(seed + 1)),)


def exits():
    """A spec whose function ends the program (test_plan's bad-spec cases)."""
    raise SystemExit(0)


def chatty():
    """A spec whose function prints, then returns no model (test_plan's stdout case)."""
    print("building")
    return "not a model"


class Centred(nn.Module):
    """Subtracts the batch's mean between two layers: its answer on a micro-batch is not its
    answer's rows on the whole batch, so a pipeline over micro-batches computes something else."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(8, d), nn.Linear(d, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        return self.second(h - h.mean(dim=0, keepdim=True))


def centred(batch: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return Centred(), (torch.randn(batch, 8, generator=torch.Generator().manual_seed(seed)),)


def per_process(batch: int = 8, seed: int = 0):
    """Weights and inputs drawn from a generator seeded by the process id: every torchrun rank
    builds another model, whatever the seed."""
    import os

    g = torch.Generator().manual_seed(os.getpid())
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / 4)
    return model, (torch.randn(batch, 8, generator=g),)


def mamba(batch: int = 8, seed: int = 0):
    """Hugging Face Mamba built from its config as a user would, without seeding torch: its
    weights come from torch's global generator (2 layers, width 64, 8 tokens)."""
    from transformers import MambaConfig, MambaForCausalLM

    from devplace_lite.zoo.external import LogitsOf

    cfg = MambaConfig(vocab_size=512, hidden_size=64, state_size=8, num_hidden_layers=2)
    model = LogitsOf(MambaForCausalLM(cfg), ("input_ids",)).eval()
    return model, (torch.randint(0, 512, (batch, 8), generator=torch.Generator().manual_seed(seed)),)
