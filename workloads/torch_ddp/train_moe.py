"""The PyTorch MoE reference workload: the Mixture-of-Experts transformer (moe_model.py, the layout of
workloads/moe) on the MindSpore workload's synthetic token sequences, under DDP: gloo on CPU, NCCL on CUDA.
Swept as `workload: script` (examples/pytorch-moe.yaml); torchrun starts every rank in perfbench's capture
bootstrap like any user's script.

Model knobs (`knobs.*`, the MindSpore workload's `model.*` defaults): vocab_size 512, seq_len 32, hidden_size 64,
num_layers 2, num_heads 4, num_experts 4, top_k 2, capacity_factor 1.25, and `knobs.expert_parallel`:

- false (default): data parallel with every expert replicated on every rank; DDP all-reduces all gradients;
- true: expert parallel over all ranks (num_experts divisible by world_size): each rank owns num_experts / W
  experts, tokens reach them by `all_to_all_single` (gloo runs it on CPU tensors), 2 per MoE layer in forward
  and 2 in backward; DDP all-reduces the other (replicated) parameters only; an expert's gradient, summed over
  every rank's tokens by the all-to-all's backward, is divided by W like DDP's mean.

`parallel.comm_fusion` -> DDP `bucket_cap_mb`; `parallel.micro_batches` -> `no_sync()` accumulation;
`parallel.zero_stage: 1` -> ZeroRedundancyOptimizer (perfbench.capture.parallel); `train.batch_size` sequences
per rank, `train.steps`, `train.lr` (AdamW). Outside perfbench: `torchrun --nproc_per_node=2
workloads/torch_ddp/train_moe.py --expert-parallel`.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfbench import capture
from workloads.moe.model import SyntheticTokens
from workloads.torch_ddp.launch import start
from workloads.torch_ddp.moe_model import MoETransformer

MODEL = {
    "vocab_size": 512,
    "seq_len": 32,
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
}
AUX_WEIGHT = 0.01


def _args() -> argparse.Namespace:
    s = capture.settings()
    train, par, knobs = s.get("train") or {}, s.get("parallel") or {}, s.get("knobs") or {}
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=int(train.get("batch_size", 8)), help="sequences per rank")
    p.add_argument("--steps", type=int, default=int(train.get("steps", 10)))
    p.add_argument("--lr", type=float, default=float(train.get("lr", 1e-3)))
    p.add_argument("--seed", type=int, default=int(train.get("seed", 0)))
    for key, default in MODEL.items():
        kind = float if isinstance(default, float) else int
        p.add_argument("--" + key.replace("_", "-"), type=kind, default=kind(knobs.get(key, default)))
    p.add_argument(
        "--expert-parallel",
        action=argparse.BooleanOptionalAction,
        default=bool(knobs.get("expert_parallel", False)),
    )
    p.add_argument("--bucket-cap-mb", default=par.get("comm_fusion", 25))
    p.add_argument("--micro-batches", type=int, default=int(par.get("micro_batches") or 1))
    p.add_argument("--zero-stage", type=int, choices=[0, 1], default=int(par.get("zero_stage") or 0))
    return p.parse_args()


def main() -> None:
    a = _args()
    m = a.micro_batches
    world, rank, device = start(a.batch_size, m)
    ep = (world, rank, None) if a.expert_parallel and world > 1 else None
    if ep is not None and a.num_experts % world:
        raise SystemExit(f"knobs.num_experts {a.num_experts} is not divisible by world_size {world} (expert parallel)")

    torch.manual_seed(a.seed)  # the same replicated weights on every rank
    model_cfg = {k: getattr(a, k) for k in MODEL}
    net = MoETransformer(**model_cfg, tokens=(a.batch_size // m) * a.seq_len, seed=a.seed, ep=ep).to(device)
    model: torch.nn.Module = net
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        cap = capture.parallel.fusion_mb(a.bucket_cap_mb)
        if ep is not None:  # the experts are this rank's own: DDP leaves them alone
            DDP._set_params_and_buffers_to_ignore_for_model(net, net.expert_parameter_names())
            for i, block in enumerate(net.blocks):
                for p in block.moe.expert_parameters():
                    p.register_hook(lambda g, w=world: g / w)
        # broadcast_buffers=False: the only buffer is the constant causal mask, so the buckets are the collectives
        model = DDP(net, bucket_cap_mb=0.0 if cap is None else cap, broadcast_buffers=False)
    zero = a.zero_stage if world > 1 else 0
    opt = capture.parallel.optimizer(model.parameters(), torch.optim.AdamW, zero_stage=zero, lr=a.lr)
    data = SyntheticTokens(a.vocab_size, a.seq_len, a.batch_size, a.seed, rank, m)
    model.train()
    loss = torch.zeros(())
    dropped = routed = 0.0
    for step in range(a.steps):
        opt.zero_grad(set_to_none=False)
        for j in range(m):
            x, y = (torch.from_numpy(t).long().to(device) for t in data.batch(step, j))
            with capture.parallel.sync(model, j, m):  # no_sync() for all but the last micro-batch
                logits, aux, stats = model(x)
                loss = (F.cross_entropy(logits.reshape(-1, a.vocab_size), y.reshape(-1)) + AUX_WEIGHT * aux) / m
                loss.backward()
            st = torch.stack(stats).sum(0)
            routed, dropped = float(st[:-1].sum()), float(st[-1])
        opt.step()
    print(
        f"rank {rank}: MoE {a.num_layers} layers x {a.num_experts} experts (top {a.top_k}), "
        f"{'expert parallel' if ep else 'experts replicated'}, {a.steps} steps of {a.batch_size} sequences, "
        f"micro-batches {m}, zero {zero}, last micro-batch {routed:.0f} slots routed / {dropped:.0f} dropped, "
        f"last loss {loss.item() * m:.4f}",
        flush=True,
    )
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
