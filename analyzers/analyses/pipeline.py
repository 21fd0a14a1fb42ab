"""Pipeline bubble per stage, compared with the ideal of a synchronous schedule.

With S stages and M micro-batches, GPipe and 1F1B leave each stage idle for

    ideal_fraction = (S - 1) / (M + S - 1)

of the pipeline's flush-to-flush time (equal stage times, no communication cost).

Two sources:

* **spans** (`metrics/rank{R}.spans.jsonl`, CPU workloads): per step, the pipeline window is the
  first start to the last end of any forward/backward/send/recv span on any stage; a stage's busy
  time is the union of its `forward` and `backward` spans; `bubble = window - busy`. Ranks of the
  same stage (data-parallel replicas) are averaged.
* **profiler breakdown** (Ascend `step_trace_time` Stage/Bubble columns, legacy MindSpore
  `ascend_cluster_analyse_pipeline-parallel_*` stage_time/receive_alone_time), read from
  `profile.reference_breakdown` (`stage_us`, `bubble_us`, or the raw `Stage`/`Bubble`):
  `window = stage time`, `bubble = bubble time`. The stage of each rank comes from
  `analyzers.analyses.parallel_groups.stage_of_rank` (profiler files, strategy, pp groups, distributed_args,
  stage count), else from S in the run config and MindSpore's contiguous layout (stage = rank // (world / S)).

With a run_config, span steps before `train.warmup_steps` (compilation) are left out.
S and M come from `config` (a run_config dict: `parallel.pipeline_stages`, `parallel.micro_batches`,
or the same keys at top level), else from the data (distinct stages / micro-batches), else
`profile.meta["stage_num"|"micro_batches"]`. Returns None when there is no pipeline (S < 2 or no data).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.context import Output
from analyzers.analyses.parallel_groups import stage_of_rank
from analyzers.schema import warmup_steps
from analyzers.stats import union_length

#: span kinds that count as a stage doing useful work
COMPUTE_KINDS = ("forward", "backward")
#: span kinds that delimit the pipeline window (optimizer and data loading fall outside)
WINDOW_KINDS = ("forward", "backward", "send", "recv")

PIPELINE_COLUMNS = [
    "step",
    "stage",
    "ranks",
    "window_us",
    "busy_us",
    "bubble_us",
    "bubble_fraction",
    "stages",
    "micro_batches",
    "ideal_fraction",
    "excess_fraction",  # bubble_fraction - ideal_fraction
    "source",  # spans | profiler
]


def ideal_bubble_fraction(stages: int, micro_batches: int) -> float:
    """(S-1)/(M+S-1); NaN when S or M is unknown."""
    try:
        s, m = int(stages), int(micro_batches)
    except (TypeError, ValueError):
        return math.nan
    if s < 1 or m < 1:
        return math.nan
    return (s - 1) / (m + s - 1)


def _cfg(config: dict | None, key: str):
    if not config:
        return None
    par = config.get("parallel") if isinstance(config.get("parallel"), dict) else {}
    val = par.get(key, config.get(key))
    try:
        return int(val) if val is not None else None
    except (TypeError, ValueError):
        return None


def _from_spans(spans: pd.DataFrame, config: dict | None) -> pd.DataFrame | None:
    need = {"rank", "step", "kind", "start_ts", "end_ts"}
    if spans is None or len(spans) == 0 or not need.issubset(spans.columns):
        return None
    df = spans.copy()
    df["kind"] = df["kind"].astype(str).str.lower()
    df["start_us"] = pd.to_numeric(df["start_ts"], errors="coerce") * 1e6
    df["end_us"] = pd.to_numeric(df["end_ts"], errors="coerce") * 1e6
    df = df.dropna(subset=["start_us", "end_us", "step"])
    warm = warmup_steps(config)
    if warm:
        df = df[pd.to_numeric(df["step"], errors="coerce") >= warm]  # compile steps are not measured
    if "stage" not in df.columns or df["stage"].isna().all():
        return None
    df["stage"] = pd.to_numeric(df["stage"], errors="coerce")
    df = df.dropna(subset=["stage"])
    stages = _cfg(config, "pipeline_stages") or int(df["stage"].nunique())
    if stages < 2:
        return None
    mbs = _cfg(config, "micro_batches")
    if mbs is None and "mb" in df.columns and df["mb"].notna().any():
        mbs = int(pd.to_numeric(df["mb"], errors="coerce").nunique())
    ideal = ideal_bubble_fraction(stages, mbs)
    win = df[df["kind"].isin(WINDOW_KINDS)]
    comp = df[df["kind"].isin(COMPUTE_KINDS)]
    if win.empty:
        return None
    bounds = win.groupby("step").agg(w0=("start_us", "min"), w1=("end_us", "max"))
    per_rank = []
    for (step, stage, rank), g in comp.groupby(["step", "stage", "rank"]):
        if step not in bounds.index:
            continue
        w0, w1 = bounds.loc[step, "w0"], bounds.loc[step, "w1"]
        iv = np.clip(g[["start_us", "end_us"]].to_numpy(dtype=float), w0, w1)
        busy = union_length(iv[:, 0], iv[:, 1])
        per_rank.append({"step": int(step), "stage": int(stage), "rank": rank, "window_us": w1 - w0, "busy_us": busy})
    if not per_rank:
        return None
    pr = pd.DataFrame(per_rank)
    out = pr.groupby(["step", "stage"]).agg(
        ranks=("rank", "nunique"), window_us=("window_us", "mean"), busy_us=("busy_us", "mean")
    )
    out = out.reset_index()
    out["bubble_us"] = (out["window_us"] - out["busy_us"]).clip(lower=0)
    out["bubble_fraction"] = np.where(out["window_us"] > 0, out["bubble_us"] / out["window_us"], np.nan)
    out["stages"] = stages
    out["micro_batches"] = mbs if mbs is not None else pd.NA
    out["ideal_fraction"] = ideal
    out["excess_fraction"] = out["bubble_fraction"] - ideal
    out["source"] = "spans"
    return out[PIPELINE_COLUMNS]


def _pick(df: pd.DataFrame, *names):
    for n in names:
        if n in df.columns:
            return pd.to_numeric(df[n], errors="coerce")
    return None


def _from_profile(profile, config: dict | None) -> pd.DataFrame | None:
    ref = getattr(profile, "reference_breakdown", None)
    if ref is None or len(ref) == 0 or "rank" not in ref.columns:
        return None
    stage_t = _pick(ref, "stage_us", "Stage")
    bubble_t = _pick(ref, "bubble_us", "Bubble")
    if stage_t is None or bubble_t is None or not (stage_t.fillna(0) > 0).any():
        return None
    df = pd.DataFrame(
        {
            "rank": pd.to_numeric(ref["rank"], errors="coerce"),
            "step": pd.to_numeric(ref["step"], errors="coerce") if "step" in ref.columns else np.nan,
            "window_us": stage_t,
            "bubble_us": bubble_t,
        }
    ).dropna(subset=["rank", "window_us", "bubble_us"])
    df = df[df["window_us"] > 0]
    if df.empty:
        return None
    meta = getattr(profile, "meta", {}) or {}
    seen = df["rank"].astype(int).unique().tolist()
    stage_of, _ = stage_of_rank(profile, seen)
    if not stage_of and _cfg(config, "pipeline_stages"):
        stage_of, _ = stage_of_rank(_WithStages(profile, _cfg(config, "pipeline_stages")), seen)
    if not stage_of:
        return None
    df["stage"] = df["rank"].astype(int).map(stage_of)
    df = df.dropna(subset=["stage"])
    stages = _cfg(config, "pipeline_stages") or meta.get("stage_num") or len(set(stage_of.values()))
    stages = int(stages)
    if stages < 2:
        return None
    mbs = _cfg(config, "micro_batches") or meta.get("micro_batches")
    ideal = ideal_bubble_fraction(stages, mbs)
    df["step"] = df["step"].fillna(-1).astype(int)
    out = df.groupby(["step", "stage"]).agg(
        ranks=("rank", "nunique"), window_us=("window_us", "mean"), bubble_us=("bubble_us", "mean")
    )
    out = out.reset_index()
    out["stage"] = out["stage"].astype(int)
    # the profiler's receive time can exceed the stage time (first step: the other stage compiles);
    # a bubble cannot be longer than the window
    out["bubble_us"] = out["bubble_us"].clip(lower=0, upper=out["window_us"])
    out["busy_us"] = out["window_us"] - out["bubble_us"]
    out["bubble_fraction"] = out["bubble_us"] / out["window_us"]
    out["stages"] = stages
    out["micro_batches"] = int(mbs) if mbs else pd.NA
    out["ideal_fraction"] = ideal
    out["excess_fraction"] = out["bubble_fraction"] - ideal
    out["source"] = "profiler"
    return out[PIPELINE_COLUMNS]


class _WithStages:
    """The profile with the run config's stage count as the profiler's (MindSpore's contiguous layout)."""

    def __init__(self, profile, stages: int):
        self.ranks = profile.ranks
        self.meta = {**(getattr(profile, "meta", {}) or {}), "stage_num": stages}


def pipeline_bubbles(profile_or_none, spans: pd.DataFrame | None, config: dict | None) -> pd.DataFrame | None:
    """Per step and stage: pipeline window, busy time, bubble time and fraction, and the ideal
    (S-1)/(M+S-1). Spans win over the profiler breakdown when both exist. None if no pipeline."""
    res = _from_spans(spans, config) if spans is not None else None
    if res is None and profile_or_none is not None:
        res = _from_profile(profile_or_none, config)
    if res is None or res.empty:
        return None
    return res.sort_values(["step", "stage"]).reset_index(drop=True)


def mean_bubble_fraction(pipeline: pd.DataFrame | None) -> float | None:
    """Run-level bubble fraction: mean over steps and stages (None without a pipeline table)."""
    if pipeline is None or len(pipeline) == 0:
        return None
    v = pd.to_numeric(pipeline["bubble_fraction"], errors="coerce").mean()
    return None if pd.isna(v) else float(v)


def analysis(ctx):
    """Registry entry `pipeline`: bubble per stage and step (from the workload's spans or the profile)."""
    pipe = pipeline_bubbles(ctx.profile, ctx.table("spans"), ctx.config)
    return Output(tables={"pipeline": pipe}, metrics={"bubble_fraction": mean_bubble_fraction(pipe)})
