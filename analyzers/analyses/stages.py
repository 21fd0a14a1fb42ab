"""Per pipeline stage compute and the stage imbalance.

Input: the `step_breakdown` table (the profiler's own breakdown where it wrote one) and `rank_stages`
(analyzers.analyses.parallel_groups). Ranks marked `consistent = False` (their recomputation disagrees with the
profiler, analyzers.analyses.breakdown) are left out and listed in `excluded_ranks`.

Table `stages`, one row per stage:

    computing_ms      mean over the stage's ranks of the rank's mean computing time per step
    step_ms, communication_not_overlapped_ms, free_ms, bubble_ms   the same means (bubble: the
                      profiler's Bubble / receive-alone time; null when the profiler did not write it)
    computing_ratio   computing_ms / the least-computing stage's computing_ms

Run-level metric `stage_compute_imbalance` = max over stages of computing_ms / min over stages
(1.0 = balanced; null without at least two stages with compute).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Output

STAGE_COLUMNS = [
    "stage",
    "ranks",
    "n_ranks",
    "steps",
    "computing_ms",
    "step_ms",
    "communication_not_overlapped_ms",
    "free_ms",
    "bubble_ms",
    "computing_ratio",
    "excluded_ranks",
]
_PARTS = {
    "computing_ms": "computing_us",
    "step_ms": "step_us",
    "communication_not_overlapped_ms": "communication_not_overlapped_us",
    "free_ms": "free_us",
    "bubble_ms": "bubble_us",
}


def trusted_ranks(sb: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """(rows of ranks not marked inconsistent, the inconsistent ranks)."""
    if sb is None or not len(sb) or "consistent" not in sb.columns:
        return sb, []
    bad = sb["consistent"].astype("boolean").fillna(True) == False  # noqa: E712 - pandas boolean mask
    return sb[~bad], sorted(int(r) for r in sb.loc[bad, "rank"].unique())


def per_rank_means(sb: pd.DataFrame) -> pd.DataFrame:
    """Per rank: mean over its steps of each breakdown part (ms), and its step count."""
    cols = {ms: us for ms, us in _PARTS.items() if us in sb.columns}
    df = pd.DataFrame({"rank": sb["rank"].astype(int)})
    for ms, us in cols.items():
        df[ms] = pd.to_numeric(sb[us], errors="coerce") / 1000.0
    out = df.groupby("rank").mean()
    out["steps"] = sb.groupby(sb["rank"].astype(int))["step"].nunique()
    return out


def stage_table(sb: pd.DataFrame | None, rank_stages: pd.DataFrame | None) -> pd.DataFrame | None:
    """The `stages` table (see the module docstring); None without two known stages."""
    if sb is None or not len(sb) or rank_stages is None or not len(rank_stages):
        return None
    stage_of = {int(r): int(s) for r, s in zip(rank_stages["rank"], rank_stages["stage"]) if pd.notna(s)}
    if len(set(stage_of.values())) < 2:
        return None
    good, bad = trusted_ranks(sb)
    per = per_rank_means(good)
    per = per[per.index.isin(list(stage_of))]
    if per.empty:
        return None
    per["stage"] = [stage_of[r] for r in per.index]
    rows = []
    for stage, g in per.groupby("stage"):
        row = {
            "stage": int(stage),
            "ranks": ",".join(str(r) for r in sorted(g.index)),
            "n_ranks": len(g),
            "steps": int(g["steps"].max()),
            "excluded_ranks": ",".join(str(r) for r in bad if stage_of.get(r) == stage),
        }
        for c in _PARTS:
            row[c] = float(g[c].mean()) if c in g.columns and g[c].notna().any() else np.nan
        rows.append(row)
    out = pd.DataFrame(rows)
    lo = out["computing_ms"].where(out["computing_ms"] > 0).min()
    out["computing_ratio"] = out["computing_ms"] / lo if pd.notna(lo) else np.nan
    return out[STAGE_COLUMNS].sort_values("stage").reset_index(drop=True)


def stage_compute_imbalance(stages: pd.DataFrame | None) -> float | None:
    """max / min of the stages' computing_ms (None without two stages with compute)."""
    if stages is None or len(stages) < 2:
        return None
    c = pd.to_numeric(stages["computing_ms"], errors="coerce")
    c = c[c > 0]
    if len(c) < 2:
        return None
    return float(c.max() / c.min())


def analysis(ctx):
    """Registry entry `stages`."""
    st = stage_table(ctx.table("step_breakdown"), ctx.table("rank_stages"))
    return Output(tables={"stages": st}, metrics={"stage_compute_imbalance": stage_compute_imbalance(st)})
