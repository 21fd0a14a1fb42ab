"""`train.optimizer`: the one place a workload turns its train section into a MindSpore optimizer.

momentum: ``nn.Momentum`` (1 state tensor per parameter: the momentum buffer);
adamw: ``nn.AdamWeightDecay`` (2 per parameter: moments1, moments2), the seeds' optimizer, ``train.weight_decay``.
(States per parameter for the memory model: analyzers.analyses.memory.OPTIMIZER_STATES.)
"""

from __future__ import annotations

from perfbench.errors import ConfigError


def make_optimizer(params, train: dict):
    from mindspore import nn

    kind = str(train.get("optimizer") or "momentum")
    lr = float(train.get("lr", 0.05))
    if kind == "adamw":
        return nn.AdamWeightDecay(params, learning_rate=lr, weight_decay=float(train.get("weight_decay") or 0.0))
    if kind == "momentum":
        return nn.Momentum(params, learning_rate=lr, momentum=float(train.get("momentum", 0.9)))

    raise ConfigError(f"train.optimizer must be momentum or adamw, got {kind!r}")
