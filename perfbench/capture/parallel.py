"""`perfbench.capture.apply_parallel()`: the run's `parallel.*` knobs applied the framework's own way.

MindSpore: `set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=True, comm_fusion=...)`
(`parallel.comm_fusion` MB per AllReduce bucket; 0: one AllReduce per parameter; `all`: one bucket). Call it
before the network and `Model` are built, after `init()`.

PyTorch: returns the keyword arguments for `DistributedDataParallel` (`bucket_cap_mb`); given the DDP model
(`apply_parallel(ddp)`) it also registers the communication hook of `parallel.grad_compression` (fp16:
`fp16_compress_hook`; powersgd: `powerSGD_hook` at rank `max(1, round(compression_ratio * 32))`). Two more helpers
the script calls where its loop builds the optimizer and runs backward:

- `optimizer(params, torch.optim.SGD, lr=...)`: `parallel.zero_stage: 1` -> `ZeroRedundancyOptimizer` (each rank
  keeps the optimizer state of its share of the parameters and broadcasts its updated share after `step()`; with
  `parameters_as_bucket_view=True`, one broadcast per rank per step); otherwise the plain optimizer.
- `parallel.micro_batches` M -> `sync(ddp, i, M)`: DDP's `no_sync()` for micro-batches 0..M-2, so gradients
  accumulate locally and the buckets are all-reduced once per step, in the last micro-batch's backward.

What cannot run is refused by `perfbench sweep --dry-run` (perfbench/run/script.py), so these see only knobs
that apply. Outside perfbench (no settings) it applies nothing and returns {}.
"""

from __future__ import annotations

from perfbench.capture.recorder import settings

#: `parallel.comm_fusion: all` as one bucket: this many MB holds any model perfbench runs
ALL_MB = 1 << 20


def fusion_mb(value) -> float | None:
    """`parallel.comm_fusion` as a bucket size in MB (None: one collective per parameter)."""
    if value == "all":
        return float(ALL_MB)
    v = float(value or 0)
    return v if v > 0 else None


def apply_parallel(model=None, framework: str | None = None) -> dict:
    """Apply the run's parallel knobs; returns what was applied (MindSpore: the context keys; PyTorch: DDP's
    keyword arguments)."""
    s = settings()
    par = s.get("parallel") or {}
    if not s:
        return {}
    fw = framework or (s.get("script") or {}).get("framework")
    if fw is None:
        import sys

        fw = "mindspore" if "mindspore" in sys.modules else "pytorch"
    return _mindspore(par, int(s.get("world_size") or 1)) if fw == "mindspore" else _pytorch(par, model)


def _par() -> tuple[dict, int]:
    s = settings()
    return (s.get("parallel") or {}), int(s.get("world_size") or 1)


def micro_batches() -> int:
    """`parallel.micro_batches` (1 outside perfbench)."""
    return max(1, int(_par()[0].get("micro_batches") or 1))


def optimizer(params, optimizer_class, *, zero_stage: int | None = None, **defaults):
    """The script's optimizer: `optimizer_class(params, **defaults)`, or under `parallel.zero_stage: 1` (or
    `zero_stage=1` given; and a process group of more than one rank) `ZeroRedundancyOptimizer` sharding its state
    over the ranks."""
    zero = int(_par()[0].get("zero_stage") or 0) if zero_stage is None else int(zero_stage)
    if zero == 1:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return ZeroRedundancyOptimizer(
                params, optimizer_class=optimizer_class, parameters_as_bucket_view=True, **defaults
            )
    return optimizer_class(params, **defaults)


def sync(model, micro_batch: int, count: int):
    """The context for micro-batch `micro_batch` of `count`: DDP's `no_sync()` for all but the last one (the
    gradients accumulate without collectives; the last backward all-reduces the sums); a null context for the
    last, or for a model without `no_sync` (no DDP)."""
    import contextlib

    if micro_batch < count - 1 and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()


#: `parallel.zero_stage` values PyTorch's own mechanisms cover here (ZeroRedundancyOptimizer is stage 1)
PYTORCH_ZERO = (0, 1)


def pytorch_refusals(par: dict, world_size: int) -> list[str]:
    """The `parallel.*` knobs a PyTorch script cannot be given, each with the reason (checked at --dry-run)."""
    problems = []
    zero = int(par.get("zero_stage") or 0)
    if zero not in PYTORCH_ZERO:
        problems.append(
            f"parallel.zero_stage {zero}: PyTorch's ZeroRedundancyOptimizer shards the optimizer state only "
            "(stage 1); sharded gradients (stage 2/3) are FSDP, which perfbench does not hand to a script"
        )
    if zero == 1 and world_size < 2:
        problems.append("parallel.zero_stage 1: needs world_size >= 2 (one rank has nothing to shard with)")
    return problems


def _mindspore(par: dict, world_size: int) -> dict:
    import mindspore as ms

    ctx: dict = {}
    if world_size > 1:
        ctx.update(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
        mb = fusion_mb(par.get("comm_fusion"))
        if mb is not None:
            ctx["comm_fusion"] = {"allreduce": {"mode": "size", "config": int(max(1, round(mb)))}}
        ms.set_auto_parallel_context(**ctx)
    return ctx


def _pytorch(par: dict, model) -> dict:
    mb = fusion_mb(par.get("comm_fusion"))
    kwargs = {"bucket_cap_mb": 0.0 if mb is None else mb}
    if model is not None:
        gc = par.get("grad_compression") or "none"
        if gc == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif gc == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

            rank = max(1, round(float(par.get("compression_ratio") or 0.01) * 32))
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank)
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return kwargs
