"""A PyTorch DDP script that goes wrong on purpose: `--mode crash` raises on rank 1 after 3 steps; `--mode nosteps`
trains without a torch.optim optimizer (perfbench cannot see its steps)."""

import argparse

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=("crash", "nosteps"))
a = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
net = nn.Linear(8, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(6):
    loss = net(torch.randn(4, 8)).sum()
    loss.backward()
    if a.mode == "crash":
        if step == 3 and rank == 1:
            raise RuntimeError("boom at step 3")
        opt.step()
    else:
        with torch.no_grad():
            for w in net.parameters():
                w -= 0.1 * w.grad
    dist.all_reduce(loss.detach())
dist.destroy_process_group()
