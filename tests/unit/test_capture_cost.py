"""The capture-cost analysis on hand-written step records (values worked out by hand)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyzers.analyses import capture_cost
from analyzers.registry import Context

NaN = math.nan


def ctx(rows, warmup=2):
    df = pd.DataFrame(rows, columns=["rank", "step", "step_time_s", "profiled", "capture_s"])
    return Context(workload_steps=df, config={"train": {"warmup_steps": warmup}})


ROWS = [  # 2 ranks, warm-up 2 (steps 0-1), profiled steps 2-3, then 4 unprofiled steps
    (0, 0, 9.0, False, 0.001),
    (1, 0, 9.0, False, 0.001),  # warm-up: its call is not the capture's
    (0, 1, 0.10, False, 0.020),
    (1, 1, 0.10, False, 0.030),  # the call after it starts the window: 0.030
    (0, 2, 0.11, True, 0.001),
    (1, 2, 0.12, True, 0.002),  # profiled: 0.12, call 0.002
    (0, 3, 0.12, True, 0.100),
    (1, 3, 0.13, True, 0.200),  # profiled: 0.13, call (stop + write) 0.200
    (0, 4, 0.10, False, NaN),
    (1, 4, 0.09, False, NaN),  # 0.10
    (0, 5, 0.11, False, NaN),
    (1, 5, 0.10, False, NaN),  # 0.11
    (0, 6, 0.09, False, NaN),
    (1, 6, 0.10, False, NaN),  # 0.10
    (0, 7, 0.10, False, NaN),
    (1, 7, 0.10, False, NaN),  # 0.10
]


def test_capture_cost_counts_the_profiled_steps_extra_and_the_calls_between_steps():
    m = capture_cost.analysis(ctx(ROWS)).metrics
    # on = median(0.12, 0.13) = 0.125; off = median(0.10, 0.11, 0.10, 0.10) = 0.10
    # calls: 0.030 (starts the window) + 0.002 + 0.200 = 0.232
    # added = 2 * 0.025 + 0.232 = 0.282; total = 2 * 0.125 + 4 * 0.10 + 0.232 = 0.882
    assert m["capture_calls_s"] == pytest.approx(0.232)
    assert m["capture_cost"] == pytest.approx(0.282 / 0.882)


def test_capture_cost_is_unknown_without_both_kinds_of_step_or_without_call_times():
    unprofiled = [r[:3] + (False,) + r[4:] for r in ROWS]
    assert capture_cost.analysis(ctx(unprofiled)).metrics == {}
    all_profiled = [r[:3] + (True,) + r[4:] for r in ROWS]
    assert capture_cost.analysis(ctx(all_profiled)).metrics == {}
    old = pd.DataFrame(ROWS, columns=["rank", "step", "step_time_s", "profiled", "capture_s"]).drop(columns="capture_s")
    assert capture_cost.analysis(Context(workload_steps=old, config={"train": {"warmup_steps": 2}})).metrics == {}


def test_a_step_only_some_ranks_finished_does_not_count():
    rows = ROWS + [(0, 8, 5.0, False, NaN)]  # rank 1 never finished step 8
    assert capture_cost.analysis(ctx(rows)).metrics["capture_cost"] == pytest.approx(0.282 / 0.882)


def test_a_warm_up_step_without_a_recorded_call_adds_nothing():
    rows = [r if r[1] != 1 else r[:4] + (NaN,) for r in ROWS]  # no capture_s after the last warm-up step
    m = capture_cost.analysis(ctx(rows)).metrics
    # calls: 0.002 + 0.200 = 0.202; added = 2 * 0.025 + 0.202 = 0.252; total = 0.25 + 0.40 + 0.202 = 0.852
    assert m["capture_calls_s"] == pytest.approx(0.202)
    assert m["capture_cost"] == pytest.approx(0.252 / 0.852)


def test_capture_cost_interval_by_hand():
    """The interval of a run's capture cost: the Welch 95% interval of mean(log on) - mean(log off),
    worked out here with scipy's t quantile, turned into the ratio r of the medians, and the cost at either end:
    (2 x off x (r - 1) + calls) / (2 x off x r + 4 x off + calls) with off = 0.10 s, calls = 0.232 s."""
    from scipy import stats

    on, off = [math.log(v) for v in (0.12, 0.13)], [math.log(v) for v in (0.10, 0.11, 0.10, 0.10)]
    mo, mf = sum(on) / 2, sum(off) / 4
    vo = sum((x - mo) ** 2 for x in on) / 1 / 2  # sample variance / n
    vf = sum((x - mf) ** 2 for x in off) / 3 / 4
    dof = (vo + vf) ** 2 / (vo**2 / 1 + vf**2 / 3)
    half = stats.t.ppf(0.975, dof) * math.sqrt(vo + vf)
    m = capture_cost.analysis(ctx(ROWS)).metrics
    for key, r in (("capture_cost_low", math.exp(mo - mf - half)), ("capture_cost_high", math.exp(mo - mf + half))):
        want = (2 * 0.10 * (r - 1) + 0.232) / (2 * 0.10 * r + 4 * 0.10 + 0.232)
        assert m[key] == pytest.approx(want, rel=1e-9), key
    assert m["capture_cost_low"] < m["capture_cost"] < m["capture_cost_high"]


def test_capture_cost_needs_step_records_and_a_positive_unprofiled_step():
    empty = pd.DataFrame(columns=["rank", "step", "step_time_s", "profiled", "capture_s"])
    assert capture_cost.analysis(Context(workload_steps=empty, config={"train": {"warmup_steps": 2}})).metrics == {}
    assert capture_cost.analysis(Context(workload_steps=None, config={"train": {"warmup_steps": 2}})).metrics == {}
    zero = [r if r[3] or r[1] < 2 else r[:2] + (0.0,) + r[3:] for r in ROWS]  # unprofiled steps of 0 s
    assert capture_cost.analysis(ctx(zero)).metrics == {}
