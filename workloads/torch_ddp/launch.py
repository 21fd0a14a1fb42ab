"""What both PyTorch reference jobs do first under torchrun: the device (CUDA when there is one, else the CPU),
the process group (NCCL on CUDA, gloo on CPU; none at world size 1) and the check that the batch splits into the
micro-batches."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def start(batch_size: int, micro_batches: int) -> tuple[int, int, torch.device]:
    """(world size, rank, device) of this process, its process group joined; SystemExit on a batch that does not
    split into `micro_batches`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    if micro_batches < 1 or batch_size % micro_batches:
        raise SystemExit(f"train.batch_size {batch_size} is not divisible by parallel.micro_batches {micro_batches}")
    return world, rank, device
