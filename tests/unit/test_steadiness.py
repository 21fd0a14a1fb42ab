"""A run's steadiness record and the intervals of its estimates of itself (analyzers.analyses.steadiness), by hand."""

from __future__ import annotations

import math

import pytest

from analyzers.analyses import capture_cost
from analyzers.stats import ratio_interval
from analyzers.analyses.steadiness import resolved, steadiness, unsteady_reasons
from tests.unit.test_capture_cost import ROWS, ctx


def test_cv_drift_and_rank_spread_by_hand():
    # x = 1.2, 1.1, 1.0, 1.0, 1.0, 1.0; sorted 1.0 1.0 1.0 1.0 1.1 1.2: Q1 at position 1.25 = 1.0, Q3 at 3.75 =
    # 1.0 + .75 * .1 = 1.075; robust cv = .075 / 1.349 / median 1.0 = .055597
    # thirds of 2 steps: median(1.2, 1.1) / median(1.0, 1.0) - 1 = .15
    # ranks: median(.5, .6, .7) = .6, median(.9, 1.0, 1.1) = 1.0 -> spread 1.0 / .6 - 1 = .6667
    m = steadiness([1.2, 1.1, 1.0, 1.0, 1.0, 1.0], {0: [0.5, 0.6, 0.7], 1: [0.9, 1.0, 1.1]})
    assert m["step_time_cv"] == pytest.approx(0.055597, rel=1e-4)
    assert m["warmup_drift"] == pytest.approx(0.15)
    assert m["warmup_drift_p"] is None  # fewer than 3 steps a third
    assert m["rank_cpu_spread"] == pytest.approx(2 / 3)


def test_drift_test_with_three_steps_a_third_and_one_rank():
    # 9 steps: first third 2.0, 2.1, 2.2 all above the last third 1.0, 1.1, 1.2: Mann-Whitney U = 9 of 9, exact
    # two-sided p = 2 / C(6, 3) = 2 / 20 = .1; drift = 2.1 / 1.1 - 1 = .90909
    m = steadiness([2.0, 2.1, 2.2, 1.5, 1.5, 1.5, 1.0, 1.1, 1.2], {0: [1.0]})
    assert m["warmup_drift"] == pytest.approx(0.90909, rel=1e-4)
    assert m["warmup_drift_p"] == pytest.approx(0.1)
    assert m["rank_cpu_spread"] is None


def test_cpu_cv_and_the_cpu_only_verdict():
    # cpu 0.9, 1.0, 1.1: Q1 (position .5) .95, Q3 (1.5) 1.05 -> .1 / 1.349 / 1.0 = .074129
    m = steadiness([1.0, 1.0, 1.0], None, [0.9, 1.0, 1.1])
    assert m["step_cpu_cv"] == pytest.approx(0.074129, rel=1e-4)
    # one slow step among 8 cannot make a run unsteady; half the steps 40% slower does
    assert steadiness([1.0] * 7 + [9.0])["step_time_cv"] == 0.0
    # 1.0 x4, 1.4 x4: Q1 1.0, Q3 1.4 (positions 1.75, 5.25), median 1.2 -> .4 / 1.349 / 1.2 = .24710
    assert steadiness([1.0, 1.4] * 4)["step_time_cv"] == pytest.approx(0.24710, rel=1e-4)
    assert m["step_time_cv"] == 0.0
    # a loaded machine: wall clock unsteady, CPU time steady -> flagged for show/ls, not for check --ab
    loaded = {"step_time_cv": 0.44, "step_cpu_cv": 0.03, "warmup_drift": 1.19, "warmup_drift_p": 0.002}
    assert len(unsteady_reasons(loaded)) == 2
    assert unsteady_reasons(loaded, wall=False) == []
    assert len(unsteady_reasons({"step_cpu_cv": 0.2}, wall=False)) == 1
    assert len(unsteady_reasons({"rank_cpu_spread": 0.5}, wall=False)) == 1


def test_unsteady_reasons_thresholds():
    assert unsteady_reasons({}) == []
    assert unsteady_reasons({"step_time_cv": 0.10, "rank_cpu_spread": 0.20}) == []  # at the limits: steady
    assert len(unsteady_reasons({"step_time_cv": 0.11})) == 1
    assert unsteady_reasons({"warmup_drift": 0.3, "warmup_drift_p": 0.2}) == []  # not significant
    assert len(unsteady_reasons({"warmup_drift": 0.06, "warmup_drift_p": 0.01})) == 1
    assert len(unsteady_reasons({"warmup_drift": 0.04, "warmup_drift_p": 0.001})) == 0
    assert "54% apart" in unsteady_reasons({"rank_cpu_spread": 0.54})[0]


def test_ratio_interval_and_how_an_estimate_is_shown():
    # logs on .1, .3 (mean .2), off 0, .2 (mean .1); variances .02 each, / 2 -> .01; se = sqrt(.02) = .141421
    # Welch df = .02^2 / (.01^2 + .01^2) = 2; t(.975, 2) = 4.3027 -> .1 +- .60849 -> e^-.50849 = .60142,
    # e^.70849 = 2.0309
    lo, hi = ratio_interval([math.exp(0.1), math.exp(0.3)], [1.0, math.exp(0.2)])
    assert lo == pytest.approx(0.60142, rel=1e-4)
    assert hi == pytest.approx(2.0309, rel=1e-4)
    assert resolved(0.105, lo - 1, hi - 1) == "below what this run can resolve (-39.9% … +103.1%)"
    assert resolved(-0.24, None, None) == "below what this run can resolve (no interval)"
    assert resolved(0.2, 0.1, 0.3) == "+20.0% (+10.0% … +30.0%)"
    assert resolved(None, None, None) == "-"
    assert ratio_interval([1.0], [1.0, 2.0]) is None


def test_capture_cost_interval_uses_the_ratio_interval_at_both_ends():
    m = capture_cost.analysis(ctx(ROWS)).metrics
    # on .12, .13; off .10, .11, .10, .10 (test_capture_cost); calls .232; extra time at ratio r:
    # (2 * .10 * (r - 1) + .232) / (2 * .10 * r + 4 * .10 + .232)
    lo, hi = ratio_interval([0.12, 0.13], [0.10, 0.11, 0.10, 0.10])
    assert m["capture_cost_low"] == pytest.approx((0.2 * (lo - 1) + 0.232) / (0.2 * lo + 0.632))
    assert m["capture_cost_high"] == pytest.approx((0.2 * (hi - 1) + 0.232) / (0.2 * hi + 0.632))
    assert m["capture_cost_low"] < m["capture_cost"] < m["capture_cost_high"]


def test_thread_settings_validate_and_leave_old_config_keys_alone():
    from perfbench.run.config import config_key, parse_config
    from perfbench.errors import ConfigError

    base = {"name": "s", "workload": "resnet50"}
    plan = parse_config(base).plan()[0]
    rc = dict(
        plan.run_config,
        train={k: v for k, v in plan.run_config["train"].items() if k not in ("kernel_threads", "dispatch_threads")},
    )
    assert config_key(rc) == plan.config_key  # a run stored before the keys existed keeps its key
    set_ = parse_config(dict(base, train={"kernel_threads": 1})).plan()[0]
    assert set_.config_key != plan.config_key and set_.run_config["train"]["kernel_threads"] == 1
    with pytest.raises(ConfigError, match="kernel_threads"):
        parse_config(dict(base, train={"kernel_threads": 0}))
    keep = parse_config(dict(base, train={"dispatch_threads": "mindspore"})).plan()[0]
    assert keep.run_config["train"]["dispatch_threads"] == "mindspore"
