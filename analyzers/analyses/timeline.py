"""A compact timeline of a few steps across ranks, for views: consecutive ops of one category on a
rank are merged into one segment (gaps shorter than `merge_gap_us` or `merge_gap_frac` of the step
are bridged), so a step of
thousands of ops becomes tens of segments per rank that a browser draws instantly."""

from __future__ import annotations

import pandas as pd

from analyzers.context import Output

TIMELINE_COLUMNS = ["rank", "step", "kind", "start_ts", "end_ts", "ops", "top_op"]


def step_timeline(
    ops: pd.DataFrame,
    steps: pd.DataFrame,
    max_steps: int = 2,
    merge_gap_us: float = 50.0,
    merge_gap_frac: float = 0.005,
) -> pd.DataFrame:
    """Segments (rank, step, kind = compute | communication, start_ts/end_ts in seconds on the
    profile's clock, ops merged, the longest op's name) for the first `max_steps` steps of the profile."""
    if ops is None or ops.empty or steps is None or steps.empty or "step" not in ops.columns:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    chosen = sorted(steps["step"].dropna().unique())[:max_steps]
    sel = ops[ops["step"].isin(chosen) & ops["category"].isin(["compute", "communication"])]
    rows = []
    lengths = (steps["end_us"] - steps["start_us"]).groupby(steps["step"]).median()
    for (rank, step), g in sel.sort_values("start_us").groupby(["rank", "step"], sort=True):
        gap = max(merge_gap_us, merge_gap_frac * float(lengths.get(step, 0.0)))
        cur = None
        for op in g.itertuples(index=False):
            kind = "communication" if op.category == "communication" else "compute"
            end = op.start_us + op.dur_us
            if cur and cur["kind"] == kind and op.start_us - cur["end"] <= gap:
                cur["end"] = max(cur["end"], end)
                cur["ops"] += 1
                if op.dur_us > cur["top_dur"]:
                    cur["top_dur"], cur["top_op"] = op.dur_us, op.name
                continue
            if cur:
                rows.append(cur)
            cur = {
                "rank": int(rank),
                "step": int(step),
                "kind": kind,
                "start": op.start_us,
                "end": end,
                "ops": 1,
                "top_dur": op.dur_us,
                "top_op": op.name,
            }
        if cur:
            rows.append(cur)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    df["start_ts"] = df["start"] / 1e6
    df["end_ts"] = df["end"] / 1e6
    return df[TIMELINE_COLUMNS]


def analysis(ctx):
    """Registry entry `timeline`: compact compute/communication segments of the first steps, per rank."""
    return Output(tables={"timeline": step_timeline(ctx.profile.ops, ctx.profile.steps)})
