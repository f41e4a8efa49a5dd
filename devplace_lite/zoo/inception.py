"""An Inception-v3 network (Szegedy et al. 2016, "Rethinking the Inception Architecture").

A stem of plain convolutions, then blocks of parallel branches joined by channel concatenation:
A (1x1, 5x5, double 3x3, pool), a grid reduction, C (factorised 1x7 / 7x1 convolutions), a
second reduction, E (expanded 1x3 / 3x1 filter banks), global pooling and a classifier. The
auxiliary classifier of the paper is left out (it only matters for training signal).
``width`` scales every channel count, ``blocks`` = how many A, C and E blocks (3, 4, 2 in the
paper); the branches make the graph wide, unlike the chains of ResNet and BERT.
"""

from __future__ import annotations

import torch
from torch import nn

from ..graph import GraphError


class ConvBN(nn.Module):
    """Convolution without bias, batch norm, ReLU (three layer nodes)."""

    def __init__(self, cin: int, cout: int, kernel, stride=1, padding=0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.relu = nn.ReLU()
        self.cout = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class _Scaled:
    """Channel counts scaled by the width multiplier (at least one channel)."""

    def __init__(self, width: float) -> None:
        self.width = width

    def __call__(self, c: int) -> int:
        return max(1, int(round(c * self.width)))


class BlockA(nn.Module):
    def __init__(self, cin: int, pool: int, s: _Scaled) -> None:
        super().__init__()
        self.b1 = ConvBN(cin, s(64), 1)
        self.b5 = nn.Sequential(ConvBN(cin, s(48), 1), ConvBN(s(48), s(64), 5, padding=2))
        self.b3 = nn.Sequential(ConvBN(cin, s(64), 1), ConvBN(s(64), s(96), 3, padding=1),
                                ConvBN(s(96), s(96), 3, padding=1))
        self.pool = nn.AvgPool2d(3, stride=1, padding=1)
        self.bp = ConvBN(cin, s(pool), 1)
        self.cout = s(64) + s(64) + s(96) + s(pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(self.pool(x))], 1)


class ReductionB(nn.Module):
    def __init__(self, cin: int, s: _Scaled) -> None:
        super().__init__()
        self.b3 = ConvBN(cin, s(384), 3, stride=2)
        self.b3d = nn.Sequential(ConvBN(cin, s(64), 1), ConvBN(s(64), s(96), 3, padding=1),
                                 ConvBN(s(96), s(96), 3, stride=2))
        self.pool = nn.MaxPool2d(3, stride=2)
        self.cout = s(384) + s(96) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b3d(x), self.pool(x)], 1)


class BlockC(nn.Module):
    def __init__(self, cin: int, c7: int, s: _Scaled) -> None:
        super().__init__()
        c7 = s(c7)
        self.b1 = ConvBN(cin, s(192), 1)
        self.b7 = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (1, 7), padding=(0, 3)),
                                ConvBN(c7, s(192), (7, 1), padding=(3, 0)))
        self.b7d = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                 ConvBN(c7, c7, (1, 7), padding=(0, 3)), ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                 ConvBN(c7, s(192), (1, 7), padding=(0, 3)))
        self.pool = nn.AvgPool2d(3, stride=1, padding=1)
        self.bp = ConvBN(cin, s(192), 1)
        self.cout = 4 * s(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.b7d(x), self.bp(self.pool(x))], 1)


class ReductionD(nn.Module):
    def __init__(self, cin: int, s: _Scaled) -> None:
        super().__init__()
        self.b3 = nn.Sequential(ConvBN(cin, s(192), 1), ConvBN(s(192), s(320), 3, stride=2))
        self.b7 = nn.Sequential(ConvBN(cin, s(192), 1), ConvBN(s(192), s(192), (1, 7), padding=(0, 3)),
                                ConvBN(s(192), s(192), (7, 1), padding=(3, 0)), ConvBN(s(192), s(192), 3, stride=2))
        self.pool = nn.MaxPool2d(3, stride=2)
        self.cout = s(320) + s(192) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7(x), self.pool(x)], 1)


class BlockE(nn.Module):
    def __init__(self, cin: int, s: _Scaled) -> None:
        super().__init__()
        self.b1 = ConvBN(cin, s(320), 1)
        self.b3 = ConvBN(cin, s(384), 1)
        self.b3a = ConvBN(s(384), s(384), (1, 3), padding=(0, 1))
        self.b3b = ConvBN(s(384), s(384), (3, 1), padding=(1, 0))
        self.b3d = nn.Sequential(ConvBN(cin, s(448), 1), ConvBN(s(448), s(384), 3, padding=1))
        self.b3da = ConvBN(s(384), s(384), (1, 3), padding=(0, 1))
        self.b3db = ConvBN(s(384), s(384), (3, 1), padding=(1, 0))
        self.pool = nn.AvgPool2d(3, stride=1, padding=1)
        self.bp = ConvBN(cin, s(192), 1)
        self.cout = s(320) + 4 * s(384) + s(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y3 = self.b3(x)
        y3d = self.b3d(x)
        return torch.cat([self.b1(x), self.b3a(y3), self.b3b(y3), self.b3da(y3d), self.b3db(y3d),
                          self.bp(self.pool(x))], 1)


class InceptionV3(nn.Module):
    """Stem, ``blocks[0]`` A blocks, reduction, ``blocks[1]`` C blocks, reduction, ``blocks[2]``
    E blocks, global average pool, dropout, classifier. Needs inputs of at least 75x75."""

    def __init__(self, width: float = 1.0, blocks: tuple[int, int, int] = (3, 4, 2), num_classes: int = 1000) -> None:
        super().__init__()
        s = _Scaled(width)
        self.stem = nn.Sequential(
            ConvBN(3, s(32), 3, stride=2), ConvBN(s(32), s(32), 3), ConvBN(s(32), s(64), 3, padding=1),
            nn.MaxPool2d(3, stride=2), ConvBN(s(64), s(80), 1), ConvBN(s(80), s(192), 3), nn.MaxPool2d(3, stride=2))
        layers: list[nn.Module] = []
        cin = s(192)
        for pool in ([32] + [64] * (blocks[0] - 1))[:blocks[0]]:
            layers.append(BlockA(cin, pool, s))
            cin = layers[-1].cout
        layers.append(ReductionB(cin, s))
        cin = layers[-1].cout
        c7s = [128] + [160] * max(0, blocks[1] - 2) + [192] * (blocks[1] > 1)
        for c7 in c7s:
            layers.append(BlockC(cin, c7, s))
            cin = layers[-1].cout
        layers.append(ReductionD(cin, s))
        cin = layers[-1].cout
        for _ in range(blocks[2]):
            layers.append(BlockE(cin, s))
            cin = layers[-1].cout
        self.blocks = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


def build(cfg: dict) -> InceptionV3:
    blocks = tuple(cfg["blocks"])
    if len(blocks) != 3 or min(blocks) < 1:
        raise GraphError(f"inception: blocks must be three positive counts (A, C, E), got {cfg['blocks']!r}")
    return InceptionV3(cfg["width"], blocks, cfg["num_classes"])


def example_input(cfg: dict, batch: int, gen: torch.Generator) -> tuple[torch.Tensor]:
    if cfg["image"] < 75:
        raise GraphError(f"inception needs images of at least 75x75, got {cfg['image']}")
    return (torch.randn(batch, 3, cfg["image"], cfg["image"], generator=gen),)
