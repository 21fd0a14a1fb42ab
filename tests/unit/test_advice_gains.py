"""Advice gains: every gain formula against a hand-computed value, the cause/symptom tree, the
accounting that explains each stretch of time once, severity from the gain share, and the ordering. The
formulas are in docs/advice.md; the numbers below are worked out by hand from the tables built here."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analyzers.analyses import advice as A
from analyzers.analyses.advice import advise
from analyzers.analyses.advice.engine import severity
from analyzers.analyses.advice.small_packets import fusion_gain
from analyzers.analyses.advice.expert_imbalance import EXPERT_MAX_MEAN
from analyzers.analyses.pipeline import ideal_bubble_fraction


def _row(out, rule):
    r = out[out["rule"] == rule]
    assert len(r), (rule, list(out["rule"]))
    return r.iloc[0]


def _comm(steps=4, ranks=2, wait=5.0, transit=1.25, op_type="allreduce", size=64e6):
    return pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "op_name": "ar",
                "op_type": op_type,
                "group": "g",
                "group_size": ranks,
                "wait_ms": wait,
                "transit_ms": transit,
                "elapse_ms": wait + transit,
                "size_bytes": size,
            }
            for r in range(ranks)
            for s in range(steps)
        ]
    )


def _sb(exposed_us, free_us, ranks=(0,), steps=3, step_us=1000.0):
    return pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "step_us": step_us,
                "computing_us": 500.0,
                "communication_not_overlapped_us": exposed_us if not callable(exposed_us) else exposed_us(r, s),
                "free_us": free_us,
            }
            for r in ranks
            for s in range(steps)
        ]
    )


def test_wait_ratio_gain_is_wait_per_step_and_one_root():
    # 2 ranks, 4 steps, 5 ms wait per collective and step -> 5.0 ms per step; the two ranks wait at the same
    # collectives: one root, the other rank folded under it
    out = advise({"comm_ops": _comm()}, {"step_time_s": 0.05})
    w = out[out["rule"] == "wait_ratio"]
    assert list(w["gain_ms"]) == [5.0, 5.0]
    assert w["symptom_of"].isna().sum() == 1
    root = w[w["symptom_of"].isna()].iloc[0]
    assert w[w["symptom_of"].notna()].iloc[0]["symptom_of"] == root["id"] == "wait_ratio:0"
    assert root["gain_share"] == pytest.approx(0.1) and root["severity"] == "high"  # 5 / 50 ms


def test_severity_thresholds_from_gain_share():
    assert severity({"gain_share": A.GAIN_HIGH}) == "high"
    assert severity({"gain_share": A.GAIN_HIGH - 1e-9}) == "medium"
    assert severity({"gain_share": A.GAIN_MEDIUM}) == "medium"
    assert severity({"gain_share": A.GAIN_MEDIUM - 1e-9}) == "low"
    assert severity({"gain_share": None, "severity": "high"}) == "high"  # unknown gain: the rule's label
    out = advise({"comm_ops": _comm()}, {"step_time_s": 1.0})  # 5 ms of 1 s = 0.5 %
    assert set(out["severity"]) == {"low"}


def test_slow_rank_gain_lateness_times_collectives_per_step():
    sr = pd.DataFrame(
        [
            {
                "group": "g",
                "scope": "group",
                "rank": 3,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 6.0,
                "statistic": 0.95,
                "critical": 0.829,
                "test": "dixon_q",
                "slow": True,
            }
        ]
    )
    # 6 ms late x 8 collectives it arrived last at / 4 steps = 12 ms per step
    out = advise({"slow_ranks": sr, "comm_ops": _comm(steps=4, wait=0.0, transit=1.0)}, {})
    assert _row(out, "slow_rank")["gain_ms"] == pytest.approx(12.0)
    assert _row(out, "slow_rank")["id"] == "slow_rank:g:3"


def test_slow_link_gain():
    sl = pd.DataFrame(
        [
            {
                "kind": "link",
                "group": "g",
                "transport": "HCCS",
                "src": 1,
                "dst": 2,
                "size_mb": 100.0,
                "time_ms": 20.0,
                "bandwidth_gbps": 5.0,
                "group_mean_gbps": 16.25,
                "ratio": 0.31,
                "slow": True,
            }
        ]
    )
    out = advise({"slow_links": sl, "comm_ops": _comm(steps=2, wait=0.0, transit=1.0)}, {})
    # (20 ms - 100 MB / 16.25 GB/s = 6.1538 ms) / 2 steps
    assert _row(out, "slow_link")["gain_ms"] == pytest.approx((20.0 - 100.0 / 16.25) / 2)


def test_bandwidth_reference_gain():
    cb = pd.DataFrame([{"rank": 0, "step": 0, "op_name": "ar", "transport": "RDMA", "size_mb": 100.0, "time_ms": 40.0}])
    out = advise({"comm_bandwidth": cb, "comm_ops": _comm(steps=2, wait=0.0, transit=1.0)}, {})
    # (40 ms - 100 MB / 12.5 GB/s = 8 ms) / 2 steps = 16 ms
    assert _row(out, "bandwidth_reference")["gain_ms"] == pytest.approx(16.0)


def _small(lat_ms=0.05, per_step=16, steps=2, ranks=2, inv_bw=1e-7):
    # all-reduce over 2 ranks: 2 ring hops, factor 2(n-1)/n = 1; transit = lat x 2 + size x inv_bw exactly
    rows = []
    for r in range(ranks):
        for s in range(steps):
            for i in range(per_step):
                size = 4096.0 * (1 + i % 2)
                rows.append(
                    {
                        "rank": r,
                        "step": s,
                        "op_name": f"ar{i}",
                        "op_type": "allreduce",
                        "group": "g",
                        "group_size": ranks,
                        "size_bytes": size,
                        "wait_ms": 0.0,
                        "transit_ms": lat_ms * 2 + size * inv_bw,
                        "elapse_ms": lat_ms * 2 + size * inv_bw,
                    }
                )
    return pd.DataFrame(rows)


def test_fusion_gain_latency_terms_removed():
    # 16 all-reduces per rank and step, 2 hops each = 32 hops; one fused all-reduce keeps 2: 30 hops x 0.05 ms
    out = advise({"comm_ops": _small()}, {"step_time_s": 0.1})
    row = _row(out, "small_packets")
    assert row["gain_ms"] == pytest.approx(1.5)
    assert json.loads(row["try"]) == {"parallel.comm_fusion": "all"}
    assert row["predicted_step_ms"] == pytest.approx(100.0 - 1.5)
    gain, basis = fusion_gain(_small(lat_ms=0.2))
    assert gain == pytest.approx(6.0) and "hop" in basis


def test_fusion_gain_is_capped_by_exposed_time():
    # the latency terms are 1.5 ms per step but only 1.0 ms of the step is exposed communication
    out = advise(
        {"comm_ops": _small(), "step_breakdown": _sb(1000.0, 0.0, ranks=(0, 1), step_us=3000.0)}, {"step_time_s": 0.1}
    )
    row = _row(out, "small_packets")
    assert row["gain_ms"] == pytest.approx(1.0) and "cut to the exposed time" in row["basis"]


def test_fusion_gain_on_the_unprofiled_scale():
    # the same 1.5 ms of latency terms, read on profiled steps of 200 ms whose unprofiled steps take 100 ms: 0.75 ms
    out = advise({"comm_ops": _small()}, {"step_time_s": 0.1, "profiled_step_time_s": 0.2})
    row = _row(out, "small_packets")
    assert row["gain_ms"] == pytest.approx(0.75) and "x 0.5 (unprofiled / profiled step)" in row["basis"]
    assert row["predicted_step_ms"] == pytest.approx(100.0 - 0.75)
    # a profiled step shorter than the unprofiled one never scales the gain up
    out = advise({"comm_ops": _small()}, {"step_time_s": 0.1, "profiled_step_time_s": 0.05})
    assert _row(out, "small_packets")["gain_ms"] == pytest.approx(1.5)


def test_fusion_on_the_cpu_counts_collectives_that_ran_at_once_by_their_union():
    """gloo's two worker threads run collectives two at a time: fusion removes the wall time they covered, not
    their summed time. Per rank, step and group: union of [start, start + elapse] / summed elapse, by hand."""
    from analyzers.analyses.advice.small_packets import serial_share

    df = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1, 2, 2],
            "step": [0] * 7,
            "group": ["g"] * 7,
            "start": [0.0, 5.0, 20.0, 0.0, 2.0, 0.0, 5.0],
            "elapse": [10.0, 10.0, 10.0, 10.0, 2.0, 5.0, 5.0],
        }
    )
    share = serial_share(df)
    # rank 0: [0,10] u [5,15] u [20,30] = 25 of 30; rank 1: [2,4] inside [0,10] = 10 of 12; rank 2 one after another
    assert share.loc[(0, 0, "g")] == pytest.approx(25 / 30)
    assert share.loc[(1, 0, "g")] == pytest.approx(10 / 12)
    assert share.loc[(2, 0, "g")] == pytest.approx(1.0)


def test_exposed_comm_gain_is_most_exposed_rank_median():
    # rank 0: 300, 300, 900 us (median 300); rank 1: 400 us every step -> 0.4 ms per step
    sb = _sb(lambda r, s: 400.0 if r else (900.0 if s == 2 else 300.0), 0.0, ranks=(0, 1))
    out = advise({"step_breakdown": sb}, {"step_time_s": 0.001})
    row = _row(out, "exposed_communication")
    assert row["gain_ms"] == pytest.approx(0.4) and row["gain_share"] == pytest.approx(0.4)


def test_free_time_gain():
    out = advise({"step_breakdown": _sb(0.0, 250.0, ranks=(0, 1))}, {"step_time_s": 0.001})
    assert _row(out, "free_time")["gain_ms"] == pytest.approx(0.25)


def _stages(c0, c1):
    return pd.DataFrame(
        [{"stage": 0, "ranks": "0,1", "computing_ms": c0}, {"stage": 1, "ranks": "2,3", "computing_ms": c1}]
    )


def _rank_stages():
    return pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]})


def test_stage_imbalance_gain_and_cross_stage_rank_imbalance_folded():
    ri = pd.DataFrame(
        [
            {
                "group": "dp",
                "kind": "dp",
                "ranks": "0,2",
                "dimension": "computing",
                "max_rank": 2,
                "max_ms": 30.0,
                "min_rank": 0,
                "min_ms": 10.0,
                "spread_ms": 20.0,
                "mean_total_ms": 50.0,
                "ratio": 0.4,
                "flagged": True,
            }
        ]
    )
    out = advise(
        {
            "stages": _stages(10.0, 30.0),
            "rank_stages": _rank_stages(),
            "rank_imbalance": ri,
            "comm_ops": _comm(ranks=4),
        },
        {"step_time_s": 0.1},
    )
    st = out.iloc[0]
    # slowest stage 30 ms above the stages' mean 20 ms -> 10 ms per step
    assert st["id"] == "stage_imbalance:1" and st["gain_ms"] == pytest.approx(10.0) and pd.isna(st["symptom_of"])
    rk = _row(out, "rank_imbalance")
    assert rk["symptom_of"] == "stage_imbalance:1" and rk["gain_ms"] == pytest.approx(20.0)
    assert "data shard" not in rk["message"] and "different pipeline stages" in rk["message"]
    assert set(out[out["rule"] == "wait_ratio"]["symptom_of"]) == {"stage_imbalance:1"}
    assert list(out["symptom_of"].isna()) == [True] + [False] * (len(out) - 1)


def test_stage_imbalance_of_a_split_given_by_hand_tries_the_balanced_split():
    """A split the user fixed (parallel.pipeline_split) has a knob: null, the cost-balanced split; the predicted
    step scales the slowest stage's critical path by the stages' mean compute over its own (100 x 20 / 30 =
    66.7 ms; no exposed collective to keep). Without the key there is nothing to try."""
    tables = {"stages": _stages(10.0, 30.0), "rank_stages": _rank_stages()}
    cfg = {"parallel": {"pipeline_stages": 2, "pipeline_split": [2, 16]}}
    st = _row(advise({**tables, A.CONFIG_KEY: cfg}, {"step_time_s": 0.1}), "stage_imbalance")
    assert json.loads(st["try"]) == {"parallel.pipeline_split": None}
    assert st["predicted_step_ms"] == pytest.approx(100.0 * 20.0 / 30.0) and "[2, 16]" in st["message"]
    st = _row(advise(tables, {"step_time_s": 0.1}), "stage_imbalance")
    assert st["try"] is None and pd.isna(st["predicted_step_ms"])


def test_free_time_of_an_unbalanced_pipeline_counts_the_slowest_stage_only():
    """Stage 0 (ranks 0, 1) computes 10 ms, stage 1 (ranks 2, 3) 30 ms: stage 0's idle time (600 us a step) is its
    wait for stage 1, stage 1's own idle time (200 us of a 1000 us step = 20% > 10%) is the host's. free_time's gain
    is stage 1's 0.2 ms, and stage_imbalance (10 ms) comes first."""
    sb = _sb(0.0, 0.0, ranks=(0, 1, 2, 3))
    sb["free_us"] = [600.0 if r < 2 else 200.0 for r in sb["rank"]]
    tables = {"stages": _stages(10.0, 30.0), "rank_stages": _rank_stages(), "step_breakdown": sb}
    out = advise(tables, {"step_time_s": 0.1})
    ft = _row(out, "free_time")
    assert ft["gain_ms"] == pytest.approx(0.2)
    assert list(ft["ranks"]) == [2, 3] and "slowest pipeline stage 1" in ft["basis"]
    assert out.iloc[0]["id"] == "stage_imbalance:1"
    # balanced stages: every rank's idle time counts (the most idle rank, 0.6 ms)
    out = advise({**tables, "stages": _stages(10.0, 11.0)}, {"step_time_s": 0.1})
    assert _row(out, "free_time")["gain_ms"] == pytest.approx(0.6) and list(_row(out, "free_time")["ranks"]) == [
        0,
        1,
        2,
        3,
    ]
    # stage 1's idle below 10% of its step: no free_time at all, though stage 0 idles 60%
    sb["free_us"] = [600.0 if r < 2 else 50.0 for r in sb["rank"]]
    assert "free_time" not in set(advise(tables, {"step_time_s": 0.1})["rule"])


def test_rank_imbalance_within_a_stage_keeps_its_remedy():
    ri = pd.DataFrame(
        [
            {
                "group": "stage 0",
                "kind": "stage",
                "ranks": "0,1",
                "dimension": "computing",
                "max_rank": 1,
                "max_ms": 12.0,
                "min_rank": 0,
                "min_ms": 10.0,
                "spread_ms": 2.0,
                "mean_total_ms": 20.0,
                "ratio": 0.1,
                "flagged": True,
            }
        ]
    )
    out = advise({"rank_imbalance": ri, "rank_stages": _rank_stages()}, {"step_time_s": 0.02})
    row = _row(out, "rank_imbalance")
    assert pd.isna(row["symptom_of"]) and row["gain_ms"] == 2.0 and "data shard" in row["message"]


def test_pipeline_bubble_gain_and_micro_batch_try():
    pl = pd.DataFrame(
        [
            {
                "step": s,
                "stage": 0,
                "bubble_fraction": 0.45,
                "ideal_fraction": 0.2,
                "window_us": 10000.0,
                "stages": 2,
                "micro_batches": 4,
            }
            for s in range(3)
        ]
    )
    out = advise({"pipeline": pl}, {"step_time_s": 0.02})
    row = _row(out, "pipeline_bubble")
    assert row["gain_ms"] == pytest.approx(0.25 * 10.0)  # excess 0.25 x 10 ms window
    assert json.loads(row["try"]) == {"parallel.micro_batches": 8}
    # ideal (S-1)/(M+S-1): 1/5 with M=4, 1/9 with M=8; x 10 ms window saved
    assert row["predicted_step_ms"] == pytest.approx(20.0 - (1 / 5 - 1 / 9) * 10.0)
    assert ideal_bubble_fraction(2, 4) == pytest.approx(1 / 5)


def test_step_spread_gain():
    ws = pd.DataFrame(
        [{"rank": r, "step": s, "step_time_s": 1.2 if r == 2 else 1.0} for r in range(4) for s in range(3)]
    )
    assert _row(advise({"workload_steps": ws}, {}), "step_time_spread")["gain_ms"] == pytest.approx(200.0)


def test_unknown_gains_are_null_and_last():
    ex = pd.DataFrame([{"step": 0, "max_mean_ratio": EXPERT_MAX_MEAN * 2 + 0.5, "cv": 0.1, "dropped_fraction": 0.0}])
    out = advise({"experts": ex, "comm_ops": _comm()}, {"step_time_s": 0.05})
    assert out.iloc[-1]["rule"] == "expert_imbalance"
    assert math.isnan(out.iloc[-1]["gain_ms"]) and out.iloc[-1]["basis"].startswith("not estimated")
    assert out.iloc[-1]["severity"] == "high"  # unknown gain keeps the rule's own label (max/mean > 2 x 1.5)


def test_straggler_claims_the_wait_before_generic_findings_and_order_by_gain():
    # exposed pool 4 ms per step; slow rank claims 12 -> cut to 4; exposed_communication folds under it;
    # free time 2.5 ms is its own root; the wait ratio is a symptom of the straggler
    sr = pd.DataFrame(
        [
            {
                "group": "g",
                "scope": "group",
                "rank": 1,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 6.0,
                "statistic": 0.95,
                "critical": 0.829,
                "test": "dixon_q",
                "slow": True,
            }
        ]
    )
    sb = _sb(4000.0, 2500.0, ranks=(0, 1), step_us=10000.0)
    out = advise({"slow_ranks": sr, "comm_ops": _comm(steps=4), "step_breakdown": sb}, {"step_time_s": 0.01})
    roots = out[out["symptom_of"].isna()]
    assert list(roots["rule"]) == ["slow_rank", "free_time"]
    assert list(roots["gain_ms"]) == pytest.approx([4.0, 2.5])
    assert "cut to the exposed time" in roots.iloc[0]["basis"]
    assert set(out[out["rule"].isin(["exposed_communication", "wait_ratio"])]["symptom_of"]) == {"slow_rank:g:1"}
    # each symptom sits right after its root
    ids = list(out["id"])
    for _, r in out[out["symptom_of"].notna()].iterrows():
        before = out.iloc[: ids.index(r["id"])]
        assert before[before["symptom_of"].isna()].iloc[-1]["id"] == r["symptom_of"]


def test_root_gains_never_exceed_step():
    sr = pd.DataFrame(
        [
            {
                "group": "g",
                "scope": "group",
                "rank": 1,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 6.0,
                "statistic": 0.95,
                "critical": 0.829,
                "test": "dixon_q",
                "slow": True,
            }
        ]
    )
    out = advise({"slow_ranks": sr, "comm_ops": _comm(steps=4), "stages": _stages(10.0, 30.0)}, {"step_time_s": 0.015})
    roots = out[out["symptom_of"].isna()]
    # straggler 12 ms (largest raw gain, claims first), stage 10 ms: the step (15 ms) leaves the stage 3 ms
    assert roots["gain_ms"].sum() == pytest.approx(15.0)
    assert list(roots["rule"]) == ["slow_rank", "stage_imbalance"]
    assert list(roots["gain_ms"]) == pytest.approx([12.0, 3.0])


def test_wait_ratio_folds_under_exposed_communication_without_a_cause():
    out = advise({"comm_ops": _comm(), "step_breakdown": _sb(400.0, 0.0, ranks=(0, 1))}, {"step_time_s": 0.001})
    assert list(out["rule"]) == ["exposed_communication", "wait_ratio", "wait_ratio"]
    assert set(out["symptom_of"].dropna()) == {"exposed_communication:all"}


def test_compare_advice_changes():
    from perfbench.regress.compare import advice_changes, top_findings

    a = [
        {"id": "stage_imbalance:1", "rule": "stage_imbalance", "gain_ms": 10.0, "symptom_of": None, "message": "s"},
        {"id": "wait_ratio:0", "rule": "wait_ratio", "gain_ms": 2.0, "symptom_of": "stage_imbalance:1", "message": "w"},
    ]
    b = [
        {"id": "small_packets:all", "rule": "small_packets", "gain_ms": 3.0, "symptom_of": None, "message": "p"},
        {"id": "wait_ratio:0", "rule": "wait_ratio", "gain_ms": 1.0, "symptom_of": None, "message": "w"},
    ]
    ch = {r["id"]: r for r in advice_changes(a, b)}
    assert [r["id"] for r in advice_changes(a, b)] == ["small_packets:all", "wait_ratio:0", "stage_imbalance:1"]
    assert ch["small_packets:all"]["change"] == "appeared" and ch["stage_imbalance:1"]["change"] == "vanished"
    assert ch["wait_ratio:0"] == {
        "id": "wait_ratio:0",
        "rule": "wait_ratio",
        "change": "both",
        "gain_a_ms": 2.0,
        "gain_b_ms": 1.0,
        "cause_a": "stage_imbalance:1",
        "cause_b": "root",
        "message": "w",
    }
    assert [t["id"] for t in top_findings(a)] == ["stage_imbalance:1"]


def test_specific_cause_claims_its_time_before_the_generic_exposed_finding():
    # exposed 3 ms per step; fusion explains 1.5 ms of it (30 hops x 0.05 ms): exposed_communication keeps the
    # other 1.5 ms, not all 3 (which would leave fusion nothing)
    out = advise(
        {"comm_ops": _small(), "step_breakdown": _sb(3000.0, 0.0, ranks=(0, 1), step_us=10000.0)}, {"step_time_s": 0.01}
    )
    roots = out[out["symptom_of"].isna()].set_index("rule")["gain_ms"]
    assert roots.to_dict() == pytest.approx({"small_packets": 1.5, "exposed_communication": 1.5})


def test_memory_and_tensor_parallel_findings_join_the_one_ranking():
    # tensor parallel: ranks 0 and 1 expose 30 and 50 ms of tensor-parallel all-reduce in a 100 ms step ->
    # gain (30 + 50) / 2 = 40 ms, share 0.40 -> high (>= GAIN_HIGH 0.10); try halves T = 4.
    # memory: 30 GiB of 32 GiB on rank 0 (> 90%), 1e9 parameters, AdamW on 8 ranks: ZeRO stage 1 saves
    # 16e9 - 9e9 = 7e9 B (tests/unit/test_advice_memory.py) -> a root with no gain (memory, not time), ranked after
    # the tensor-parallel finding, its knob kept as the try.
    GiB = 2**30
    ex = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [1, 1],
            "comm_class": ["tensor_parallel"] * 2,
            "time_us": [0.0, 0.0],
            "exposed_us": [30_000.0, 50_000.0],
        }
    )
    steps = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [100_000.0] * 2})
    mem = pd.DataFrame(
        [
            {
                "rank": 0,
                "peak_bytes": 30 * GiB,
                "capacity_bytes": 32 * GiB,
                "params": 1_000_000_000,
                "peak_allocated_bytes": None,
                "peak_reserved_bytes": None,
            }
        ]
    )
    config = {
        "world_size": 8,
        "train": {"optimizer": "adamw", "recompute": False},
        "parallel": {"zero_stage": 0, "pipeline_stages": 1, "tensor_parallel": 4},
    }
    out = advise(
        {"comm_exposure_classes": ex, "steps": steps, "memory": mem, A.CONFIG_KEY: config},
        {"step_time_s": 0.1, "computing_s": 0.06, "communication_not_overlapped_s": 0.02},
    )
    assert list(out["rule"])[:2] == ["tensor_parallel_comm", "memory_near_capacity"]
    tp, m = out.iloc[0], out.iloc[1]
    assert tp["id"] == "tensor_parallel_comm:run" and tp["gain_ms"] == pytest.approx(40.0)
    assert tp["gain_share"] == pytest.approx(0.40) and tp["severity"] == "high"
    assert json.loads(tp["try"]) == {"parallel.tensor_parallel": 2}
    assert tp["predicted_step_ms"] == pytest.approx(100.0 - 40.0)
    assert m["id"] == "memory_near_capacity:0"
    assert m["gain_ms"] is None or math.isnan(m["gain_ms"])
    assert json.loads(m["try"]) == {"parallel.zero_stage": 1} and m["symptom_of"] is None


def test_idle_time_on_the_straggler_folds_under_it():
    # the straggler run of tests/integration/test_advise_try_msrun.py, by hand: rank 1 burns 300 ms of host work
    # before each of 2 steps (free 310 ms per step, rank 0 free 6.6 ms); rank 0 waits for it (exposed 316 ms).
    # slow_rank's gain = its summed lateness / steps = 612 / 2 = 306 ms; free_time (only rank 1 idle > 10%) is why
    # rank 1 is late, so it folds under the straggler with its rank imbalance: one root, the straggler.
    sr = pd.DataFrame(
        [
            {
                "group": "world",
                "scope": "group",
                "rank": 1,
                "n_ops": 106,
                "last_arrivals": 50,
                "mean_lateness_ms": 612.0 / 106,
                "total_lateness_ms": 612.0,
                "statistic": 0.994,
                "critical": 0.9,
                "test": "pair",
                "slow": True,
            }
        ]
    )
    sb = pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "step_us": 336_000.0,
                "computing_us": 10_000.0,
                "communication_not_overlapped_us": 316_000.0 if r == 0 else 13_000.0,
                "free_us": 6_600.0 if r == 0 else 310_000.0,
            }
            for r in (0, 1)
            for s in (2, 3)
        ]
    )
    out = advise(
        {"slow_ranks": sr, "comm_ops": _comm(steps=2, ranks=2, wait=5.0, transit=1.0), "step_breakdown": sb},
        {"step_time_s": 0.336},
    )
    roots = out[out["symptom_of"].isna()]
    top = roots.iloc[0]
    assert top["id"] == "slow_rank:world:1" and top["gain_ms"] == pytest.approx(306.0)
    assert out[out["rule"] == "free_time"].iloc[0]["symptom_of"] == "slow_rank:world:1"
    assert "free_time" not in set(roots["rule"])
    # the same idle time spread over every rank (a slow input pipeline) has no straggler: free_time stays a root
    even = sb.assign(free_us=310_000.0)
    out = advise(
        {"comm_ops": _comm(steps=2, ranks=2, wait=0.0, transit=1.0), "step_breakdown": even}, {"step_time_s": 0.336}
    )
    assert out[out["symptom_of"].isna()].iloc[0]["rule"] == "free_time"


def test_fusion_gain_edges_by_hand():
    """fusion_gain's other paths, hand-computed. _small(): 16 all-reduces per rank and step over 2 ranks, 2 ring
    hops each, 0.05 ms per hop: 30 hops removed per rank and step -> 1.5 ms; basis "50 us per ring hop x 30"."""
    base = _small()
    gain, basis = fusion_gain(base)
    assert gain == pytest.approx(1.5) and "50 us per ring hop x 30 hops per step per rank" in basis
    # without `group` (one group) and without `group_size` (the ranks seen: 2): the same
    gain, _ = fusion_gain(base.drop(columns=["group", "group_size"]))
    assert gain == pytest.approx(1.5)
    # point-to-point transfers are not fused: Send/Recv rows (any case) change nothing
    p2p = base.iloc[:4].assign(op_type=["Send", "recv", "SEND", "Recv"], transit_ms=50.0, elapse_ms=50.0)
    gain, _ = fusion_gain(pd.concat([base, p2p], ignore_index=True))
    assert gain == pytest.approx(1.5)
    # a negative bytes term (times fall with size): latency alone, mean(t) / 2 hops. Two all-reduces per rank and
    # step, 0.11 ms (4 KB) and 0.09 ms (8 KB): lat = (2 x 0.11 + 2 x 0.09) / (4 + 4) = 0.05 ms; 2 hops removed
    two = _small(per_step=2)
    two["transit_ms"] = [0.11 if s == 4096.0 else 0.09 for s in two["size_bytes"]]
    two["elapse_ms"] = two["transit_ms"]
    gain, basis = fusion_gain(two)
    assert gain == pytest.approx(0.1) and "50 us per ring hop x 2 hops" in basis


def test_fusion_gain_not_estimated_says_why():
    base = _small()
    assert fusion_gain(base.drop(columns=["step"])) == (
        None,
        "not estimated: no collective with a size, a time and a step",
    )
    one = base.assign(group_size=1)  # a collective over one rank has no ring hop
    assert fusion_gain(one) == (None, "not estimated: no collective over more than one rank")
    zero = base.assign(transit_ms=0.0, elapse_ms=0.0)  # no time at all: latency 0 is no latency
    assert fusion_gain(zero) == (
        None,
        "not estimated: this run's collectives show no latency term (fit <= 0)",
    )
