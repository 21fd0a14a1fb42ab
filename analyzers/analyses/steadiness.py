"""How steady a run was: can its numbers be compared with another run's?

From the workload's step records, over the measured steps (after warm-up, every rank finished, unprofiled when
the run has unprofiled steps: the steps the run's step_time_s is the median of):

    step_time_cv     robust coefficient of variation of the per-step step_time_s (slowest rank per step):
                     (Q3 - Q1) / 1.349 / median (numpy's linear quantiles). For normally distributed steps it is
                     sd / mean; one slow step (a GC pause, a neighbour's burst) cannot move it, a run whose steps
                     run at two speeds (part of them 40% slower) moves it by tens of percent
    step_cpu_cv      the same of the per-step step_cpu_s (the rank process's CPU time, slowest rank per step):
                     a busy machine stretches wall time in bursts, CPU time much less (docs/check.md)
    warmup_drift     median step time of the first third of the measured steps / median of the last third - 1
                     (> 0: the run was still getting faster after its warm-up; thirds: floor(n / 3) steps each)
    warmup_drift_p   two-sided Mann-Whitney p of those two thirds (null with fewer than 3 steps a third)
    rank_cpu_spread  slowest rank's median CPU time per step / fastest rank's - 1 (ranks at two speeds: one
                     rank's threads fighting over a core); null with one rank or without cpu_s

A run is **unsteady** (unsteady_reasons) when step_time_cv or step_cpu_cv > MAX_CV, or warmup_drift is beyond
MAX_DRIFT with warmup_drift_p < DRIFT_ALPHA, or rank_cpu_spread > MAX_RANK_SPREAD. `show` and `ls` warn about it.
`check --ab` measures a pair again when a run is unsteady by its own CPU time (`wall=False`: step_cpu_cv and
rank_cpu_spread; on a loaded machine nearly every run's wall clock is unsteady, which the pairing is for).

The interval of a run's estimate of itself (profiler_overhead, capture_cost) is `ratio_interval`: the two sets of
step times compared on the log scale (Welch), so a cost that noise can make negative is shown with its interval
or as "below what this run can resolve" (`resolved`), never as a bare negative number.
"""

from __future__ import annotations

import math

import numpy as np

from analyzers.stats import mann_whitney_p

MAX_CV = 0.10
MAX_DRIFT = 0.05
DRIFT_ALPHA = 0.05
MAX_RANK_SPREAD = 0.20


def cv(x: list[float]) -> float | None:
    """Robust coefficient of variation, (Q3 - Q1) / 1.349 / median; None with fewer than 2 values or a median <= 0."""
    if len(x) < 2 or np.median(x) <= 0:
        return None
    q1, q3 = np.quantile(x, [0.25, 0.75])
    return float((q3 - q1) / 1.349 / np.median(x))


def steadiness(
    step_times: list[float], rank_cpu: dict[int, list[float]] | None = None, step_cpu: list[float] | None = None
) -> dict:
    """The steadiness metrics from the measured steps' step times (in step order), each rank's per-step CPU
    times, and the per-step CPU time (slowest rank)."""

    x = [float(v) for v in step_times if v is not None and not math.isnan(v)]
    out = {
        "step_time_cv": cv(x),
        "step_cpu_cv": cv([float(v) for v in step_cpu or [] if v == v]),
        "warmup_drift": None,
        "warmup_drift_p": None,
        "rank_cpu_spread": None,
    }
    k = len(x) // 3
    if k >= 1:
        first, last = x[:k], x[-k:]
        if np.median(last) > 0:
            out["warmup_drift"] = float(np.median(first) / np.median(last) - 1.0)
        if k >= 3:
            out["warmup_drift_p"] = mann_whitney_p(first, last)
    meds = [float(np.median(v)) for v in (rank_cpu or {}).values() if len(v)]
    if len(meds) >= 2 and min(meds) > 0:
        out["rank_cpu_spread"] = max(meds) / min(meds) - 1.0
    return out


def unsteady_reasons(m: dict, wall: bool = True) -> list[str]:
    """Why a run's metrics say it is not steady enough to compare; [] when steady or unknown. `wall=False`: by
    its CPU time only (step_cpu_cv, rank_cpu_spread)."""
    why = []
    cv_w, cv_c, drift, p, spread = (
        m.get(k) for k in ("step_time_cv", "step_cpu_cv", "warmup_drift", "warmup_drift_p", "rank_cpu_spread")
    )
    if wall and cv_w is not None and cv_w > MAX_CV:
        why.append(f"step time CV {cv_w * 100:.0f}% > {MAX_CV * 100:.0f}%")
    if cv_c is not None and cv_c > MAX_CV:
        why.append(f"CPU time per step CV {cv_c * 100:.0f}% > {MAX_CV * 100:.0f}%")
    if wall and drift is not None and p is not None and abs(drift) > MAX_DRIFT and p < DRIFT_ALPHA:
        why.append(f"{'slower' if drift > 0 else 'faster'} in its first third by {abs(drift) * 100:.0f}% (p={p:.2g})")
    if spread is not None and spread > MAX_RANK_SPREAD:
        why.append(f"ranks' CPU time per step {spread * 100:.0f}% apart")
    return why


#: a run's estimates of its own cost, shown with their interval (`resolved`), never as a bare negative cost; the
#: run record holds each as `name`, `name_low`, `name_high`
SELF_ESTIMATES = ("profiler_overhead", "capture_cost")


def resolved(value, low, high, fmt=lambda v: f"{v * 100:+.1f}%") -> str:
    """How views print a run's estimate of its own cost: with its interval; an interval that holds 0 (or a
    negative estimate without one) is "below what this run can resolve", never a bare negative cost."""
    if value is None:
        return "-"
    if low is None or high is None:
        return fmt(value) if value >= 0 else "below what this run can resolve (no interval)"
    if low <= 0 <= high:
        return f"below what this run can resolve ({fmt(low)} … {fmt(high)})"
    return f"{fmt(value)} ({fmt(low)} … {fmt(high)})"


def analysis(ctx):
    """Registry entry: the steadiness metrics of a run with workload step records."""
    from analyzers.analyses.step_metrics import step_series
    from analyzers.context import Output

    ws = ctx.workload_steps
    if ws is None or ws.empty or "step_time_s" not in ws.columns:
        return Output()
    per = step_series(ws, None, None, ctx.warmup_steps())
    if per.empty or "step_time_s" not in per.columns:
        return Output()
    per = per[per["measured"].astype(bool)].sort_values("step")
    steps = set(per["step"])
    rank_cpu = {}
    if "cpu_s" in ws.columns:
        mine = ws[ws["step"].isin(steps)].dropna(subset=["cpu_s"])
        rank_cpu = {int(r): [float(v) for v in g["cpu_s"]] for r, g in mine.groupby("rank")}
    cpu = [float(v) for v in per["cpu_s"].dropna()] if "cpu_s" in per.columns else []
    m = steadiness([float(v) for v in per["step_time_s"].dropna()], rank_cpu, cpu)
    return Output(metrics={k: v for k, v in m.items() if v is not None})
