"""Per rank and step time breakdown (the msprof-analyze / Ascend profiler "step trace"), computed from
the device ops themselves, and its reconciliation with what the profiler wrote (step_trace_time.csv,
analysis.db StepTraceTime).

Definitions (same rules as torch_npu's step_trace_time and msprof-analyze's
`MsprofStepTraceTimeDBAdapter` / `RangeCaculator`), per rank and step window W = [start, end]:

    C  = union of compute-op intervals in W          computing_us
    M  = union of communication-op intervals in W    communication_us
    overlapped_us                     = |C ∩ M|
    communication_not_overlapped_us   = |M| - |C ∩ M|
    free_us                           = |W| - |C ∪ M|
    bubble_us                         = sum of durations of receive ops (hcom_receive*) in W
    stage_us                          = |W| - bubble_us
    preparing_us                      = first op start in W - host step start (when the host step is known, else 0)

The Ascend parsers set W to the device span of the step (first op start to last op end), as the profiler
does; ops are clipped to W. Ops without a step are assigned to the window they start in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.schema import STEP_BREAKDOWN, conform, empty

METRICS = ["computing_us", "communication_us", "communication_not_overlapped_us", "overlapped_us", "free_us",
           "stage_us", "bubble_us", "preparing_us"]


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length of the union of intervals [start_i, end_i)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = end[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    block = np.cumsum(new) - 1
    bstart = s[new]
    bend = np.maximum.reduceat(e, np.flatnonzero(new))
    del block
    return float(np.sum(bend - bstart))


def assign_steps(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Step of each op: its own `step` if set, else the window (same rank) its start falls in."""
    out = ops["step"].astype("Float64") if "step" in ops.columns else pd.Series(np.nan, index=ops.index, dtype="Float64")
    missing = out.isna()
    if not missing.any() or steps is None or not len(steps):
        return out
    for r, st in steps.groupby("rank"):
        sel = missing & (ops["rank"] == r)
        if not sel.any():
            continue
        st = st.sort_values("start_us")
        starts = st["start_us"].to_numpy(float)
        ends = st["end_us"].to_numpy(float)
        ids = st["step"].to_numpy(float)
        ts = ops.loc[sel, "start_us"].to_numpy(float)
        idx = np.searchsorted(starts, ts, side="right") - 1
        ok = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
        out.loc[sel] = np.where(ok, ids[np.clip(idx, 0, None)], np.nan)
    return out


def step_breakdown(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step) with the STEP_BREAKDOWN columns."""
    if steps is None or not len(steps):
        return empty(STEP_BREAKDOWN)
    ops = ops.copy()
    ops["step"] = assign_steps(ops, steps)
    ops = ops.dropna(subset=["step", "start_us", "dur_us"])
    ops["end_us"] = ops["start_us"] + ops["dur_us"].clip(lower=0)
    grouped = {k: g for k, g in ops.groupby(["rank", "step"], sort=False)}
    rows = []
    for rec in steps.itertuples(index=False):
        r, s = int(rec.rank), int(rec.step)
        w0, w1 = float(rec.start_us), float(rec.end_us)
        g = grouped.get((r, float(s)))
        if g is None:
            g = grouped.get((r, s))
        row = {"rank": r, "step": s, "step_us": max(w1 - w0, 0.0)}
        if g is None or not len(g):
            row.update({m: 0.0 for m in METRICS})
            row["free_us"] = row["step_us"]
            row["stage_us"] = row["step_us"]
            rows.append(row)
            continue
        st = np.clip(g["start_us"].to_numpy(float), w0, w1)
        en = np.clip(g["end_us"].to_numpy(float), w0, w1)
        comm = (g["category"] == "communication").to_numpy()
        comp = (g["category"] == "compute").to_numpy()
        c = union_length(st[comp], en[comp])
        m = union_length(st[comm], en[comm])
        both = comm | comp
        cm = union_length(st[both], en[both])
        ov = c + m - cm
        names = g["name"].astype(str).str.lower()
        recv = (comm & names.str.startswith(("hcom_receive", "hcom_recv")).to_numpy())
        bubble = float(np.sum(en[recv] - st[recv]))
        host0 = getattr(rec, "host_start_us", np.nan)
        first = float(st[both].min()) if both.any() else np.nan
        prep = first - float(host0) if host0 is not None and not pd.isna(host0) and not np.isnan(first) else 0.0
        row.update({"computing_us": c, "communication_us": m, "overlapped_us": ov,
                    "communication_not_overlapped_us": m - ov, "free_us": row["step_us"] - cm,
                    "bubble_us": bubble, "stage_us": row["step_us"] - bubble, "preparing_us": prep})
        rows.append(row)
    return conform(pd.DataFrame(rows), STEP_BREAKDOWN)


def reconcile(ours: pd.DataFrame, reference: pd.DataFrame | None) -> pd.DataFrame | None:
    """Long table: rank, step, metric, computed_us, reference_us, diff_us, rel_diff (diff / step time)."""
    if reference is None or not len(reference) or not len(ours):
        return None
    ref = reference.copy()
    ref["rank"] = ref["rank"].astype("int64")
    ref["step"] = ref["step"].astype("int64")
    merged = ours.merge(ref, on=["rank", "step"], how="inner", suffixes=("", "_ref"))
    rows = []
    for m in METRICS:
        if m not in ours.columns or m not in ref.columns:
            continue
        a = merged[m].astype(float)
        b = merged[f"{m}_ref"].astype(float)
        denom = merged["step_us"].astype(float).where(merged["step_us"] > 0, np.nan)
        rows.append(pd.DataFrame({"rank": merged["rank"], "step": merged["step"], "metric": m.removesuffix("_us"),
                                  "computed_us": a, "reference_us": b, "diff_us": a - b,
                                  "rel_diff": (a - b) / denom}))
    return pd.concat(rows, ignore_index=True) if rows else None


def breakdown_from_reference(reference: pd.DataFrame) -> pd.DataFrame:
    """When a profile has no ops (e.g. an imported msprof-analyze cluster table), its breakdown is the one
    the file carries; step_us = stage + bubble if Stage is known, else computing + not-overlapped comm + free."""
    ref = reference.copy()
    for m in METRICS:
        if m not in ref.columns:
            ref[m] = 0.0 if m in ("bubble_us", "preparing_us") else np.nan
    total = ref["computing_us"] + ref["communication_not_overlapped_us"] + ref["free_us"]
    ref["step_us"] = (ref["stage_us"] + ref["bubble_us"].fillna(0)).fillna(total) if "stage_us" in ref else total
    ref["rank"] = ref["rank"].astype("int64")
    ref["step"] = ref["step"].astype("int64")
    return conform(ref[[c for c in STEP_BREAKDOWN]], STEP_BREAKDOWN)
