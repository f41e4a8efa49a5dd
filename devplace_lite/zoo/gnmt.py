"""A GNMT-style LSTM encoder-decoder (Wu et al. 2016), in the 4+4-layer MLPerf configuration.

Encoder: embedding, a bidirectional LSTM layer, a unidirectional layer, then layers with
residual connections. Decoder (teacher forcing, the training and profiling setting): embedding,
a first LSTM layer whose outputs query an additive (Bahdanau) attention over the encoder
outputs; every later layer reads its input concatenated with the attention context, with
residual connections from the third layer on; a vocabulary classifier. Each LSTM layer is one
``nn.LSTM`` (one fused operator at either granularity).
"""

from __future__ import annotations

import torch
from torch import nn

from ..graph import GraphError


class AdditiveAttention(nn.Module):
    """``softmax(v^T tanh(W q + U k)) k`` for every query against every key (one layer node)."""

    devplace_layer = True

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden)
        self.score = nn.Linear(hidden, 1, bias=False)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        energy = torch.tanh(self.query(queries).unsqueeze(2) + self.key(keys).unsqueeze(1))
        weights = torch.softmax(self.score(energy).squeeze(-1), dim=-1)
        return torch.bmm(weights, keys)


class GNMT(nn.Module):
    """Source and target ids ``(batch, tokens)`` in, target logits ``(batch, tgt, vocab)`` out."""

    def __init__(self, layers: int, hidden: int, vocab: int, dropout: float = 0.2) -> None:
        super().__init__()
        h = hidden
        self.src_embed = nn.Embedding(vocab, h)
        self.tgt_embed = nn.Embedding(vocab, h)
        self.enc_bi = nn.LSTM(h, h, batch_first=True, bidirectional=True)
        self.enc = nn.ModuleList([nn.LSTM(2 * h, h, batch_first=True)] +
                                 [nn.LSTM(h, h, batch_first=True) for _ in range(layers - 2)])
        self.dec_att = nn.LSTM(h, h, batch_first=True)
        self.attention = AdditiveAttention(h)
        self.dec = nn.ModuleList(nn.LSTM(2 * h, h, batch_first=True) for _ in range(layers - 1))
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(h, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        x = self.enc_bi(self.drop(self.src_embed(src)))[0]
        for i, lstm in enumerate(self.enc):
            y = lstm(self.drop(x))[0]
            x = y if i == 0 else x + y
        memory = x
        q = self.dec_att(self.drop(self.tgt_embed(tgt)))[0]
        context = self.attention(q, memory)
        x = q
        for i, lstm in enumerate(self.dec):
            y = lstm(self.drop(torch.cat([x, context], dim=2)))[0]
            x = y if i == 0 else x + y
        return self.classifier(self.drop(x))


def build(cfg: dict) -> GNMT:
    if cfg["layers"] < 2:
        raise GraphError(f"gnmt needs at least 2 layers per side, got {cfg['layers']}")
    return GNMT(cfg["layers"], cfg["hidden"], cfg["vocab"])


def example_input(cfg: dict, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randint(0, cfg["vocab"], (batch, cfg["src_len"]), generator=gen),
            torch.randint(0, cfg["vocab"], (batch, cfg["tgt_len"]), generator=gen))
