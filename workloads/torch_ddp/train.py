"""The PyTorch reference workload: ResNet-50 (bottleneck 3-4-6-3, base width a knob) on synthetic images,
data parallel with DDP: gloo on CPU, NCCL on CUDA. Swept as `workload: script` (examples/pytorch-resnet50.yaml);
torchrun starts every rank in perfbench's capture bootstrap like any user's script.

It reads the run's settings (`perfbench.capture.settings()`; the command-line flags win, and give the defaults
outside perfbench: `torchrun --nproc_per_node=2 workloads/torch_ddp/train.py --steps 12`). The knobs, PyTorch's
own way:

- `parallel.comm_fusion` MB -> DDP `bucket_cap_mb` (0: a bucket per parameter; `all`: one bucket);
- `parallel.grad_compression` fp16 / powersgd -> DDP's `fp16_compress_hook` / `powerSGD_hook`;
- `parallel.overlap_grad_comm` true -> DDP all-reduces each bucket while backward goes on; false -> no DDP
  hooks: after the whole backward, one all-reduce per bucket (the same buckets: parameters in reverse order,
  a bucket closes once it holds `bucket_cap_mb`);
- `train.precision` bf16 / fp16 -> `torch.autocast` (fp16 with a GradScaler);
- `parallel.micro_batches` M -> gradient accumulation: each step's batch in M micro-batches, the first M-1 under
  DDP's `no_sync()` (perfbench.capture.parallel.sync), so the buckets are all-reduced once per step;
- `parallel.zero_stage: 1` -> `ZeroRedundancyOptimizer` (perfbench.capture.parallel.optimizer: each rank keeps
  the momentum of its share of the parameters and broadcasts its updated share, one broadcast per rank per step);
- `train.recompute` -> activation checkpointing of the bottleneck blocks (model.py);
- `parallel.pipeline_stages` S > 1 -> `torch.distributed.pipelining` stages over `parallel.micro_batches`,
  `parallel.pipeline_schedule` gpipe / 1f1b, `parallel.pipeline_split` (pipeline.py);
- `inject.straggler_rank` / `straggler_busy_ms` -> that rank alone burns this much CPU time at the start of every
  step (the MindSpore runner's straggler), so the other ranks wait for it in the all-reduces;
- `train.batch_size` (per rank), `train.steps`, `train.lr`, `knobs.width`, `knobs.image_size`, `knobs.num_classes`.

With one rank there is no process group traffic: the model is trained without DDP.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

from perfbench import capture
from workloads.torch_ddp import pipeline
from workloads.torch_ddp.buckets import allreduce_after_backward, buckets
from workloads.torch_ddp.launch import start
from workloads.torch_ddp.model import ResNet


def _args() -> argparse.Namespace:
    s = capture.settings()
    train, par, knobs = s.get("train") or {}, s.get("parallel") or {}, s.get("knobs") or {}
    inj = s.get("inject") or {}
    straggler = inj.get("straggler_rank")
    fusion = par.get("comm_fusion", 25)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=int(train.get("batch_size", 8)), help="per rank")
    p.add_argument("--steps", type=int, default=int(train.get("steps", 12)))
    p.add_argument("--lr", type=float, default=float(train.get("lr", 0.05)))
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=train.get("precision", "fp32"))
    p.add_argument("--width", type=int, default=int(knobs.get("width", 64)), help="base width (64: ResNet-50)")
    p.add_argument("--image-size", type=int, default=int(knobs.get("image_size", 32)))
    p.add_argument("--num-classes", type=int, default=int(knobs.get("num_classes", 10)))
    p.add_argument("--bucket-cap-mb", default=fusion, help="DDP bucket size in MB (0: per parameter; all)")
    p.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=bool(par.get("overlap_grad_comm", True)))
    p.add_argument(
        "--grad-compression", choices=["none", "fp16", "powersgd"], default=par.get("grad_compression", "none")
    )
    p.add_argument("--micro-batches", type=int, default=int(par.get("micro_batches") or 1))
    p.add_argument("--zero-stage", type=int, choices=[0, 1], default=int(par.get("zero_stage") or 0))
    p.add_argument("--recompute", action=argparse.BooleanOptionalAction, default=bool(train.get("recompute", False)))
    p.add_argument("--pipeline-stages", type=int, default=int(par.get("pipeline_stages") or 1))
    p.add_argument("--pipeline-schedule", choices=["gpipe", "1f1b"], default=par.get("pipeline_schedule") or "1f1b")
    p.add_argument(
        "--pipeline-split",
        type=lambda v: [int(x) for x in v.split(",")],
        default=par.get("pipeline_split"),
        help="layers per stage, comma-separated (stem + 16 blocks + head = 18)",
    )
    p.add_argument("--straggler-rank", type=int, default=None if straggler is None else int(straggler))
    p.add_argument("--straggler-busy-ms", type=float, default=float(inj.get("straggler_busy_ms") or 0))
    return p.parse_args()


def burn_cpu(seconds: float) -> None:
    """Spin until this thread used `seconds` of CPU time (the MindSpore runner's straggler burn)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


def bucket_cap_mb(value) -> float:
    """DDP's `bucket_cap_mb` for `parallel.comm_fusion` (capture.apply_parallel's rule)."""
    mb = capture.parallel.fusion_mb(value)
    return 0.0 if mb is None else mb


def main() -> None:
    a = _args()
    if a.grad_compression == "powersgd" and not a.overlap:
        raise SystemExit("parallel.grad_compression powersgd needs overlap_grad_comm: true (a DDP hook)")
    world, rank, device = start(a.batch_size, a.micro_batches)
    if a.pipeline_stages > 1:
        pipeline.train(a, world, rank, device, bucket_cap_mb(a.bucket_cap_mb))
        dist.destroy_process_group()
        return

    torch.manual_seed(0)  # the same initial weights on every rank
    net = ResNet(width=a.width, num_classes=a.num_classes, recompute=a.recompute).to(device)
    cap = bucket_cap_mb(a.bucket_cap_mb)
    model: nn.Module = net
    groups: list[list[torch.nn.Parameter]] = []
    if world > 1 and a.overlap:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # broadcast_buffers=False: BatchNorm statistics stay per rank, so the only collectives are the buckets
        model = DDP(net, bucket_cap_mb=cap, broadcast_buffers=False)
        if capture.settings():
            capture.apply_parallel(model, framework="pytorch")  # the grad_compression hook, when set
        elif a.grad_compression == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif a.grad_compression == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

            model.register_comm_hook(ps.PowerSGDState(process_group=None), ps.powerSGD_hook)
    elif world > 1:
        for t in net.state_dict().values():  # DDP's start: rank 0's weights everywhere
            dist.broadcast(t, 0)
        groups = buckets([p for p in net.parameters() if p.requires_grad], cap)

    zero = a.zero_stage if world > 1 else 0
    opt = capture.parallel.optimizer(model.parameters(), torch.optim.SGD, zero_stage=zero, lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=a.precision == "fp16")
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    data = [
        (
            torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=g).to(device),
            torch.randint(0, a.num_classes, (a.batch_size,), generator=g).to(device),
        )
        for _ in range(4)
    ]
    model.train()
    loss = torch.zeros(())
    m = a.micro_batches
    burn_s = a.straggler_busy_ms / 1000.0 if a.straggler_rank == rank else 0.0
    for i in range(a.steps):
        if burn_s:
            burn_cpu(burn_s)
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=False)
        for j, (xs, ys) in enumerate(zip(x.chunk(m), y.chunk(m))):
            with capture.parallel.sync(model, j, m):  # no_sync() for all but the last micro-batch
                with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                    loss = loss_fn(model(xs), ys) / m
                scaler.scale(loss).backward()
        if groups:
            allreduce_after_backward(groups, world, a.grad_compression == "fp16")
        scaler.step(opt)
        scaler.update()
    print(
        f"rank {rank}: ResNet width {a.width}, {a.steps} steps of {a.batch_size} images {a.image_size}px, "
        f"precision {a.precision}, bucket_cap_mb {cap:g}, overlap {a.overlap}, micro-batches {m}, "
        f"zero {zero}, recompute {a.recompute}, buckets "
        f"{len(groups) if groups else 'DDP'}, last loss {loss.item() * m:.4f}",
        flush=True,
    )
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
