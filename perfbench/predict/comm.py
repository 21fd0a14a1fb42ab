"""The collectives a data-parallel setting issues per step, and what each costs.

Cost of one collective over n ranks moving `bytes` (the nccl-tests convention of analyzers.analyses.collectives:
all-reduce/broadcast: the buffer; all-gather: the gathered output):

    t = latency x steps(op, n) + factor(op, n) x bytes / bandwidth

    factor  (analyzers.analyses.collectives.busbw_factor)   all-reduce 2(n-1)/n; all-gather, reduce-scatter,
                                                    all-to-all (n-1)/n; broadcast, send/recv 1
    steps   (ring algorithm's sequential hops)      all-reduce 2(n-1); all-gather, reduce-scatter,
                                                    all-to-all n-1; broadcast, send/recv 1

Which collectives (mirrors workloads/parallel/compression.py and bucketing.py, which the runs executed):
gradients are cut into buckets by `comm_fusion` (the workload's own `plan_buckets`); `none` all-reduces
each bucket in fp32, `fp16` in fp16 (half the bytes), `powersgd` two all-reduces (P and Q) per bucket of
`compression_ratio` x the bytes, `topk` two all-gathers (values, indices) per bucket of ratio x the bytes.
With pipeline stages S > 1 each stage all-reduces its 1/S of the gradients in one flat buffer over the
D = world_size / (S x T) replicas.

Tensor parallel T > 1 (workload moe, `layout_collectives`): per micro-batch and MoE block on a rank, forward,
the backward's re-materialized forward and backward each run 2 all-reduces over the T ranks (Megatron's g / f
around attention: tokens x hidden; around the experts: the capacity buffer experts x capacity x hidden), and with
D > 1 the expert dispatch / combine over the D replicas (workloads/parallel/experts.comm_bytes_per_call). The
byte counts are the workload's own functions (workloads/parallel/tensor.py), the ones its step records use.
Each Collective carries its traffic class (`cls`, analyzers.analyses.parallel_groups.COMM_CLASSES).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.analyses.collectives import factor, steps
from perfbench.errors import UserError
from workloads.parallel.bucketing import parse_fusion, plan_buckets  # pure Python (no MindSpore)
from workloads.parallel.layout_math import capacity, comm_bytes_per_call, moe_tp_comm_per_microbatch, stage_bounds


@dataclass(frozen=True)
class Collective:
    op_type: str
    n: int  # ranks in the group
    bytes: float  # nccl-tests size convention (see module doc)
    ready_fraction: float = 1.0  # share of the backward pass done when its bucket is ready (overlap window)
    cls: str = "dp_grad"  # traffic class (analyzers.analyses.parallel_groups.COMM_CLASSES)


def cost(c: Collective, latency_s: float, bandwidth_Bps: float) -> tuple[float, float]:
    """(latency term, bytes term) in seconds."""
    return latency_s * steps(c.op_type, c.n), factor(c.op_type, c.n) * c.bytes / bandwidth_Bps


def _buckets(tensor_bytes: list[float], fusion, scale: float = 1.0) -> list[tuple[float, float]]:
    """Buckets as (bytes on the wire, ready fraction) in backward order. `tensor_bytes` is in backward
    order; the workload's plan_buckets takes parameter order and walks it backwards."""
    total = sum(tensor_bytes) or 1.0
    wire = [b * scale for b in tensor_bytes]
    param_order = wire[::-1]
    buckets = plan_buckets(param_order, fusion)  # lists of parameter indices, backward order
    out, done = [], 0.0
    n = len(param_order)
    for b in buckets:
        size = sum(param_order[i] for i in b)
        done += sum(tensor_bytes[n - 1 - i] for i in b)
        out.append((size, done / total))
    return out


def plan(settings: dict, tensor_bytes: list[float], world_size: int | None = None) -> list[Collective]:
    """The gradient collectives one rank issues per step for `settings` (see the module doc)."""
    n_world = int(world_size if world_size is not None else settings["world_size"])
    S = int(settings.get("pipeline_stages") or 1)
    T = int(settings.get("tensor_parallel") or 1)
    D = max(1, n_world // (S * T))
    if D <= 1 or not tensor_bytes:
        return []
    if T > 1:  # approximation: every gradient tensor split over the T slices (replicated ones are not)
        return [Collective("allreduce", D, sum(tensor_bytes) / (S * T), 1.0)]
    if S > 1:
        return [Collective("allreduce", D, sum(tensor_bytes) / S, 1.0)]
    kind = str(settings.get("grad_compression") or "none")
    fusion = settings.get("comm_fusion", 0)
    parse_fusion(fusion)  # a bad value is the user's error (ConfigError names it)
    ratio = float(settings.get("compression_ratio") or 0.01)
    if kind in ("none", "fp16"):
        return [
            Collective("allreduce", D, b, r) for b, r in _buckets(tensor_bytes, fusion, 0.5 if kind == "fp16" else 1.0)
        ]
    if kind == "powersgd":
        out = []
        for b, r in _buckets(tensor_bytes, fusion, ratio):
            out += [Collective("allreduce", D, b / 2, r), Collective("allreduce", D, b / 2, r)]
        return out
    if kind == "topk":
        out = []
        for b, r in _buckets(tensor_bytes, fusion):
            per_rank = ratio * b / 2  # values (fp32) and indices (int32): ratio x the fp32 bytes in all
            out += [Collective("allgather", D, per_rank * D, r), Collective("allgather", D, per_rank * D, r)]
        return out

    raise UserError(f"grad_compression={kind!r}: the model knows none, fp16, powersgd, topk")


def layout_collectives(workload: str, model: dict | None, settings: dict) -> list[Collective]:
    """The tensor-parallel and expert collectives one rank of the busiest stage issues per step (module doc);
    [] for workloads / layouts without them or when the model config is unknown."""
    if workload != "moe" or not model:
        return []

    n = int(settings["world_size"])
    S, T = int(settings.get("pipeline_stages") or 1), int(settings.get("tensor_parallel") or 1)
    M = int(settings.get("micro_batches") or 1)
    D = max(1, n // (S * T))
    H, L, E, k = (int(model[x]) for x in ("hidden_size", "num_layers", "num_experts", "top_k"))
    tokens = int(settings["batch_size"]) // M * int(model["seq_len"])
    C = capacity(tokens, E, k, float(model["capacity_factor"]))
    costs = [0.25] + [1.0] * L + [0.5]
    blocks = max(
        sum(1 for i in range(L) if lo <= i + 1 < hi)
        for lo, hi in stage_bounds(costs, S, settings.get("pipeline_split"))
    )
    out: list[Collective] = []
    if T > 1:
        both, _ = moe_tp_comm_per_microbatch(tokens, H, E, C, T)
        attn = tokens * H * 4  # g after attention: tokens x hidden; the rest is the experts' buffer
        experts = both - attn
        for _ in range(3 * blocks * M):
            out += [
                Collective("allreduce", T, attn, 1.0, "tensor_parallel"),
                Collective("allreduce", T, experts, 1.0, "tensor_parallel"),
            ]
    if D > 1:
        impl = "allgather+allreduce" if S == 1 and T == 1 else "allreduce+allreduce"
        nbytes, calls = comm_bytes_per_call(impl, D, E, C, H)
        for _ in range(3 * blocks * M):
            out += [Collective("allreduce", D, nbytes / calls, 1.0, "expert_dispatch") for _ in range(calls)]
    return out
