"""Expert (MoE) load balance from the workload's per-step records.

Input: `workload_steps` rows with `tokens_per_expert` (a list: tokens routed to each expert by this
rank in this step, i.e. top-k assignments before the capacity limit) and optionally
`dropped_tokens` (assignments this rank dropped because an expert was over capacity).

Per step the expert load is summed over ranks, load_e = sum_r tokens_per_expert[r][e], and

    max_mean_ratio   = max_e load_e / mean_e load_e      (1.0 = perfectly balanced)
    cv               = std_e load_e / mean_e load_e      (population std; 0 = balanced)
    dropped_fraction = sum_r dropped_tokens / sum_e load_e

Rows with a missing or empty list are skipped; ranks reporting different expert counts is an error
in the data and those steps are skipped too (a row count tells how many ranks were used).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analyzers.context import Output

EXPERT_COLUMNS = [
    "step",
    "ranks",
    "experts",
    "total_tokens",
    "min_load",
    "max_load",
    "mean_load",
    "max_mean_ratio",
    "cv",
    "dropped_tokens",
    "dropped_fraction",
    "busiest_expert",
]


def _as_list(v):
    if v is None:
        return None
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if isinstance(v, float) and math.isnan(v):
        return None
    try:
        arr = np.asarray(list(v), dtype=float)
    except (TypeError, ValueError):
        return None
    return arr if arr.size else None


def expert_load(workload_steps: pd.DataFrame, warmup_steps: int = 0) -> pd.DataFrame | None:
    """One row per step with the expert load balance; None when there is no expert data.
    Steps before `warmup_steps` (compilation, excluded from metrics by the contract) are left out."""
    if workload_steps is None or len(workload_steps) == 0 or "tokens_per_expert" not in workload_steps.columns:
        return None
    df = workload_steps
    if warmup_steps:
        df = df[pd.to_numeric(df["step"], errors="coerce") >= warmup_steps]
    has_drop = "dropped_tokens" in df.columns
    rows = []
    for step, g in df.groupby("step", sort=True):
        loads = []
        dropped = 0.0
        ranks = 0
        for _, r in g.iterrows():
            arr = _as_list(r["tokens_per_expert"])
            if arr is None:
                continue
            loads.append(arr)
            ranks += 1
            if has_drop and pd.notna(r["dropped_tokens"]):
                dropped += float(r["dropped_tokens"])
        if not loads or len({len(a) for a in loads}) != 1:
            continue
        load = np.sum(loads, axis=0)
        total = float(load.sum())
        mean = float(load.mean())
        rows.append(
            {
                "step": int(step),
                "ranks": ranks,
                "experts": int(load.size),
                "total_tokens": total,
                "min_load": float(load.min()),
                "max_load": float(load.max()),
                "mean_load": mean,
                "max_mean_ratio": float(load.max() / mean) if mean > 0 else math.nan,
                "cv": float(load.std(ddof=0) / mean) if mean > 0 else math.nan,
                "dropped_tokens": dropped if has_drop else math.nan,
                "dropped_fraction": (dropped / total if total > 0 else math.nan) if has_drop else math.nan,
                "busiest_expert": int(np.argmax(load)),
            }
        )
    if not rows:
        return None
    return pd.DataFrame(rows, columns=EXPERT_COLUMNS)


def mean_expert_cv(experts: pd.DataFrame | None) -> float | None:
    """Run-level expert-load CV: mean over steps (None without expert data)."""
    if experts is None or len(experts) == 0:
        return None
    v = pd.to_numeric(experts["cv"], errors="coerce").mean()
    return None if pd.isna(v) else float(v)


def analysis(ctx):
    """Registry entry `experts`: tokens per expert and their balance (MoE workloads' step records)."""
    experts = expert_load(ctx.table("workload_steps"), warmup_steps=ctx.warmup_steps())
    return Output(tables={"experts": experts}, metrics={"expert_load_cv": mean_expert_cv(experts)})
