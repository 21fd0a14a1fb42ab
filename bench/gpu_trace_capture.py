"""Capture a real PyTorch profiler (Kineto) trace of ResNet-50 training on one CUDA GPU, for the Kineto parity check.

Run on a machine with an NVIDIA GPU (the device check in docs/benchmarks.md, "Kineto on a GPU"):

    torchrun --nproc_per_node 1 bench/gpu_trace_capture.py --out DIR [--steps 10] [--batch 64]

DDP over NCCL at world size 1 (so the trace holds `distributedInfo`, NCCL kernels and `record_param_comms`), synthetic
ImageNet-shaped data, SGD; `torch.profiler` with a schedule (wait 2, warm-up 2, active 3) writes DIR/*.pt.trace.json.gz
through `tensorboard_trace_handler`, the file layout HolisticTraceAnalysis reads. It also writes DIR/steps.json: the
wall time of every step measured with CUDA events, so the trace's ProfilerStep spans can be checked against it.
Then, on any machine: `perfbench analyze DIR` and bench/bench_kineto_import.py (perfbench beside HTA on DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the trace (*.pt.trace.json.gz) and steps.json")
    ap.add_argument("--steps", type=int, default=10, help="training steps (>= 7: the profiler's window is steps 5-7)")
    ap.add_argument("--batch", type=int, default=64, help="samples per step")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    args = ap.parse_args()
    import torchvision

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dev = torch.device("cuda")
    model = torchvision.models.resnet50(weights=None).to(dev).to(memory_format=torch.channels_last)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    steps = []
    sched = torch.profiler.schedule(wait=2, warmup=2, active=3, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=sched,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out), worker_name=f"rank{rank}", use_gzip=True),
        profile_memory=True,
        record_shapes=False,
    ) as prof:
        for i in range(args.steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            end.record()
            torch.cuda.synchronize()
            steps.append({"step": i, "gpu_ms": start.elapsed_time(end), "wall_ms": (time.perf_counter() - t0) * 1e3})
            prof.step()
    (out / "steps.json").write_text(
        json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch, "steps": steps}
        )
    )
    dist.destroy_process_group()
    print(json.dumps(steps[-3:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
