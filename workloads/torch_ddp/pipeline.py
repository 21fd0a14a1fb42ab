"""Pipeline stages for the PyTorch ResNet-50 (`parallel.pipeline_stages` S > 1), on PyTorch's own
`torch.distributed.pipelining`: each rank runs one stage (a `PipelineStage` over a contiguous run of
[stem, every bottleneck block, head], the MindSpore workload's layer list), activations and their gradients go
between stages by point-to-point send/recv (gloo on CPU), and `parallel.pipeline_schedule` picks GPipe or 1F1B
over `parallel.micro_batches` M micro-batches.

Layout, as MindSpore's (contiguous stages): with world size W = S x D, rank r runs stage r // D in data-parallel
replica r % D. The stages of one replica form a process group described "pp" (the i-th lowest rank runs stage i:
how perfbench's analyses place stages, from the Kineto trace's `pg_config`); the D ranks of a stage form a group
described "dp", over which that stage's gradients are all-reduced once per step, after the schedule's step, in
DDP's buckets of `parallel.comm_fusion` MB (workloads/torch_ddp/buckets.py; DDP itself inside a `PipelineStage`
fails its bucket rebuild in torch 2.13 when micro-batches accumulate).
The split follows `parallel.pipeline_split` (layers per stage), else the
cost-balanced partition of the layers' estimated MACs (workloads.parallel.layout_math, the MindSpore workload's).

Samples are counted by the last stage alone (one replica trains `batch_size` samples per step, whatever S), with
the capture's step line.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from perfbench import capture
from perfbench.capture.recorder import current
from workloads.parallel.layout_math import resnet_layer_costs, stage_bounds
from workloads.torch_ddp.buckets import allreduce_after_backward, buckets
from workloads.torch_ddp.model import ResNet

#: ResNet-50's bottleneck blocks per group
BLOCKS = (3, 4, 6, 3)


class Stem(nn.Module):
    def __init__(self, net: ResNet):
        super().__init__()
        self.conv1, self.bn1, self.relu, self.pool = net.conv1, net.bn1, net.relu, net.pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn1(self.conv1(x))))


class Head(nn.Module):
    def __init__(self, net: ResNet):
        super().__init__()
        self.fc = net.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def layers(net: ResNet) -> list[nn.Module]:
    """[stem, every bottleneck block, head]: the units a stage takes a contiguous run of."""
    return [Stem(net), *net.blocks, Head(net)]


def layout(world: int, stages: int, rank: int) -> tuple[int, int, int]:
    """(stage, replica, replicas) of `rank`: contiguous stages, stage = rank // replicas."""
    replicas = world // stages
    return rank // replicas, rank % replicas, replicas


def groups(world: int, stages: int, rank: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup | None]:
    """(this rank's pp group, its dp group or None with one replica). Every rank creates every group, in one
    order, as `new_group` requires."""
    replicas = world // stages
    pp = dp = None
    for d in range(replicas):
        g = dist.new_group([s * replicas + d for s in range(stages)], group_desc="pp")
        if rank % replicas == d:
            pp = g
    if replicas > 1:
        for s in range(stages):
            g = dist.new_group([s * replicas + d for d in range(replicas)], group_desc="dp")
            if rank // replicas == s:
                dp = g
    assert pp is not None
    return pp, dp


def refusals(a) -> list[str]:
    """What this pipeline does not combine with (one line each)."""
    out = []
    if a.recompute:
        out.append("train.recompute with pipeline stages: not built for the PyTorch pipeline")
    if a.zero_stage:
        out.append("parallel.zero_stage with pipeline stages: not built for the PyTorch pipeline")
    if a.precision != "fp32":
        out.append("train.precision other than fp32 with pipeline stages: not built for the PyTorch pipeline")
    if a.grad_compression != "none":
        out.append("parallel.grad_compression with pipeline stages: not built for the PyTorch pipeline")
    if a.pipeline_schedule == "1f1b" and a.micro_batches < a.pipeline_stages:
        out.append(
            f"parallel.micro_batches {a.micro_batches} < pipeline_stages {a.pipeline_stages}: PyTorch's 1F1B "
            "schedule needs at least one micro-batch per stage (or pipeline_schedule: gpipe)"
        )
    return out


def train(a, world: int, rank: int, device: torch.device, bucket_cap_mb: float) -> float:
    """Train `a.steps` steps of the pipeline; the last stage's last loss (0.0 on the other stages)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    problems = refusals(a)
    if problems:
        raise SystemExit("; ".join(problems))
    S = a.pipeline_stages
    if world % S:
        raise SystemExit(f"world_size {world} is not a multiple of parallel.pipeline_stages {S}")
    stage, replica, replicas = layout(world, S, rank)
    pp, dp = groups(world, S, rank)
    rec = current()
    if rec is not None:
        rec.set_meta(stage=stage, pipeline_stages=S)
    torch.manual_seed(0)  # the same initial weights in every replica
    net = ResNet(BLOCKS, width=a.width, num_classes=a.num_classes)
    costs = resnet_layer_costs(BLOCKS, a.width, a.image_size, a.num_classes)
    lo, hi = stage_bounds(costs, S, a.pipeline_split)[stage]
    module: nn.Module = nn.Sequential(*layers(net)[lo:hi]).to(device)
    grads = buckets([p for p in module.parameters() if p.requires_grad], bucket_cap_mb) if dp is not None else []
    pipe = PipelineStage(module, stage, S, device, group=pp)
    loss_fn = nn.CrossEntropyLoss()
    schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[a.pipeline_schedule]
    sched = schedule(pipe, n_microbatches=a.micro_batches, loss_fn=loss_fn)
    opt = torch.optim.SGD(module.parameters(), lr=a.lr, momentum=0.9)
    first, last = stage == 0, stage == S - 1
    g = torch.Generator().manual_seed(1 + replica)  # each replica its own data, the same on its first and last stage
    data = [
        (
            torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=g).to(device),
            torch.randint(0, a.num_classes, (a.batch_size,), generator=g).to(device),
        )
        for _ in range(4)
    ]
    module.train()
    loss = 0.0
    for i in range(a.steps):
        x, y = data[i % len(data)]
        with capture.step(samples=a.batch_size if last else 0) as s:
            opt.zero_grad(set_to_none=False)
            losses: list[torch.Tensor] = []
            if first and last:
                sched.step(x, target=y, losses=losses)
            elif first:
                sched.step(x)
            elif last:
                sched.step(target=y, losses=losses)
            else:
                sched.step()
            if grads:
                allreduce_after_backward(grads, replicas, False, group=dp)
            opt.step()
            if losses:
                loss = float(torch.stack(losses).detach().mean())
                s.loss = loss
    print(
        f"rank {rank}: pipeline stage {stage}/{S} (layers {lo}-{hi - 1} of {len(costs)}), replica {replica}/"
        f"{replicas}, {a.pipeline_schedule} over {a.micro_batches} micro-batches, {a.steps} steps, "
        f"last loss {loss:.4f}",
        flush=True,
    )
    return loss
