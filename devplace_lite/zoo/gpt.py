"""A GPT-2 style decoder (Radford et al. 2019).

Token and position embeddings, ``layers`` pre-LayerNorm blocks (LayerNorm, causal
self-attention, residual add; LayerNorm, a 4x GELU MLP, residual add), a final LayerNorm and a
language-model head tied to the token embedding. The full configuration is GPT-2 small with
its 1024-token context.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import SelfAttention


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = SelfAttention(dim, heads, causal=True, dropout=dropout)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * dim, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attention(self.norm1(x)))
        return x + self.drop2(self.proj(self.act(self.fc(self.norm2(x)))))


class GPT(nn.Module):
    """Token ids ``(batch, tokens)`` in, next-token logits ``(batch, tokens, vocab)`` out."""

    def __init__(self, layers: int, dim: int, heads: int, vocab: int, max_len: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.drop(self.tokens(ids) + self.positions(torch.arange(t, device=ids.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(cfg: dict) -> GPT:
    return GPT(cfg["layers"], cfg["dim"], cfg["heads"], cfg["vocab"], cfg["max_len"])


def example_input(cfg: dict, batch: int, gen: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randint(0, cfg["vocab"], (batch, cfg["seq"]), generator=gen),)
