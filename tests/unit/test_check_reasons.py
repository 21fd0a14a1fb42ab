"""The CI gate's per-metric decision (`decide_metric`) beyond the verdict table in test_check_table.py: the
fields and the reason a user reads, a higher-is-better share (kernel_utilization), the change exactly at the
threshold, the between-run margin of shares (in points, not on the log scale), a metric the catalogue does not
know, and the fallback to one value per repeat at exactly MIN_SAMPLES. Every expected number is computed here
by hand from docs/check.md's rule (Mann-Whitney p < alpha AND worse than max(threshold, noise floor))."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from perfbench.regress.check import MIN_SAMPLES, decide_metric

#: exact two-sided Mann-Whitney p of two fully separated samples of 8 without ties: 2 / C(16, 8)
P_SEPARATED_8 = 2 / math.comb(16, 8)


def _e(samples=None, metric="comm_share", value=None):
    return {
        "samples": {metric: samples} if samples is not None else {},
        "metrics": {metric: value} if value is not None else {},
    }


def _cluster(center, step=0.001, n=8):
    return [center + step * (i - (n - 1) / 2) for i in range(n)]


def test_a_higher_is_better_share_that_drops_is_a_regression_in_points():
    base, cur = _cluster(0.80), _cluster(0.60)
    r = decide_metric(
        "kernel_utilization", [_e(base, "kernel_utilization")], [_e(cur, "kernel_utilization")], 0.05, 0.05
    )
    assert r["verdict"] == "regression"
    assert r["higher_is_better"] is True and r["unit"] == "share"
    assert r["change_kind"] == "points"
    assert r["change"] == pytest.approx(-0.20) and r["worse_by"] == pytest.approx(0.20)
    assert r["threshold_used"] == pytest.approx(0.05) and r["noise_floor"] == 0.0
    assert r["p_value"] == pytest.approx(P_SEPARATED_8)
    assert r["alpha"] == 0.05 and r["basis"] == "steps"
    assert (r["n_baseline"], r["n_current"], r["repeats_baseline"], r["repeats_current"]) == (8, 8, 1, 1)
    assert r["reason"] == f"p={P_SEPARATED_8:.3g} < 0.05, worse by 20.0pt > 5.0pt"


def test_a_higher_is_better_share_that_rises_is_an_improvement():
    base, cur = _cluster(0.60), _cluster(0.80)
    r = decide_metric(
        "kernel_utilization", [_e(base, "kernel_utilization")], [_e(cur, "kernel_utilization")], 0.05, 0.05
    )
    assert r["verdict"] == "improvement" and r["worse_by"] == pytest.approx(-0.20)
    assert r["reason"] == f"p={P_SEPARATED_8:.3g} < 0.05, better by 20.0pt > 5.0pt"


def test_a_ratio_metric_reason_is_in_percent():
    base, cur = _cluster(1.0, 0.001), _cluster(1.5, 0.001)
    r = decide_metric("step_time_s", [_e(base, "step_time_s")], [_e(cur, "step_time_s")], 0.05, 0.05)
    assert r["verdict"] == "regression" and r["change_kind"] == "relative"
    assert r["reason"] == f"p={P_SEPARATED_8:.3g} < 0.05, worse by 50.0% > 5.0%"


def test_unchanged_names_both_reasons():
    same = [0.5] * 8  # identical samples: Mann-Whitney p = 1 (docs: no difference at all)
    r = decide_metric("comm_share", [_e(same)], [_e(list(same))], 0.05, 0.05)
    assert r["verdict"] == "unchanged" and r["p_value"] == 1.0 and r["change"] == 0.0
    assert r["reason"] == "p=1 ≥ 0.05; |change| ≤ 5.0pt"
    assert r["ci_mean_diff"] == [0.0, 0.0]  # no spread on either side: the difference is exactly 0
    r = decide_metric("step_time_s", [_e(same, "step_time_s")], [_e(list(same), "step_time_s")], 0.05, 0.05)
    assert r["reason"] == "p=1 ≥ 0.05; |change| ≤ 5.0%"


def test_significant_but_small_gives_only_the_size_reason():
    base, cur = _cluster(0.30), _cluster(0.32)  # 2 points, separated: significant, under the 5-point threshold
    r = decide_metric("comm_share", [_e(base)], [_e(cur)], 0.05, 0.05)
    assert r["verdict"] == "unchanged" and r["reason"] == "|change| ≤ 5.0pt"


@pytest.mark.parametrize("cur,verdict", [(0.75, "unchanged"), (0.25, "unchanged"), (0.875, "regression")])
def test_a_change_exactly_at_the_threshold_is_not_enough(cur, verdict):
    # 0.5 -> 0.75 is exactly 0.25 points (binary fractions: no rounding); the rule says "worse than" the threshold
    r = decide_metric("comm_share", [_e([0.5] * 8)], [_e([cur] * 8)], 0.25, 0.05)
    assert r["verdict"] == verdict
    assert r["threshold_used"] == 0.25 and abs(r["worse_by"]) == abs(cur - 0.5)
    if verdict == "unchanged":
        assert r["reason"] == "|change| ≤ 25.0pt"


def test_p_exactly_at_alpha_is_not_significant():
    base, cur = _cluster(1.0), _cluster(2.0)
    p = float(stats.mannwhitneyu(base, cur, alternative="two-sided").pvalue)
    r = decide_metric("step_time_s", [_e(base, "step_time_s")], [_e(cur, "step_time_s")], 0.05, p)
    assert r["verdict"] == "unchanged" and r["reason"].startswith(f"p={p:.3g} ≥ ")


#: t_{0.975, df} from the tables
T975 = {2: 4.302652729911275, 3: 3.182446305284263}


def _margin(b_meds, c_meds):
    """t_{0.975, df} * pooled s * sqrt(1/n_b + 1/n_c), df = n_b + n_c - 2 (docs/check.md, between-run margin)."""
    ss = sum((x - sum(m) / len(m)) ** 2 for m in (b_meds, c_meds) for x in m)
    df = len(b_meds) + len(c_meds) - 2
    return T975[df] * math.sqrt(ss / df) * math.sqrt(1 / len(b_meds) + 1 / len(c_meds))


def test_the_share_noise_floor_is_the_between_run_margin_in_points():
    # two baseline repeats (medians 0.30 / 0.34) and three current ones (0.50 / 0.52 / 0.51): ss = 0.001, df = 3
    b_meds, c_meds = (0.30, 0.34), (0.50, 0.52, 0.51)
    margin = _margin(b_meds, c_meds)
    assert margin == pytest.approx(3.182446 * math.sqrt(0.001 / 3) * math.sqrt(5 / 6))  # 0.0530 > the 0.04 range
    base = [_e(_cluster(m)) for m in b_meds]
    cur = [_e(_cluster(m)) for m in c_meds]
    r = decide_metric("comm_share", base, cur, 0.05, 0.05)
    assert r["noise_floor"] == pytest.approx(margin) and r["threshold_used"] == pytest.approx(margin)
    # pooled medians 0.32 and 0.51: 19 points worse, beyond the margin (on the log scale it would be 0.15)
    assert r["worse_by"] == pytest.approx(0.19) and r["verdict"] == "regression"


def test_the_ratio_noise_floor_is_the_between_run_margin_of_the_log_medians():
    # step times under 1 s (their logs are negative): medians 0.50 / 0.55 and 0.80 / 0.88 / 0.84
    b_meds, c_meds = (0.50, 0.55), (0.80, 0.88, 0.84)
    factor = math.exp(_margin([math.log(v) for v in b_meds], [math.log(v) for v in c_meds]))
    assert factor > 0.55 / 0.50  # the margin, not the 10% range of the repeats, sets the floor
    base = [_e(_cluster(m), "step_time_s") for m in b_meds]
    cur = [_e(_cluster(m), "step_time_s") for m in c_meds]
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["noise_floor"] == pytest.approx(factor - 1.0) and r["threshold_used"] == pytest.approx(factor - 1.0)


def test_a_metric_the_catalogue_does_not_know_is_a_lower_is_better_ratio():
    base, cur = _cluster(10.0, 0.01), _cluster(13.0, 0.01)
    r = decide_metric("my_latency", [_e(base, "my_latency")], [_e(cur, "my_latency")], 0.05, 0.05)
    assert (r["higher_is_better"], r["unit"], r["change_kind"]) == (False, "", "relative")
    assert r["verdict"] == "regression" and r["change"] == pytest.approx(0.3)


def test_exactly_min_samples_repeat_values_fall_back_to_repeats():
    assert MIN_SAMPLES == 3
    base = [_e(None, "step_time_s", v) for v in (1.00, 1.01, 1.02)]
    cur = [_e(None, "step_time_s", v) for v in (1.50, 1.51, 1.52)]
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["basis"] == "repeats" and (r["n_baseline"], r["n_current"]) == (3, 3)
    assert r["baseline"] == 1.01 and r["current"] == 1.51
    short = decide_metric("step_time_s", base[:2], cur, 0.05, 0.05)
    assert short["verdict"] == "undecided" and short["reason"] == "too few samples (baseline 2, current 3; need 3)"
    short = decide_metric("step_time_s", base, cur[:2], 0.05, 0.05)
    assert short["verdict"] == "undecided" and short["reason"] == "too few samples (baseline 3, current 2; need 3)"
