"""`perfbench check` beyond the verdict table: threshold parsing, matching settings groups, the paths that
end in undecided / skipped, and the whole gate on a hand-built store (baseline saved, run checked, exit
code) with no msrun."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from perfbench.regress.baseline import save_baseline
from perfbench.regress.check import Group, decide_metric, group_key, groups_of, match_groups, parse_threshold, run_check
from perfbench.errors import UserError
from perfbench.store import Store


@pytest.mark.parametrize(
    "text,value",
    [
        ("5%", 0.05),
        ("0.05", 0.05),
        ("5", 0.05),
        ("1", 0.01),
        ("12.5%", 0.125),
        ("0.999", 0.999),
        ("950%", 9.5),
        (0.2, 0.2),
    ],
)
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["abc", "0", "0%", "-5%", "nan", "1000%", ""])
def test_parse_threshold_refuses(bad):
    with pytest.raises(UserError, match="--threshold"):
        parse_threshold(bad)


def test_groups_and_matching():
    e = lambda rid, **s: {"run_id": rid, "settings": s}  # noqa: E731
    runs = [e("a0", ws=1, fusion=0, repeat=0), e("a1", ws=1, fusion=0, repeat=1), e("b0", ws=2, fusion=0, repeat=0)]
    gs = groups_of(runs)
    assert [[x["run_id"] for x in g.entries] for g in gs] == [["a0", "a1"], ["b0"]]
    assert gs[0].settings == {"ws": 1, "fusion": 0}  # repeat is not a setting that separates groups
    assert group_key({"ws": 1, "repeat": 3}) == group_key({"repeat": 0, "ws": 1}) != group_key({"ws": 2})
    assert len(groups_of(runs, ignore=())) == 3
    base = [Group({"ws": 1, "fusion": 0}), Group({"ws": 2, "fusion": 0}), Group({"ws": 2, "fusion": 4})]
    cur = [Group({"ws": 2, "fusion": 4}), Group({"ws": 1}), Group({"ws": 2}), Group({"ws": 8})]
    pairs = match_groups(base, cur, direct=False)
    assert pairs[0][0] is base[2]  # exact match
    assert pairs[1][0] is base[0]  # the one group that agrees on every common key
    assert pairs[2][0] == "ambiguous"  # two baseline groups agree
    assert pairs[3][0] is None  # nothing agrees
    # a single run against a single run is compared directly even when their settings differ
    assert match_groups([base[0]], [cur[3]], direct=True) == [(base[0], cur[3])]
    assert match_groups([base[0]], [cur[3]], direct=False) == [(None, cur[3])]


def _e(metric, samples=None, value=None):
    return {
        "samples": {metric: samples} if samples is not None else {},
        "metrics": {metric: value} if value is not None else {},
    }


def test_undecided_and_skipped_paths():
    d = lambda m, b, c: decide_metric(m, b, c, 0.05, 0.05)  # noqa: E731
    r = d("comm_share", [_e("comm_share")], [_e("comm_share")])
    assert r["verdict"] == "skipped" and r["reason"] == "measured by neither side"
    r = d("step_time_s", [_e("step_time_s")], [_e("step_time_s", [1.0, 1.1, 1.2])])
    assert r["verdict"] == "undecided" and "not measured in the baseline" in r["reason"]
    r = d("comm_share", [_e("comm_share", [0.1, 0.2, 0.3])], [_e("comm_share")])
    assert r["verdict"] == "skipped" and "not measured in the current" in r["reason"]
    assert r["baseline"] == pytest.approx(0.2) and r["current"] is None
    r = d("throughput", [_e("throughput", [1.0, 2.0])], [_e("throughput", [3.0, 4.0, 5.0])])
    assert r["verdict"] == "undecided" and "baseline 2, current 3; need 3" in r["reason"]
    # baseline median 0 with a non-zero current: a relative change is undefined
    r = d("step_time_s", [_e("step_time_s", [0.0] * 5)], [_e("step_time_s", [1.0] * 5)])
    assert r["verdict"] == "undecided" and "relative change undefined" in r["reason"] and r["change"] is None
    r = d(
        "communication_not_overlapped_s",
        [_e("communication_not_overlapped_s", [0.0] * 5)],
        [_e("communication_not_overlapped_s", [0.0] * 5)],
    )
    assert r["verdict"] == "unchanged" and r["change"] == 0.0 and r["reason"] == "0 on both sides"


def test_falls_back_to_one_value_per_repeat():
    """No per-step samples (e.g. baselines of imported runs) but 4 repeats a side: their run-level values are
    the samples."""
    base = [_e("step_time_s", None, v) for v in (1.00, 1.01, 0.99, 1.02)]
    cur = [_e("step_time_s", None, v) for v in (2.00, 2.02, 1.98, 2.01)]
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["basis"] == "repeats" and r["n_baseline"] == 4 and r["n_current"] == 4
    assert r["p_value"] == pytest.approx(2 / 70)  # 4 vs 4, separated: 2 of C(8,4) = 70 splits
    assert r["verdict"] == "regression" and r["change"] == pytest.approx(2.005 / 1.005 - 1)


def test_reported_numbers():
    base = [_e("throughput", [100.0, 101.0, 99.0, 100.5, 99.5])]
    cur = [_e("throughput", [50.0, 50.5, 49.5, 50.2, 49.8])]
    r = decide_metric("throughput", base, cur, 0.05, 0.05)
    assert r["verdict"] == "regression" and r["baseline"] == 100.0 and r["current"] == 50.0
    assert r["change"] == pytest.approx(-0.5) and r["worse_by"] == pytest.approx(1.0)  # half the throughput = 2x worse
    assert r["threshold_used"] == pytest.approx(0.05) and r["noise_floor"] == 0.0
    assert r["n_baseline"] == 5 and r["repeats_baseline"] == 1 and r["higher_is_better"] is True
    assert r["reason"].startswith("p=") and "worse by 100.0%" in r["reason"]
    lo, hi = r["ci_mean_diff"]
    assert lo < -49.9 < -50.0 + 1.5 and hi > -50.5  # mean difference -50 (current - baseline) inside
    same = decide_metric("throughput", base, base, 0.05, 0.05)
    assert same["verdict"] == "unchanged" and "|change| ≤ 5.0%" in same["reason"]


# ---- the whole gate on a hand-built store ------------------------------------------------------------------------


def _run(store, rid, sweep, ws, times, status="ok"):
    store.write_run(
        {
            "run_id": rid,
            "sweep_id": sweep,
            "source": "sweep",
            "status": status,
            "error": None,
            "settings": {"workload": "resnet50", "world_size": ws, "repeat": 0},
            "config": {"train": {"warmup_steps": 1}},
            "metrics": {},
        }
    )
    rows = [{"rank": r, "step": s, "samples": 4, "step_time_s": t} for s, t in enumerate(times) for r in range(ws)]
    store.write_table(rid, "workload_steps", pd.DataFrame(rows))


def test_run_check_end_to_end(tmp_path):
    st = Store(tmp_path / "results")
    steady = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01]
    _run(st, "base-1", "base", 1, [9.0] + steady)
    _run(st, "base-2", "base", 2, [9.0] + [2 * t for t in steady])
    _run(st, "same-1", "same", 1, [9.0] + steady[::-1])
    _run(st, "same-2", "same", 2, [9.0] + [2 * t for t in steady[::-1]])
    _run(st, "slow-1", "slow", 1, [9.0] + [1.5 * t for t in steady])
    _run(st, "slow-2", "slow", 2, [9.0] + [2 * t for t in steady])
    _run(st, "bad-1", "bad", 1, [9.0], status="failed")
    save_baseline(st, "base", "main")
    res = run_check(st, "main", "same")
    assert res["verdict"] == "unchanged" and res["exit_code"] == 0 and len(res["groups"]) == 2
    res = run_check(st, "main", "slow")
    assert res["verdict"] == "regression" and res["exit_code"] == 1
    by_ws = {g["settings"]["world_size"]: g for g in res["groups"]}
    assert by_ws[1]["status"] == "regression" and by_ws[2]["status"] == "unchanged"
    step = next(m for m in by_ws[1]["metrics"] if m["metric"] == "step_time_s")
    assert step["change"] == pytest.approx(0.5) and step["verdict"] == "regression"
    res = run_check(st, "main", "bad")
    assert res["exit_code"] == 2 and res["groups"][0]["status"] == "undecided"
    assert "every current run failed" in res["groups"][0]["reason"]
    assert res["unmatched_baseline_groups"] == [{"workload": "resnet50", "world_size": 2}]
    with pytest.raises(UserError, match="unknown metric"):
        run_check(st, "main", "same", metrics=("no_such_metric",))


def test_check_names_the_top_finding_of_the_regressed_run(tmp_path):
    """check reads the same ranked advice as show / advise: the first root (largest gain), not a symptom."""
    from perfbench.views.check_report import to_markdown

    st = Store(tmp_path / "results")
    steady = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01]
    _run(st, "base-1", "base", 1, [9.0] + steady)
    _run(st, "slow-1", "slow", 1, [9.0] + [1.5 * t for t in steady])
    st.write_table(
        "slow-1",
        "advice",
        pd.DataFrame(
            [
                {
                    "id": "slow_rank:g:1",
                    "rule": "slow_rank",
                    "severity": "high",
                    "message": "rank 1 is late",
                    "evidence": "e",
                    "gain_ms": 300.0,
                    "gain_share": 0.2,
                    "basis": "b",
                    "symptom_of": None,
                },
                {
                    "id": "wait_ratio:0",
                    "rule": "wait_ratio",
                    "severity": "high",
                    "message": "rank 0 waits",
                    "evidence": "e",
                    "gain_ms": 400.0,
                    "gain_share": 0.27,
                    "basis": "b",
                    "symptom_of": "slow_rank:g:1",
                },
                {
                    "id": "free_time:all",
                    "rule": "free_time",
                    "severity": "low",
                    "message": "idle",
                    "evidence": "e",
                    "gain_ms": 10.0,
                    "gain_share": 0.01,
                    "basis": "b",
                    "symptom_of": None,
                },
            ]
        ),
    )
    save_baseline(st, "base", "main")
    res = run_check(st, "main", "slow")
    top = res["groups"][0]["advice"]
    assert top["run_id"] == "slow-1" and [t["id"] for t in top["top"]] == ["slow_rank:g:1", "free_time:all"]
    assert "Top finding in slow-1 (saves ~300 ms/step): rank 1 is late" in to_markdown(res)


# ---- the result document of one metric (check --json), field by field -------------------------------------------


def test_result_fields_of_each_path():
    d = lambda m, b, c, t=0.05: decide_metric(m, b, c, t, 0.05)  # noqa: E731
    r = d("step_time_s", [_e("step_time_s", [1.0, 1.1])], [_e("step_time_s", [2.0, 2.1, 2.2])])
    assert r == {
        "metric": "step_time_s",
        "unit": "s",
        "higher_is_better": False,
        "threshold": 0.05,
        "verdict": "undecided",
        "reason": "too few samples (baseline 2, current 3; need 3)",
        "baseline": pytest.approx(1.05),
        "current": pytest.approx(2.1),
        "change": None,
        "p_value": None,
    }
    z = [_e("communication_not_overlapped_s", [0.0] * 4)]
    r = d("communication_not_overlapped_s", z, z)
    assert r == {
        "metric": "communication_not_overlapped_s",
        "unit": "s",
        "higher_is_better": False,
        "threshold": 0.05,
        "basis": "steps",
        "verdict": "unchanged",
        "reason": "0 on both sides",
        "baseline": 0.0,
        "current": 0.0,
        "change": 0.0,
        "change_kind": "relative",
        "p_value": None,
        "threshold_used": 0.05,
        "n_baseline": 4,
        "n_current": 4,
    }
    r = d("throughput", [_e("throughput", [0.0] * 4)], [_e("throughput", [1.0] * 4)])
    assert r == {
        "metric": "throughput",
        "unit": "samples/s",
        "higher_is_better": True,
        "threshold": 0.05,
        "basis": "steps",
        "verdict": "undecided",
        "reason": "baseline median is 0: relative change undefined",
        "baseline": 0.0,
        "current": 1.0,
        "change": None,
        "p_value": None,
    }


def test_exactly_three_samples_a_side_are_tested():
    r = decide_metric(
        "step_time_s", [_e("step_time_s", [1.0, 1.01, 0.99])], [_e("step_time_s", [2.0, 2.01, 1.99])], 0.05, 0.05
    )
    assert r["basis"] == "steps" and r["n_baseline"] == 3 and r["p_value"] == pytest.approx(0.1)
    assert r["verdict"] == "unchanged"  # 3 vs 3 can never reach p < 0.05 (smallest two-sided p = 0.1)


def test_repeat_fallback_needs_both_sides():
    base = [_e("step_time_s", None, v) for v in (1.0, 1.1, 1.2)]
    r = decide_metric("step_time_s", base, [_e("step_time_s", [2.0, 2.1])], 0.05, 0.05)
    assert r["verdict"] == "undecided" and "too few samples (baseline 3, current 2" in r["reason"]


def test_missing_and_nan_samples_are_left_out():
    base = [_e("step_time_s", [1.0, None, 1.01, float("nan"), 0.99, 1.0, 1.02, 0.98])]
    r = decide_metric("step_time_s", base, [_e("step_time_s", [1.0, 1.01, 0.99])], 0.05, 0.05)
    assert r["n_baseline"] == 6 and r["baseline"] == pytest.approx(1.0)


def test_current_throughput_of_zero_is_infinitely_worse():
    r = decide_metric(
        "throughput", [_e("throughput", [100.0, 101.0, 99.0, 100.5, 99.5])], [_e("throughput", [0.0] * 5)], 0.05, 0.05
    )
    assert r["verdict"] == "regression" and r["worse_by"] == float("inf")


def test_improvement_is_measured_as_the_inverse_factor():
    base = [_e("step_time_s", [1.0 + 0.001 * i for i in range(-4, 5)])]
    cur = [_e("step_time_s", [0.8 + 0.001 * i for i in range(-4, 5)])]
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["verdict"] == "improvement" and r["worse_by"] == pytest.approx(-(1 / 0.8 - 1))  # 1.25x faster: -25%
    # 0.97x the step time is 3.09% better: an improvement against a 3.05% threshold, not against 3.1%
    cur = [_e("step_time_s", [0.97 + 0.001 * i for i in range(-4, 5)])]
    assert decide_metric("step_time_s", base, cur, 0.0305, 0.05)["verdict"] == "improvement"
    assert decide_metric("step_time_s", base, cur, 0.031, 0.05)["verdict"] == "unchanged"


def test_a_repeat_with_median_zero_does_not_set_the_noise_floor():
    m = "communication_not_overlapped_s"
    base = [_e(m, [0.0, 0.0, 0.0]), _e(m, [0.10, 0.101, 0.099, 0.1])]
    cur = [_e(m, [0.3, 0.301, 0.299, 0.3, 0.302])]
    r = decide_metric(m, base, cur, 0.05, 0.05)
    assert r["noise_floor"] == 0.0 and r["repeats_baseline"] == 2


def test_history_metric_judges_cpu_time_while_the_pair_check_keeps_its_metrics(tmp_path):
    """`check --history --history-metric step_cpu_s`: the history judges CPU time per step (a 10% rise is a
    regression although wall-clock step times are the same), the per-pair check still judges its --metric list."""
    from perfbench.regress import history
    from perfbench.regress.history import run_history_check

    st = Store(tmp_path / "results")
    wiggle = [0.0, 0.01, -0.008, 0.004, -0.01, 0.007, -0.003, 0.009]

    def run(rid, sweep, cpu_factor, offset):
        st.write_run(
            {
                "run_id": rid,
                "sweep_id": sweep,
                "source": "sweep",
                "status": "ok",
                "error": None,
                "settings": {"workload": "resnet50", "world_size": 1, "repeat": 0},
                "config": {"train": {"warmup_steps": 1}},
                "metrics": {},
            }
        )
        rows = [
            {
                "rank": 0,
                "step": s,
                "samples": 4,
                "step_time_s": 0.1 * (1 + wiggle[s % 8]),
                "cpu_s": 0.04 * cpu_factor * (1 + wiggle[(s + offset) % 8]),
            }
            for s in range(9)
        ]
        st.write_table(rid, "workload_steps", pd.DataFrame(rows))

    for i in range(4):
        run(f"h{i}-1", f"h{i}", [1.0, 1.006, 0.995, 1.003][i], i)
        history.record(st, f"h{i}", via="baseline", label=f"h{i}", commit=None, when=float(i))
    save_baseline(st, "h3", "main")
    run("slow-1", "slow", 1.10, 5)
    run("same-1", "same", 1.0, 6)
    res = run_history_check(
        st, "slow", baseline_name="main", label="slow", commit=None, history_metrics=("step_cpu_s",)
    )
    assert res["exit_code"] == 1 and res["verdict"] == "regression", json.dumps(res["history"], default=str)[:3000]
    (j,) = res["history"]["results"]
    assert j["metric"] == "step_cpu_s" and j["verdict"] == "regression" and j["began_at"] == "slow"
    assert j["change"] == pytest.approx(0.10, abs=0.02)
    assert [m["metric"] for m in res["groups"][0]["metrics"]] == [
        "throughput",
        "step_time_s",
        "comm_share",
        "communication_not_overlapped_s",
    ]
    assert res["groups"][0]["status"] == "unchanged"  # wall clock did not move
    res = run_history_check(
        st, "same", baseline_name="main", label="same", commit=None, history_metrics=("step_cpu_s",)
    )
    assert res["exit_code"] == 0 and res["history"]["results"][0]["verdict"] == "unchanged"


def test_repeats_on_both_sides_set_a_between_run_margin():
    """Two repeats a side whose medians lie a factor e^0.1 apart, the current side every sample 1.30x slower.
    By hand: log medians {0, 0.1} on each side, pooled s = sqrt(4 * 0.05^2 / 2) = 0.0707, t(0.975, df 2) =
    4.3027 (Student's t table), margin = 4.3027 * 0.0707 * sqrt(1/2 + 1/2) = 0.3042, factor e^0.3042 = 1.3556.
    So +30% is inside what run-to-run variation alone gives (unchanged, although every current step is
    slower and the range of the repeats alone, e^0.1 = 1.105, would call it a regression); +40% is beyond it."""
    import math

    jit = [0.99, 0.995, 1.0, 1.005, 1.01]
    reps = [[100 * j for j in jit], [100 * math.exp(0.1) * j for j in jit]]
    base = [_e("step_time_s", r) for r in reps]
    for k, verdict in ((1.30, "unchanged"), (1.40, "regression")):
        cur = [_e("step_time_s", [x * k for x in r]) for r in reps]
        r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
        assert r["p_value"] < 0.001 and r["verdict"] == verdict, r
        assert r["threshold_used"] == pytest.approx(0.3556, abs=2e-4)
    # one current run: no margin from the repeats (df would be 1), the range floor alone
    r = decide_metric("step_time_s", base, [_e("step_time_s", [x * 1.30 for x in reps[0]])], 0.05, 0.05)
    assert r["threshold_used"] == pytest.approx(math.exp(0.1) - 1)
