"""A BERT encoder (Devlin et al. 2019) with its masked-language-model head.

Token and position embeddings, LayerNorm, then ``layers`` post-LayerNorm encoder layers
(self-attention, residual add, LayerNorm, a GELU feed-forward network, residual add,
LayerNorm), and the pre-training head (dense, GELU, LayerNorm, a vocabulary projection tied
to the token embedding). The full configuration is BERT-base at 128 tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import SelfAttention


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.attention = SelfAttention(dim, heads, dropout=dropout)
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.ff1 = nn.Linear(dim, ffn)
        self.act = nn.GELU()
        self.ff2 = nn.Linear(ffn, dim)
        self.drop2 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop1(self.attention(x)))
        return self.norm2(x + self.drop2(self.ff2(self.act(self.ff1(x)))))


class Bert(nn.Module):
    """Token ids ``(batch, tokens)`` in, vocabulary logits ``(batch, tokens, vocab)`` out."""

    def __init__(self, layers: int, hidden: int, heads: int, ffn: int, vocab: int, max_len: int,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_len, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, dropout) for _ in range(layers))
        self.head_dense = nn.Linear(hidden, hidden)
        self.head_act = nn.GELU()
        self.head_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.tokens.weight  # tied, as in the original

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        x = self.drop(self.norm(x))
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.head_norm(self.head_act(self.head_dense(x))))


def build(cfg: dict) -> Bert:
    return Bert(cfg["layers"], cfg["hidden"], cfg["heads"], cfg["ffn"], cfg["vocab"], cfg["max_len"])


def example_input(cfg: dict, batch: int, gen: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randint(0, cfg["vocab"], (batch, cfg["seq"]), generator=gen),)
