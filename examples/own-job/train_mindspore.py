"""A plain MindSpore data-parallel training script: a small MLP on synthetic data, trained with Model.train.

It knows nothing of perfbench; run it yourself with

    msrun --worker_num=2 --local_worker_num=2 --master_port=8118 --join=True train_mindspore.py --steps 12

or sweep it with `perfbench sweep examples/own-job/mindspore.yaml` (perfbench finds its steps in Model.train).
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init


class MLP(nn.Cell):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.body = nn.SequentialCell(
            nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU(), nn.Dense(hidden, classes)
        )

    def construct(self, x):
        return self.body(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--fusion-mb", type=float, default=0, help="AllReduce bucket size in MB (0: one per parameter)")
    a = p.parse_args()

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    init()  # msrun starts every rank (and a scheduler, which serves the cluster inside init())
    rank, size = get_rank(), get_group_size()
    if size > 1:
        fusion = {"comm_fusion": {"allreduce": {"mode": "size", "config": int(a.fusion_mb)}}} if a.fusion_mb else {}
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True, **fusion)
    ms.set_seed(0)

    features, classes = 64, 10
    rng = np.random.default_rng(0)  # the same data on every rank; each rank reads its shard
    n = a.steps * a.batch_size * size
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False, num_shards=size, shard_id=rank)
    data = data.batch(a.batch_size, drop_remainder=True)

    net = MLP(features, a.hidden, classes)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=a.lr, momentum=0.9)
    model = ms.Model(net, loss_fn=loss, optimizer=opt)
    model.train(1, data, dataset_sink_mode=False)
    print(f"rank {rank}: trained {a.steps} steps of {a.batch_size} samples", flush=True)


if __name__ == "__main__":
    main()
