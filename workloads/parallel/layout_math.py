"""The arithmetic of a parallel layout, pure Python (no MindSpore): how layers split into pipeline stages, an
expert's token capacity, and the bytes each rank puts into the expert-dispatch and tensor-parallel collectives.
The workloads build their layouts with these and `perfbench predict` costs layouts never run with the same
functions (planning layer, docs/architecture.md "Layers")."""

from __future__ import annotations

import math

from perfbench.errors import UserError

#: bytes of an fp32 value
FP32 = 4


def partition(costs: list[float], stages: int) -> list[tuple[int, int]]:
    """Split layers with the given costs into ``stages`` contiguous non-empty ranges minimizing the largest
    stage cost (linear partition, exact DP). Returns ``[(start, end), ...]`` with ``end`` exclusive."""
    n = len(costs)
    if stages < 1 or stages > n:
        raise ValueError(f"cannot split {n} layers into {stages} non-empty stages")
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + float(c))
    INF = float("inf")
    # best[k][i]: minimal max-cost splitting the first i layers into k stages; cut[k][i] the last split point
    best = [[INF] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                v = max(best[k - 1][j], pre[i] - pre[j])
                if v < best[k][i] - 1e-12:
                    best[k][i], cut[k][i] = v, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        j = cut[k][i]
        bounds.append((j, i))
        i = j
    return bounds[::-1]


def stage_bounds(costs: list[float], stages: int, split: list[int] | None = None) -> list[tuple[int, int]]:
    """The stages' layer ranges: ``split`` (layers per stage, as the user gave them in
    ``parallel.pipeline_split``, validated by ``rules.validate_parallel``) when given, else the cost-balanced
    ``partition``. Returns ``[(start, end), ...]`` with ``end`` exclusive."""
    if not split:
        return partition(costs, stages)
    if len(split) != stages or sum(split) != len(costs) or min(split) < 1:
        raise ValueError(f"pipeline split {list(split)} does not cut {len(costs)} layers into {stages} stages")
    bounds, lo = [], 0
    for n in split:
        bounds.append((lo, lo + int(n)))
        lo += int(n)
    return bounds


def moe_layer_costs(num_layers: int) -> list[float]:
    """Relative cost of each of the MoE transformer's pipeline layers (workloads.moe): the embedding, every block,
    the head."""
    return [0.25] + [1.0] * int(num_layers) + [0.5]


def layer_costs(cfg: dict) -> list[float] | None:
    """The pipeline layers' estimated costs of a reference workload's config (the ones its stages are cut by),
    None for another workload or a missing model number."""
    m = cfg.get("model") or {}
    try:
        if cfg.get("workload") == "resnet50":
            return resnet_layer_costs(m["layers"], int(m["width"]), int(m["image_size"]), int(m["num_classes"]))
        if cfg.get("workload") == "moe":
            return moe_layer_costs(int(m["num_layers"]))
    except (KeyError, TypeError, ValueError):
        return None
    return None


def resnet_layer_costs(layers, width: int, image_size: int, num_classes: int) -> list[float]:
    """Estimated cost (multiply-accumulates per image, in millions) of each of a ResNet's pipeline layers (stem,
    every bottleneck block, head: ``workloads.resnet50.model.pipeline_layers``, ``workloads.torch_ddp.pipeline``).

    Counts the convolutions and the fc layer only (BN/ReLU/pool are memory-bound and small next to them).
    """
    size = (int(image_size) + 1) // 2  # conv1, stride 2
    costs = [size * size * 49 * 3 * width]
    size = (size + 1) // 2  # max pool, stride 2, pad same
    cin = width
    for i, n in enumerate(layers):
        w = width * (2**i)
        for j in range(int(n)):
            stride = 2 if (j == 0 and i > 0) else 1
            out = (size + stride - 1) // stride
            c = size * size * cin * w + out * out * (9 * w * w + w * 4 * w)
            if stride != 1 or cin != 4 * w:
                c += out * out * cin * 4 * w
            costs.append(c)
            size, cin = out, 4 * w
    costs.append(cin * num_classes + size * size * cin)
    return [c / 1e6 for c in costs]


def capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    return max(1, int(math.ceil(capacity_factor * tokens * top_k / num_experts)))


def comm_bytes_per_call(
    impl: str, size: int, num_experts: int, capacity: int, hidden: int, itemsize: int = 4
) -> tuple[int, int]:
    """Bytes this rank puts into collectives for one dispatch + one combine (forward), and their count."""
    buf = num_experts * capacity * hidden * itemsize
    if impl == "local" or size == 1:
        return 0, 0
    if impl == "alltoall":
        return 2 * buf * (size - 1) // size, 2
    if impl == "allreduce+allreduce":  # two AllReduces of padded [W, E, C, H] buffers
        return 2 * size * buf, 2
    # allgather: own buffer; allreduce of the padded [W, E, C, H] buffer
    return buf + size * buf, 2


def moe_tp_comm_per_microbatch(
    tokens: int, hidden: int, num_experts: int, capacity: int, tp: int, itemsize: int = 4
) -> tuple[int, int]:
    """Bytes this rank puts into tensor-parallel all-reduces for one forward of one MoE block, and their count:
    g after attention (``tokens x H``) and g after the experts (the expert buffer ``E x C x H``: the experts run
    on the dispatched capacity buffer).  The backward moves the same (f, same shapes)."""
    if tp <= 1:
        return 0, 0
    return (tokens * hidden + num_experts * capacity * hidden) * itemsize, 2


def model_states(params: int, dp: int, zero_stage: int, states_per_param: int, grads_sharded: bool = True) -> dict:
    """Bytes of parameters, gradients and optimizer state one rank holds (ZeRO paper, fp32)."""
    if zero_stage not in (0, 1, 2):
        raise UserError(f"zero_stage={zero_stage!r}: the memory model knows 0, 1, 2")
    if dp < 1 or params < 0:
        raise UserError(f"data-parallel size {dp} and parameter count {params} must be positive")
    p = FP32 * params
    grads = p / dp if zero_stage >= 2 and grads_sharded else p
    opt = FP32 * states_per_param * params / (dp if zero_stage >= 1 else 1)
    return {
        "params_bytes": float(p),
        "grads_bytes": float(grads),
        "optimizer_bytes": float(opt),
        "total_bytes": float(p + grads + opt),
    }
