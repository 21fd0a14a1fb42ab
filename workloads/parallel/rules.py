"""Pure-Python checks of the parallel axes (no MindSpore): called by the config layer before anything launches.

``validate_parallel(workload, model_cfg, parallel_cfg, world_size, train_cfg=None) -> list[str]`` returns one
message per problem, each naming the key(s) and value(s); an empty list means the combination can run.
"""

from __future__ import annotations

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


def stage_layout(rank: int, world_size: int, stages: int) -> tuple[int, int, int]:
    """(stage, dp_index, dp_size) of a rank: ranks of one stage are contiguous (stage = rank // dp_size)."""
    dp = world_size // stages
    return rank // dp, rank % dp, dp


def parallel_layout(workload: str, model_cfg: dict, parallel_cfg: dict, train_cfg: dict, rank: int,
                    world_size: int) -> tuple[int, int, int, int, int]:
    """Validate a workload's parallel settings for this rank and return (S, M, stage, dp_index, D).
    Raises ConfigError naming every problem."""
    from perfbench.errors import ConfigError

    problems = validate_parallel(workload, model_cfg, parallel_cfg, world_size, train_cfg=train_cfg)
    if problems:
        raise ConfigError("; ".join(problems))
    S = int(parallel_cfg.get("pipeline_stages", 1) or 1)
    M = int(parallel_cfg.get("micro_batches", 1) or 1)
    stage, dp_index, D = stage_layout(rank, world_size, S)
    return S, M, stage, dp_index, D


def validate_parallel(workload: str, model_cfg: dict, parallel_cfg: dict, world_size: int,
                      train_cfg: dict | None = None) -> list[str]:
    errs: list[str] = []
    model_cfg = model_cfg or {}
    par = parallel_cfg or {}
    ws = _int(world_size)
    if ws is None or ws < 1:
        return [f"world_size must be a positive integer, got {world_size!r}"]

    S = _int(par.get("pipeline_stages", 1))
    M = _int(par.get("micro_batches", 1))
    sched = par.get("pipeline_schedule", "1f1b")
    if S is None or S < 1:
        errs.append(f"parallel.pipeline_stages must be a positive integer, got {par.get('pipeline_stages')!r}")
    if M is None or M < 1:
        errs.append(f"parallel.micro_batches must be a positive integer, got {par.get('micro_batches')!r}")
    if sched not in SCHEDULES:
        errs.append(f"parallel.pipeline_schedule must be one of {', '.join(SCHEDULES)}, got {sched!r}")
    if errs:
        return errs

    if ws % S != 0:
        errs.append(f"parallel.pipeline_stages={S} does not divide world_size={ws} "
                    f"(world_size = pipeline_stages x data-parallel size)")
    dp = ws // S if ws % S == 0 else None
    if S > 1 and sched == "1f1b" and M < S:
        errs.append(f"parallel.micro_batches={M} is less than parallel.pipeline_stages={S}: 1F1B needs at least "
                    f"one micro-batch per stage (use micro_batches >= {S} or pipeline_schedule='gpipe')")
    units = pipeline_units(workload, model_cfg)
    if S > 1 and units is not None and S > units:
        what = "model.num_layers + 2 (embedding, blocks, head)" if workload == "moe" else \
            "the blocks in model.layers + 2 (stem, head)"
        errs.append(f"parallel.pipeline_stages={S} is more than the {units} layers workload {workload} can be "
                    f"split into ({what})")
    if train_cfg is not None and "batch_size" in train_cfg:
        b = _int(train_cfg.get("batch_size"))
        if b is None or b < 1:
            errs.append(f"train.batch_size must be a positive integer, got {train_cfg.get('batch_size')!r}")
        elif b % M != 0:
            errs.append(f"train.batch_size={b} is not divisible by parallel.micro_batches={M}")
    if S > 1 and workload not in ("moe", "resnet50"):
        errs.append(f"parallel.pipeline_stages={S}: workload {workload} does not expose its layers to the "
                    f"pipeline (only 'moe' and 'resnet50' do); use pipeline_stages=1")
    if workload == "resnet50" and (S > 1 or M > 1) and (dp or 1) > 1 \
            and par.get("fusion_impl", "perfbench") == "mindspore":
        errs.append(f"parallel.fusion_impl='mindspore' with pipeline_stages={S} and micro_batches={M} is not "
                    f"supported for workload resnet50 (the pipeline / accumulation loop reduces gradients "
                    f"itself, MindSpore's reducer lives in its one-shot train step); use fusion_impl='perfbench' "
                    f"or pipeline_stages=1 and micro_batches=1")
    if S > 1 and (dp or 1) > 1 and par.get("grad_compression", "none") != "none":
        errs.append(f"parallel.grad_compression={par.get('grad_compression')!r} with pipeline_stages={S} and "
                    f"{dp} data-parallel replicas per stage is not supported (compression runs on the world "
                    f"group only); use grad_compression='none' or pipeline_stages=1")

    errs += _validate_precision_overlap(workload, par, S, M, dp, train_cfg or {})
    if workload == "moe":
        errs += _validate_moe(model_cfg, par, S, dp)
    return errs


def _validate_precision_overlap(workload: str, par: dict, S: int, M: int, dp: int | None, train: dict) -> list[str]:
    """train.precision and parallel.overlap_grad_comm: where they are built (resnet50's one-shot train step)."""
    errs: list[str] = []
    prec = train.get("precision", "fp32")
    if prec == "fp16":  # bf16 is refused by the field itself (perfbench/config_models.py Train.precision)
        if workload != "resnet50" or S > 1 or M > 1:
            errs.append(f"train.precision='fp16' is built for workload resnet50 without pipeline or micro-batches "
                        f"(got workload={workload}, pipeline_stages={S}, micro_batches={M}); use precision='fp32'")
        elif (dp or 1) > 1 and par.get("fusion_impl", "perfbench") == "mindspore":
            errs.append("train.precision='fp16' with parallel.fusion_impl='mindspore' is not supported (the loss-scaled "
                        "train step reduces gradients with perfbench's buckets); use fusion_impl='perfbench'")
    if par.get("overlap_grad_comm"):
        what = "parallel.overlap_grad_comm=true"
        if workload != "resnet50" or S > 1 or M > 1:
            errs.append(f"{what} is built for workload resnet50 without pipeline or micro-batches (got "
                        f"workload={workload}, pipeline_stages={S}, micro_batches={M}); use overlap_grad_comm=false")
        if par.get("grad_compression", "none") != "none":
            errs.append(f"{what} cannot be combined with parallel.grad_compression="
                        f"{par.get('grad_compression')!r} (compression needs every gradient before it starts); "
                        f"use grad_compression='none'")
        if par.get("fusion_impl", "perfbench") == "mindspore":
            errs.append(f"{what} needs parallel.fusion_impl='perfbench' (the hooks issue perfbench's buckets)")
        if train.get("mode", "graph") != "pynative":
            errs.append(f"{what} needs train.mode='pynative' (got {train.get('mode', 'graph')!r}): the MindSpore CPU "
                        f"backend runs a compiled graph's kernels one after another, so only PyNative's asynchronous "
                        f"all-reduce can overlap backward")
        if prec == "fp16":
            errs.append(f"{what} with train.precision='fp16' is not built (the loss-scaled step all-reduces after "
                        f"backward); use precision='fp32' or overlap_grad_comm=false")
    return errs


def _validate_moe(m: dict, par: dict, S: int, dp: int | None) -> list[str]:
    errs: list[str] = []
    need = ("vocab_size", "seq_len", "hidden_size", "num_layers", "num_heads", "num_experts", "top_k",
            "capacity_factor", "aux_loss_coef")
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
    if ints["top_k"] > ints["num_experts"]:
        errs.append(f"model.top_k={ints['top_k']} is more than model.num_experts={ints['num_experts']}")
    if dp and ints["num_experts"] % dp:
        errs.append(f"model.num_experts={ints['num_experts']} is not divisible by the expert-parallel size {dp} "
                    f"(world_size / parallel.pipeline_stages): every rank must own the same number of experts")
    if par.get("fusion_impl", "perfbench") == "mindspore" and (dp or 1) > 1:
        errs.append("parallel.fusion_impl='mindspore' is not supported for workload moe (MindSpore's gradient "
                    "reducer would all-reduce the expert weights, which each rank owns alone); use 'perfbench'")
    return errs
