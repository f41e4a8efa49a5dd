"""Multi-head scaled dot-product self-attention, written out op by op (Vaswani et al. 2017).

Used by the BERT and GPT models of the zoo. The class sets ``devplace_layer = True``: at
layer granularity the profiler keeps the whole attention as one node (as a fused attention
kernel runs it); at operator granularity it shows the projections, the two batched matrix
products, the scaling, the (causal) mask and the softmax as separate nodes.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    """``softmax(Q K^T / sqrt(d) [+ causal mask]) V`` over ``heads`` heads, then an output
    projection. Input and output are ``(batch, tokens, dim)``."""

    devplace_layer = True

    def __init__(self, dim: int, heads: int, causal: bool = False, dropout: float = 0.1) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} is not a multiple of {heads} heads")
        self.heads, self.head_dim, self.causal = heads, dim // heads, causal
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.query(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.key(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.value(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if self.causal:
            later = scores.new_ones((t, t), dtype=torch.bool).triu(1)  # True where a token would see a later one
            scores = scores.masked_fill(later, float("-inf"))
        weights = self.drop(torch.softmax(scores, dim=-1))
        context = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, d)
        return self.out(context)
