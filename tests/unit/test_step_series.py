"""The per-step series a run's metrics are medians of (`step_metrics.step_series`, `samples`), on workload
step records written by hand: which steps count, throughput at its edges, means over ranks, and null for what
no rank measured. Expected values are computed here from the records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analyzers.analyses.step_metrics import samples, step_series


def _ws(rows, cols=("rank", "step", "step_time_s", "samples")):
    return pd.DataFrame(rows, columns=list(cols))


def test_the_three_required_columns_are_enough():
    s = step_series(_ws([(0, 0, 0.5), (0, 1, 0.25)], ("rank", "step", "step_time_s")), None, None)
    assert list(s["step_time_s"]) == [0.5, 0.25]
    assert list(s["measured"]) == [True, True] and list(s["profiled"]) == [False, False]  # no profiled column


def test_throughput_needs_a_positive_time_and_samples():
    s = step_series(_ws([(0, 0, 0.5, 1), (0, 1, 0.0, 4), (0, 2, 0.5, 0)]), None, None)
    assert s["throughput"].iloc[0] == 2.0  # 1 sample in 0.5 s
    assert math.isnan(s["throughput"].iloc[1])  # a zero step time: unknown, not infinite
    assert math.isnan(s["throughput"].iloc[2])  # no samples recorded: unknown, not 0


def test_every_step_profiled_still_counts_them_all():
    ws = _ws([(0, 0, 0.5, 4, True), (0, 1, 0.5, 4, True)], ("rank", "step", "step_time_s", "samples", "profiled"))
    s = step_series(ws, None, None)
    assert list(s["measured"]) == [True, True]


def test_workload_collectives_are_means_over_ranks_and_unknown_stays_null():
    ws = _ws(
        [(0, 0, 0.5, 4, 100.0, 4), (1, 0, 0.6, 4, 300.0, 6), (0, 1, 0.5, 4, np.nan, 4), (1, 1, 0.5, 4, np.nan, 6)],
        ("rank", "step", "step_time_s", "samples", "comm_bytes", "collectives"),
    )
    s = step_series(ws, None, None)
    assert list(s["comm_bytes"].iloc[:1]) == [200.0] and math.isnan(s["comm_bytes"].iloc[1])
    assert list(s["collectives"]) == [5.0, 5.0]
    assert list(s["step_time_s"]) == [0.6, 0.5]  # the slowest rank's step
    assert list(s["samples"]) == [8.0, 8.0]  # summed over ranks


def test_capture_time_known_on_one_rank_is_that_ranks():
    ws = _ws([(0, 0, 0.5, 4, 0.02), (1, 0, 0.5, 4, np.nan)], ("rank", "step", "step_time_s", "samples", "capture_s"))
    assert step_series(ws, None, None)["capture_s"].iloc[0] == 0.02


def test_samples_of_collectives_take_the_measured_steps_only():
    series = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "measured": [True, True, False],
            "profiled": [False, False, True],
            "collectives": [4.0, 4.0, 9.0],
        }
    )
    assert samples(series, "collectives_per_step") == [4.0, 4.0]
    # a workload column: measured steps only, whatever the profile says
    series["cpu_s"] = [0.1, 0.2, 0.9]
    assert samples(series, "step_cpu_s") == [0.1, 0.2]
    # a profile column: every step
    series["comm_share"] = [0.1, 0.2, 0.3]
    assert samples(series, "comm_share") == pytest.approx([0.1, 0.2, 0.3])


def test_profile_collectives_count_every_step_when_the_measured_ones_have_none():
    series = pd.DataFrame(
        {"step": [0, 1], "measured": [True, False], "profiled": [False, True], "collectives": [np.nan, 7.0]}
    )
    assert samples(series, "collectives_per_step") == [7.0]
    series["measured"] = [False, False]
    assert samples(series, "collectives_per_step") == [7.0]


def test_text_in_a_series_column_is_dropped_not_an_error():
    series = pd.DataFrame({"step": [0, 1], "measured": [True, True], "comm_share": ["0.5", "n/a"]})
    assert samples(series, "comm_share") == [0.5]
    assert samples(series, "no_such_metric") == [] and samples(None, "comm_share") == []
