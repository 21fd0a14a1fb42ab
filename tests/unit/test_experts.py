"""Expert load balance from per-step records (tokens_per_expert, dropped_tokens), hand-computed."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analyzers.analyses.experts import expert_load, mean_expert_cv


def _ws(rows):
    base = {"start_ts": 0.0, "end_ts": 1.0, "step_time_s": 1.0, "samples": 64, "loss": 1.0, "profiled": False}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_two_ranks_summed_per_step():
    ws = _ws(
        [
            {"rank": 0, "step": 0, "tokens_per_expert": [10, 2, 2, 2], "dropped_tokens": 1},
            {"rank": 1, "step": 0, "tokens_per_expert": [6, 2, 2, 2], "dropped_tokens": 0},
            {"rank": 0, "step": 1, "tokens_per_expert": [4, 4, 4, 4], "dropped_tokens": 0},
            {"rank": 1, "step": 1, "tokens_per_expert": [4, 4, 4, 4], "dropped_tokens": 0},
        ]
    )
    res = expert_load(ws).set_index("step")
    # step 0: load = [16, 4, 4, 4], total 28, mean 7, population std = sqrt(((9^2) + 3*(3^2)) / 4) = sqrt(27)
    s0 = res.loc[0]
    assert s0["ranks"] == 2 and s0["experts"] == 4
    assert s0["total_tokens"] == 28 and s0["max_load"] == 16 and s0["min_load"] == 4
    assert s0["max_mean_ratio"] == pytest.approx(16 / 7)
    assert s0["cv"] == pytest.approx(math.sqrt(27) / 7)
    assert s0["dropped_fraction"] == pytest.approx(1 / 28)
    assert s0["busiest_expert"] == 0
    s1 = res.loc[1]
    assert s1["cv"] == 0.0 and s1["max_mean_ratio"] == 1.0 and s1["dropped_fraction"] == 0.0
    assert mean_expert_cv(expert_load(ws)) == pytest.approx(math.sqrt(27) / 14)


def test_json_strings_and_missing_values():
    # parquet round trips may turn lists into JSON strings; rows without expert data are skipped
    ws = _ws(
        [
            {"rank": 0, "step": 3, "tokens_per_expert": json.dumps([1, 3]), "dropped_tokens": None},
            {"rank": 1, "step": 3, "tokens_per_expert": None, "dropped_tokens": None},
        ]
    )
    res = expert_load(ws)
    assert len(res) == 1 and res["ranks"].iloc[0] == 1
    assert res["cv"].iloc[0] == pytest.approx(0.5)  # mean 2, std 1
    assert res["dropped_tokens"].iloc[0] == 0.0


def test_no_expert_columns():
    ws = _ws([{"rank": 0, "step": 0}])
    assert expert_load(ws) is None
    assert expert_load(pd.DataFrame()) is None
    assert expert_load(_ws([{"rank": 0, "step": 0, "tokens_per_expert": None}])) is None
    assert mean_expert_cv(None) is None


def test_without_dropped_column():
    res = expert_load(_ws([{"rank": 0, "step": 0, "tokens_per_expert": [3, 1]}]))
    assert math.isnan(res["dropped_fraction"].iloc[0])
    assert res["max_mean_ratio"].iloc[0] == pytest.approx(1.5)


def test_mismatched_expert_counts_skip_the_step():
    ws = _ws(
        [
            {"rank": 0, "step": 0, "tokens_per_expert": [1, 2, 3]},
            {"rank": 1, "step": 0, "tokens_per_expert": [1, 2]},
            {"rank": 0, "step": 1, "tokens_per_expert": [2, 2]},
        ]
    )
    res = expert_load(ws)
    assert res["step"].tolist() == [1]


def test_warmup_steps_are_left_out():
    ws = _ws([{"rank": 0, "step": 0, "tokens_per_expert": [9, 1]}, {"rank": 0, "step": 1, "tokens_per_expert": [5, 5]}])
    res = expert_load(ws, warmup_steps=1)
    assert res["step"].tolist() == [1] and res["cv"].iloc[0] == 0.0
    assert expert_load(ws)["step"].tolist() == [0, 1]


def test_loads_under_one_token_on_average_and_an_empty_step():
    # step 0: load [1, 0]: mean 0.5, max/mean 2, population std 0.5 -> cv 1; 1 dropped of 1 routed
    # step 1: no token routed: ratios unknown (NaN), not 0 and not infinite
    ws = _ws(
        [
            {"rank": 0, "step": 0, "tokens_per_expert": [1, 0], "dropped_tokens": 1},
            {"rank": 0, "step": 1, "tokens_per_expert": [0, 0], "dropped_tokens": 0},
        ]
    )
    res = expert_load(ws).set_index("step")
    assert res.loc[0, "max_mean_ratio"] == 2.0 and res.loc[0, "cv"] == 1.0 and res.loc[0, "dropped_fraction"] == 1.0
    assert math.isnan(res.loc[1, "max_mean_ratio"]) and math.isnan(res.loc[1, "cv"])
    assert math.isnan(res.loc[1, "dropped_fraction"])
    assert mean_expert_cv(res.reset_index()) == 1.0  # the unknown step does not count as 0
    assert mean_expert_cv(res.reset_index().iloc[1:]) is None  # only unknown: None


def test_a_rank_without_expert_data_does_not_end_the_step():
    ws = _ws(
        [
            {"rank": 0, "step": 0, "tokens_per_expert": None},
            {"rank": 1, "step": 0, "tokens_per_expert": [3, 1]},
            {"rank": 0, "step": 1, "tokens_per_expert": None},
            {"rank": 1, "step": 1, "tokens_per_expert": None},
            {"rank": 0, "step": 2, "tokens_per_expert": [2, 2]},
        ]
    )
    res = expert_load(ws)
    assert res["step"].tolist() == [0, 2] and res["ranks"].tolist() == [1, 1]
    assert list(res.columns)[:3] == ["step", "ranks", "experts"]


def test_warmup_steps_given_as_text_are_compared_as_numbers():
    ws = _ws([{"rank": 0, "step": s, "tokens_per_expert": [1, 1]} for s in ("0", "1", "x")])
    assert expert_load(ws, warmup_steps=1)["step"].tolist() == [1]


def test_one_step_of_expert_data_has_a_cv():
    assert mean_expert_cv(expert_load(_ws([{"rank": 0, "step": 0, "tokens_per_expert": [3, 1]}]))) == 0.5
