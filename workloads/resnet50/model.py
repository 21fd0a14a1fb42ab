"""ResNet with bottleneck blocks (ResNet-50 = layers 3-4-6-3, width 64), configurable width/depth."""

from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops


def _conv(cin, cout, k, stride=1):
    return nn.Conv2d(
        cin,
        cout,
        k,
        stride=stride,
        pad_mode="pad" if k > 1 else "valid",
        padding=k // 2 if k > 1 else 0,
        has_bias=False,
        weight_init="HeNormal",
    )


class Bottleneck(nn.Cell):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = _conv(cin, width, 1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv(width, width, 3, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv(width, cout, 1)
        self.bn3 = nn.BatchNorm2d(cout, gamma_init="zeros")  # zero-init last BN: stable start
        self.relu = nn.ReLU()
        self.has_down = stride != 1 or cin != cout
        if self.has_down:
            self.down = nn.SequentialCell([_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout)])
        else:
            self.down = None

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.has_down:
            identity = self.down(x)
        return self.relu(out + identity)


class Recomputed(nn.Cell):
    """A block whose activations are recomputed in backward in PyNative mode (``mindspore.recompute``: only the
    block's input is kept).  ``auto_prefix=False``: the block's parameters keep their names."""

    def __init__(self, block):
        super().__init__(auto_prefix=False)
        self.block = block

    def construct(self, x):
        return ms.recompute(self.block, x)


class ResNet(nn.Cell):
    def __init__(self, layers=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, pad_mode="pad", padding=3, has_bias=False, weight_init="HeNormal")
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        blocks = []
        cin = width
        for i, n in enumerate(layers):
            w = width * (2**i)
            for j in range(int(n)):
                blocks.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
        self.blocks = nn.SequentialCell(blocks)
        self.mean = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(cin, num_classes)

    def construct(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.blocks(x)
        return self.fc(self.mean(x, (2, 3)))


def param_count(net) -> int:
    return int(sum(int(p.size) for p in net.trainable_params()))


def pipeline_layers(net: ResNet) -> list:
    """The model as the ordered layer list the pipeline trainer cuts into stages:
    ``[stem (conv1, bn1, relu, pool), every bottleneck block, head (global mean + fc)]``.

    The cells share ``net``'s parameters (same initial weights as the data-parallel path for the same seed);
    ``auto_prefix=False`` keeps the parameter names ``net`` gave them (unique within any stage).
    """

    class Stem(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.conv1, self.bn1, self.relu, self.pool = net.conv1, net.bn1, net.relu, net.pool

        def construct(self, x):
            return self.pool(self.relu(self.bn1(self.conv1(x))))

    class Head(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.mean, self.fc = net.mean, net.fc

        def construct(self, x):
            return self.fc(self.mean(x, (2, 3)))

    return [Stem()] + list(net.blocks) + [Head()]
