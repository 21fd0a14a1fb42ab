"""A PyTorch DDP script with perfbench's capture line: `capture.step` marks its steps, `capture.apply_parallel`
gives DDP the run's bucket size and gradient compression hook. It also runs without perfbench (a no-op then)."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from perfbench import capture

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--report", default="")
a = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
model = DDP(net, **capture.apply_parallel())
capture.apply_parallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(rank)
for step in range(a.steps):
    with capture.step(samples=a.batch_size) as s:
        x = torch.randn(a.batch_size, 32, generator=g)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        s.loss = loss.item()
if a.report:  # what the script did, for the test to compare with what perfbench recorded
    with open(os.path.join(a.report, f"rank{rank}.json"), "w") as fh:
        json.dump({"steps": a.steps, "batch_size": a.batch_size, "params": len(list(net.parameters()))}, fh)
dist.destroy_process_group()
