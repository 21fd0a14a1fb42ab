"""A plain PyTorch DDP training script: a small MLP on synthetic data, a hand-written loop, gloo collectives.

It knows nothing of perfbench; run it yourself with

    torchrun --nproc_per_node=2 train_pytorch.py --steps 12

or sweep it with `perfbench sweep examples/own-job/pytorch.yaml` (perfbench finds its steps in optimizer.step()).
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP gradient bucket size in MB")
    a = p.parse_args()

    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    features, classes = 64, 10
    net = nn.Sequential(
        nn.Linear(features, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden), nn.ReLU(), nn.Linear(a.hidden, classes)
    )
    model = DDP(net, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    for _ in range(a.steps):
        x = torch.randn(a.batch_size, features, generator=g)
        y = torch.randint(0, classes, (a.batch_size,), generator=g)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank}: trained {a.steps} steps of {a.batch_size} samples, last loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
