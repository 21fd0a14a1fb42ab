"""The checkpoint-cost and CPU-time analyses on hand-written step records (values worked out by hand)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyzers.analyses import checkpoint_cost
from analyzers.analyses.step_metrics import run_metrics, samples, step_series
from analyzers.registry import Context

NaN = math.nan


def steps(rows):
    return pd.DataFrame(rows, columns=["rank", "step", "step_time_s", "cpu_s", "checkpoint_s"])


def ctx(df, warmup=1):
    return Context(workload_steps=df, config={"train": {"warmup_steps": warmup}})


def test_checkpoint_cost_compares_steps_with_and_without_a_save():
    # 2 ranks; step 0 is warm-up (ignored, even though slow); steps 2 and 4 saved a checkpoint
    df = steps(
        [
            (0, 0, 9.0, 1, NaN),
            (1, 0, 9.0, 1, NaN),
            (0, 1, 0.10, 1, NaN),
            (1, 1, 0.12, 1, NaN),  # step time 0.12 (slowest rank)
            (0, 2, 0.15, 1, 0.04),
            (1, 2, 0.16, 1, 0.05),  # 0.16, save 0.05
            (0, 3, 0.10, 1, NaN),
            (1, 3, 0.10, 1, NaN),  # 0.10
            (0, 4, 0.20, 1, 0.07),
            (1, 4, 0.18, 1, 0.06),  # 0.20, save 0.07
            (0, 5, 0.11, 1, NaN),
            (1, 5, 0.09, 1, NaN),  # 0.11
        ]
    )
    m = checkpoint_cost.analysis(ctx(df)).metrics
    # with a save: median(0.16, 0.20) = 0.18; without: median(0.12, 0.10, 0.11) = 0.11
    assert m["checkpoint_cost"] == pytest.approx(0.18 / 0.11 - 1)
    assert m["checkpoint_save_s"] == pytest.approx((0.05 + 0.07) / 2)


def test_checkpoint_cost_is_unknown_without_saves():
    df = steps([(0, s, 0.1, 1, NaN) for s in range(4)])
    assert checkpoint_cost.analysis(ctx(df)).metrics == {}
    assert checkpoint_cost.analysis(ctx(df.drop(columns=["checkpoint_s"]))).metrics == {}


def test_step_cpu_is_the_median_of_the_slowest_rank_per_step():
    df = steps(
        [
            (0, 0, 1, 5.0, NaN),
            (1, 0, 1, 5.0, NaN),
            (0, 1, 1, 0.030, NaN),
            (1, 1, 1, 0.034, NaN),
            (0, 2, 1, 0.040, NaN),
            (1, 2, 1, 0.020, NaN),
            (0, 3, 1, 0.031, NaN),
            (1, 3, 1, 0.029, NaN),
        ]
    )
    df["samples"] = 4
    # per step max over ranks: 0.034, 0.040, 0.031 -> median 0.034; the per-step values are the samples check tests
    series = step_series(df, None, None, warmup=1)
    assert samples(series, "step_cpu_s") == pytest.approx([0.034, 0.040, 0.031])
    assert run_metrics(series)["step_cpu_s"] == pytest.approx(0.034)
    assert run_metrics(step_series(df.drop(columns=["cpu_s"]), None, None, warmup=1))["step_cpu_s"] is None
