"""`perfbench.capture.apply_parallel()`: the run's `parallel.*` knobs applied the framework's own way.

MindSpore: `set_auto_parallel_context(parallel_mode=DATA_PARALLEL, gradients_mean=True, comm_fusion=...)`
(`parallel.comm_fusion` MB per AllReduce bucket; 0: one AllReduce per parameter; `all`: one bucket). Call it
before the network and `Model` are built, after `init()`.

PyTorch: returns the keyword arguments for `DistributedDataParallel` (`bucket_cap_mb`); given the DDP model
(`apply_parallel(ddp)`) it also registers the communication hook of `parallel.grad_compression` (fp16:
`fp16_compress_hook`; powersgd: `powerSGD_hook` at rank `max(1, round(compression_ratio * 32))`).

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
