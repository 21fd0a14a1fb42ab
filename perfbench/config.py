"""Sweep configuration: YAML → validated config → the planned runs (cartesian product of the axes x repeats).

Every error names the offending key (as a dotted path) and value. See docs/config.md for the reference.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from perfbench.errors import ConfigError

WORKLOADS = ("resnet50", "moe")

MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "resnet50": {"image_size": 32, "num_classes": 10, "width": 64, "layers": [3, 4, 6, 3]},
    "moe": {
        "vocab_size": 512,
        "seq_len": 32,
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "num_experts": 4,
        "top_k": 2,
        "capacity_factor": 1.25,
        "aux_loss_coef": 0.01,
    },
}

TRAIN_DEFAULTS: dict[str, Any] = {
    "batch_size": 8,
    "steps": 12,
    "warmup_steps": 2,
    "seed": 0,
    "lr": 0.05,
    "momentum": 0.9,
    "mode": "graph",
    "data": "synthetic",
}

PROFILE_DEFAULTS: dict[str, Any] = {"enabled": True, "steps": 4}

PARALLEL_DEFAULTS: dict[str, Any] = {
    "grad_compression": "none",
    "compression_ratio": 0.01,
    "comm_fusion": 0,
    "fusion_impl": "perfbench",
    "pipeline_stages": 1,
    "micro_batches": 1,
    "pipeline_schedule": "1f1b",
}

LAUNCH_DEFAULTS: dict[str, Any] = {
    "timeout_s": 900,  # whole run, msrun start to exit
    "stall_timeout_s": 180,  # no new step from any rank for this long (after the first step) = hung
    "max_world_size": 8,
    "bind_core": "auto",  # auto: pin ranks to cores when they fit (msrun --bind_core)
    "master_port": "auto",
    "nodes": 1,  # >1: multi-node msrun; run `perfbench sweep` on each node with launch.node_rank
    "node_rank": 0,
    "master_addr": "127.0.0.1",
}

INJECT_DEFAULTS: dict[str, Any] = {
    "crash_rank": None,
    "crash_step": None,
    "hang_rank": None,
    "hang_step": None,
    "delay_ms": 0,
}

GRAD_COMPRESSION = ("none", "fp16", "powersgd", "topk")
FUSION_IMPLS = ("perfbench", "mindspore")
SCHEDULES = ("gpipe", "1f1b")
MODES = ("graph", "pynative")

TOP_LEVEL = ("name", "workload", "model", "train", "profile", "parallel", "launch", "inject", "sweep", "repeats", "results",
             "search")
#: keys that may be swept besides world_size: every parallel, train and model knob
SWEEPABLE_SECTIONS = ("parallel", "train", "model")


@dataclass
class RunPlan:
    """One planned run: its id, the settings that identify it, and the run_config given to the workload."""

    run_id: str
    settings: dict[str, Any]
    run_config: dict[str, Any]
    config_key: str = ""  # same for runs that differ only in world_size and repeat (scaling efficiency)


@dataclass
class SweepConfig:
    name: str
    workload: str
    model: dict[str, Any]
    train: dict[str, Any]
    profile: dict[str, Any]
    parallel: dict[str, Any]
    launch: dict[str, Any]
    inject: dict[str, Any]
    sweep: dict[str, list]
    repeats: int
    results: str | None = None
    source: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    #: numeric range axes (`{low, high, log, step}`), by key; `sweep` holds their enumerated values
    ranges: dict[str, "Range"] = field(default_factory=dict)
    #: the validated `search:` section for `perfbench tune` (perfbench.tune_spec.SearchSpec), or None
    search: Any = None

    def axes(self) -> dict[str, list]:
        axes = {"world_size": self.sweep.get("world_size", [1])}
        axes.update({k: v for k, v in self.sweep.items() if k != "world_size"})
        return axes

    def plan(self, sweep_id: str | None = None, *, strict: bool = True) -> list[RunPlan]:
        """The runs, in order. Run ids are `<sweep_id>-<swept values>-r<repeat>`, stable for a sweep id.
        Repeats are the outer loop, so the repeats of one setting are spread over the sweep's time
        and slow drifts of a shared machine do not land on one setting only."""
        sweep_id = sweep_id or self.name
        for key, r in self.ranges.items():
            if strict and not r.enumerable:
                raise ConfigError(f"sweep.{key}: the range {r.describe()} has no `step`, so a sweep cannot list its "
                                  "values: give `step`, a list of values, or search it with `perfbench tune`")
        axes = self.axes()
        names = list(axes)
        points = []
        used: set[str] = set()
        for combo in itertools.product(*(axes[n] for n in names)):
            point = dict(zip(names, combo))
            sections = {s: copy.deepcopy(getattr(self, s)) for s in ("model", "train", "profile", "parallel", "inject")}
            for key, value in point.items():
                if key != "world_size":
                    sections[section_of(key, self.workload)][key] = value
            settings = {"workload": self.workload, "world_size": point["world_size"]}
            settings.update({k: v for k, v in point.items() if k != "world_size"})
            short = _short(point)
            if short in used:  # two points that abbreviate alike
                short = f"{short}-{_digest({'settings': settings, **sections})}"
            used.add(short)
            points.append((short, settings, sections))
        plans: list[RunPlan] = []
        for repeat in range(self.repeats):
            for short, settings, sections in points:
                run_id = f"{sweep_id}-{short}-r{repeat}"
                run_config = {
                    "run_id": run_id,
                    "workload": self.workload,
                    "world_size": settings["world_size"],
                    "repeat": repeat,
                    "output_dir": None,  # filled by the sweep (store path)
                    "threads_per_rank": None,  # filled by the launcher
                    **copy.deepcopy(sections),
                }
                plans.append(RunPlan(run_id, dict(settings, repeat=repeat), run_config, config_key(run_config)))
        return plans


def plan_point(cfg: SweepConfig, point: dict[str, Any], run_id: str, repeat: int = 0) -> RunPlan:
    """One run at an arbitrary point of the space (e.g. a value sampled from a range axis), checked
    with the same value and cross-key rules as a sweep's runs (ConfigError when it breaks one)."""
    sections = {s: copy.deepcopy(getattr(cfg, s)) for s in ("model", "train", "profile", "parallel", "inject")}
    for key, value in point.items():
        if key != "world_size":
            sections[section_of(key, cfg.workload)][key] = value
        _check_value(cfg, key, value)
    ws = point.get("world_size", cfg.axes()["world_size"][0])
    settings = {"workload": cfg.workload, "world_size": ws}
    settings.update({k: v for k, v in point.items() if k != "world_size"})
    run_config = {"run_id": run_id, "workload": cfg.workload, "world_size": ws, "repeat": repeat,
                  "output_dir": None, "threads_per_rank": None, **sections}
    plan = RunPlan(run_id, dict(settings, repeat=repeat), run_config, config_key(run_config))
    _check_run(cfg, plan)
    return plan


def short_name(point: dict) -> str:
    """A run-id fragment naming a point's values, e.g. `ws2-cf4-gcfp16`."""
    return _short(point)


def config_key(run_config: dict) -> str:
    """Identity of a run's configuration apart from world size, repeat and where it runs."""
    ignore = {"run_id", "world_size", "repeat", "output_dir", "threads_per_rank"}
    return _digest({k: v for k, v in run_config.items() if k not in ignore})


def section_of(key: str, workload: str) -> str:
    if key in PARALLEL_DEFAULTS:
        return "parallel"
    if key in TRAIN_DEFAULTS:
        return "train"
    if key in MODEL_DEFAULTS[workload]:
        return "model"
    if key in INJECT_DEFAULTS:
        return "inject"
    raise KeyError(key)


_ABBREV = {
    "world_size": "ws",
    "grad_compression": "gc",
    "compression_ratio": "cr",
    "comm_fusion": "cf",
    "fusion_impl": "fi",
    "pipeline_stages": "pp",
    "micro_batches": "mb",
    "pipeline_schedule": "sch",
    "batch_size": "bs",
}


def _short(point: dict) -> str:
    parts = []
    for k, v in point.items():
        if isinstance(v, list):
            v = "x".join(map(str, v))
        val = re.sub(r"[^A-Za-z0-9.]+", "", str(v))[:12]
        parts.append(f"{_ABBREV.get(k, re.sub(r'[^a-z0-9]', '', k)[:6])}{val}")
    return "-".join(parts)


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:6]


# ---- loading and validation ----------------------------------------------------------------


def load_config(path: str | os.PathLike) -> SweepConfig:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if p.is_dir():
        raise ConfigError(f"config path {p} is a directory, expected a YAML file")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read ({exc})") from None
    cfg = parse_config(raw, default_name=p.stem)
    cfg.source = str(p)
    return cfg


def parse_config(raw: Any, default_name: str = "sweep") -> SweepConfig:
    if raw is None:
        raise ConfigError("the config is empty: expected a mapping with at least `workload`")
    if not isinstance(raw, dict):
        raise ConfigError(f"the config must be a mapping of keys to values, got {_show(raw)}")
    for key in raw:
        if key not in TOP_LEVEL:
            raise ConfigError(f"unknown key `{key}`{_suggest(key, TOP_LEVEL)} (allowed: {', '.join(TOP_LEVEL)})")

    workload = raw.get("workload")
    if workload is None:
        raise ConfigError(f"missing key `workload` (one of: {', '.join(WORKLOADS)})")
    if workload not in WORKLOADS:
        raise ConfigError(f"workload: {_show(workload)} is not a known workload (one of: {', '.join(WORKLOADS)})")

    name = raw.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(f"name: {_show(name)} must be 1-64 letters, digits, '_', '.' or '-'")

    model = _section(raw, "model", MODEL_DEFAULTS[workload])
    train = _section(raw, "train", TRAIN_DEFAULTS)
    profile = _section(raw, "profile", PROFILE_DEFAULTS)
    parallel = _section(raw, "parallel", PARALLEL_DEFAULTS)
    launch = _section(raw, "launch", LAUNCH_DEFAULTS)
    inject = _section(raw, "inject", INJECT_DEFAULTS)

    repeats = raw.get("repeats", 1)
    _check_int("repeats", repeats, lo=1, hi=100)

    results = raw.get("results")
    if results is not None and not isinstance(results, str):
        raise ConfigError(f"results: {_show(results)} must be a path (string)")

    sweep_raw = raw.get("sweep", {}) or {}
    if not isinstance(sweep_raw, dict):
        raise ConfigError(f"sweep: expected a mapping of axis name to a list of values, got {_show(sweep_raw)}")
    sweep: dict[str, list] = {}
    ranges: dict[str, Range] = {}
    for key, values in sweep_raw.items():
        if key != "world_size":
            try:
                section_of(key, workload)
            except KeyError:
                allowed = ["world_size", *PARALLEL_DEFAULTS, *TRAIN_DEFAULTS, *MODEL_DEFAULTS[workload], *INJECT_DEFAULTS]
                raise ConfigError(
                    f"sweep.{key}: unknown sweep axis{_suggest(key, allowed)} "
                    f"(axes may be world_size or any key of parallel, train, model or inject for {workload})"
                ) from None
        if isinstance(values, dict):
            ranges[key] = parse_range(f"sweep.{key}", values)
            values = ranges[key].values()
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ConfigError(f"sweep.{key}: the list of values is empty")
        if len(values) != len({json.dumps(v, sort_keys=True, default=str) for v in values}):
            raise ConfigError(f"sweep.{key}: values {_show(values)} contain duplicates")
        sweep[key] = values

    cfg = SweepConfig(name, workload, model, train, profile, parallel, launch, inject, sweep, repeats, results, raw=raw,
                      ranges=ranges)
    _validate(cfg)
    if raw.get("search") is not None:
        from perfbench.tune_spec import parse_search

        cfg.search = parse_search(raw["search"], cfg)
    return cfg


@dataclass(frozen=True)
class Range:
    """A numeric sweep axis `{low, high, log, step}`: `perfbench tune` samples it; `perfbench sweep` lists its
    values when it has a step (integers: step 1 unless log)."""

    low: float
    high: float
    step: float | None = None
    log: bool = False

    @property
    def is_int(self) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high)) and \
            (self.step is None or isinstance(self.step, int))

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
        parts = [f"low: {self.low}", f"high: {self.high}"] + ([f"step: {self.step}"] if self.step is not None else []) \
            + (["log: true"] if self.log else [])
        return "{" + ", ".join(parts) + "}"


def parse_range(where: str, raw: dict) -> Range:
    allowed = ("low", "high", "step", "log")
    for k in raw:
        if k not in allowed:
            raise ConfigError(f"{where}.{k}: unknown key{_suggest(k, allowed)} (a range has {', '.join(allowed)})")
    for k in ("low", "high"):
        if k not in raw:
            raise ConfigError(f"{where}: a range needs `low` and `high` (got {_show(raw)})")
        _check_number(f"{where}.{k}", raw[k])
    low, high, step, log = raw["low"], raw["high"], raw.get("step"), raw.get("log", False)
    _check_bool(f"{where}.log", log)
    if high <= low:
        raise ConfigError(f"{where}.high: {high} must be greater than low ({low})")
    if step is not None:
        _check_number(f"{where}.step", step)
        if step <= 0:
            raise ConfigError(f"{where}.step: {step} must be greater than 0")
        if log:
            raise ConfigError(f"{where}: `log: true` and `step` cannot be combined (a log range is sampled on a log scale)")
    if log and low <= 0:
        raise ConfigError(f"{where}.low: {low} must be greater than 0 with `log: true`")
    return Range(low, high, step, log)


def _section(raw: dict, name: str, defaults: dict) -> dict:
    value = raw.get(name, {}) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: expected a mapping, got {_show(value)}")
    for key in value:
        if key not in defaults:
            raise ConfigError(f"{name}.{key}: unknown key{_suggest(key, defaults)} (allowed: {', '.join(defaults)})")
    out = copy.deepcopy(defaults)
    out.update(value)
    return out


def _validate(cfg: SweepConfig) -> None:
    """Check every value that any run will use: the defaults merged with each swept value."""
    launch = cfg.launch
    _check_int("launch.timeout_s", launch["timeout_s"], lo=10)
    _check_int("launch.stall_timeout_s", launch["stall_timeout_s"], lo=10)
    _check_int("launch.max_world_size", launch["max_world_size"], lo=1, hi=4096)
    _check_int("launch.nodes", launch["nodes"], lo=1, hi=1024)
    _check_int("launch.node_rank", launch["node_rank"], lo=0, hi=launch["nodes"] - 1)
    if launch["bind_core"] not in ("auto", True, False):
        raise ConfigError(f"launch.bind_core: {_show(launch['bind_core'])} must be auto, true or false")
    if launch["master_port"] != "auto":
        _check_int("launch.master_port", launch["master_port"], lo=1024, hi=65535)
    if not isinstance(launch["master_addr"], str) or not launch["master_addr"]:
        raise ConfigError(f"launch.master_addr: {_show(launch['master_addr'])} must be a host name or address")

    _check_bool("profile.enabled", cfg.profile["enabled"])
    _check_int("profile.steps", cfg.profile["steps"], lo=1, hi=1000)

    for k in ("crash_rank", "crash_step", "hang_rank", "hang_step"):
        for v in cfg.sweep.get(k, [cfg.inject[k]]):
            if v is not None:
                _check_int(f"sweep.{k}" if k in cfg.sweep else f"inject.{k}", v, lo=0)
    for v in cfg.sweep.get("delay_ms", [cfg.inject["delay_ms"]]):
        _check_number("sweep.delay_ms" if "delay_ms" in cfg.sweep else "inject.delay_ms", v, lo=0)

    # every value of every axis, checked in the context of the defaults
    for key, value in _all_values(cfg):
        _check_value(cfg, key, value)

    for plan in cfg.plan(strict=False):
        _check_run(cfg, plan)


def _all_values(cfg: SweepConfig):
    yield from (("world_size", v) for v in cfg.sweep.get("world_size", [1]))
    for section in ("model", "train", "parallel"):
        for key, default in getattr(cfg, section).items():
            yield from ((key, v) for v in cfg.sweep.get(key, [default]))


def _path(cfg: SweepConfig, key: str) -> str:
    if key in cfg.sweep:
        return f"sweep.{key}"
    return "world_size" if key == "world_size" else f"{section_of(key, cfg.workload)}.{key}"


def _check_value(cfg: SweepConfig, key: str, value: Any) -> None:
    where = _path(cfg, key)
    ints = {
        "world_size": (1, None),
        "image_size": (8, 1024),
        "num_classes": (2, 100000),
        "width": (1, 4096),
        "batch_size": (1, 65536),
        "steps": (1, 1000000),
        "warmup_steps": (0, 1000000),
        "seed": (0, 2**31 - 1),
        "pipeline_stages": (1, 1024),
        "micro_batches": (1, 4096),
        "vocab_size": (2, 10**7),
        "seq_len": (2, 65536),
        "hidden_size": (2, 65536),
        "num_layers": (1, 1024),
        "num_heads": (1, 1024),
        "num_experts": (1, 4096),
        "top_k": (1, 64),
    }
    if key in ints:
        lo, hi = ints[key]
        _check_int(where, value, lo=lo, hi=hi)
    if key == "world_size":
        mx = cfg.launch["max_world_size"]
        if value > mx:
            raise ConfigError(
                f"{where}: {value} is larger than allowed: launch.max_world_size is {mx} "
                f"(raise launch.max_world_size to allow it; this machine has {os.cpu_count()} cores)"
            )
        if value % cfg.launch["nodes"]:
            raise ConfigError(f"{where}: {value} is not divisible by launch.nodes ({cfg.launch['nodes']})")
    elif key == "layers":
        if not (isinstance(value, list) and len(value) == 4 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in value)):
            raise ConfigError(f"{where}: {_show(value)} must be a list of 4 positive integers (blocks per stage, ResNet-50 is [3, 4, 6, 3])")
    elif key in ("lr", "momentum", "capacity_factor", "aux_loss_coef", "compression_ratio"):
        _check_number(where, value, lo=0)
        if key == "momentum" and value >= 1:
            raise ConfigError(f"{where}: {value} must be below 1")
        if key == "compression_ratio" and not (0 < value <= 1):
            raise ConfigError(f"{where}: {value} must be in (0, 1]: the fraction of gradient bytes kept")
        if key == "capacity_factor" and value <= 0:
            raise ConfigError(f"{where}: {value} must be greater than 0")
    elif key == "mode" and value not in MODES:
        raise ConfigError(f"{where}: {_show(value)} must be one of {', '.join(MODES)}")
    elif key == "data":
        if not isinstance(value, str) or not (value == "synthetic" or Path(value).is_dir()):
            raise ConfigError(f"{where}: {_show(value)} must be `synthetic` or an existing image folder")
    elif key == "grad_compression" and value not in GRAD_COMPRESSION:
        raise ConfigError(f"{where}: {_show(value)} must be one of {', '.join(GRAD_COMPRESSION)}")
    elif key == "fusion_impl" and value not in FUSION_IMPLS:
        raise ConfigError(f"{where}: {_show(value)} must be one of {', '.join(FUSION_IMPLS)}")
    elif key == "pipeline_schedule" and value not in SCHEDULES:
        raise ConfigError(f"{where}: {_show(value)} must be one of {', '.join(SCHEDULES)}")
    elif key == "comm_fusion":
        if value != "all":
            _check_number(where, value, lo=0, what="a bucket size in MB (0 = one collective per parameter) or `all`")


def _check_run(cfg: SweepConfig, plan: RunPlan) -> None:
    """Rules across keys, for one run."""
    rc = plan.run_config
    ws, par, train = rc["world_size"], rc["parallel"], rc["train"]
    where = ", ".join(f"{k}={v}" for k, v in plan.settings.items() if k not in ("workload", "repeat"))
    if train["warmup_steps"] >= train["steps"]:
        raise ConfigError(
            f"train.warmup_steps ({train['warmup_steps']}) must be less than train.steps ({train['steps']}) "
            f"so that some steps are measured (run {where})"
        )
    if rc["profile"]["enabled"] and train["warmup_steps"] + rc["profile"]["steps"] > train["steps"]:
        raise ConfigError(
            f"profile.steps ({rc['profile']['steps']}) does not fit after train.warmup_steps ({train['warmup_steps']}) "
            f"within train.steps ({train['steps']}) (run {where})"
        )
    stages, mbs = par["pipeline_stages"], par["micro_batches"]
    if ws % stages:
        raise ConfigError(f"pipeline_stages={stages} does not divide world_size={ws} (world_size = stages x data-parallel size)")
    if stages > 1 and par["pipeline_schedule"] == "1f1b" and mbs < stages:
        raise ConfigError(f"micro_batches={mbs} is less than pipeline_stages={stages}, which 1F1B needs (use pipeline_schedule=gpipe or more micro-batches)")
    if train["batch_size"] % mbs:
        raise ConfigError(f"micro_batches={mbs} does not divide train.batch_size={train['batch_size']}")
    if rc["workload"] == "resnet50":
        n_blocks = sum(rc["model"]["layers"]) + 2  # stem and head are stages' units too
        if stages > n_blocks:
            raise ConfigError(f"pipeline_stages={stages} is more than the model's {n_blocks} layers (model.layers={rc['model']['layers']})")
    else:
        m = rc["model"]
        if stages > m["num_layers"]:
            raise ConfigError(f"pipeline_stages={stages} is more than model.num_layers={m['num_layers']}")
        if m["top_k"] > m["num_experts"]:
            raise ConfigError(f"model.top_k={m['top_k']} is more than model.num_experts={m['num_experts']}")
        if m["hidden_size"] % m["num_heads"]:
            raise ConfigError(f"model.hidden_size={m['hidden_size']} is not divisible by model.num_heads={m['num_heads']}")
        dp = ws // stages
        if dp > 1 and m["num_experts"] % dp:
            raise ConfigError(f"model.num_experts={m['num_experts']} is not divisible by the data/expert-parallel size {dp} (world_size={ws}, pipeline_stages={stages})")
    if par["fusion_impl"] == "mindspore" and par["grad_compression"] != "none":
        raise ConfigError(
            f"fusion_impl=mindspore fuses MindSpore's own gradient all-reduce and cannot be combined with grad_compression={par['grad_compression']} (use fusion_impl=perfbench)"
        )
    try:  # workload-specific rules, kept next to the parallel code (no MindSpore import)
        from workloads.parallel.rules import validate_parallel
    except ImportError:
        return
    problems = validate_parallel(rc["workload"], rc["model"], par, ws, rc["train"])
    if problems:
        raise ConfigError(f"{problems[0]} (run {where})")


# ---- small checks ----------------------------------------------------------------------------


def _show(v: Any) -> str:
    s = json.dumps(v, default=str) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _suggest(key: str, allowed) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), list(allowed), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _check_int(where: str, v: Any, lo: int | None = None, hi: int | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{where}: {_show(v)} must be an integer")
    if lo is not None and v < lo:
        raise ConfigError(f"{where}: {v} must be at least {lo}")
    if hi is not None and v > hi:
        raise ConfigError(f"{where}: {v} must be at most {hi}")


def _check_number(where: str, v: Any, lo: float | None = None, what: str = "a number") -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where}: {_show(v)} must be {what}")
    if lo is not None and v < lo:
        raise ConfigError(f"{where}: {v} must be at least {lo}")


def _check_bool(where: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise ConfigError(f"{where}: {_show(v)} must be true or false")
