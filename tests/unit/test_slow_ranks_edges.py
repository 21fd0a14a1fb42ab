"""The straggler test's limits, each exactly at its constant (docs/analyzers.md, slow ranks): a pair's
last-arrival share at PAIR_LAST_SHARE, its lateness share at PAIR_LATENESS_SHARE (and with under 1 ms of lateness
in all), the practical floor (10 % of the block's collective time, or MIN_LATENESS_MS when that time is 0), and
the column types. Lateness values are binary fractions, so every share below is exact; the expected outcome
follows from the rule ("at least" the constant) by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyzers.analyses.slow_ranks import (
    MIN_LATENESS_MS,
    MIN_LATENESS_SHARE,
    PAIR_LAST_SHARE,
    PAIR_LATENESS_SHARE,
    find_slow_ranks,
)


def _pair(steps: list[tuple[float, float]], elapse: float = 10.0, names=("a",)) -> pd.DataFrame:
    """steps[i] = (wait of rank 0, wait of rank 1) at every collective of step i."""
    return pd.DataFrame(
        [
            {"rank": r, "step": i, "op_name": n, "group": "g", "wait_ms": w, "elapse_ms": elapse, "transit_ms": 1.0}
            for i, ws in enumerate(steps)
            for n in names
            for r, w in enumerate(ws)
        ]
    )


def _rank1(res):
    return res[(res["scope"] == "group") & (res["rank"] == 1)].iloc[0]


def test_last_in_exactly_three_quarters_with_a_significant_sign_test_is_slow():
    # rank 1 last in 15 of 20: share 0.75 = PAIR_LAST_SHARE; P[X >= 15 | 20, 1/2] = 21700 / 2^20 = 0.0207 < 0.05;
    # lateness 4 ms x 15 vs 4 ms x 5 (time share 0.75 < 0.9); mean lateness 3 vs 1 ms: excess 2 >= floor 1 ms
    assert sum(math.comb(20, i) for i in range(15, 21)) / 2**20 == pytest.approx(0.0207, abs=1e-4)
    g = _rank1(find_slow_ranks(_pair([(4.0, 0.0)] * 15 + [(0.0, 4.0)] * 5)))
    assert g["test"] == "pair" and g["statistic"] == PAIR_LAST_SHARE and g["critical"] == PAIR_LAST_SHARE
    assert bool(g["slow"])


def test_a_lateness_share_of_exactly_nine_tenths_is_slow():
    # two collectives a step, 2 steps: at "a" rank 1 is 4.5 ms late, at "b" rank 0 is 0.5 ms late. Last in 2 of 4
    # (no count evidence); lateness 9 of 10 ms = 0.9 = PAIR_LATENESS_SHARE; excess 2.25 - 0.25 = 2 >= 0.1 ms
    rows = []
    for step in range(2):
        for name, w0, w1 in (("a", 4.5, 0.0), ("b", 0.0, 0.5)):
            rows += [
                {"rank": r, "step": step, "op_name": name, "group": "g", "wait_ms": w, "elapse_ms": 1.0}
                for r, w in ((0, w0), (1, w1))
            ]
    g = _rank1(find_slow_ranks(pd.DataFrame(rows)))
    assert g["statistic"] == PAIR_LATENESS_SHARE and g["critical"] == PAIR_LATENESS_SHARE and bool(g["slow"])


def test_a_lateness_share_counts_when_all_lateness_is_under_a_millisecond():
    # the same shape with 15/32 and 1/32 ms: lateness 15/16 of a block total of exactly 1 ms
    rows = []
    for step in range(2):
        for name, w0, w1 in (("a", 15 / 32, 0.0), ("b", 0.0, 1 / 32)):
            rows += [
                {"rank": r, "step": step, "op_name": name, "group": "g", "wait_ms": w, "elapse_ms": 1.0}
                for r, w in ((0, w0), (1, w1))
            ]
    g = _rank1(find_slow_ranks(pd.DataFrame(rows)))
    assert g["statistic"] == 15 / 16 and bool(g["slow"])


def test_lateness_exactly_at_the_floor_is_slow():
    # last in 10 of 10 (P = 1/1024), 1 ms late each time; floor = 10 % of the 10 ms collective = 1 ms
    assert MIN_LATENESS_SHARE * 10.0 == 1.0
    g = _rank1(find_slow_ranks(_pair([(1.0, 0.0)] * 10, elapse=10.0)))
    assert g["mean_lateness_ms"] == 1.0 and bool(g["slow"])
    g = _rank1(find_slow_ranks(_pair([(0.5, 0.0)] * 10, elapse=10.0)))  # half the floor
    assert not bool(g["slow"])


def test_without_collective_time_the_floor_is_min_lateness_ms():
    late = MIN_LATENESS_MS / 2  # under the absolute floor: not slow, although 10 % of 0 ms would be 0
    g = _rank1(find_slow_ranks(_pair([(late, 0.0)] * 10, elapse=0.0)))
    assert not bool(g["slow"])
    g = _rank1(find_slow_ranks(_pair([(MIN_LATENESS_MS, 0.0)] * 10, elapse=0.0)))
    assert bool(g["slow"])


def test_one_instance_has_a_last_share_of_one():
    # one step, two collectives: each collective's block has one instance, last 1 of 1 (share 1.0, P = 1/2: no
    # count evidence; the lateness-share test is the group scope's only)
    res = find_slow_ranks(_pair([(4.0, 0.0)], names=("a", "b")))
    col = res[(res["scope"] == "collective") & (res["rank"] == 1)]
    assert list(col["n_ops"]) == [1, 1] and list(col["statistic"]) == [1.0, 1.0] and not col["slow"].any()


def test_column_types():
    res = find_slow_ranks(_pair([(4.0, 0.0)] * 10 + [(0.0, 1.0)]))
    assert res["slow"].dtype == bool
    assert res["statistic"].dtype == float and res["critical"].dtype == float
    # the rank that is not the block's top is not tested: statistic unknown (NaN), not 0
    r0 = res[(res["scope"] == "group") & (res["rank"] == 0)].iloc[0]
    assert math.isnan(r0["statistic"]) and math.isnan(r0["critical"])
    assert PAIR_LATENESS_SHARE == 0.9 and PAIR_LAST_SHARE == 0.75


def test_outlier_tests_need_more_than_their_critical_value():
    from analyzers.analyses.slow_ranks import DIXON_Q95, SIGMA_THRESHOLD, _outlier_test

    # Dixon's Q of [0, 0.03, 1] = (1 - 0.03) / 1 = 0.97 = the n = 3 critical value: not an outlier; just above is
    assert _outlier_test([0.0, 0.03, 1.0]) == ("dixon_q", 0.97, DIXON_Q95[3], False)
    assert _outlier_test([0.0, 0.02, 1.0])[3] is True
    # 3 sigma: ten others at -1 / +1 (mean 0, sd sqrt(10/9)) and a top of exactly 3 sd: z = 3, not beyond
    sd = math.sqrt(10 / 9)
    assert _outlier_test([-1.0] * 5 + [1.0] * 5 + [3 * sd]) == ("3sigma", 3.0, SIGMA_THRESHOLD, False)
    assert _outlier_test([-1.0] * 5 + [1.0] * 5 + [3.1 * sd])[3] is True


def test_sign_test_beyond_2000_is_the_normal_approximation():
    from analyzers.analyses.slow_ranks import sign_test_p

    # n = 2001: z = (k - 0.5 - n / 2) / sqrt(n / 4) with continuity correction, P = 1 - Phi(z)
    z = (1050 - 0.5 - 1000.5) / math.sqrt(2001 / 4)
    assert sign_test_p(1050, 2001) == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert sign_test_p(1050, 2001) != pytest.approx(0.0142206, rel=1e-4)  # the exact tail differs in the 4th digit
    assert sign_test_p(0, 3000) == 1.0 and sign_test_p(0, 10) == 1.0  # no last arrival: no evidence at all
