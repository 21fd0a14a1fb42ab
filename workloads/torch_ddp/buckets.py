"""DDP's gradient buckets, built and all-reduced by hand: what the PyTorch reference job does with
`overlap_grad_comm: false` (after the whole backward instead of during it) and what each pipeline stage's
data-parallel ranks do after the schedule's step."""

from __future__ import annotations

import torch
import torch.distributed as dist

MB = 1 << 20


def buckets(params: list[torch.nn.Parameter], cap_mb: float) -> list[list[torch.nn.Parameter]]:
    """DDP's bucketing: parameters in reverse order, a bucket closes once its bytes reach the cap."""
    cap = cap_mb * MB
    out: list[list[torch.nn.Parameter]] = [[]]
    size = 0
    for p in reversed(params):
        out[-1].append(p)
        size += p.numel() * p.element_size()
        if size >= cap:
            out.append([])
            size = 0
    return [b for b in out if b]


def allreduce_after_backward(
    bucket_list: list[list[torch.nn.Parameter]], world: int, fp16: bool, group: dist.ProcessGroup | None = None
) -> None:
    """The gradients of each bucket flattened, all-reduced (averaged over the `world` ranks of `group`, default
    the whole job) and copied back: after the whole backward."""
    for bucket in bucket_list:
        grads = [p.grad for p in bucket]
        flat = torch.cat([g.reshape(-1) for g in grads])
        buf = flat.to(torch.float16) if fp16 else flat
        dist.all_reduce(buf, group=group)
        flat = buf.to(flat.dtype).div_(world)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n
