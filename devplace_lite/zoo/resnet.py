"""ResNet-50 v1.5 (He et al. 2016, "Deep Residual Learning for Image Recognition").

Four stages of bottleneck blocks (1x1 reduce, 3x3, 1x1 expand by 4, plus a shortcut); v1.5
puts the stage's stride in the 3x3 convolution, which gives the 4.1 G multiply-adds usually
quoted at 224x224. Every conv, batch norm and ReLU is its own module, so a layer-granularity
profile shows each of them as a node, as in the authors' layer graphs.
"""

from __future__ import annotations

import torch
from torch import nn

from ..graph import GraphError


class Bottleneck(nn.Module):
    """``x -> conv1x1 -> bn -> relu -> conv3x3(stride) -> bn -> relu -> conv1x1 -> bn``, plus
    the shortcut (a strided 1x1 projection when the shape changes), then ReLU."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
        self.relu3 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu3(y + shortcut)


class ResNet(nn.Module):
    """A bottleneck ResNet: 7x7/2 stem, 3x3/2 max-pool, four stages, global pool, classifier.

    ``blocks`` = blocks per stage ((3, 4, 6, 3) is ResNet-50), ``width`` = the first stage's
    bottleneck width (64 in the paper; each later stage doubles it).
    """

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        cin = width
        for i, n in enumerate(blocks):
            w = width * 2 ** i
            stage = [Bottleneck(cin, w, stride=1 if i == 0 else 2)]
            cin = w * Bottleneck.expansion
            stage += [Bottleneck(cin, w) for _ in range(n - 1)]
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(cfg: dict) -> ResNet:
    if len(cfg["blocks"]) != 4:
        raise GraphError(f"resnet: blocks must list four stages, got {cfg['blocks']!r}")
    return ResNet(tuple(cfg["blocks"]), cfg["width"], cfg["num_classes"])


def example_input(cfg: dict, batch: int, gen: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randn(batch, 3, cfg["image"], cfg["image"], generator=gen),)
