"""Pure-Python checks of the parallel axes (no MindSpore): called by the config layer before anything launches.

``validate_parallel(workload, model_cfg, parallel_cfg, world_size, train_cfg=None) -> list[str]`` returns one
message per problem, each naming the key(s) and value(s); an empty list means the combination can run.
"""

from __future__ import annotations

from perfbench.errors import ConfigError
from workloads.parallel.schedules import SCHEDULES


def _int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def pipeline_units(workload: str, model_cfg: dict) -> int | None:
    """How many layers the workload hands to the pipeline partitioner (None if unknown / not computable).

    moe: embedding + num_layers blocks + head; resnet50: stem + every bottleneck block + head.
    """
    try:
        if workload == "moe":
            return int(model_cfg["num_layers"]) + 2
        if workload == "resnet50":
            return sum(int(n) for n in model_cfg["layers"]) + 2
    except (KeyError, TypeError, ValueError):
        return None
    return None


def stage_layout(rank: int, world_size: int, stages: int, tp: int = 1) -> tuple[int, int, int]:
    """(stage, dp_index, dp_size) of a rank: ranks of one stage are contiguous; within a stage the T
    tensor-parallel ranks of one replica are contiguous (Megatron's order, tensor parallel innermost):
    ``rank = stage * (D * T) + dp_index * T + tp_index`` with ``D = world_size / (stages * T)``."""
    per_stage = world_size // stages
    return rank // per_stage, (rank % per_stage) // tp, per_stage // tp


def tp_index(rank: int, tp: int = 1) -> int:
    """This rank's position in its tensor-parallel group (see ``stage_layout``)."""
    return rank % tp


def layout_groups(world_size: int, stages: int, tp: int = 1) -> dict[str, list[int]]:
    """Every communication group of the layout, by name -> global ranks (what ``pipeline.create_groups``
    creates; the names carry the kind first, ``analyzers.groups.kind_of`` reads them):

    * ``pb_tp_s{s}_d{d}``: the T tensor-parallel ranks of replica d on stage s (T > 1),
    * ``pb_dp_stage{s}`` (T = 1) / ``pb_dp_stage{s}_tp{t}`` (T > 1): the D data-parallel replicas of stage s
      (tensor-parallel slice t) - gradient all-reduce and, for the MoE workload, expert dispatch/combine;
      with S = 1 and T = 1 this is the world group, named by MindSpore,
    * ``pb_p2p_{a}_{b}``: pipeline neighbours (stage s, replica d, slice t) <-> (s + 1, d, t).
    """
    per_stage = world_size // stages
    D = per_stage // tp
    out: dict[str, list[int]] = {}
    for s in range(stages):
        base = s * per_stage
        if tp > 1:
            for d in range(D):
                out[f"pb_tp_s{s}_d{d}"] = [base + d * tp + t for t in range(tp)]
        if D > 1 and (stages > 1 or tp > 1):
            for t in range(tp):
                name = f"pb_dp_stage{s}" if tp == 1 else f"pb_dp_stage{s}_tp{t}"
                out[name] = [base + d * tp + t for d in range(D)]
    for s in range(stages - 1):
        for i in range(per_stage):
            a, b = s * per_stage + i, (s + 1) * per_stage + i
            out[pair_group_name(a, b)] = [a, b]
    return out


def _validate_split(split, S: int, units: int | None, workload: str) -> list[str]:
    """``parallel.pipeline_split``: one positive layer count per stage, adding up to the workload's layers."""
    counts = [_int(n) for n in split] if isinstance(split, (list, tuple)) else None
    if counts is None or any(n is None or n < 1 for n in counts):
        return [f"parallel.pipeline_split must be a list of positive layer counts, one per stage, got {split!r}"]
    if S == 1:
        return [f"parallel.pipeline_split={list(split)} is set but parallel.pipeline_stages is 1: nothing to split"]
    if len(counts) != S:
        return [
            f"parallel.pipeline_split={list(split)} has {len(counts)} entries but parallel.pipeline_stages is {S} "
            f"(one layer count per stage)"
        ]
    if units is not None and sum(counts) != units:
        return [
            f"parallel.pipeline_split={list(split)} adds up to {sum(counts)} layers but workload {workload} has "
            f"{units} to split"
        ]
    return []


def parallel_layout(
    workload: str, model_cfg: dict, parallel_cfg: dict, train_cfg: dict, rank: int, world_size: int
) -> tuple[int, int, int, int, int]:
    """Validate a workload's parallel settings for this rank and return (S, M, stage, dp_index, D)
    (D: data-parallel size, world_size / (S x tensor_parallel)). Raises ConfigError naming every problem."""
    problems = validate_parallel(workload, model_cfg, parallel_cfg, world_size, train_cfg=train_cfg)
    if problems:
        raise ConfigError("; ".join(problems))
    S = int(parallel_cfg.get("pipeline_stages", 1) or 1)
    M = int(parallel_cfg.get("micro_batches", 1) or 1)
    T = int(parallel_cfg.get("tensor_parallel", 1) or 1)
    stage, dp_index, D = stage_layout(rank, world_size, S, T)
    return S, M, stage, dp_index, D


def validate_parallel(
    workload: str, model_cfg: dict, parallel_cfg: dict, world_size: int, train_cfg: dict | None = None
) -> list[str]:
    errs: list[str] = []
    model_cfg = model_cfg or {}
    par = parallel_cfg or {}
    ws = _int(world_size)
    if ws is None or ws < 1:
        return [f"world_size must be a positive integer, got {world_size!r}"]

    S = _int(par.get("pipeline_stages", 1))
    M = _int(par.get("micro_batches", 1))
    sched = par.get("pipeline_schedule", "1f1b")
    T = _int(par.get("tensor_parallel", 1))
    if T is None or T < 1:
        errs.append(f"parallel.tensor_parallel must be a positive integer, got {par.get('tensor_parallel')!r}")
    if S is None or S < 1:
        errs.append(f"parallel.pipeline_stages must be a positive integer, got {par.get('pipeline_stages')!r}")
    if M is None or M < 1:
        errs.append(f"parallel.micro_batches must be a positive integer, got {par.get('micro_batches')!r}")
    if sched not in SCHEDULES:
        errs.append(f"parallel.pipeline_schedule must be one of {', '.join(SCHEDULES)}, got {sched!r}")
    if errs:
        return errs

    if ws % S != 0:
        errs.append(
            f"parallel.pipeline_stages={S} does not divide world_size={ws} "
            f"(world_size = pipeline_stages x data-parallel size)"
        )
    elif ws % (S * T) != 0:
        errs.append(
            f"world_size={ws} is not a multiple of parallel.pipeline_stages={S} x "
            f"parallel.tensor_parallel={T} (world_size = data-parallel x tensor-parallel x pipeline stages)"
        )
    dp = ws // (S * T) if ws % (S * T) == 0 else None
    errs += _validate_tensor_parallel(workload, par, T)
    if S > 1 and sched == "1f1b" and M < S:
        errs.append(
            f"parallel.micro_batches={M} is less than parallel.pipeline_stages={S}: 1F1B needs at least "
            f"one micro-batch per stage (use micro_batches >= {S} or pipeline_schedule='gpipe')"
        )
    units = pipeline_units(workload, model_cfg)
    if S > 1 and units is not None and S > units:
        what = (
            "model.num_layers + 2 (embedding, blocks, head)"
            if workload == "moe"
            else "the blocks in model.layers + 2 (stem, head)"
        )
        errs.append(
            f"parallel.pipeline_stages={S} is more than the {units} layers workload {workload} can be "
            f"split into ({what})"
        )
    split = par.get("pipeline_split")
    if split is not None:
        errs += _validate_split(split, S, units, workload)
    if train_cfg is not None and "batch_size" in train_cfg:
        b = _int(train_cfg.get("batch_size"))
        if b is None or b < 1:
            errs.append(f"train.batch_size must be a positive integer, got {train_cfg.get('batch_size')!r}")
        elif b % M != 0:
            errs.append(f"train.batch_size={b} is not divisible by parallel.micro_batches={M}")
    if S > 1 and workload not in ("moe", "resnet50"):
        errs.append(
            f"parallel.pipeline_stages={S}: workload {workload} does not expose its layers to the "
            f"pipeline (only 'moe' and 'resnet50' do); use pipeline_stages=1"
        )
    errs += _validate_fusion_impl(workload, par, S, M, dp)
    if S > 1 and (dp or 1) > 1 and par.get("grad_compression", "none") != "none":
        errs.append(
            f"parallel.grad_compression={par.get('grad_compression')!r} with pipeline_stages={S} and "
            f"{dp} data-parallel replicas per stage is not supported (compression runs on the world "
            f"group only); use grad_compression='none' or pipeline_stages=1"
        )

    errs += _validate_memory_knobs(workload, par, train_cfg or {}, ws, S, M)
    errs += _validate_precision_overlap(workload, par, S, M, dp, train_cfg or {})
    if workload == "moe":
        errs += _validate_moe(model_cfg, par, S, dp, T)
    return errs


def _validate_tensor_parallel(workload: str, par: dict, T: int) -> list[str]:
    """parallel.tensor_parallel > 1: the workloads and knobs that support it."""
    errs: list[str] = []
    if T > 1 and workload != "moe":
        errs.append(
            f"parallel.tensor_parallel={T}: workload {workload} has no tensor-parallel implementation "
            f"(only 'moe' splits its attention heads and feed-forward over ranks); use tensor_parallel=1"
        )
    if T > 1 and par.get("grad_compression", "none") != "none":
        errs.append(
            f"parallel.grad_compression={par.get('grad_compression')!r} with parallel.tensor_parallel={T} is "
            f"not supported (compression runs on the world group only); use grad_compression='none'"
        )
    if T > 1 and par.get("comm_fusion", 0) not in (0, None):
        errs.append(
            f"parallel.comm_fusion={par.get('comm_fusion')!r} with parallel.tensor_parallel={T} is not "
            f"supported (the data-parallel gradients of a tensor-parallel layout go in one flat all-reduce "
            f"per group); use comm_fusion=0"
        )
    return errs


def _validate_fusion_impl(workload: str, par: dict, S: int, M: int, dp: int | None) -> list[str]:
    """parallel.fusion_impl='mindspore': where MindSpore's own fused all-reduce can run."""
    errs: list[str] = []
    if (
        workload == "resnet50"
        and (S > 1 or M > 1)
        and (dp or 1) > 1
        and par.get("fusion_impl", "perfbench") == "mindspore"
    ):
        errs.append(
            f"parallel.fusion_impl='mindspore' with pipeline_stages={S} and micro_batches={M} is not "
            f"supported for workload resnet50 (the pipeline / accumulation loop reduces gradients "
            f"itself, MindSpore's reducer lives in its one-shot train step); use fusion_impl='perfbench' "
            f"or pipeline_stages=1 and micro_batches=1"
        )
    if par.get("fusion_impl", "perfbench") == "mindspore" and par.get("grad_compression", "none") != "none":
        errs.append(
            f"parallel.fusion_impl='mindspore' fuses MindSpore's own gradient all-reduce and cannot be "
            f"combined with parallel.grad_compression={par.get('grad_compression')!r} "
            f"(use fusion_impl='perfbench')"
        )
    return errs


def _validate_memory_knobs(workload: str, par: dict, train: dict, ws: int, S: int, M: int) -> list[str]:
    """parallel.zero_stage and train.recompute: where the workloads implement them (workloads/parallel/zero.py)."""
    errs: list[str] = []
    z = par.get("zero_stage", 0)
    if isinstance(z, bool) or z not in (0, 1, 2):
        return [f"parallel.zero_stage must be 0, 1 or 2, got {z!r}"]
    if z:
        why = None
        if workload != "resnet50":
            why = f"workload {workload} does not shard its optimizer (only resnet50 does)"
        elif ws < 2:
            why = f"world_size={ws}: there is nothing to shard over one data-parallel rank"
        elif S > 1 or M > 1:
            why = (
                f"pipeline_stages={S} and micro_batches={M}: sharding is built for the plain data-parallel step "
                "(pipeline_stages=1, micro_batches=1)"
            )
        elif par.get("fusion_impl", "perfbench") != "perfbench":
            why = (
                f"fusion_impl={par.get('fusion_impl')!r}: sharding needs perfbench's own reducer "
                "(fusion_impl=perfbench)"
            )
        elif par.get("grad_compression", "none") != "none":
            why = (
                f"grad_compression={par.get('grad_compression')!r}: sharding reduces uncompressed gradients (use none)"
            )
        if why:
            errs.append(f"parallel.zero_stage={z} is not supported with {why}")
    if train.get("recompute") and workload != "resnet50":
        errs.append(
            f"train.recompute=true is not supported for workload {workload} (only resnet50 marks its blocks "
            "for recompute)"
        )
    return errs


def _validate_precision_overlap(workload: str, par: dict, S: int, M: int, dp: int | None, train: dict) -> list[str]:
    """train.precision and parallel.overlap_grad_comm: where they are built (resnet50's one-shot train step)."""
    errs: list[str] = []
    prec = train.get("precision", "fp32")
    if prec == "fp16":  # bf16 is refused by the field itself (perfbench/run/config_models.py Train.precision)
        if workload != "resnet50" or S > 1 or M > 1:
            errs.append(
                f"train.precision='fp16' is built for workload resnet50 without pipeline or micro-batches "
                f"(got workload={workload}, pipeline_stages={S}, micro_batches={M}); use precision='fp32'"
            )
        elif (dp or 1) > 1 and par.get("fusion_impl", "perfbench") == "mindspore":
            errs.append(
                "train.precision='fp16' with parallel.fusion_impl='mindspore' is not supported (the loss-scaled "
                "train step reduces gradients with perfbench's buckets); use fusion_impl='perfbench'"
            )
    if par.get("overlap_grad_comm"):
        what = "parallel.overlap_grad_comm=true"
        if workload != "resnet50" or S > 1 or M > 1:
            errs.append(
                f"{what} is built for workload resnet50 without pipeline or micro-batches (got "
                f"workload={workload}, pipeline_stages={S}, micro_batches={M}); use overlap_grad_comm=false"
            )
        if par.get("grad_compression", "none") != "none":
            errs.append(
                f"{what} cannot be combined with parallel.grad_compression="
                f"{par.get('grad_compression')!r} (compression needs every gradient before it starts); "
                f"use grad_compression='none'"
            )
        if par.get("fusion_impl", "perfbench") == "mindspore":
            errs.append(f"{what} needs parallel.fusion_impl='perfbench' (the hooks issue perfbench's buckets)")
        if train.get("mode", "graph") != "pynative":
            errs.append(
                f"{what} needs train.mode='pynative' (got {train.get('mode', 'graph')!r}): the MindSpore CPU "
                f"backend runs a compiled graph's kernels one after another, so only PyNative's asynchronous "
                f"all-reduce can overlap backward"
            )
        if prec == "fp16":
            errs.append(
                f"{what} with train.precision='fp16' is not built (the loss-scaled step all-reduces after "
                f"backward); use precision='fp32' or overlap_grad_comm=false"
            )
    if int(par.get("zero_stage") or 0) and (prec == "fp16" or par.get("overlap_grad_comm")):
        errs.append(
            f"parallel.zero_stage={par.get('zero_stage')} with train.precision={prec!r} / "
            f"parallel.overlap_grad_comm={bool(par.get('overlap_grad_comm'))} is not built (the sharded step "
            f"reduces and updates in fp32 after backward); use zero_stage=0 or fp32 without overlap"
        )
    return errs


def _validate_moe(m: dict, par: dict, S: int, dp: int | None, T: int = 1) -> list[str]:
    errs: list[str] = []
    need = (
        "vocab_size",
        "seq_len",
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_experts",
        "top_k",
        "capacity_factor",
        "aux_loss_coef",
    )
    missing = [k for k in need if k not in m]
    if missing:
        return [f"model.{k} is missing for workload moe" for k in missing]
    ints = {}
    for k in ("vocab_size", "seq_len", "hidden_size", "num_layers", "num_heads", "num_experts", "top_k"):
        v = _int(m[k])
        if v is None or v < 1:
            errs.append(f"model.{k} must be a positive integer, got {m[k]!r}")
        ints[k] = v
    for k in ("capacity_factor",):
        v = m[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            errs.append(f"model.{k} must be a number > 0, got {v!r}")
    v = m["aux_loss_coef"]
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
        errs.append(f"model.aux_loss_coef must be a number >= 0, got {v!r}")
    if errs:
        return errs
    if ints["hidden_size"] % ints["num_heads"]:
        errs.append(f"model.hidden_size={ints['hidden_size']} is not divisible by model.num_heads={ints['num_heads']}")
    if T > 1:
        F = _int(m.get("ffn_hidden_size") or 2 * ints["hidden_size"])
        if ints["num_heads"] % T:
            errs.append(
                f"parallel.tensor_parallel={T} does not divide model.num_heads={ints['num_heads']} "
                f"(every tensor-parallel rank owns num_heads / T attention heads)"
            )
        if ints["hidden_size"] % T:
            errs.append(f"parallel.tensor_parallel={T} does not divide model.hidden_size={ints['hidden_size']}")
        if F is None or F % T:
            errs.append(
                f"parallel.tensor_parallel={T} does not divide the feed-forward size "
                f"model.ffn_hidden_size={F} (default 2 x hidden_size)"
            )
    if ints["top_k"] > ints["num_experts"]:
        errs.append(f"model.top_k={ints['top_k']} is more than model.num_experts={ints['num_experts']}")
    if dp and ints["num_experts"] % dp:
        errs.append(
            f"model.num_experts={ints['num_experts']} is not divisible by the expert-parallel size {dp} "
            f"(world_size / (parallel.pipeline_stages x parallel.tensor_parallel)): every rank must own the "
            f"same number of experts"
        )
    if par.get("fusion_impl", "perfbench") == "mindspore" and (dp or 1) > 1:
        errs.append(
            "parallel.fusion_impl='mindspore' is not supported for workload moe (MindSpore's gradient "
            "reducer would all-reduce the expert weights, which each rank owns alone); use 'perfbench'"
        )
    return errs


def pair_group_name(a: int, b: int) -> str:
    lo, hi = sorted((a, b))
    return f"pb_p2p_{lo}_{hi}"
