"""Per-step series of the run-level metrics, and the run's values: the one place a metric's number is made.

`step_series()` gives one row per step with the per-step value of every step metric of the catalogue
(analyzers/catalogue.py says how ranks are combined); `samples(series, metric)` are the values a
run-level metric is taken over, and the run's value is their median (`run_metrics`). `perfbench
compare` and `perfbench check` test exactly these samples (the stored `step_metrics` table), so the run
record, `ls`, `show`, `compare`, `check` and the dashboard cannot disagree.

Which steps count:
* workload metrics (throughput, step_time_s, step_cpu_s, samples_per_step, dropped tokens, and the workload's own
  collective counts/bytes): steps after warm-up that every rank finished ("measured"); when the run
  has both profiled and unprofiled measured steps, only the unprofiled ones (the profiler's overhead
  stays out), and `profiler_overhead` compares the two;
* breakdown metrics (computing_s, comm_share, ...): the steps of the step breakdown after warm-up (the
  profiled window); imported profiles, which have no warm-up, use all their steps;
* an imported profile without workload records takes step_time_s from the step breakdown: per step, the
  slowest rank's step window.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.catalogue import ADDING_PARTS, BREAKDOWN_TOTAL, SERIES_COLUMN
from analyzers.context import Output
from analyzers.schema import BREAKDOWN_PARTS
from analyzers.stats import median
from analyzers.stats import ratio_interval

#: columns that come from the workload's records and are taken over the measured steps only
WORKLOAD_COLUMNS = (
    "throughput",
    "step_time_s",
    "cpu_s",
    "samples",
    "dropped_tokens",
    "wl_collectives",
    "wl_comm_bytes",
)


def _workload_part(ws: pd.DataFrame, warmup: int) -> pd.DataFrame | None:
    if ws is None or ws.empty or not {"rank", "step", "step_time_s"} <= set(ws.columns):
        return None
    nranks = ws["rank"].nunique()
    s = ws[ws["step"] >= warmup]
    done = s.groupby("step")["rank"].nunique()
    s = s[s["step"].isin(done[done == nranks].index)]
    if s.empty:
        return None
    g = s.groupby("step")
    out = pd.DataFrame({"step_time_s": g["step_time_s"].max().astype(float)})
    out["samples"] = g["samples"].sum().astype(float) if "samples" in s.columns else np.nan
    if "cpu_s" in s.columns and s["cpu_s"].notna().any():  # the rank process's CPU time in the step
        out["cpu_s"] = g["cpu_s"].max(min_count=1).astype(float)
    if "capture_s" in s.columns:  # the profiler's call after the step (analyzers.analyses.capture_cost)
        out["capture_s"] = g["capture_s"].max(min_count=1).astype(float)
    out["throughput"] = (out["samples"] / out["step_time_s"].where(out["step_time_s"] > 0)).where(out["samples"] > 0)
    out["profiled"] = g["profiled"].any().astype(bool) if "profiled" in s.columns else False
    for col, name in (("comm_bytes", "wl_comm_bytes"), ("collectives", "wl_collectives")):
        if col in s.columns and s[col].notna().any():
            out[name] = g[col].sum(min_count=1) / nranks  # mean over ranks
    if "dropped_tokens" in s.columns and s["dropped_tokens"].notna().any():
        out["dropped_tokens"] = g["dropped_tokens"].sum(min_count=1).astype(float)
    unprofiled = ~out["profiled"]
    out["measured"] = unprofiled if unprofiled.any() else True
    return out


def _breakdown_part(sb: pd.DataFrame, warmup: int) -> pd.DataFrame | None:
    if sb is None or sb.empty:
        return None
    steady = sb[sb["step"] >= warmup]
    sb = steady if not steady.empty else sb
    sb = sb[sb["step_us"] > 0]
    if sb.empty:
        return None
    g = sb.groupby("step")
    out = pd.DataFrame({"window_s": g["step_us"].max() / 1e6})
    for part in BREAKDOWN_PARTS:
        col = f"{part}_us"
        if col in sb.columns:
            out[f"{part}_s"] = g[col].mean() / 1e6  # mean over the ranks that know it; NaN when none does
    share = (sb["communication_us"] / sb["step_us"]).groupby(sb["step"]).mean()
    out["comm_share"] = share
    known = sb[sb["computing_us"].notna()]
    kg = known.groupby("step")
    out["kernel_utilization"] = kg["computing_us"].sum() / kg["step_us"].sum()
    return out


def _comm_part(co: pd.DataFrame) -> pd.DataFrame | None:
    if co is None or co.empty or not {"rank", "step", "op_name"} <= set(co.columns) or co["step"].isna().all():
        return None
    if "size_bytes" not in co.columns:
        co = co.assign(size_bytes=np.nan)
    co = co.dropna(subset=["step"]).copy()
    co["step"] = co["step"].astype("int64")
    per = co.groupby(["step", "rank"]).agg(n=("op_name", "size"), b=("size_bytes", lambda s: s.sum(min_count=1)))
    g = per.groupby(level="step")
    return pd.DataFrame({"collectives": g["n"].mean().astype(float), "comm_bytes": g["b"].mean()})


def step_series(
    workload_steps: pd.DataFrame | None,
    step_breakdown: pd.DataFrame | None,
    comm_ops: pd.DataFrame | None,
    warmup: int = 0,
    ops_seen: bool = False,
) -> pd.DataFrame:
    """One row per step: `step, measured, profiled` and the per-step value of every step metric.
    `ops_seen`: the profile has op data, so a step without collectives has 0 of them (known), not null."""
    wl = _workload_part(workload_steps, warmup)
    bd = _breakdown_part(step_breakdown, warmup)
    cm = _comm_part(comm_ops)
    if cm is None and ops_seen and bd is not None and (comm_ops is None or comm_ops.empty):
        cm = pd.DataFrame({"collectives": 0.0, "comm_bytes": 0.0}, index=bd.index)
    parts = [p for p in (wl, bd, cm) if p is not None]
    if not parts:
        return pd.DataFrame(columns=["step", "measured", "profiled"])
    out = pd.concat(parts, axis=1).sort_index()
    out.index.name = "step"
    if wl is None:  # an imported profile: its step windows are the step times, every step counts
        out["step_time_s"] = out.get("window_s")
        out["measured"] = out["step_time_s"].notna()
        out["profiled"] = True
    else:
        out["measured"] = out["measured"].astype("boolean").fillna(False).astype(bool)
        out["profiled"] = out["profiled"].astype("boolean").fillna(True).astype(bool)
    # the workload's own collective counts/bytes (what it sent) win over the profile's where both exist
    for wcol, col in (("wl_collectives", "collectives"), ("wl_comm_bytes", "comm_bytes")):
        if wcol in out.columns:
            out[col] = out[wcol] if col not in out.columns else out[wcol].where(out["measured"], out[col])
    out = out.drop(columns=[c for c in ("window_s", "wl_collectives", "wl_comm_bytes") if c in out.columns])
    return out.reset_index()


def samples(series: pd.DataFrame, metric: str) -> list[float]:
    """The per-step values a run-level metric is the median of (and that compare/check test)."""
    col = SERIES_COLUMN.get(metric)
    if series is None or col is None or col not in series.columns or series.empty:
        return []
    rows = series
    if col in WORKLOAD_COLUMNS or (
        col in ("collectives", "comm_bytes")
        and series["measured"].any()
        and not series.loc[series["measured"], col].isna().all()
    ):
        rows = series[series["measured"].astype(bool)]
    v = pd.to_numeric(rows[col], errors="coerce").dropna()
    return [float(x) for x in v]


def run_metrics(
    series: pd.DataFrame,
    workload_steps: pd.DataFrame | None = None,
    step_breakdown: pd.DataFrame | None = None,
    ranks: int | None = None,
) -> dict:
    m: dict = {name: median(samples(series, name)) for name in SERIES_COLUMN}
    if m["step_time_s"] is not None or m["throughput"] is not None:
        m["measured_steps"] = int(series["measured"].sum())
    ws = workload_steps
    if ws is not None and not ws.empty and "profiled" in ws.columns and len(series) and "profiled" in series:
        prof = series[series["profiled"] & series["step_time_s"].notna()] if "step_time_s" in series else series[:0]
        if len(prof) and (~series["profiled"] & series["measured"]).any():
            on = float(prof["step_time_s"].median())
            off = m["step_time_s"]
            m["profiled_step_time_s"] = on
            m["profiler_overhead"] = on / off - 1 if off else None

            ci = ratio_interval(list(prof["step_time_s"]), samples(series, "step_time_s"))
            if ci is not None and m["profiler_overhead"] is not None:
                m["profiler_overhead_low"], m["profiler_overhead_high"] = ci[0] - 1, ci[1] - 1
    if ws is not None and not ws.empty and "loss" in ws.columns and ws["loss"].notna().any():
        by_step = ws.dropna(subset=["loss"]).groupby("step")["loss"].mean().sort_index()
        m["loss_first"], m["loss_last"] = float(by_step.iloc[0]), float(by_step.iloc[-1])
    if ws is not None and not ws.empty and "overflow" in ws.columns and ws["overflow"].notna().any():
        after = set(series["step"]) if "step" in series else set()  # the series holds the steps after warm-up
        hit = ws[ws["step"].isin(after) & ws["overflow"].fillna(False).astype(bool)]
        m["skipped_steps"] = int(hit["step"].nunique())
    parts = [m.get(p) for p in ADDING_PARTS]
    if all(p is not None and not (isinstance(p, float) and math.isnan(p)) for p in parts):
        m[BREAKDOWN_TOTAL] = float(sum(parts))  # the step the parts split (catalogue breakdown_step_s)
    m["ranks"] = ranks
    m["steps"] = int(step_breakdown["step"].nunique()) if step_breakdown is not None and len(step_breakdown) else None
    return {k: _plain(v) for k, v in m.items() if not (v is None and k not in SERIES_COLUMN)}


def _plain(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def analysis(ctx):
    """Registry entry: the step series table and the run-level metrics taken from it."""
    warm = ctx.warmup_steps()
    sb = ctx.table("step_breakdown")
    series = step_series(
        ctx.table("workload_steps"), sb, ctx.table("comm_ops"), warm, ops_seen=ctx.table("ops") is not None
    )
    ranks = None
    if ctx.profile is not None and len(ctx.profile.ranks):
        ranks = int(ctx.profile.ranks["rank"].nunique())
    elif sb is not None:
        ranks = int(sb["rank"].nunique())
    elif ctx.table("workload_steps") is not None:
        ranks = int(ctx.workload_steps["rank"].nunique())
    return Output(tables={"step_metrics": series}, metrics=run_metrics(series, ctx.table("workload_steps"), sb, ranks))
