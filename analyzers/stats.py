"""The two-sample statistics perfbench decides with (and the numeric helpers below them: `finite`, `median`,
`step_ms`, `union_length`): the Welch interval of a difference of means and the
Mann-Whitney U test's p-value (scipy), shared by compare/check (perfbench/) and the analyses that judge a run
against itself (analyzers/analyses/steadiness.py)."""

from __future__ import annotations

import math

import numpy as np

#: confidence level of the intervals a run gives of its own estimates (profiler_overhead, capture_cost)
LEVEL = 0.95


# ---- the small numeric helpers every layer shares (one home each) --------------------------------------------


def finite(v) -> float | None:
    """`v` as a float when it is a finite real number (NumPy's included; not a bool or a string), else None
    (unknown is None, never 0)."""
    if v is None or isinstance(v, (bool, np.bool_, str, bytes)):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def median(values) -> float | None:
    """The median of the finite values (None, NaN and inf passed over), None without any."""
    v = [f for f in (finite(x) for x in values) if f is not None]
    return float(np.median(v)) if v else None


def step_ms(step_time_s) -> float | None:
    """A step time in seconds as milliseconds, None unless it is a finite number > 0."""
    v = finite(step_time_s)
    return v * 1000.0 if v is not None and v > 0 else None


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length of the union of intervals [start_i, end_i) (touching intervals join)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = end[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    bstart = s[new]
    bend = np.maximum.reduceat(e, np.flatnonzero(new))
    return float(np.sum(bend - bstart))


def welch_ci(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Confidence interval of mean(b) - mean(a) (Welch). None with fewer than 2 samples a side."""
    from scipy import stats

    a_, b_ = np.asarray(a, float), np.asarray(b, float)
    if len(a_) < 2 or len(b_) < 2:
        return None
    va, vb = a_.var(ddof=1) / len(a_), b_.var(ddof=1) / len(b_)
    diff = b_.mean() - a_.mean()
    se = math.sqrt(va + vb)
    if se == 0:
        return (diff, diff)
    dof = (va + vb) ** 2 / (
        (va**2 / (len(a_) - 1) if len(a_) > 1 else 0) + (vb**2 / (len(b_) - 1) if len(b_) > 1 else 0)
    )
    q = stats.t.ppf(0.5 + level / 2, dof)
    return (diff - q * se, diff + q * se)


def median_diff_ci(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Confidence interval of median(b) - median(a): scipy's percentile bootstrap (4,999 resamples of each side,
    seed 0, so the same samples give the same interval). None with fewer than 2 samples a side."""
    from scipy import stats

    a_, b_ = np.asarray(a, float), np.asarray(b, float)
    if len(a_) < 2 or len(b_) < 2:
        return None
    if np.ptp(np.concatenate([a_, b_])) == 0:
        return (0.0, 0.0)

    def diff(x, y, axis=-1):
        return np.median(y, axis=axis) - np.median(x, axis=axis)

    ci = stats.bootstrap(
        (a_, b_),
        diff,
        vectorized=True,
        paired=False,
        n_resamples=4999,
        method="percentile",
        confidence_level=level,
        random_state=0,
    ).confidence_interval
    return (float(ci.low), float(ci.high))


def mann_whitney_p(a: list[float], b: list[float]) -> float | None:
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def ratio_interval(on: list[float], off: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """Interval of median(on) / median(off) from the log step times: exp(Welch interval of mean(log on) -
    mean(log off)). None with fewer than 2 values a side or a value <= 0."""
    if len(on) < 2 or len(off) < 2 or min(on) <= 0 or min(off) <= 0:
        return None
    ci = welch_ci([math.log(v) for v in off], [math.log(v) for v in on], level)
    return None if ci is None else (math.exp(ci[0]), math.exp(ci[1]))
