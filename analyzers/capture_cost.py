"""What the profiler's capture costs the run, as a share of its training time after warm-up.

The runner records the profiler on steps [warm-up, warm-up + profile.steps) and calls the profiler once after
every step, outside the step's own time (at the end of the window that call stops recording and writes the raw
FRAMEWORK files); it stores that call's duration as `capture_s` in the step record. Per step the run's step
time and capture time are the slowest rank's; over the steps from warm-up on that every rank finished:

    on, off       = median step time of the profiled / unprofiled steps
    added         = n_profiled * (on - off) + sum of capture_s
    capture_cost  = added / (n_profiled * on + n_unprofiled * off + sum of capture_s)

`profiler_overhead` (analyzers.step_metrics) is the cost per recorded step, on / off - 1; capture_cost is
what the run as a whole paid for its profile. Unknown (not reported) without profiled steps, without
unprofiled ones, or without `capture_s` in the records (runs from before it was recorded).
"""

from __future__ import annotations

from analyzers.registry import Output


def analysis(ctx) -> Output:
    ws = ctx.workload_steps
    if ws is None or ws.empty or "capture_s" not in ws.columns or "profiled" not in ws.columns:
        return Output()
    nranks = ws["rank"].nunique()
    steady = ws[ws["step"] >= ctx.warmup_steps()]
    per = steady.groupby("step").agg(t=("step_time_s", "max"), cap=("capture_s", "max"),
                                     prof=("profiled", "any"), ranks=("rank", "nunique"))
    per = per[per["ranks"] == nranks]
    on, off = per[per["prof"].astype(bool)], per[~per["prof"].astype(bool)]
    if on.empty or off.empty or off["t"].median() <= 0:
        return Output()
    # the call after the last warm-up step starts the window: it belongs to the capture too
    before = ws[ws["step"] == ctx.warmup_steps() - 1].groupby("step")["capture_s"].max()
    cap = float(per["cap"].fillna(0.0).sum() + before.fillna(0.0).sum())
    m_on, m_off = float(on["t"].median()), float(off["t"].median())
    added = len(on) * (m_on - m_off) + cap
    total = len(on) * m_on + len(off) * m_off + cap
    return Output(metrics={"capture_cost": added / total, "capture_calls_s": cap})
