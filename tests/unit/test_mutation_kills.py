"""Closed-form cases for the metric code that mutation testing (`make mutation`) found unchecked: the
collective statistics (sync ratio, per-rank totals, per-type summary, bandwidth per transport), the expert
load balance at its edges, and the collectives analysis through the registry. Expected values by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import analyzers
from analyzers.analyses.breakdown import reconcile
from analyzers.analyses.collectives import bandwidth_wide, busbw_factor, comm_op_stats, per_type_summary, rank_totals
from analyzers.analyses.experts import expert_load, mean_expert_cv
from analyzers.schema import COMM_BANDWIDTH, COMM_OPS, Profile, conform


def _co(rows):
    cols = [
        "rank",
        "step",
        "op_name",
        "op_type",
        "group",
        "group_size",
        "start_us",
        "elapse_ms",
        "transit_ms",
        "wait_ms",
        "synchronization_ms",
        "idle_ms",
        "size_bytes",
    ]
    return conform(pd.DataFrame(rows, columns=cols), COMM_OPS)


OPS = _co(
    [
        # rank, step, name, type, group, n, start, elapse, transit, wait, sync, idle, bytes
        (0, 1, "ar1", "allreduce", "g", 2, 0.0, 10.0, 6.0, 2.0, 1.0, 0.5, 4e8),
        (0, 1, "ag1", "AllGather", "g", 2, 50.0, 4.0, 3.0, 1.0, 3.0, 0.0, 1e8),
        (1, 1, "ar1", "allreduce", "g", 2, 0.0, 10.0, 8.0, 0.0, 0.0, 1.0, 4e8),
        (1, 1, "ag1", "AllGather", "g", 2, 50.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e8),  # zero time
    ]
)


def test_comm_op_stats_by_hand():
    out = comm_op_stats(OPS)
    # algbw = bytes / 1e9 / seconds; busbw = algbw x factor (allreduce 2(n-1)/n = 1, allgather (n-1)/n = 0.5)
    assert out["algbw_gbps"].iloc[0] == pytest.approx(4e8 / 1e9 / 0.010)  # 40 GB/s
    assert out["busbw_gbps"].iloc[0] == pytest.approx(40.0)
    assert out["algbw_gbps"].iloc[1] == pytest.approx(1e8 / 1e9 / 0.004)  # 25 GB/s
    assert out["busbw_gbps"].iloc[1] == pytest.approx(12.5)
    assert math.isnan(out["algbw_gbps"].iloc[3]) and math.isnan(out["busbw_gbps"].iloc[3])  # 0 ms: unknown
    # wait ratio = wait / (wait + transit); sync ratio = sync / (sync + transit); 0 / 0 -> 0
    assert list(out["wait_ratio"]) == pytest.approx([0.25, 0.25, 0.0, 0.0])
    assert list(out["sync_ratio"]) == pytest.approx([1 / 7, 0.5, 0.0, 0.0])
    assert out["sync_ratio"].dtype == float and out["wait_ratio"].dtype == float


def test_comm_op_stats_keeps_the_profilers_wait_ratio_and_leaves_unknown_times_unknown():
    co = OPS.copy()
    co["wait_ratio"] = [0.9, np.nan, np.nan, np.nan]  # the profiler's own value wins where it has one
    co.loc[2, ["wait_ms", "transit_ms", "synchronization_ms"]] = np.nan
    out = comm_op_stats(co)
    assert out["wait_ratio"].iloc[0] == pytest.approx(0.9) and out["wait_ratio"].iloc[1] == pytest.approx(0.25)
    assert math.isnan(out["wait_ratio"].iloc[2]) and math.isnan(out["sync_ratio"].iloc[2])


def test_comm_op_stats_of_nothing_has_the_columns():
    out = comm_op_stats(conform(pd.DataFrame(columns=list(COMM_OPS)), COMM_OPS))
    assert len(out) == 0
    for c in ("algbw_gbps", "busbw_gbps", "wait_ratio", "sync_ratio"):
        assert c in out.columns and out[c].dtype == "float64"


def test_busbw_factor_edges():
    assert busbw_factor("AllReduce", 4) == pytest.approx(1.5)  # op types are matched case-insensitively
    assert busbw_factor("alltoallv", 4) == pytest.approx(0.75)
    for n in (0, -1, "x", None):
        assert math.isnan(busbw_factor("allreduce", n))
    assert math.isnan(busbw_factor("barrier", 8))


def test_per_type_summary_by_hand():
    s = per_type_summary(comm_op_stats(OPS)).set_index("op_type")
    assert list(s.index) == ["allreduce", "AllGather"]  # by total time, largest first
    assert s.loc["allreduce", "count"] == 2 and s.loc["allreduce", "elapse_ms_total"] == pytest.approx(20.0)
    assert s.loc["allreduce", "elapse_ms_mean"] == pytest.approx(10.0)
    assert s.loc["allreduce", "wait_ratio_mean"] == pytest.approx(0.125)
    assert s.loc["AllGather", "busbw_gbps_mean"] == pytest.approx(12.5)  # mean skips the unknown one
    empty = per_type_summary(OPS.iloc[:0])
    assert len(empty) == 0 and "busbw_gbps_mean" in empty.columns


def _bw(rows):
    return conform(
        pd.DataFrame(rows, columns=["rank", "step", "op_name", "transport", "size_mb", "time_ms", "bandwidth_gbps"]),
        COMM_BANDWIDTH,
    )


BW = _bw(
    [
        (0, 1, "ar1", "HCCS", 100.0, 10.0, 10.0),
        (0, 1, "ag1", "HCCS", 50.0, 10.0, 5.0),
        (0, 1, "ar1", "RDMA", 10.0, 0.0, 0.0),
        (1, 1, "ar1", "HCCS", 30.0, 3.0, 10.0),
    ]
)


def test_rank_totals_by_hand():
    t = rank_totals(comm_op_stats(OPS), BW).set_index("rank")
    r0 = t.loc[0]
    assert r0["ops"] == 2 and r0["elapse_ms"] == pytest.approx(14.0) and r0["transit_ms"] == pytest.approx(9.0)
    assert r0["wait_ms"] == pytest.approx(3.0) and r0["synchronization_ms"] == pytest.approx(4.0)
    assert r0["idle_ms"] == pytest.approx(0.5)
    assert r0["wait_ratio"] == pytest.approx(3 / 12) and r0["sync_ratio"] == pytest.approx(4 / 13)
    # per transport: summed size / summed time (MB/ms = GB/s); 0 ms -> unknown (NaN, never 0)
    assert r0["HCCS_size_mb"] == pytest.approx(150.0) and r0["HCCS_time_ms"] == pytest.approx(20.0)
    assert r0["HCCS_bandwidth_gbps"] == pytest.approx(7.5) and math.isnan(r0["RDMA_bandwidth_gbps"])
    r1 = t.loc[1]
    assert r1["wait_ratio"] == 0.0 and r1["sync_ratio"] == 0.0 and r1["HCCS_bandwidth_gbps"] == pytest.approx(10.0)
    assert (t["group"] == "g").all()
    assert list(rank_totals(None, None).columns)[:3] == ["group", "rank", "step"]
    assert len(rank_totals(OPS.iloc[:0], BW)) == 0


def test_bandwidth_wide_by_hand():
    w = bandwidth_wide(BW).set_index(["rank", "op_name"])
    assert w.loc[(0, "ar1"), "HCCS_gbps"] == pytest.approx(10.0) and w.loc[(0, "ar1"), "RDMA_gbps"] == 0.0
    assert math.isnan(w.loc[(1, "ar1"), "RDMA_gbps"])
    assert list(bandwidth_wide(None).columns) == ["rank", "step", "op_name"]


def test_collectives_analysis_through_the_registry():
    prof = Profile(source="test", path="-", comm_ops=OPS, comm_bandwidth=BW)
    a = analyzers.analyze(prof)
    assert a.summary["comm_wait_ratio"] == pytest.approx(0.125)  # mean of 0.25, 0.25, 0, 0
    types = a.tables["comm_types"].set_index("op_type")
    assert types.loc["allreduce", "count"] == 2
    assert a.tables["comm_rank_totals"].set_index("rank").loc[0, "HCCS_bandwidth_gbps"] == pytest.approx(7.5)
    assert a.tables["comm_ops"]["busbw_gbps"].iloc[0] == pytest.approx(40.0)


# ---- expert load ---------------------------------------------------------------------------------------------------


def _ws(rows):
    return pd.DataFrame(rows, columns=["rank", "step", "tokens_per_expert", "dropped_tokens"])


def test_expert_load_by_hand():
    ws = _ws(
        [
            (0, 0, [9, 9, 9, 9], 0),
            (0, 1, [3, 1, 0, 0], 1),
            (1, 1, "[1, 3, 0, 4]", 2),
            (0, 2, [2, 2, 2, 2], 0),
            (1, 2, [2, 2, 2, 2], None),
        ]
    )
    t = expert_load(ws, warmup_steps=1).set_index("step")
    assert list(t.index) == [1, 2]  # step 0 is warm-up
    s1 = t.loc[1]  # load = [4, 4, 0, 4]: mean 3, max 4, std sqrt(3)
    assert s1["ranks"] == 2 and s1["experts"] == 4 and s1["total_tokens"] == 12
    assert s1["min_load"] == 0 and s1["max_load"] == 4 and s1["mean_load"] == 3
    assert s1["max_mean_ratio"] == pytest.approx(4 / 3) and s1["cv"] == pytest.approx(math.sqrt(3) / 3)
    assert s1["dropped_tokens"] == 3 and s1["dropped_fraction"] == pytest.approx(3 / 12)
    assert s1["busiest_expert"] == 0
    s2 = t.loc[2]
    assert s2["cv"] == 0.0 and s2["max_mean_ratio"] == 1.0 and s2["dropped_tokens"] == 0
    assert mean_expert_cv(t.reset_index()) == pytest.approx((math.sqrt(3) / 3) / 2)


def test_expert_load_edges():
    assert expert_load(None) is None and expert_load(pd.DataFrame()) is None
    assert expert_load(pd.DataFrame({"rank": [0], "step": [0]})) is None
    # no token routed: balance unknown (NaN), not 0
    t = expert_load(_ws([(0, 0, [0, 0], 0)]))
    assert math.isnan(t["cv"].iloc[0]) and math.isnan(t["max_mean_ratio"].iloc[0])
    assert math.isnan(t["dropped_fraction"].iloc[0])
    # without a dropped_tokens column the drops are unknown
    t = expert_load(pd.DataFrame({"rank": [0], "step": [0], "tokens_per_expert": [[1, 3]]}))
    assert math.isnan(t["dropped_tokens"].iloc[0]) and math.isnan(t["dropped_fraction"].iloc[0])
    assert t["busiest_expert"].iloc[0] == 1 and list(t.columns)[0] == "step"
    # ranks disagreeing on the number of experts: that step is skipped; empty/garbage lists are skipped
    assert expert_load(_ws([(0, 0, [1, 2], 0), (1, 0, [1, 2, 3], 0)])) is None
    assert expert_load(_ws([(0, 0, [], 0), (1, 0, "not json", 0), (2, 0, float("nan"), 0)])) is None
    t = expert_load(_ws([(0, 3, [1, 1], 0), (0, 2, [2, 0], 0)]))
    assert list(t["step"]) == [2, 3]  # in step order
    assert mean_expert_cv(None) is None and mean_expert_cv(t.iloc[:0]) is None


def test_expert_load_cv_through_the_registry():
    ws = _ws([(0, s, [3, 1], 0) for s in range(3)]).assign(step_time_s=0.1, samples=4)
    a = analyzers.analyze(None, workload_steps=ws, config={"world_size": 1, "train": {"warmup_steps": 1}})
    assert a.summary["expert_load_cv"] == pytest.approx(0.5)  # load [3, 1]: std 1 / mean 2
    assert list(a.tables["experts"]["step"]) == [1, 2]


# ---- run rows, directions, compare statistics, group matching, pipeline bubble (survivors of `make mutation`) -------


def test_ls_row_carries_every_field_of_the_record():
    from perfbench.views.results import summarize

    metrics = {
        "throughput": 10.0,
        "step_time_s": 0.5,
        "computing_s": 0.3,
        "communication_not_overlapped_s": 0.1,
        "overlapped_s": 0.05,
        "free_s": 0.1,
        "comm_share": 0.25,
        "kernel_utilization": 0.6,
        "collectives_per_step": 161.0,
        "comm_bytes_per_step": 1e6,
        "bubble_fraction": 0.2,
        "expert_load_cv": 0.3,
        "dropped_tokens_per_step": 7.0,
        "loss_first": 2.3,
        "loss_last": 1.1,
    }
    rec = {
        "run_id": "r2",
        "sweep_id": "sw",
        "source": "sweep",
        "status": "ok",
        "error": "none really",
        "settings": {"world_size": 2},
        "config_key": "K",
        "metrics": metrics,
    }
    one = {
        "run_id": "r1",
        "status": "ok",
        "settings": {"world_size": 1},
        "config_key": "K",
        "metrics": {"throughput": 4.0},
    }
    (row,) = summarize([rec], context=[one, rec])  # the baseline comes from the context
    from analyzers.catalogue import METRICS

    unknown = {name: None for name in METRICS}  # every catalogue metric is a field; unknown ones are null
    assert row == {
        "run_id": "r2",
        "sweep_id": "sw",
        "source": "sweep",
        "status": "ok",
        "error": "none really",
        "settings": {"world_size": 2},
        **unknown,
        **metrics,
        "scaling_efficiency": pytest.approx(10.0 / (2 * 4.0)),
        "threads_per_rank": None,  # the record does not say (no env): unknown, and so no like-with-like verdict
        "scaling_not_comparable": None,
        "unsteady": [],
        "input_problems": [],
    }
    # ranks with 1 thread each against a 1-rank baseline that had 2: the scaling is not like with like
    pinned, wide = dict(rec, env={"threads_per_rank": 1}), dict(one, env={"threads_per_rank": 2})
    (row,) = summarize([pinned], context=[wide, pinned])
    assert row["threads_per_rank"] == 1
    assert row["scaling_not_comparable"] == "its ranks had 1 thread(s) each, the 1-rank baseline 2"
    (row,) = summarize([pinned], context=[dict(one, env={"threads_per_rank": 1}), pinned])
    assert row["scaling_not_comparable"] is None
    problem = {"rank": 0, "file": "step_trace_time.csv", "problem": "empty"}
    (row,) = summarize([dict(rec, input_problems=[problem])])
    assert row["input_problems"] == [problem]
    (row,) = summarize([dict(rec, metrics=dict(metrics, rank_cpu_spread=0.5))])  # ranks at two speeds: said why
    assert row["unsteady"] == ["ranks' CPU time per step 50% apart"]
    (row,) = summarize([rec])  # without the context there is no 1-rank run
    assert row["scaling_efficiency"] is None
    (row,) = summarize([{"run_id": "x", "status": "ok", "metrics": None}])  # a bare record: unknowns, no crash
    assert row["settings"] == {} and row["throughput"] is None
    from perfbench.views.results import baselines

    assert baselines([{"run_id": "y", "status": "ok", "config_key": "K", "metrics": {"throughput": 1.0}}]) == {}


@pytest.mark.parametrize(
    "better,before,after,worse",
    [
        ("higher", 10, 9, True),
        ("higher", 10, 10, False),
        ("higher", 10, 11, False),
        ("lower", 10, 11, True),
        ("lower", 10, 10, False),
        ("lower", 10, 9, False),
        (None, 10, 11, False),
        (None, 10, 9, False),
    ],
)
def test_metric_worse_by_direction(better, before, after, worse):
    from analyzers.catalogue import Metric, metric

    assert Metric("m", "m", "s", better, "d").worse(before, after) is worse
    assert metric("throughput").worse(100, 50) and metric("step_time_s").worse(0.1, 0.2)
    with pytest.raises(KeyError, match="not in the metric catalogue"):
        metric("no_such_metric")


def test_metric_delta_by_hand():
    from perfbench.regress.compare import metric_delta

    r = metric_delta("step_time_s", [1.0, 2.0, 3.0], [])
    assert r == {
        "metric": "step_time_s",
        "unit": "s",
        "higher_is_better": False,
        "n_a": 3,
        "n_b": 0,
        "a": 2.0,
        "b": None,
        "delta": None,
        "rel": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
    }
    r = metric_delta("throughput", [], [4.0])
    assert r["a"] is None and r["b"] == 4.0 and r["higher_is_better"] is True and r["unit"] == "samples/s"
    r = metric_delta("no_such_metric", [1.0, 2.0], [3.0, 5.0], level=0.5)
    assert r["higher_is_better"] is False and r["unit"] == ""
    assert r["a"] == 1.5 and r["b"] == 4.0 and r["rel"] == pytest.approx(2.5 / 1.5)  # medians, not means
    # the interval of the change of the medians: scipy's percentile bootstrap (seed 0), inside what resampled
    # medians can give ({1, 1.5, 2} and {3, 4, 5}: differences 1 to 4)
    ref = stats.bootstrap(
        (np.array([1.0, 2.0]), np.array([3.0, 5.0])),
        lambda x, y, axis=-1: np.median(y, axis=axis) - np.median(x, axis=axis),
        vectorized=True,
        paired=False,
        n_resamples=4999,
        method="percentile",
        confidence_level=0.5,
        random_state=0,
    ).confidence_interval
    assert r["ci_abs"] == pytest.approx([ref.low, ref.high])
    assert 1.0 <= r["ci_abs"][0] <= 2.5 <= r["ci_abs"][1] <= 4.0
    assert r["ci_low"] == pytest.approx(ref.low / 1.5) and r["ci_high"] == pytest.approx(ref.high / 1.5)
    r = metric_delta("step_time_s", [1.0, 1.0, 10.0], [2.0, 2.0, 2.0])  # an outlier moves the mean, not the median
    assert r["a"] == 1.0 and r["b"] == 2.0 and r["rel"] == pytest.approx(1.0)
    r = metric_delta("step_time_s", [0.0, 0.0], [1.0, 2.0])  # median 0: no relative change, no relative interval
    assert r["rel"] is None and r["ci_low"] is None and r["ci_high"] is None and r["delta"] == 1.5


def test_welch_ci_needs_two_samples_a_side():
    from analyzers.stats import welch_ci

    assert welch_ci([1, 2], [3, 5]) is not None and welch_ci([1, 2], [3]) is None and welch_ci([1], [3, 4]) is None
    lo, hi = welch_ci([1, 2], [3, 5])
    assert lo < 2.5 < hi and (lo + hi) / 2 == pytest.approx(2.5)
    assert welch_ci([1.0, 1.0], [2.0, 2.0]) == (1.0, 1.0)  # no spread: the difference itself


def test_group_matching_prefers_the_exact_group():
    from perfbench.regress.check import Group, group_key, match_groups

    base = [Group({"ws": 2}), Group({"ws": 2, "fusion": 0})]
    (pair,) = match_groups(base, [Group({"ws": 2, "fusion": 0})], direct=False)
    assert pair[0] is base[1]  # both agree on the common keys; the exact one wins
    twins = [Group({"ws": 2, "fusion": 0}), Group({"ws": 2, "fusion": 0})]
    assert match_groups(twins, [Group({"ws": 2, "fusion": 0})], direct=False)[0][0] == "ambiguous"
    assert group_key({"model": {"a": 1, "b": 2}}) == group_key({"model": {"b": 2, "a": 1}})


def test_pipeline_bubble_helpers():
    from analyzers.analyses.pipeline import ideal_bubble_fraction, mean_bubble_fraction

    assert ideal_bubble_fraction(2, 4) == pytest.approx(1 / 5) and ideal_bubble_fraction(1, 8) == 0.0
    assert ideal_bubble_fraction(4, 4) == pytest.approx(3 / 7)
    for s, m in ((0, 4), (2, 0), (None, 4), ("x", 2)):
        assert math.isnan(ideal_bubble_fraction(s, m))
    assert mean_bubble_fraction(None) is None and mean_bubble_fraction(pd.DataFrame({"bubble_fraction": []})) is None
    assert mean_bubble_fraction(pd.DataFrame({"bubble_fraction": [0.2]})) == pytest.approx(0.2)
    assert mean_bubble_fraction(pd.DataFrame({"bubble_fraction": [0.2, "0.4", "n/a"]})) == pytest.approx(0.3)
    assert mean_bubble_fraction(pd.DataFrame({"bubble_fraction": [np.nan]})) is None


def test_ratios_between_0_and_1_ms():
    co = OPS.copy()
    co.loc[0, ["wait_ms", "transit_ms", "synchronization_ms"]] = [0.2, 0.3, 0.1]  # denominators below 1 ms
    out = comm_op_stats(co)
    assert out["wait_ratio"].iloc[0] == pytest.approx(0.4) and out["sync_ratio"].iloc[0] == pytest.approx(0.25)
    assert out["algbw_gbps"].iloc[0] == pytest.approx(40.0, rel=1e-12)  # 1 GB = 1e9 bytes exactly


# ---- slow ranks: the outlier tests at their edges -----------------------------------------------------------------


def test_outlier_test_by_hand():
    from analyzers.analyses.slow_ranks import DIXON_Q95, _outlier_test, sign_test_p

    t, stat, crit, out = _outlier_test([1.0])
    assert t == "none" and math.isnan(stat) and math.isnan(crit) and out is False
    assert _outlier_test([1.0, 5.0])[0] == "pair" and _outlier_test([1.0, 5.0])[3] is False
    assert _outlier_test([2.0, 2.0, 2.0, 2.0]) == ("dixon_q", 0.0, DIXON_Q95[4], False)  # all equal: no outlier
    # Q = (x_n - x_{n-1}) / (x_n - x_1): [0, 0, 0, 1, 2] -> (2 - 1) / 2 = 0.5 < 0.710
    assert _outlier_test([0.0, 2.0, 0.0, 1.0, 0.0]) == ("dixon_q", 0.5, DIXON_Q95[5], False)
    # 10 ranks still use Dixon's Q; 11 use 3 sigma (leave-one-out)
    ten = [1.0] * 9 + [9.0]
    assert _outlier_test(ten)[0] == "dixon_q" and _outlier_test(ten)[3] is True
    others = [1.0, 1.2, 0.8, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0]
    z = (5.0 - np.mean(others)) / np.std(others, ddof=1)
    t, stat, crit, out = _outlier_test(others + [5.0])
    assert t == "3sigma" and stat == pytest.approx(z) and crit == 3.0 and out is True
    assert _outlier_test([1.0] * 10 + [2.0]) == ("3sigma", math.inf, 3.0, True)  # no spread, one above
    assert _outlier_test([1.0] * 11) == ("3sigma", 0.0, 3.0, False)
    # the sign test: P[X >= k], X ~ Binomial(n, 1/2)
    assert sign_test_p(0, 5) == 1.0 and sign_test_p(6, 5) == 0.0 and sign_test_p(5, 5) == pytest.approx(1 / 32)
    assert sign_test_p(15, 20) == pytest.approx(sum(math.comb(20, i) for i in range(15, 21)) / 2**20)
    exact = sum(math.comb(2000, i) for i in range(1010, 2001)) / 2**2000  # still exact at n = 2000
    assert sign_test_p(1010, 2000) == pytest.approx(exact, rel=1e-12)


def _pair_ops(last_of_rank1: int, n: int, late_ms: float, elapse_ms: float = 10.0):
    rows = []
    for step in range(n):
        late1 = late_ms if step < last_of_rank1 else 0.0
        late0 = 0.0 if step < last_of_rank1 else late_ms
        for rank, late in ((0, late0), (1, late1)):
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "op_name": "ar",
                    "group": "g",
                    "wait_ms": 5.0 - late,
                    "start_us": 0.0,
                    "elapse_ms": elapse_ms,
                }
            )
    return pd.DataFrame(rows)


def test_two_rank_groups_by_hand():
    from analyzers.analyses.slow_ranks import find_slow_ranks

    # rank 1 last in 15 of 20 collectives: share 0.75 (the bar, inclusive), sign test p = 0.0207 < 0.05
    g = find_slow_ranks(_pair_ops(15, 20, 4.0)).set_index("rank")
    assert g.loc[1, "test"] == "pair" and g.loc[1, "statistic"] == pytest.approx(0.75)
    assert g.loc[1, "critical"] == 0.75 and bool(g.loc[1, "slow"]) and not bool(g.loc[0, "slow"])
    assert g.loc[1, "last_arrivals"] == 15 and g.loc[1, "n_ops"] == 20 and (g["ranks_compared"] == 2).all()
    assert g.loc[1, "mean_lateness_ms"] == pytest.approx(3.0) and g.loc[1, "total_lateness_ms"] == pytest.approx(60.0)
    # 14 of 20: p = 0.0577 >= 0.05, not slow
    assert not find_slow_ranks(_pair_ops(14, 20, 4.0))["slow"].any()
    # the floor: 10% of a 0.5 ms collective = 0.05 ms; 0.03 ms of lateness above the other rank is below it
    assert not find_slow_ranks(_pair_ops(20, 20, 0.03, elapse_ms=0.5))["slow"].any()
    assert find_slow_ranks(_pair_ops(20, 20, 0.06, elapse_ms=0.5))["slow"].any()
    # unknown durations: the floor is MIN_LATENESS_MS = 0.01 ms
    assert find_slow_ranks(_pair_ops(20, 20, 0.03, elapse_ms=float("nan")))["slow"].any()


# ---- reconciliation and compare's tests at their edges -----------------------------------------------------------


def test_reconcile_edges():
    ours = pd.DataFrame(
        [
            {"rank": 0, "step": 1, "step_us": 100.0, "computing_us": 60.0, "bubble_us": 5.0},
            {"rank": 0, "step": 2, "step_us": 0.0, "computing_us": 0.0, "bubble_us": 0.0},
            {"rank": 0, "step": 3, "step_us": 0.5, "computing_us": 0.5, "bubble_us": 0.0},
        ]
    )
    ref = pd.DataFrame(
        [
            {"rank": 0.0, "step": 1.0, "computing_us": 50.0},
            {"rank": 0.0, "step": 2.0, "computing_us": 1.0},
            {"rank": 0.0, "step": 3.0, "computing_us": 0.25},
        ]
    )
    rec = reconcile(ours, ref)
    assert list(rec["metric"]) == ["computing"] * 3  # bubble: the profiler did not write it, nothing to compare
    assert list(rec.index) == [0, 1, 2]
    assert rec["rel_diff"].iloc[0] == pytest.approx(0.1)
    assert math.isnan(rec["rel_diff"].iloc[1])  # a 0-length step: no relative difference
    assert rec["rel_diff"].iloc[2] == pytest.approx(0.5)
    assert reconcile(ours.iloc[:0], ref) is None and reconcile(ours, ref.iloc[:0]) is None
    assert reconcile(ours, None) is None
    assert reconcile(ours[["rank", "step", "step_us"]], ref) is None  # no part in common


def test_mann_whitney_p_edges():
    from analyzers.stats import mann_whitney_p
    from perfbench.regress.compare import metric_delta

    assert mann_whitney_p([1.0], [1.0, 2.0, 3.0]) is None and mann_whitney_p([1.0, 2.0, 3.0], [1.0]) is None
    assert mann_whitney_p([1.0, 2.0], [3.0, 4.0]) == pytest.approx(1 / 3)  # 2 vs 2 separated: 2 x 1/6
    assert mann_whitney_p([2.0, 2.0, 2.0], [2.0, 2.0]) == 1.0
    assert mann_whitney_p([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]) < 0.2  # spread exactly 1: a real test
    r = metric_delta("step_time_s", [1.0, 1.1, 1.2], [2.0, 2.1, 2.2])  # default level: a 95% interval
    assert r["ci_low"] < r["rel"] < r["ci_high"] and math.isfinite(r["ci_low"])


def test_no_collectives_in_a_profile_with_op_data_is_zero_not_unknown():
    """A 1-rank profile has ops but no collectives: 0 collectives per step is known; without op data it is null."""
    from analyzers.analyses.step_metrics import run_metrics, step_series

    sb = pd.DataFrame(
        {
            "rank": [0, 0],
            "step": [1, 2],
            "step_us": [100.0, 100.0],
            "computing_us": [80.0, 70.0],
            "communication_us": [0.0, 0.0],
        }
    )
    seen = run_metrics(step_series(None, sb, None, 0, ops_seen=True))
    assert seen["collectives_per_step"] == 0.0 and seen["comm_bytes_per_step"] == 0.0
    unseen = run_metrics(step_series(None, sb, None, 0, ops_seen=False))
    assert unseen["collectives_per_step"] is None and unseen["comm_bytes_per_step"] is None
