"""The `search:` section of a config: how `perfbench tune` searches the space of the `sweep:` axes.

    search:
      strategy: tpe              # tpe | random | grid
      pruner: successive_halving # successive_halving | hyperband | none
      budget: {trials: 8, minutes: null}   # runs launched (the default point included); wall-time cap
      objective: throughput      # throughput, step_time_s or any metric of the catalogue; its direction too
      constraints:               # a trial that breaks one is kept but cannot be the best
        - loss_decreases         # the last step's loss is below the first step's
        - {metric: comm_share, max: 0.5}
        - {peak_memory_gb: 16}   # predicted not to fit: not run; measured above: infeasible
      seed: 0                    # sampler seed
      startup_trials: 3          # TPE: random trials before the model takes over
      min_steps: 2               # measured steps before the pruner may stop a trial
      profile_best: true         # profile the best (trials run without it)
      confirm: {top: 2, rounds: 2, band: 0.25}  # re-measure the best few (within 25% of the best) interleaved,
                                 # pick by median (tune_confirm.py)
      compile_cache: true        # MindSpore's graph compile cache, shared by trials of the same configuration

Every key is optional; without the section every default applies (docs/tune.md).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from analyzers.catalogue import METRICS
from perfbench.errors import ConfigError


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trials: int | None = Field(default=None, ge=1, le=10000)
    minutes: float | None = Field(default=None, gt=0)


class Bound(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metric: str
    min: float | None = None
    max: float | None = None


class MemoryLimit(BaseModel):
    """`{peak_memory_gb: X}`: a setting predicted to need more than X GB (10^9 bytes) per rank is not run; a run
    whose measured peak_memory_bytes exceeds it is kept but infeasible (perfbench/tune/memory.py)."""

    model_config = ConfigDict(extra="forbid")
    peak_memory_gb: float = Field(gt=0)


class Confirm(BaseModel):
    """The best `top` trials within `band` of the best trial's value re-measured `rounds` times each, interleaved;
    the pick is the best median of each one's trial value and re-measurements (perfbench/tune/confirm.py).
    `top: 0` or `rounds: 0` trusts the best single trial; so does a search with one contender."""

    model_config = ConfigDict(extra="forbid")
    top: int = Field(default=2, ge=0, le=20)
    rounds: int = Field(default=2, ge=0, le=20)
    band: float = Field(default=0.25, ge=0)  # contenders only: within this fraction of the best trial's value


class SearchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: Literal["tpe", "random", "grid"] = "tpe"
    pruner: Literal["successive_halving", "hyperband", "none"] = "successive_halving"
    budget: Budget = Field(default_factory=Budget)
    objective: str = "throughput"
    constraints: list[Literal["loss_decreases"] | Bound | MemoryLimit] = Field(default_factory=list)
    seed: int = 0
    startup_trials: int = Field(default=3, ge=0)
    min_steps: int = Field(default=2, ge=1)
    profile_best: bool = True
    compile_cache: bool = True
    confirm: Confirm = Field(default_factory=Confirm)

    @field_validator("constraints", mode="before")
    @classmethod
    def _mapping(cls, v):
        """`constraints: {peak_memory_gb: X}` (a mapping) is the list `[{peak_memory_gb: X}]`."""
        return [v] if isinstance(v, dict) else v

    def memory_limit_bytes(self) -> float | None:
        """The tightest `peak_memory_gb` constraint, in bytes (None without one)."""
        gb = [c.peak_memory_gb for c in self.constraints if isinstance(c, MemoryLimit)]
        return min(gb) * 1e9 if gb else None

    @field_validator("objective")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        direction(v)  # raises for a metric without a direction
        return v


def direction(metric_name: str) -> str:
    """'maximize' or 'minimize', from the metric catalogue's `better`."""

    m = METRICS.get(metric_name)
    if m is None:
        raise ValueError(f"{metric_name!r} is not a metric of the catalogue (e.g. throughput, step_time_s)")
    if m.better not in ("higher", "lower"):
        raise ValueError(
            f"metric {metric_name!r} has no better direction in the catalogue, so it cannot be an objective"
        )
    return "maximize" if m.better == "higher" else "minimize"


def default_trials(space_size: float) -> int:
    """Runs a search launches by default: a quarter of the space (at least 6, at most 40); all of a tiny space."""
    if math.isinf(space_size):
        return 20
    return int(min(space_size, max(6, min(40, math.ceil(space_size / 4)))))


def parse_search(raw: Any, cfg) -> SearchSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"search: expected a mapping (strategy, pruner, budget, objective, constraints), got {raw!r}")
    try:
        spec = SearchSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("search", *err["loc"]) if not str(p).startswith(("Bound", "literal")))
        value = err.get("input")
        raise ConfigError(f"{where}: {value!r}: {err['msg']}") from None
    if spec.strategy == "grid":
        for key, r in cfg.ranges.items():
            if not r.enumerable:
                raise ConfigError(
                    f"sweep.{key}: search.strategy grid needs every range to have a `step` (got {r.describe()})"
                )
    for c in spec.constraints:
        if isinstance(c, Bound):
            if c.min is None and c.max is None:
                raise ConfigError(f"search.constraints: {{metric: {c.metric}}} needs `min` or `max`")

            if c.metric not in METRICS:
                raise ConfigError(f"search.constraints: {c.metric!r} is not a metric of the catalogue")
    return spec
