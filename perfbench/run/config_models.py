"""The sweep YAML as pydantic models: one model per section, one field per knob.

Adding a knob is one field in one model (its type, range, default and description); it is then validated,
sweepable (if its section is), listed in `perfbench schema`'s JSON Schema, and reported by key and value
when wrong: `config_error` (perfbench/run/config_errors.py) turns pydantic's errors into one line naming the
dotted key and the value.
The rules across keys are plain functions (`run_rules`, `range_rules`, `launch_rules`) behind one-line
validators, so that `make mutation` mutates them (mutmut leaves decorated functions alone).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, WrapValidator, create_model, model_validator
from pydantic_core import PydanticCustomError

from perfbench.run.config_errors import explain, rule, show
from perfbench.run.script import script_rules
from perfbench.tune.spec import SearchSpec
from workloads.parallel.rules import validate_parallel


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


def _int(lo: int | None = None, hi: int | None = None, default: int | None = 0, doc: str = ""):
    return Field(default, ge=lo, le=hi, description=doc or None)


def _text(message: str, **constraints) -> Any:
    """A string's type: pydantic's `constraints` (min_length, pattern) checked, `message` when one fails."""
    return Annotated[str, Field(**constraints), explain(message)]


class ResNet50Model(Section):
    """ResNet-50 knobs (workload: resnet50)."""

    image_size: int = _int(8, 1024, 32, "input height and width")
    num_classes: int = _int(2, 100000, 10)
    width: int = _int(1, 4096, 64, "base width (64 is the paper's ResNet-50)")
    layers: Annotated[
        list[Annotated[int, Field(ge=1)]],
        Field(min_length=4, max_length=4),
        explain("must be a list of 4 positive integers (blocks per stage, ResNet-50 is [3, 4, 6, 3])"),
    ] = Field(default_factory=lambda: [3, 4, 6, 3], description="bottleneck blocks per stage")


class MoEModel(Section):
    """Mixture-of-Experts transformer knobs (workload: moe)."""

    vocab_size: int = _int(2, 10**7, 512)
    seq_len: int = _int(2, 65536, 32)
    hidden_size: int = _int(2, 65536, 64)
    num_layers: int = _int(1, 1024, 2)
    num_heads: int = _int(1, 1024, 4)
    num_experts: int = _int(1, 4096, 4)
    top_k: int = _int(1, 64, 2, "experts per token")
    capacity_factor: float = Field(1.25, gt=0, description="expert capacity = factor x tokens / experts")
    aux_loss_coef: float = Field(0.01, ge=0, description="load-balancing loss weight")


class Train(Section):
    batch_size: int = _int(1, 65536, 8, "per rank (per data-parallel replica)")
    steps: int = _int(1, 1_000_000, 12, "steps per run, including warm-up")
    warmup_steps: int = _int(0, 1_000_000, 2, "not measured (graph compilation, first collectives)")
    seed: int = _int(0, 2**31 - 1, 0, "same seed = same weights and data on every rank and repeat")
    lr: float = Field(0.05, ge=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    optimizer: Literal["momentum", "adamw"] = Field(
        "momentum", description="momentum (nn.Momentum, 1 state per parameter) | adamw (nn.AdamWeightDecay, 2 states)"
    )
    weight_decay: float = Field(0.0, ge=0, description="adamw's decoupled weight decay")
    recompute: bool = Field(
        False,
        description="recompute the activations of the model's blocks in backward "
        "instead of keeping them (graph: cell.recompute(); pynative: mindspore.recompute)",
    )
    mode: Literal["graph", "pynative"] = "graph"
    checkpoint_every: int = _int(
        0,
        1_000_000,
        0,
        "save a MindSpore checkpoint every N steps (0: never); "
        "`sweep --resume` continues a killed run from its last checkpoint",
    )
    data: Annotated[str, WrapValidator(lambda v, h: _data_folder(h(v)))] = Field(
        "synthetic", description="synthetic, or an image folder (ResNet: mindspore.dataset.ImageFolderDataset)"
    )
    kernel_threads: Annotated[int, Field(ge=1, le=256)] | Literal["mindspore"] | None = Field(
        None,
        description=(
            "MindSpore's CPU kernel thread pool per rank (mindspore.device_context.cpu.op_tuning.threads_num); null: 1 "
            "for a rank pinned to one core (with MindSpore's default its steps 5-14 cost 40-70% more CPU time), "
            "MindSpore's default otherwise; `mindspore`: always MindSpore's default (docs/benchmarks.md, Repeatability)"
        ),
    )
    dispatch_threads: Annotated[int, Field(ge=1, le=256)] | Literal["mindspore"] | None = Field(
        None,
        description=(
            "MindSpore's runtime (actor dispatch) threads per rank (mindspore.runtime.dispatch_threads_num); null: 1 "
            "for a rank pinned to one core, MindSpore's default (5) otherwise; `mindspore`: always MindSpore's default"
        ),
    )
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        "fp32",
        description="fp32 | fp16 (MindSpore AMP O2 + dynamic loss scaling) | bf16 (Ascend only for the MindSpore "
        "workloads: the CPU backend has no bf16 MatMul/Conv2D kernels; a PyTorch script's autocast runs it on CPU)",
    )
    loss_scale: float = Field(2.0**16, ge=1, le=2.0**64, description="fp16: initial dynamic loss scale")
    loss_scale_window: int = _int(1, 1_000_000, 1000, "fp16: steps without overflow before the loss scale doubles")


#: train.precision bf16 outside `workload: script` (workloads/runner.py runs on the CPU backend only)
BF16_ON_CPU = (
    "'bf16' cannot run on the MindSpore CPU backend perfbench launches: it has no "
    "bf16 kernels for MatMul, Conv2D, BatchNorm, Softmax or the loss (only Add, Mul, "
    "Cast); use fp16 or fp32 here (bf16 is the usual choice on Ascend, "
    "docs/workloads.md)"
)


def _data_folder(value: str) -> str:
    if value != "synthetic" and not Path(value).is_dir():
        raise PydanticCustomError("invalid", "must be `synthetic` or an existing image folder")
    return value


class Profile(Section):
    enabled: bool = Field(True, description="false: no profiler at all (for overhead measurements)")
    steps: int = _int(1, 1000, 4, "profiled window: the steps right after warm-up")
    level: Literal["off", "light", "default", "full"] = Field(
        "default",
        description="what the profiler records: off | light (op times) | default (op times, MindSpore's "
        "parse after training) | full (+ memory, shapes, stacks); workloads/runner.py PROFILE_LEVELS",
    )


class Parallel(Section):
    grad_compression: Literal["none", "fp16", "powersgd", "topk"] = "none"
    compression_ratio: Annotated[
        float, Field(gt=0, le=1), explain("must be in (0, 1]: the fraction of gradient bytes kept")
    ] = Field(0.01, description="powersgd/topk: fraction of gradient bytes kept, in (0, 1]")
    comm_fusion: Annotated[
        Union[Literal["all"], Annotated[int, Field(ge=0)], Annotated[float, Field(ge=0)]],
        explain("must be a bucket size in MB (0 = one collective per parameter) or `all`"),
    ] = Field(0, description="gradient bucket size in MB; 0 = one all-reduce per parameter; all = one buffer")
    fusion_impl: Literal["perfbench", "mindspore"] = Field(
        "perfbench", description="perfbench (own bucketing) | mindspore (MindSpore's comm_fusion)"
    )
    pipeline_stages: int = _int(1, 1024, 1, "S; world_size = S x data-parallel size")
    tensor_parallel: int = _int(
        1,
        1024,
        1,
        "T (moe only): attention heads and feed-forward split over T ranks, "
        "Megatron-style; world_size = data-parallel x T x S",
    )
    micro_batches: int = _int(1, 4096, 1, "M; with S = 1 it is gradient accumulation")
    pipeline_schedule: Literal["gpipe", "1f1b"] = "1f1b"
    pipeline_split: list[Annotated[int, Field(ge=1)]] | None = Field(
        None,
        description="layers per pipeline stage, e.g. [3, 15] (resnet50: stem + blocks + head; moe: embedding + "
        "layers + head), as MindSpore users set each cell's pipeline_stage by hand; null: split by the layers' "
        "estimated cost",
    )
    zero_stage: Literal[0, 1, 2] = Field(
        0,
        description="ZeRO: 0 = replicated; 1 = optimizer state sharded over the data-parallel ranks; "
        "2 = optimizer state and gradients sharded (CPU: AllReduce + in-place Broadcast, docs/workloads.md)",
    )
    overlap_grad_comm: bool = Field(
        False,
        description="true: all-reduce each gradient bucket asynchronously as soon "
        "as backward produced it (PyNative hooks), waited before the optimizer; false: "
        "all-reduce after the whole backward",
    )


class Slurm(Section):
    """Where and how `launch.backend: slurm` submits each run (sbatch); docs/slurm.md."""

    partition: _text("must be a partition name (sinfo lists them)", min_length=1) | None = Field(
        None, description="sbatch --partition (default: the cluster's default partition)"
    )
    account: _text("must be an account name", min_length=1) | None = Field(None, description="sbatch --account")
    time_limit: (
        _text(
            "must be a Slurm time limit: MINUTES, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]", pattern=r"^(\d+-)?\d+(:\d+){0,2}$"
        )
        | None
    ) = Field(None, description="sbatch --time; when Slurm ends the job for it, the run fails with TIMEOUT")
    cpus_per_task: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="sbatch --cpus-per-task (one task per node runs msrun, which starts that node's ranks)",
    )
    sbatch_args: Annotated[
        list[Annotated[str, Field(pattern=r"^-")]], explain("must be a list of sbatch options, each starting with '-'")
    ] = Field(default_factory=list, description='extra sbatch options, e.g. ["--exclusive", "--qos=high"]')
    poll_s: float = Field(2.0, ge=0.1, le=600, description="how often the sweep asks Slurm about the job")


class Launch(Section):
    backend: Literal["local", "slurm"] = Field(
        "local",
        description="local: msrun on this machine; slurm: each run is a Slurm job (sbatch), msrun on every node",
    )
    slurm: Slurm = Field(default_factory=Slurm, description="sbatch options for backend: slurm")
    timeout_s: int = _int(
        10, None, 900, "whole run, msrun start to exit (slurm: from the job's start, pending excluded)"
    )
    stall_timeout_s: int = _int(10, None, 180, "no rank finished a step for this long = hung")
    max_world_size: int = _int(1, 4096, 8, "world sizes above this are rejected")
    bind_core: Annotated[Union[Literal["auto"], bool], explain("must be auto, true or false")] = Field(
        "auto",
        description="auto: msrun --bind_core when every local rank gets a core of its own; true: always (a single "
        "local rank is then pinned to the first core by the rank itself, with 1-thread MindSpore pools); a PyTorch "
        "script (torchrun) is pinned only with true: each local rank to a core of its own, by the capture bootstrap",
    )
    master_port: Annotated[
        Union[Literal["auto"], Annotated[int, Field(ge=1024, le=65535)]],
        explain("must be auto or a port number from 1024 to 65535"),
    ] = "auto"
    nodes: int = _int(1, 1024, 1, ">1: multi-node msrun; run the same sweep on every node with its node_rank")
    node_rank: int = _int(0, None, 0)
    master_addr: _text("must be a host name or address", min_length=1) = "127.0.0.1"

    @model_validator(mode="after")
    def _rules(self):
        return launch_rules(self)


def launch_rules(launch: Launch) -> Launch:
    if launch.node_rank > launch.nodes - 1:
        raise rule(
            f"{launch.node_rank} must be at most {launch.nodes - 1} (launch.nodes is {launch.nodes})", "node_rank"
        )
    if launch.backend == "slurm" and launch.node_rank:
        raise rule(
            f"{launch.node_rank}: with launch.backend slurm every node takes its rank from Slurm "
            "(SLURM_NODEID); remove launch.node_rank",
            "node_rank",
        )
    if launch.backend == "local" and launch.slurm != Slurm():
        raise rule(
            f"{show(launch.slurm.model_dump(exclude_defaults=True))} is set but launch.backend is local; "
            "set launch.backend: slurm to submit runs to Slurm",
            "slurm",
        )
    return launch


def _nth(doc: str = ""):
    """An optional rank or step number (null: none)."""
    return Field(None, ge=0, description=doc or None)


def _ms(doc: str):
    """A non-negative duration in milliseconds, 0 by default."""
    return Field(0, ge=0, description=doc)


class Inject(Section):
    """Fault and slowdown injection, for tests and for trying the regression gate."""

    crash_rank: int | None = _nth("this rank exits with code 3 at crash_step")
    crash_step: int | None = _nth()
    hang_rank: int | None = _nth("this rank sleeps forever at hang_step")
    hang_step: int | None = _nth()
    crash_at_exit_rank: int | None = _nth(
        "this rank kills itself with SIGSEGV after it has written everything (what a crash in MindSpore's teardown "
        "looks like)"
    )
    delay_ms: float = _ms("every rank sleeps this long in every step")
    busy_ms: float = _ms(
        "every rank burns this much CPU time in every step (a slowdown that costs CPU like a code regression, unlike "
        "delay_ms's sleep)"
    )
    straggler_rank: int | None = _nth(
        "this rank alone burns straggler_busy_ms of CPU inside every step (a straggler: the other ranks wait for it "
        "in collectives)"
    )
    straggler_busy_ms: float = _ms("CPU time straggler_rank burns in every step")
    input_delay_ms: float = _ms(
        "every rank waits this long for its batch before each step's compiled step (a slow input pipeline; recorded "
        "as input_wait_s)"
    )

    @model_validator(mode="after")
    def _straggler(self):
        if self.straggler_busy_ms and self.straggler_rank is None:
            raise rule(
                f"{self.straggler_busy_ms:g} is set but inject.straggler_rank is not: name the rank that straggles",
                "straggler_busy_ms",
            )
        return self

    overflow_step: int | None = _nth(
        "train.precision fp16: the loss is scaled by a further 1e30 at this step, so its gradients overflow: the "
        "update is skipped and the loss scale halves"
    )


class ScriptModel(Section):
    """workload: script has no model knobs (the script builds its own model; its knobs go under `knobs:`)."""


class Script(Section):
    """workload: script: the user's own training script (docs/workloads.md, "Your own job")."""

    path: _text("must be the path of a Python script", min_length=1) = Field(
        description="the entry script, relative to the sweep file"
    )
    framework: Literal["mindspore", "pytorch"] = Field(
        description="mindspore (started by msrun) | pytorch (started by torchrun, gloo on CPU)"
    )
    args: Annotated[list[Union[str, int, float, bool]], explain("must be a list of arguments (strings or numbers)")] = (
        Field(default_factory=list, description='the script\'s arguments, templates: ["--lr", "{knobs.lr}"]')
    )
    env: Annotated[
        dict[str, Union[str, int, float, bool]], explain("must be a mapping of variable names to values")
    ] = Field(default_factory=dict, description='environment of every rank, templates: {HCCL_BUFFSIZE: "{knobs.buf}"}')


MODELS: dict[str, type[Section]] = {"resnet50": ResNet50Model, "moe": MoEModel, "script": ScriptModel}
#: sections whose keys may be sweep axes, in the order a key is looked up
SWEEPABLE: dict[str, type[Section]] = {"parallel": Parallel, "train": Train, "inject": Inject}


Number = Annotated[Union[int, float], explain("must be a number")]


class Range(BaseModel):
    """A numeric sweep axis `{low, high, log, step}`: `perfbench tune` samples it; `perfbench sweep` lists its
    values when it has a step (integers: step 1 unless log)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    low: Number
    high: Number
    step: Annotated[Number, Field(gt=0)] | None = None
    log: bool = False

    @model_validator(mode="before")
    @classmethod
    def _ends(cls, raw):
        return range_ends(raw)

    @model_validator(mode="after")
    def _consistent(self):
        return range_rules(self)

    @property
    def is_int(self) -> bool:
        return all(isinstance(v, int) for v in (self.low, self.high)) and (
            self.step is None or isinstance(self.step, int)
        )

    @property
    def enumerable(self) -> bool:
        return self.step is not None or (self.is_int and not self.log)

    def values(self) -> list:
        """Every value when enumerable, else the two ends (enough to validate the range)."""
        if not self.enumerable:
            return [self.low, self.high]
        step = self.step or 1
        n = math.floor((self.high - self.low) / step + 1e-9) + 1
        vals = [self.low + i * step for i in range(n)]
        return vals if self.is_int else [round(v, 12) for v in vals]

    def describe(self) -> str:
        parts = (
            [f"low: {self.low}", f"high: {self.high}"]
            + ([f"step: {self.step}"] if self.step is not None else [])
            + (["log: true"] if self.log else [])
        )
        return "{" + ", ".join(parts) + "}"


def range_ends(raw):
    if isinstance(raw, dict) and not {"low", "high"} <= set(raw):
        raise rule(f"a range needs `low` and `high` (got {show(raw)})")
    return raw


def range_rules(r: Range) -> Range:
    if r.high <= r.low:
        raise rule(f"{r.high} must be greater than low ({r.low})", "high")
    if r.log and r.step is not None:
        raise rule("`log: true` and `step` cannot be combined (a log range is sampled on a log scale)")
    if r.log and r.low <= 0:
        raise rule(f"{r.low} must be greater than 0 with `log: true`", "low")
    return r


def tidy_sections(raw):
    """`train:` with nothing under it means the defaults, as an empty mapping does."""
    if isinstance(raw, dict):
        return {k: ({} if v is None and k in SECTION_KEYS else v) for k, v in raw.items()}
    return raw


SECTION_KEYS = ("model", "train", "profile", "parallel", "launch", "inject", "sweep", "knobs")


class SweepFile(BaseModel):
    """A perfbench sweep: a workload, its knobs, and sweep axes whose cartesian product (x repeats) is the runs."""

    model_config = ConfigDict(extra="forbid", strict=True, title="perfbench sweep config")
    name: (
        _text("must be 1-64 letters, digits, '_', '.' or '-'", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$") | None
    ) = Field(None, description="sweep name: run ids start with it; default: the file's stem")
    workload: Literal["resnet50", "moe", "script"]
    model: dict[str, Any] = Field(default_factory=dict, description="workload knobs")
    script: Script | None = Field(None, description="workload: script: the entry script, framework, args, env")
    knobs: dict[str, Any] = Field(
        default_factory=dict, description="workload: script: free knobs with their defaults; sweep them as knobs.NAME"
    )
    train: Train = Field(default_factory=Train)
    profile: Profile = Field(default_factory=Profile)
    parallel: Parallel = Field(
        default_factory=Parallel, description="defaults for every run; any key may be a sweep axis"
    )
    launch: Launch = Field(default_factory=Launch)
    inject: Inject = Field(default_factory=Inject)
    sweep: dict[str, Any] = Field(default_factory=dict, description="axes: lists (or ranges); runs are their product")
    repeats: int = _int(1, 100, 1, "each point runs this many times (repeats are the outer loop)")
    results: str | None = Field(None, description="results folder (relative to this file); --results wins")
    search: dict[str, Any] | None = Field(
        None, description="how `perfbench tune` searches the sweep axes (docs/tune.md)"
    )

    _tidy = model_validator(mode="before")(tidy_sections)


class RunConfig(BaseModel):
    """One planned run's resolved knobs (run_config.json), with the rules across keys checked for it."""

    model_config = ConfigDict(extra="ignore", strict=True)
    workload: Literal["resnet50", "moe", "script"]
    world_size: int = Field(ge=1)
    model: dict[str, Any]
    train: Train
    profile: Profile
    parallel: Parallel
    inject: Inject = Field(default_factory=Inject)
    script: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _rules(self):
        return run_rules(self)


def run_rules(run: RunConfig) -> RunConfig:
    """The rules across keys for one run; the first broken one is the error."""
    ws, par, train, profile, m = run.world_size, run.parallel, run.train, run.profile, run.model
    if train.warmup_steps >= train.steps:
        raise rule(
            f"train.warmup_steps ({train.warmup_steps}) must be less than train.steps ({train.steps}) "
            "so that some steps are measured"
        )
    if profile.enabled and train.warmup_steps + profile.steps > train.steps:
        raise rule(
            f"profile.steps ({profile.steps}) does not fit after train.warmup_steps ({train.warmup_steps}) "
            f"within train.steps ({train.steps})"
        )
    if run.inject.straggler_rank is not None and run.inject.straggler_rank >= ws:
        raise rule(f"inject.straggler_rank ({run.inject.straggler_rank}) must be less than world_size ({ws})")
    if run.workload == "script":  # what a user's script can be given (perfbench/run/script.py)
        problems = script_rules((run.script or {}).get("framework", ""), par.model_dump(), ws)
        if problems:
            raise rule(problems[0] + " (refused before running)")
        return run
    if train.precision == "bf16":
        raise rule(BF16_ON_CPU, key="train.precision")
    # the parallel rules have one home, shared with the workloads and `predict` (pure Python, no MindSpore)
    problems = validate_parallel(run.workload, m, par.model_dump(), ws, train.model_dump())
    if problems:
        raise rule(problems[0])
    return run


# ---- the JSON Schema (typed model and sweep sections for editors) -----------------------------------


def _axis(field) -> Any:
    value = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return (Union[list[value], Range, value, None], Field(None, description=field.description))


def json_schema() -> dict:
    """The sweep YAML's JSON Schema (draft 2020-12), for yaml-language-server and other editors."""

    axes: dict[str, Any] = {"world_size": (Union[list[Annotated[int, Field(ge=1)]], Range, int, None], Field(None))}
    for cls in (*SWEEPABLE.values(), *MODELS.values()):
        axes.update({k: _axis(f) for k, f in cls.model_fields.items()})
    Axes = create_model("SweepAxes", __config__=ConfigDict(extra="forbid"), **axes)
    Schema = create_model(
        "SweepConfig",
        __base__=SweepFile,
        model=(Union[ResNet50Model, MoEModel, ScriptModel], Field(default_factory=dict, description="workload knobs")),
        sweep=(Axes, Field(default_factory=dict, description="axes: lists (or ranges); runs are their product")),
        search=(SearchSpec | None, Field(None, description="how `perfbench tune` searches the sweep axes")),
    )
    schema = Schema.model_json_schema(mode="validation")
    # the model section's keys depend on the workload
    schema["allOf"] = [
        {
            "if": {"properties": {"workload": {"const": name}}, "required": ["workload"]},
            "then": {"properties": {"model": {"$ref": f"#/$defs/{cls.__name__}"}}},
        }
        for name, cls in MODELS.items()
    ]
    # workload script: the user's knobs are axes too (knobs.NAME)
    schema["$defs"]["SweepAxes"]["patternProperties"] = {r"^knobs\.[A-Za-z_][A-Za-z0-9_]*$": {}}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "perfbench sweep config"
    return schema
