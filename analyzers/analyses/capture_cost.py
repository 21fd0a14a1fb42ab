"""What the profiler's capture costs the run, as a share of its training time after warm-up.

The runner records the profiler on steps [warm-up, warm-up + profile.steps) and calls the profiler once after
every step, outside the step's own time (at the end of the window that call stops recording and writes the raw
FRAMEWORK files); it stores that call's duration as `capture_s` in the step record. Per step the run's step
time and capture time are the slowest rank's; over the steps from warm-up on that every rank finished:

    on, off       = median step time of the profiled / unprofiled steps
    added         = n_profiled * (on - off) + sum of capture_s
    capture_cost  = added / (n_profiled * on + n_unprofiled * off + sum of capture_s)

`capture_cost_low`/`_high`: the same with the profiled steps' time at either end of the 95% interval of
on / off (analyzers.analyses.steadiness.ratio_interval, Welch on log step times): the extra time is n_profiled * off *
(r - 1) + sum of capture_s over n_profiled * off * r + n_unprofiled * off + sum of capture_s.

`profiler_overhead` (analyzers.analyses.step_metrics) is the cost per recorded step, on / off - 1; capture_cost is
what the run as a whole paid for its profile. Unknown (not reported) without profiled steps, without
unprofiled ones, or without `capture_s` in the records (runs from before it was recorded).
"""

from __future__ import annotations

from analyzers.context import Output
from analyzers.stats import ratio_interval
from analyzers.analyses.step_metrics import step_series


def analysis(ctx) -> Output:
    ws = ctx.workload_steps
    if ws is None or ws.empty or "capture_s" not in ws.columns:
        return Output()
    warm = ctx.warmup_steps()
    per = step_series(ws, None, None, warm)  # per step, the slowest rank; the steps every rank finished
    if "capture_s" not in per.columns:
        return Output()
    prof = per["profiled"].astype(bool)
    on, off = per.loc[prof, "step_time_s"].dropna(), per.loc[~prof, "step_time_s"].dropna()
    if on.empty or off.empty or off.median() <= 0:
        return Output()
    # the call after the last warm-up step starts the window: it belongs to the capture too
    before = ws.loc[ws["step"] == warm - 1, "capture_s"].max()
    cap = float(per["capture_s"].fillna(0.0).sum() + (0.0 if before != before else before))
    m_on, m_off = float(on.median()), float(off.median())
    added = len(on) * (m_on - m_off) + cap
    total = len(on) * m_on + len(off) * m_off + cap
    out = {"capture_cost": added / total, "capture_calls_s": cap}
    ci = ratio_interval(list(on), list(off))
    if ci is not None:  # the profiled steps' extra time at either end of the interval of on / off
        for key, r in (("capture_cost_low", ci[0]), ("capture_cost_high", ci[1])):
            a = len(on) * m_off * (r - 1) + cap
            out[key] = a / (len(on) * m_off * r + len(off) * m_off + cap)
    return Output(metrics=out)
