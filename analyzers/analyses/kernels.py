"""Kernel (device op) statistics: time per op type, top kernels, utilization, AI Core metrics.

* `kernels` table: one row per (type, core_type) over all ranks (compute and communication ops; the
  op name when the profiler wrote no type): count, total/mean/min/max duration (us), share of all
  kernel time, ranks, and duration-weighted means of AI Core metrics where the profiler recorded them
  (`cube_utilization(%)`, `aic_mac_ratio`, `aiv_vec_ratio`).
* the run's `kernel_utilization` is defined in the metric catalogue and computed in analyzers.analyses.step_metrics.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Output

AIC_METRICS = ("cube_utilization(%)", "aic_mac_ratio", "aiv_vec_ratio", "aic_scalar_ratio", "aic_mte2_ratio")


def kernel_table(ops: pd.DataFrame) -> pd.DataFrame:
    cols = ["type", "core_type", "category", "count", "total_us", "mean_us", "min_us", "max_us", "share", "ranks"]
    if ops is None or not len(ops):
        return pd.DataFrame(columns=cols)
    # HCCL sub-tasks (notify/copy/reduce tasks of a collective) are part of the collective's own row
    df = ops[ops["category"] != "communication_task"].copy()
    df["type"] = df["type"].where(df["type"].notna() & (df["type"].astype(str) != ""), df["name"])
    df["core_type"] = df["core_type"].fillna("")
    g = df.groupby(["type", "core_type", "category"], dropna=False)
    out = g.agg(
        count=("dur_us", "size"),
        total_us=("dur_us", "sum"),
        mean_us=("dur_us", "mean"),
        min_us=("dur_us", "min"),
        max_us=("dur_us", "max"),
        ranks=("rank", "nunique"),
    ).reset_index()
    total = float(df["dur_us"].sum())
    out["share"] = out["total_us"] / total if total > 0 else np.nan
    for m in AIC_METRICS:
        if m in df.columns:
            v = pd.to_numeric(df[m], errors="coerce")
            w = df["dur_us"].where(v.notna(), 0.0)
            num = (v.fillna(0) * w).groupby([df["type"], df["core_type"], df["category"]]).sum()
            den = w.groupby([df["type"], df["core_type"], df["category"]]).sum()
            wm = (num / den.where(den > 0)).rename(m)
            out = out.merge(wm.reset_index(), on=["type", "core_type", "category"], how="left")
    return out.sort_values("total_us", ascending=False).reset_index(drop=True)


def top_kernels(ops: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The n individual kernel names with the most total time (compute ops only)."""
    if ops is None or not len(ops):
        return pd.DataFrame(columns=["name", "type", "count", "total_us", "mean_us"])
    c = ops[ops["category"] == "compute"]
    return (
        c.groupby("name")
        .agg(type=("type", "first"), count=("dur_us", "size"), total_us=("dur_us", "sum"), mean_us=("dur_us", "mean"))
        .reset_index()
        .sort_values("total_us", ascending=False)
        .head(n)
        .reset_index(drop=True)
    )


def analysis(ctx):
    """Registry entry `kernels`."""
    ops = ctx.table("ops")
    return Output(tables={"kernels": kernel_table(ops), "top_kernels": top_kernels(ops)})
