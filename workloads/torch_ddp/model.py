"""ResNet with bottleneck blocks in plain PyTorch: the same layers (3-4-6-3), widths, stem and zero-initialised
last BatchNorm per block as the MindSpore one (workloads/resnet50/model.py); `width` 64 is the paper's ResNet-50.
`recompute=True`: each bottleneck block runs under activation checkpointing (`torch.utils.checkpoint`, non-reentrant)
while training, so backward runs its forward again instead of keeping its activations (as `train.recompute`
marks the same blocks in the MindSpore model; BatchNorm's running statistics are then updated twice per step)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = _conv(cin, width, 1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv(width, width, 3, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv(width, cout, 1)
        self.bn3 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn3.weight)  # zero-init last BN: stable start
        self.relu = nn.ReLU()
        self.down = (
            nn.Sequential(_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000, recompute: bool = False):
        super().__init__()
        self.recompute = recompute
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        blocks = []
        cin = width
        for i, n in enumerate(layers):
            w = width * (2**i)
            for j in range(int(n)):
                blocks.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        if self.recompute and self.training and torch.is_grad_enabled():
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False)
        else:
            x = self.blocks(x)
        return self.fc(x.mean(dim=(2, 3)))
