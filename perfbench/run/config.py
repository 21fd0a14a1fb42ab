"""Sweep configuration: YAML → validated config → the planned runs (cartesian product of the axes x repeats).

Every error names the offending key (as a dotted path) and value. See docs/config.md for the reference.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from perfbench.errors import ConfigError
from perfbench.run.config_errors import config_error, show, suggest
from perfbench.run.config_models import (
    MODELS,
    SWEEPABLE,
    Inject,
    Parallel,
    Range,
    RunConfig,
    SweepFile,
    Train,
    tidy_sections,
)
from perfbench.run.script import resolve_script, script_path
from perfbench.tune.spec import parse_search

WORKLOADS = tuple(MODELS)


def defaults(section: type[BaseModel]) -> dict[str, Any]:
    return section().model_dump()


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
    #: the validated `search:` section for `perfbench tune` (perfbench.tune.spec.SearchSpec), or None
    search: Any = None
    #: workload script: the user's knobs (defaults) and the `script:` section (path made absolute)
    knobs: dict[str, Any] = field(default_factory=dict)
    script: dict[str, Any] | None = None

    def sections(self) -> tuple[str, ...]:
        base = ("model", "train", "profile", "parallel", "inject")
        return (*base, "knobs") if self.workload == "script" else base

    def finish_run_config(self, run_config: dict) -> dict:
        """workload script: the run's resolved `script` section (templates over its settings)."""
        if self.workload == "script" and self.script is not None:
            run_config["script"] = resolve_script(self.script, run_config)
        return run_config

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
                raise ConfigError(
                    f"sweep.{key}: the range {r.describe()} has no `step`, so a sweep cannot list its "
                    "values: give `step`, a list of values, or search it with `perfbench tune`"
                )
        axes = self.axes()
        names = list(axes)
        points = []
        used: set[str] = set()
        for combo in itertools.product(*(axes[n] for n in names)):
            point = dict(zip(names, combo))
            sections = {s: copy.deepcopy(getattr(self, s)) for s in self.sections()}
            for key, value in point.items():
                if key != "world_size":
                    assign(sections, key, value, self.workload)
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
                self.finish_run_config(run_config)
                plans.append(RunPlan(run_id, dict(settings, repeat=repeat), run_config, config_key(run_config)))
        return plans


def plan_point(cfg: SweepConfig, point: dict[str, Any], run_id: str, repeat: int = 0) -> RunPlan:
    """One run at an arbitrary point of the space (e.g. a value sampled from a range axis), checked
    with the same value and cross-key rules as a sweep's runs (ConfigError when it breaks one)."""
    sections = {s: copy.deepcopy(getattr(cfg, s)) for s in cfg.sections()}
    for key, value in point.items():
        if key != "world_size":
            assign(sections, key, value, cfg.workload)
        _check_value(cfg, key, value)
    ws = point.get("world_size", cfg.axes()["world_size"][0])
    settings = {"workload": cfg.workload, "world_size": ws}
    settings.update({k: v for k, v in point.items() if k != "world_size"})
    run_config = {
        "run_id": run_id,
        "workload": cfg.workload,
        "world_size": ws,
        "repeat": repeat,
        "output_dir": None,
        "threads_per_rank": None,
        **sections,
    }
    cfg.finish_run_config(run_config)
    plan = RunPlan(run_id, dict(settings, repeat=repeat), run_config, config_key(run_config))
    _check_run(plan)
    return plan


def short_name(point: dict) -> str:
    """A run-id fragment naming a point's values, e.g. `ws2-cf4-gcfp16`."""
    return _short(point)


def config_key(run_config: dict) -> str:
    """Identity of a run's configuration apart from world size, repeat and where it runs."""
    ignore = {"run_id", "world_size", "repeat", "output_dir", "threads_per_rank"}
    rc = {k: v for k, v in run_config.items() if k not in ignore}
    if isinstance(rc.get("train"), dict):  # keys added later, at their default: the same configuration as before
        rc["train"] = {k: v for k, v in rc["train"].items() if not (k in UNSET_IS_OLD and v is None)}
    return _digest(rc)


#: train keys that did not exist before; unset (null) they leave a configuration's key as it was
UNSET_IS_OLD = ("kernel_threads", "dispatch_threads")


def assign(sections: dict, key: str, value: Any, workload: str) -> None:
    """Set a swept key's value in its section (`knobs.NAME` into the knobs)."""
    section = section_of(key, workload)
    sections[section][key.removeprefix("knobs.") if section == "knobs" else key] = value


def section_of(key: str, workload: str) -> str:
    """The section a sweepable key belongs to (KeyError if it is not sweepable for this workload)."""
    if key.startswith("knobs.") and workload == "script":
        return "knobs"
    for name, section in (("parallel", Parallel), ("train", Train), ("model", MODELS[workload]), ("inject", Inject)):
        if key in section.model_fields:
            return name
    raise KeyError(key)


_ABBREV = {
    "world_size": "ws",
    "grad_compression": "gc",
    "compression_ratio": "cr",
    "comm_fusion": "cf",
    "fusion_impl": "fi",
    "pipeline_stages": "pp",
    "tensor_parallel": "tp",
    "micro_batches": "mb",
    "pipeline_schedule": "sch",
    "batch_size": "bs",
}


def _short(point: dict) -> str:
    parts = []
    for k, v in point.items():
        k = k.removeprefix("knobs.")
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
    cfg = parse_config(raw, default_name=p.stem, base_dir=p.resolve().parent)
    cfg.source = str(p)
    return cfg


def parse_config(raw: Any, default_name: str = "sweep", base_dir: Path | None = None) -> SweepConfig:
    if raw is None:
        raise ConfigError("the config is empty: expected a mapping with at least `workload`")
    if not isinstance(raw, dict):
        raise ConfigError(f"the config must be a mapping of keys to values, got {show(raw)}")
    try:
        top = SweepFile.model_validate(raw)
    except ValidationError as exc:
        raise config_error(exc, model=SweepFile) from None
    raw = tidy_sections(raw)
    script = _script_section(top, raw, base_dir)
    model_cls = MODELS[top.workload]
    try:
        model = model_cls.model_validate(top.model)
    except ValidationError as exc:
        raise config_error(exc, "model", model_cls) from None
    sections = {
        "model": model,
        "train": top.train,
        "profile": top.profile,
        "parallel": top.parallel,
        "launch": top.launch,
        "inject": top.inject,
    }
    # the validated defaults, with the values exactly as written (an int stays an int: run ids and config keys)
    merged = {name: {**obj.model_dump(), **raw.get(name, {})} for name, obj in sections.items()}
    merged["launch"]["slurm"] = {**top.launch.slurm.model_dump(), **(raw.get("launch", {}).get("slurm") or {})}

    sweep: dict[str, list] = {}
    ranges: dict[str, Range] = {}
    for key, values in top.sweep.items():
        if key.startswith("knobs.") and top.workload == "script" and key[6:] not in top.knobs:
            raise ConfigError(
                f"sweep.{key}: unknown knob{suggest(key[6:], top.knobs)} (value {show(values)}); declare it under "
                f"`knobs:` with a default, e.g. `knobs: {{{key[6:]}: ...}}`"
                + (f" (knobs: {', '.join(top.knobs)})" if top.knobs else "")
            )
        if key != "world_size":
            try:
                section_of(key, top.workload)
            except KeyError:
                allowed = [
                    "world_size",
                    *Parallel.model_fields,
                    *Train.model_fields,
                    *model_cls.model_fields,
                    *Inject.model_fields,
                ]
                raise ConfigError(
                    f"sweep.{key}: unknown sweep axis{suggest(key, allowed)} (value {show(values)}; axes may be "
                    f"world_size or any key of parallel, train, model or inject for {top.workload}"
                    + (", or knobs.NAME)" if top.workload == "script" else ")")
                ) from None
        if isinstance(values, dict):
            ranges[key] = parse_range(f"sweep.{key}", values)
            values = ranges[key].values()
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ConfigError(f"sweep.{key}: the list of values is empty")
        if len(values) != len({json.dumps(v, sort_keys=True, default=str) for v in values}):
            raise ConfigError(f"sweep.{key}: values {show(values)} contain duplicates")
        sweep[key] = values

    cfg = SweepConfig(
        top.name or default_name,
        top.workload,
        merged["model"],
        merged["train"],
        merged["profile"],
        merged["parallel"],
        merged["launch"],
        merged["inject"],
        sweep,
        top.repeats,
        top.results,
        raw=raw,
        ranges=ranges,
        knobs=dict(top.knobs),
        script=script,
    )
    for key, values in cfg.axes().items():
        for value in values:
            _check_value(cfg, key, value)
    for plan in cfg.plan(strict=False):
        _check_run(plan)
    if top.search is not None:
        cfg.search = parse_search(top.search, cfg)
    return cfg


def _script_section(top: SweepFile, raw: dict, base_dir: Path | None) -> dict | None:
    """The `script:` and `knobs:` sections: present exactly for workload script; knobs need values."""
    if top.workload != "script":
        for key in ("script", "knobs"):
            if raw.get(key):
                raise ConfigError(
                    f"{key}: {show(raw[key])} is only for `workload: script` (workload is {top.workload})"
                )
        return None
    launch = raw.get("launch") or {}
    if launch.get("backend", "local") == "local" and int(launch.get("nodes") or 1) > 1:
        raise ConfigError(
            f"launch.nodes: {launch['nodes']}: a workload script runs on several nodes through Slurm only "
            "(launch.backend: slurm); with launch.backend local it runs on this machine (launch.nodes 1)"
        )
    if top.script is None:
        raise ConfigError(
            "missing key `script` (workload script needs `script: {path: train.py, framework: mindspore | pytorch}`)"
        )
    if raw.get("model"):
        raise ConfigError(
            f"model: {show(raw['model'])} has no meaning for workload script; put your knobs under `knobs:`"
        )
    for name, value in top.knobs.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"knobs.{name}: a knob name must be letters, digits and '_' (used as {{knobs.NAME}})")
        if value is None and f"knobs.{name}" not in top.sweep:
            raise ConfigError(f"knobs.{name}: the knob has no value: give it a default (or sweep it as knobs.{name})")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"knobs.{name}: {show(value)} must be a string, number or true/false")

    sc = top.script.model_dump()
    sc["path"] = script_path(sc["path"], base_dir or Path.cwd())
    return sc


def parse_range(where: str, raw: dict) -> Range:
    try:
        return Range.model_validate(raw)
    except ValidationError as exc:
        raise config_error(exc, where, Range) from None


def _check_value(cfg: SweepConfig, key: str, value: Any) -> None:
    """One value of a key (swept or a tune trial's), by the key's own field in its section's model."""
    where = "sweep" if key in cfg.sweep else ""
    if key.startswith("knobs."):
        if value is None or not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"sweep.{key}: {show(value)} must be a string, number or true/false")
        return
    if key == "world_size":
        where = "sweep.world_size" if key in cfg.sweep else "world_size"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: {show(value)} must be an integer, at least 1")
        mx, nodes = cfg.launch["max_world_size"], cfg.launch["nodes"]
        if value > mx:
            raise ConfigError(
                f"{where}: {value} is larger than allowed: launch.max_world_size is {mx} "
                f"(raise launch.max_world_size to allow it; this machine has {os.cpu_count()} cores)"
            )
        if value % nodes:
            raise ConfigError(f"{where}: {value} is not divisible by launch.nodes ({nodes})")
        return
    section = section_of(key, cfg.workload)
    model = (MODELS[cfg.workload] if section == "model" else SWEEPABLE[section]).model_construct(
        **getattr(cfg, section)
    )
    try:
        setattr(model, key, value)
    except ValidationError as exc:
        raise config_error(exc, where or section, type(model)) from None


def _check_run(plan: RunPlan) -> None:
    """Rules across keys, for one run (config_models.RunConfig)."""
    try:
        RunConfig.model_validate(plan.run_config)
    except ValidationError as exc:
        where = ", ".join(f"{k}={v}" for k, v in plan.settings.items() if k not in ("workload", "repeat"))
        raise config_error(exc, suffix=f" (run {where})") from None
