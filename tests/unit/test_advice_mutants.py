"""Hand-computed cases of the advice rules' thresholds, gains and decisions that the other advice tests leave open
(found by `make mutation` over analyzers/analyses/advice/: each test fails on a one-line change of a number or a
decision there)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyzers.analyses.advice import (
    aicpu_ops,
    dropped_tokens,
    dynamic_shape,
    expert_imbalance,
    memory_fragmentation,
    slow_link,
    step_time_spread,
)

GiB = 2**30
MiB = 2**20


def _ops(rows, cols=("rank", "core_type", "dur_us", "category", "type")):
    return {"ops_for_checks": pd.DataFrame(rows, columns=list(cols))}


def test_aicpu_ops_counts_kernels_over_20_us_against_the_compute_time():
    # AI_CPU ops (any case, AI_CPU or AICPU): 30 us Cast (rank 0), 26 us Gather (rank 1), 20 us Cast (not > 20);
    # long: 30 + 26 = 56 us = 0.06 ms; compute time 30 + 26 + 20 + 924 = 1000 us (the hcom op is not compute):
    # share 5.6% > 5%: high
    t = _ops(
        [
            (0, "AI_CPU", 30.0, "compute", "Cast"),
            (1, "aicpu", 26.0, "compute", "Gather"),
            (0, "AI_CPU", 20.0, "compute", "Cast"),
            (0, "AI_CORE", 924.0, "compute", "MatMul"),
            (1, "AI_CORE", 5000.0, "communication", "hcom_allReduce"),
        ]
    )
    (row,) = aicpu_ops.find(t, {})
    assert row == {
        "basis": "not estimated: the AI Core kernel that would replace them is not in the profile",
        "severity": "high",
        "ranks": [0, 1],
        "stage": None,
        "message": (
            "2 AI_CPU kernels run longer than 20 us (0.06 ms, 5.6% of compute time), led by Cast, Gather: AI_CPU ops "
            "are slow and serialize with the AI Core; change the data type (e.g. int64/double -> int32/float) or "
            "the code so an AI Core kernel is used."
        ),
        "evidence": "ops[core_type=AI_CPU, dur_us > 20.0]: 2 of 3 AI_CPU ops; Cast 0.030 ms; Gather 0.026 ms",
    }


def test_aicpu_ops_at_exactly_5_percent_is_medium_and_without_a_category_all_ops_are_compute():
    # one 50 us AI_CPU op of 1000 us: 5% is not above 5%
    t = _ops([(0, "AI_CPU", 50.0, "Cast"), (0, "AI_CORE", 950.0, "MatMul")], ("rank", "core_type", "dur_us", "type"))
    (row,) = aicpu_ops.find(t, {})
    assert row["severity"] == "medium" and "5.0% of compute time" in row["message"]
    # 60 us of 1000: 6%, high
    t = _ops([(0, "AI_CPU", 60.0, "Cast"), (0, "AI_CORE", 940.0, "MatMul")], ("rank", "core_type", "dur_us", "type"))
    assert aicpu_ops.find(t, {})[0]["severity"] == "high"


def test_aicpu_ops_says_nothing_without_a_long_ai_cpu_kernel():
    assert (
        aicpu_ops.find(_ops([(0, "AI_CPU", 20.0, "compute", "Cast"), (0, "AI_CORE", 80.0, "compute", "M")]), {}) == []
    )
    assert aicpu_ops.find({}, {}) == []


def test_dynamic_shape_names_the_ranks_whose_every_known_state_is_dynamic():
    # rank 0: dynamic, DYNAMIC, unknown (NaN) -> all known dynamic; rank 1: one static; rank 2: no known state;
    # rank 3: Dynamic. 'dynamic' ops in all: 2 + 1 + 1 = 4
    k = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1, 2, 3],
            "OP State": ["dynamic", "DYNAMIC", None, "dynamic", "static", "other", "Dynamic"],
        }
    )
    (row,) = dynamic_shape.find({"ops_for_checks": k}, {})
    assert row == {
        "basis": "not estimated: the profile does not say what static shapes would cost",
        "severity": "medium",
        "ranks": [0, 3],
        "stage": None,
        "message": (
            "All operators are compiled for dynamic shapes on ranks 0, 3: each launch pays shape inference and "
            "kernel selection. For static shapes disable JIT compile (torch_npu.npu.set_compile_mode(jit_compile="
            "False)) or pad inputs to fixed buckets."
        ),
        "evidence": "ops['OP State']: 4 ops 'dynamic', 0 'static' on ranks 0, 3",
    }
    static = pd.DataFrame({"rank": [0, 1], "OP State": ["static", "other"]})
    assert dynamic_shape.find({"ops_for_checks": static}, {}) == []


def test_step_time_spread_fires_above_110_percent_of_the_median_rank():
    # per-rank medians 1.0, 1.0, 1.0, 1.1, 1.5 s: the ranks' median 1.0 s; 1.1 is not above 1.1 x 1.0;
    # rank 4: gain (1.5 - 1.0) s = 500 ms, 50% above
    ws = pd.DataFrame(
        {"rank": [0, 0, 0, 1, 2, 3, 4, 4, 4], "step_time_s": [1.0, 0.9, 1.2, 1.0, 1.0, 1.1, 1.5, 1.4, 1.6]}
    )
    (row,) = step_time_spread.find({"workload_steps": ws}, {})
    assert row == {
        "key": "4",
        "gain_ms": pytest.approx(500.0),
        "explains": "imbalance",
        "generic": True,
        "basis": "rank 4's median step time above the ranks' median: (1.5000 - 1.0000) s",
        "ranks": [4],
        "severity": "medium",
        "message": "Rank 4's median step time 1.5000 s is 50% above the ranks' median 1.0000 s.",
        "evidence": "workload_steps[rank=4]: median step_time_s 1.5000",
    }


def test_step_time_spread_needs_two_ranks_and_a_positive_median():
    one = pd.DataFrame({"rank": [0, 0], "step_time_s": [1.0, 3.0]})
    assert step_time_spread.find({"workload_steps": one}, {}) == []
    zero = pd.DataFrame({"rank": [0, 1, 2], "step_time_s": [0.0, 0.0, 1.0]})  # median rank 0 s
    assert step_time_spread.find({"workload_steps": zero}, {}) == []


def test_dropped_tokens_above_1_percent_of_routed_tokens():
    assert dropped_tokens.find({"experts": pd.DataFrame({"dropped_fraction": [0.01]})}, {}) == []  # not above
    assert dropped_tokens.find({"experts": pd.DataFrame({"dropped_fraction": [None]})}, {}) == []  # unknown
    (row,) = dropped_tokens.find({"experts": pd.DataFrame({"dropped_fraction": [0.02]})}, {})
    assert row == {
        "basis": "not estimated: dropped tokens cost accuracy, not step time",
        "severity": "medium",
        "message": "2.0% of routed tokens are dropped by the expert capacity limit: raise capacity_factor.",
        "evidence": "experts: mean dropped_fraction 0.0200 over 1 steps",
    }


def test_expert_imbalance_by_max_over_mean_or_cv():
    def find(mm, cv):
        return expert_imbalance.find({"experts": pd.DataFrame({"max_mean_ratio": [mm], "cv": [cv]})}, {})

    assert find(1.5, 0.3) == []  # both exactly at their limits
    assert find(None, None) == []
    (row,) = find(1.6, None)
    assert row == {
        "basis": "not estimated: the step time an even expert load would save is not in the tables",
        "severity": "medium",
        "message": (
            "Expert load is unbalanced (max/mean 1.60, CV nan): raise the auxiliary load-balancing loss coefficient "
            "or the capacity factor."
        ),
        "evidence": "experts: mean max_mean_ratio 1.600, mean cv nan over 1 steps",
    }
    assert find(None, 0.31)[0]["severity"] == "medium"  # the CV alone
    assert find(3.0, 0.1)[0]["severity"] == "medium"  # twice 1.5 is not above it
    assert find(3.1, 0.1)[0]["severity"] == "high"


def test_memory_fragmentation_above_30_percent_of_reserved_and_256_mib():
    mem = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3, 4],
            # rank 0: 1 GiB reserved, 0.5 GiB allocated: 512 MiB > max(0.3 GiB, 256 MiB)
            # rank 1: 512 MiB reserved, 256 MiB allocated: 256 MiB is not above 256 MiB
            # rank 2: 10 GiB reserved, 7.5 GiB allocated: 2.5 GiB is under 30% (3 GiB)
            # rank 3: allocation unknown; rank 4: nothing reserved
            "peak_allocated_bytes": [GiB // 2, 256 * MiB, 15 * GiB // 2, None, 0],
            "peak_reserved_bytes": [GiB, 512 * MiB, 10 * GiB, GiB, 0],
        }
    )
    (row,) = memory_fragmentation.find({"memory": mem}, {})
    assert row == {
        "key": "0",
        "severity": "medium",
        "message": (
            "rank 0: the allocator reserved 1.00 GiB but at most 0.50 GiB was allocated (0.50 GiB, 50% of reserved, "
            "held but unused): fragmentation or a pool sized larger than needed; the headroom is smaller than the "
            "allocations say"
        ),
        "evidence": (
            "memory[rank=0]: peak_reserved_bytes 1073741824 - peak_allocated_bytes 536870912 = 536870912 > 30% of "
            "reserved"
        ),
        "ranks": [0],
        "stage": None,
        "basis": "reserved minus allocated at their peaks (the profiler's own numbers)",
    }
    assert memory_fragmentation.find({"memory": mem.iloc[:0]}, {}) == []
    assert memory_fragmentation.find({}, {}) == []


def _slow_links(comm_steps=(1, 2)):
    sl = pd.DataFrame(
        {
            "slow": [True, True, False],
            "kind": ["link", "rank", "link"],
            "src": [0, 3, 5],
            "dst": [1, 3, 6],
            "group": ["dp", "tp", "dp"],
            "transport": ["HCCS", "RDMA", "HCCS"],
            "time_ms": [3.0, 10.0, 9.0],
            "size_mb": [4.0, 8.0, 1.0],
            "group_mean_gbps": [2.0, 4.0, 2.0],
            "bandwidth_gbps": [1.33, 0.8, 0.1],
            "ratio": [0.3, 0.2, 0.05],
        }
    )
    t = {"slow_links": sl}
    if comm_steps:
        t["comm_ops"] = pd.DataFrame({"step": list(comm_steps)})
    return t


def test_slow_link_gain_is_the_time_above_the_group_mean_bandwidth_per_step():
    a, b = slow_link.find(_slow_links(), {})
    # link 0->1: 4 MB at 2 GB/s = 2 ms; (3 - 2) ms over 2 steps = 0.5 ms; ratio 0.3 is not below 0.3: medium
    assert a == {
        "key": "link:dp:HCCS:0-1",
        "gain_ms": pytest.approx(0.5),
        "explains": "exposed",
        "basis": "the link's time minus the same bytes at the group mean bandwidth: (3.00 - 4.00 MB / 2.00 GB/s) ms "
        "/ 2 steps",
        "ranks": [0, 1],
        "severity": "medium",
        "message": "HCCS link 0->1 reaches 1.33 GB/s, 30% of the group average 2.00 GB/s: check that link/NIC.",
        "evidence": "slow_links[kind=link, group=dp, transport=HCCS, src=0, dst=1]: 4.00 MB in 3.00 ms",
    }
    # rank 3's transport: 8 MB at 4 GB/s = 2 ms; (10 - 2) / 2 = 4 ms; ratio 0.2: high
    assert b["key"] == "rank:tp:RDMA:3-3" and b["gain_ms"] == pytest.approx(4.0)
    assert b["ranks"] == [3] and b["severity"] == "high"
    assert b["message"].startswith("RDMA rank 3 reaches 0.80 GB/s, 20% of")


def test_slow_link_without_steps_has_no_gain():
    a, _ = slow_link.find(_slow_links(comm_steps=()), {})
    assert a["gain_ms"] is None
    assert a["basis"] == "not estimated: steps or the group mean bandwidth unknown"


def _comm(rows):
    return pd.DataFrame(rows, columns=["rank", "op_type", "step", "wait_ms", "transit_ms"])


def test_wait_ratio_fires_above_20_percent_and_1_ms_per_step_high_above_half_and_5_percent_of_the_step():
    from analyzers.analyses.advice import wait_ratio

    co = _comm(
        [
            # rank 0: wait 6, transit 4 over 2 steps: ratio 0.6, 3 ms per step (the send's wait is the bubble's)
            (0, "allreduce", 1, 3.0, 2.0),
            (0, "allreduce", 2, 3.0, 2.0),
            (0, "send", 1, 100.0, 0.0),
            # rank 1: ratio 2 / 10 = 0.2, not above 0.2
            (1, "allreduce", 1, 1.0, 4.0),
            (1, "allreduce", 2, 1.0, 4.0),
            # rank 2: ratio 0.5 (not above 0.5: medium), 1 ms per step (at the minimum: fires)
            (2, "allreduce", 1, 1.0, 1.0),
            (2, "allreduce", 2, 1.0, 1.0),
            # rank 3: ratio 0.9 but 0.9 ms per step
            (3, "allreduce", 1, 0.9, 0.1),
            (3, "allreduce", 2, 0.9, 0.1),
            # rank 4: ratio 4 / 5 = 0.8, 2 ms per step: under 5% of a 60 ms step, medium
            (4, "allreduce", 1, 2.0, 0.5),
            (4, "allreduce", 2, 2.0, 0.5),
        ]
    )
    rows = wait_ratio.find({"comm_ops": co}, {"step_time_s": 0.06})
    assert [r["key"] for r in rows] == ["4", "0", "2"]  # by ratio, largest first
    assert [r["severity"] for r in rows] == ["medium", "high", "medium"]  # rank 0: 3 ms = 5% of 60 ms
    assert [r["gain_ms"] for r in rows] == [pytest.approx(2.0), pytest.approx(3.0), pytest.approx(1.0)]
    assert rows[1] == {
        "key": "0",
        "ranks": [0],
        "gain_ms": pytest.approx(3.0),
        "explains": "exposed",
        "generic": True,
        "basis": "rank 0's collective wait per step: comm_ops wait_ms 6.00 ms / steps",
        "severity": "high",
        "message": (
            "Rank 0 spends 60% of its collective time waiting for peers (> 20%): look for a slow rank, load "
            "imbalance or unsynchronized start."
        ),
        "evidence": (
            "comm_ops[rank=0, op_type not send/recv]: wait 6.00 ms / (wait+transit) 10.00 ms = 0.60; 3.00 ms wait "
            "per step"
        ),
    }
    # the step time unknown: a ratio above 0.5 alone is high
    assert [r["severity"] for r in wait_ratio.find({"comm_ops": co}, {})] == ["high", "high", "medium"]


def test_wait_ratio_without_steps_counts_the_whole_wait_as_one_step():
    from analyzers.analyses.advice import wait_ratio

    # two ops, wait 3 + 3 = 6 ms, transit 2 + 2: ratio 0.6, 6 ms per (one) step
    co = _comm([(0, "allreduce", 1, 3.0, 2.0), (0, "allreduce", 2, 3.0, 2.0)]).drop(columns=["step", "op_type"])
    (row,) = wait_ratio.find({"comm_ops": co}, {})
    assert row["gain_ms"] == pytest.approx(6.0)
    only_p2p = _comm([(0, "recv", 1, 3.0, 2.0)])
    assert wait_ratio.find({"comm_ops": only_p2p}, {}) == []


def _bandwidth(rows):
    return pd.DataFrame(rows, columns=["rank", "transport", "size_mb", "time_ms"])


def test_bandwidth_reference_judges_transfers_of_1_mb_and_more_against_half_the_reference():
    from analyzers.analyses.advice import bandwidth_reference as br

    # reference_bandwidth_gbps in ascend910.yaml: HCCS 18, RDMA 12.5; half of them: 9 and 6.25 GB/s
    cb = _bandwidth(
        [
            (0, "hccs", 4.0, 1.0),  # rank 0 HCCS: 8 MB in 2 ms = 4 GB/s (the 0.5 MB transfer is left out)
            (0, "hccs", 4.0, 1.0),
            (0, "hccs", 0.5, 10.0),
            (1, "HCCS", 9.0, 1.0),  # 9 GB/s: not under 9
            (2, "MCCL", 9.0, 100.0),  # no reference
            (3, "RDMA", 1.0, 1.0),  # 1 MB (at the minimum) in 1 ms: 1 GB/s
            (4, "HCCS", 2.0, 0.0),  # no time: no bandwidth
        ]
    )
    t = {"comm_bandwidth": cb, "comm_ops": pd.DataFrame({"step": [1, 2, 2]})}  # 2 steps
    a, b = br.find(t, {})
    # rank 0: (2 - 8 / 18) / 2 = 0.77778 ms; rank 3: (1 - 1 / 12.5) / 2 = 0.46 ms
    assert a == {
        "key": "HCCS:0",
        "gain_ms": pytest.approx((2 - 8 / 18) / 2),
        "explains": "exposed",
        "basis": "time minus the same bytes at the HCCS reference: (2.00 - 8.00 MB / 18.0 GB/s) ms / 2 steps",
        "ranks": [0],
        "severity": "medium",
        "message": (
            "Rank 0 HCCS bandwidth 4.00 GB/s is under 50% of the HCCS reference 18.0 GB/s for transfers >= 1.0 MB: "
            "check link health, contention with compute (SDMA), or packet sizes."
        ),
        "evidence": "comm_bandwidth[rank=0, transport=HCCS, size_mb>=1.0]: 8.00 MB in 2.00 ms",
    }
    assert b["key"] == "RDMA:3" and b["gain_ms"] == pytest.approx(0.46) and b["ranks"] == [3]
    (a,) = br.find({"comm_bandwidth": cb.iloc[:3]}, {})  # no comm_ops: steps unknown
    assert a["gain_ms"] is None and a["basis"] == "not estimated: the number of profiled steps is unknown"
    assert br.find({"comm_bandwidth": cb.iloc[[2, 4]]}, {}) == []  # nothing of 1 MB with a time


def _imbalance(rows):
    cols = ["group", "kind", "dimension", "max_rank", "min_rank", "max_ms", "min_ms", "spread_ms", "mean_total_ms"]
    return pd.DataFrame(rows, columns=[*cols, "ratio", "flagged"])


def test_rank_imbalance_rows_of_the_flagged_groups():
    from analyzers.analyses.advice import rank_imbalance

    ri = _imbalance(
        [
            # spread 2 ms of a 10 ms mean total: ratio 0.2, not above 0.2: medium
            ("all", "all", "computing", 1, 0, 12.0, 10.0, 2.0, 10.0, 0.2, True),
            ("stage 1", "stage", "free", 3, 2, 5.0, 1.0, 4.0, 16.0, 0.25, True),  # stage 1's group, high
            ("dp 0", "dp", "communication", 0, 1, 3.0, 2.0, 1.0, 10.0, 0.1, False),  # not flagged
        ]
    )
    a, b = rank_imbalance.find({"rank_imbalance": ri}, {})
    assert a == {
        "key": "all:computing",
        "gain_ms": 2.0,
        "explains": "imbalance",
        "generic": False,
        "basis": (
            "the spread between the slowest and the fastest rank of the group, which the others wait for each step: "
            "12.000 - 10.000 ms"
        ),
        "severity": "medium",
        "ranks": [1, 0],
        "stage": None,
        "message": (
            "Rank 1 computes 2.000 ms more per step than rank 0 in all ranks (12.000 vs 10.000 ms): the other ranks "
            "of the group wait for it. Check its data shard / sequence lengths, device frequency and host "
            "interference."
        ),
        "evidence": (
            "rank_imbalance[group=all, dimension=computing]: rank 1 12.000 ms - rank 0 10.000 ms = 2.000 ms / mean "
            "step total 10.000 ms = 0.200 > 0.05 (msprof-analyze slow-rank rule)"
        ),
        "cross_stage": False,
    }
    assert (b["key"], b["explains"], b["generic"], b["severity"], b["stage"]) == (
        "stage 1:free",
        "idle",
        True,
        "high",
        1,
    )
    assert b["message"] == (
        "In group stage 1, rank 3 idles 5.000 ms per step and rank 2 1.000 ms (spread 4.000 ms): host-side delay on "
        "rank 3 (data loading, op dispatch, Python, other processes)."
    )


def test_rank_imbalance_between_ranks_of_two_stages_is_the_pipeline_split():
    from analyzers.analyses.advice import rank_imbalance

    ri = _imbalance([("all", "all", "communication", 1, 0, 3.0, 1.0, 2.0, 10.0, 0.2, True)])
    stages = pd.DataFrame({"rank": [0, 1], "stage": [0, 1]})
    (row,) = rank_imbalance.find({"rank_imbalance": ri, "rank_stages": stages}, {})
    assert row["cross_stage"] is True and row["explains"] == "exposed" and row["generic"] is True
    assert row["message"] == (
        "In all ranks, rank 1 (stage 1) and rank 0 (stage 0) differ by 2.000 ms per step in communication time: "
        "they sit on different pipeline stages, so this is the pipeline split, not a slow rank. Rebalance the "
        "layers across stages (see stage_imbalance)."
    )
    unknown = ri.assign(spread_ms=math.nan)
    assert rank_imbalance.find({"rank_imbalance": unknown}, {})[0]["gain_ms"] is None  # spread unknown: no gain
    (row,) = rank_imbalance.find({"rank_imbalance": ri}, {})  # stages unknown
    assert row["cross_stage"] is False
    assert row["message"].startswith("In all ranks, rank 1 spends 3.000 ms per step in exposed communication and")


def _slow_ranks(rows):
    cols = ["group", "rank", "slow", "scope", "group_kind", "mean_lateness_ms", "n_ops", "total_lateness_ms"]
    return pd.DataFrame(rows, columns=[*cols, "test", "statistic", "critical", "last_arrivals"])


def _two_step_comm(group="dp0", ranks=(0, 1, 2, 3)):
    return pd.DataFrame({"group": group, "rank": list(ranks) * 2, "step": [1] * len(ranks) + [2] * len(ranks)})


def test_slow_rank_gain_is_its_lateness_over_all_collectives_per_step():
    from analyzers.analyses.advice import slow_rank

    sr = _slow_ranks(
        [
            # rank 2: 0.5 ms late on average over 10 collectives, no total: 5 ms in all, over 2 steps: 2.5 ms
            ("dp0", 2, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9),
            ("dp0", 1, True, "group", "dp", 0.5, 10, 3.0, "dixon", 0.8, 0.6, 9),  # its total: 3 / 2 = 1.5 ms
            ("dp0", 3, True, "rank", "dp", 0.5, 10, 3.0, "dixon", 0.8, 0.6, 9),  # not a group-scope row
            ("dp0", 0, False, "group", "dp", 0.5, 10, 3.0, "dixon", 0.8, 0.6, 9),  # not slow
        ]
    )
    a, b = slow_rank.find({"slow_ranks": sr, "comm_ops": _two_step_comm()}, {})
    assert a == {
        "key": "dp0:2",
        "ranks": [2],
        "gain_ms": pytest.approx(2.5),
        "explains": "exposed",
        "cross_stage": False,
        "basis": "straggler lateness x collectives it delays: 5.00 ms late in all (mean 0.50 ms over 10 collectives) "
        "/ 2 steps",
        "severity": "high",
        "message": "Rank 2 is the rank the others wait for in dp group 'dp0' (mean 0.50 ms late per collective). "
        "Check its input pipeline, host load, and compute imbalance.",
        "evidence": "slow_ranks[group=dp0, rank=2]: dixon statistic 0.800 > 0.600, last in 9/10 ops",
    }
    assert b["gain_ms"] == pytest.approx(1.5)
    (a, _) = slow_rank.find({"slow_ranks": sr}, {})  # steps unknown
    assert a["gain_ms"] is None and a["basis"] == "not estimated: the number of profiled steps is unknown"
    assert slow_rank.stragglers({"slow_ranks": sr, "comm_ops": _two_step_comm()}) == {1, 2}
    assert slow_rank.group_members({"comm_ops": _two_step_comm()}) == {"dp0": {0, 1, 2, 3}}


def _cpu_steps(rank2_unprofiled_s, warm=()):
    # ranks 0, 1, 3 burn 1.0, 1.0 and 2.0 s of CPU per step (median 1.0 s); rank 2 1 + 2^-6 s in the profiled
    # steps 2 and 3 (15.625 ms more) and `rank2_unprofiled_s` in the unprofiled steps 0 and 1
    rows = []
    for step in (0, 1, 2, 3):
        prof = step >= 2
        for rank, cpu in ((0, 1.0), (1, 1.0), (3, 2.0), (2, 1.015625 if prof else rank2_unprofiled_s)):
            rows.append((rank, step, cpu, prof))
    rows += list(warm)
    return pd.DataFrame(rows, columns=["rank", "step", "cpu_s", "profiled"])


def test_cpu_excess_is_the_median_excess_over_the_others_in_profiled_and_unprofiled_steps():
    from analyzers.analyses.advice.slow_rank import cpu_excess_ms

    ws = _cpu_steps(1.0078125)  # 7.8125 ms more when not profiled
    assert cpu_excess_ms({"workload_steps": ws}, 2, [0, 1, 2, 3]) == (15.625, 7.8125)
    # a warm-up step (below train.warmup_steps = 1) with a huge excess is left out of the medians
    warm = [(2, -1, 9.0, False), (0, -1, 1.0, False), (2, 0, 9.0, False)]
    t = {"workload_steps": _cpu_steps(1.0078125, warm), "_config": {"train": {"warmup_steps": 1}}}
    assert cpu_excess_ms(t, 2, [0, 1, 3]) == (15.625, 7.8125)
    assert cpu_excess_ms({"workload_steps": ws}, 2, [2]) is None  # no other rank
    assert cpu_excess_ms({"workload_steps": ws}, 7, [0, 1]) is None  # rank 7 is not in the table
    assert cpu_excess_ms({"workload_steps": ws[ws["profiled"]]}, 2, [0, 1, 3]) is None  # no unprofiled step


def test_a_rank_late_only_in_the_profiled_steps_is_the_profilers_work():
    from analyzers.analyses.advice import slow_rank

    sr = _slow_ranks([("dp0", 2, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    t = {"slow_ranks": sr, "comm_ops": _two_step_comm()}
    # unprofiled excess 7.8125 ms is exactly half the profiled 15.625 ms: not below half, a straggler
    (row,) = slow_rank.find({**t, "workload_steps": _cpu_steps(1.0078125)}, {})
    assert "profiler_only" not in row and row["gain_ms"] == pytest.approx(2.5)
    # 3.90625 ms when not profiled: under half, the profiler's work; gain 0
    (row,) = slow_rank.find({**t, "workload_steps": _cpu_steps(1.00390625)}, {})
    assert row["profiler_only"] is True and row["gain_ms"] == 0.0 and row["severity"] == "low"
    assert row["basis"].startswith("0: rank 2 burned 15.62 ms more CPU per step than the group's other ranks in the ")
    assert row["basis"].endswith(
        "(was straggler lateness x collectives it delays: 5.00 ms late in all (mean 0.50 "
        "ms over 10 collectives) / 2 steps)"
    )
    assert row["message"].startswith("Rank 2 arrives last in the profiled steps only: it burned 15.62 ms more CPU")
    assert slow_rank.stragglers({**t, "workload_steps": _cpu_steps(1.00390625)}) == set()
    # no excess at all when profiled (rank 2 burns what the others do): not the profiler's
    ws = _cpu_steps(0.5)
    ws.loc[ws["rank"] == 2, "cpu_s"] = 1.0
    (row,) = slow_rank.find({**t, "workload_steps": ws}, {})
    assert "profiler_only" not in row


def _pipeline(rows):
    cols = ["stage", "bubble_fraction", "ideal_fraction", "window_us", "stages", "micro_batches"]
    return pd.DataFrame(rows, columns=cols)


STAGES = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]})


def test_pipeline_bubble_gain_is_the_excess_over_the_ideal_times_the_window():
    from analyzers.analyses.advice import pipeline_bubble

    # stage 0, S = 2, M = 4: ideal 1/5 = 0.2; bubble medians: 0.4 (the first step's 0.9 is warm-up), window 20 ms;
    # excess 0.2 > 0.1: gain 0.2 x 20 = 4 ms. Twice the micro-batches: (1/5 - 1/9) x 20 ms = 16/9 ms saved
    # stage 1: 0.3 - 0.2 = 0.1, not above 0.1, and the ideal 0.2 is under 0.25: nothing
    pl = _pipeline(
        [
            (0, 0.9, 0.2, 10_000.0, 2, 4),
            (0, 0.4, 0.2, 20_000.0, 2, 4),
            (0, 0.35, 0.2, 20_000.0, 2, 4),
            (1, 0.3, 0.2, 20_000.0, 2, 4),
        ]
    )
    (row,) = pipeline_bubble.find({"pipeline": pl, "rank_stages": STAGES}, {"step_time_s": 0.1})
    assert row == {
        "key": "0",
        "gain_ms": pytest.approx(4.0),
        "explains": "exposed",
        "too_few": False,
        "try": {"parallel.micro_batches": 8},
        "predicted_step_ms": pytest.approx(100.0 - 16 / 9),
        "basis": (
            "the bubble above the ideal (S-1)/(M+S-1) times the stage's window: 0.200 x 20 ms (medians over steps)"
        ),
        "stage": 0,
        "ranks": [0, 1],
        "severity": "medium",
        "message": (
            "Pipeline stage 0 is idle 40% of the pipeline window (ideal 20%): more micro-batches, balance layers "
            "across stages, or an interleaved/1F1B schedule."
        ),
        "evidence": "pipeline[stage=0]: median bubble_fraction 0.400 over 3 steps",
    }
    (row,) = pipeline_bubble.find({"pipeline": pl}, {})  # step time unknown: no prediction; no stages: no ranks
    assert row["predicted_step_ms"] is None and row["try"] == {"parallel.micro_batches": 8} and row["ranks"] == []


def test_pipeline_bubble_of_too_few_micro_batches_gains_what_twice_as_many_save():
    from analyzers.analyses.advice import pipeline_bubble

    # S = 4, M = 4: ideal 3/7 >= 0.25; bubble 0.45, 0.02 above it (not above 0.1); window 77 ms;
    # twice the micro-batches: (3/7 - 3/11) x 77 ms = 12/77 x 77 = 12 ms
    pl = _pipeline([(1, 0.45, 3 / 7, 77_000.0, 4, 4)])
    sb = pd.DataFrame(
        {
            "rank": [0, 2, 3],
            "free_us": [9000.0, 3000.0, 2000.0],  # stage 1 (ranks 2, 3): idle 3 ms > exposed 2 ms
            "communication_not_overlapped_us": [0.0, 1000.0, 2000.0],
        }
    )
    t = {"pipeline": pl, "rank_stages": STAGES, "step_breakdown": sb}
    (row,) = pipeline_bubble.find(t, {"step_time_s": 0.1})
    assert row["gain_ms"] == pytest.approx(12.0) and row["predicted_step_ms"] == pytest.approx(88.0)
    assert row["explains"] == "idle" and row["ranks"] == [2, 3] and row["try"] == {"parallel.micro_batches": 8}
    assert row["basis"] == (
        "the ideal bubble 0.429 at or above 0.25: what twice the micro-batches saves, (ideal(S, M) - ideal(S, 2M)) "
        "x the stage's window 77 ms (median over steps)"
    )
    # exposed communication as large as the idle time: the bubble shows as exposed communication
    sb2 = sb.assign(communication_not_overlapped_us=[0.0, 3000.0, 3000.0])
    (row,) = pipeline_bubble.find({**t, "step_breakdown": sb2}, {})
    assert row["explains"] == "exposed"
    (row,) = pipeline_bubble.find({"pipeline": pl}, {})  # no breakdown: exposed
    assert row["explains"] == "exposed"
    # S = 2, M = 3: the ideal is exactly 0.25: too few; one stage (S = 1): nothing to interleave, no finding
    (row,) = pipeline_bubble.find({"pipeline": _pipeline([(0, 0.3, 0.25, 8_000.0, 2, 3)])}, {})
    # (1/4 - 1/7) x 8 ms = 3/28 x 8 = 6/7 ms
    assert row["gain_ms"] == pytest.approx(6 / 7) and row["try"] == {"parallel.micro_batches": 6}
    assert pipeline_bubble.find({"pipeline": _pipeline([(0, 0.3, 0.25, 8_000.0, 1, 3)])}, {}) == []


def test_pipeline_bubble_with_the_ideal_unknown_fires_above_30_percent():
    from analyzers.analyses.advice import pipeline_bubble

    pl = pd.DataFrame({"stage": [0, 1], "bubble_fraction": [0.3, 0.31], "ideal_fraction": [None, None]})
    (row,) = pipeline_bubble.find({"pipeline": pl}, {"step_time_s": 0.1})
    assert row["key"] == "1" and row["gain_ms"] is None and row["try"] is None
    assert row["predicted_step_ms"] is None
    assert row["basis"] == "not estimated: the ideal bubble (S, M) or the window is unknown"
    assert row["message"].startswith("Pipeline stage 1 is idle 31% of the pipeline window (ideal unknown): ")
    assert row["evidence"] == "pipeline[stage=1]: median bubble_fraction 0.310 over 1 steps"


def _stages(rows):
    return pd.DataFrame(rows, columns=["stage", "computing_ms", "ranks"])


def test_stage_imbalance_above_1_2_times_the_least_stage():
    from analyzers.analyses.advice import stage_imbalance

    # 13 / 10 = 1.3 > 1.2: medium; the stages' mean 11.5 ms; gain 13 - 11.5 = 1.5 ms. A stage with no compute
    # (0 ms) or an unknown one is left out
    st = _stages([(0, 10.0, "0,1"), (1, 13.0, "2,3"), (2, 0.0, "4"), (3, None, "5")])
    (row,) = stage_imbalance.find({"stages": st}, {"step_time_s": 0.1})
    assert row == {
        "try": None,
        "predicted_step_ms": None,
        "key": "1",
        "gain_ms": pytest.approx(1.5),
        "explains": "imbalance",
        "basis": (
            "the slowest stage's compute above the stages' mean, off the critical path when the layers are "
            "rebalanced: 13 - 11.5 ms per step"
        ),
        "severity": "medium",
        "ranks": [2, 3],
        "stage": 1,
        "message": (
            "Pipeline stage 1 is the bottleneck: stage 1 computes 1.3x more than stage 0 (13 vs 10 ms per step). "
            "Move layers off stage 1 (rebalance the layer split) or use more micro-batches."
        ),
        "evidence": (
            "stages[stage=1, ranks 2,3]: computing_ms 13.000; stages[stage=0, ranks 0,1]: computing_ms 10.000; "
            "ratio 1.300 > 1.2"
        ),
    }
    assert stage_imbalance.bottleneck_stage({"stages": st}) == (1, pytest.approx(1.3))
    # a split given by hand: try the balanced one; no breakdown, so the whole 100 ms step scales by 11.5 / 13
    cfg = {"parallel": {"pipeline_split": [2, 16]}}
    (row,) = stage_imbalance.find({"stages": st, "_config": cfg}, {"step_time_s": 0.1})
    assert row["try"] == {"parallel.pipeline_split": None}
    assert row["predicted_step_ms"] == pytest.approx(100.0 * 11.5 / 13.0)
    assert "(rebalance the layer split, now [2, 16] by parallel.pipeline_split)" in row["message"]
    (row,) = stage_imbalance.find({"stages": st, "_config": cfg}, {})
    assert row["try"] == {"parallel.pipeline_split": None} and row["predicted_step_ms"] is None


def test_stage_imbalance_limits():
    from analyzers.analyses.advice import stage_imbalance

    def find(a, b):
        return stage_imbalance.find({"stages": _stages([(0, a, "0"), (1, b, "1")])}, {})

    assert find(10.0, 12.0) == []  # 1.2 is not above 1.2
    assert stage_imbalance.bottleneck_stage({"stages": _stages([(0, 10.0, "0"), (1, 12.0, "1")])}) is None
    assert find(10.0, 15.0)[0]["severity"] == "medium"  # 1.5 is not above 1.5
    assert find(16.0, 10.0)[0]["severity"] == "high" and find(16.0, 10.0)[0]["stage"] == 0
    assert stage_imbalance.find({"stages": _stages([(0, 10.0, "0"), (1, 0.0, "1")])}, {}) == []  # one stage left


def test_time_budget_pools():
    from analyzers.analyses.advice.budget import time_budget

    sb = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1, 2],
            # medians over steps: rank 0 2 ms exposed, 4 ms free, 0.2 ms overlapped; rank 1 is inconsistent (left
            # out); rank 2 1.5 ms exposed, 6 ms free, overlap unknown: the largest rank's: 2, 6 and 0.2 ms
            "communication_not_overlapped_us": [1000.0, 3000.0, 2000.0, 5000.0, 5000.0, 1500.0],
            "free_us": [4000.0, 4000.0, 4000.0, 9000.0, 9000.0, 6000.0],
            "overlapped_us": [100.0, 200.0, 300.0, 900.0, 900.0, None],
            "consistent": [True, True, True, False, False, True],
        }
    )
    # stages: 14 - 10 = 4 ms (0 and unknown left out)
    st = pd.DataFrame({"stage": [0, 1, 2, 3], "computing_ms": [10.0, 14.0, 0.0, None]})
    rs = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 0, 1]})
    ri = pd.DataFrame(
        {
            "dimension": ["computing", "computing", "free", "computing", "computing"],
            "max_rank": [0, 0, 0, 5, 0],
            "min_rank": [2, 3, 2, 6, 1],
            # 3 ms within stage 0; 9 ms across stages 0 and 1 (left out); a free spread (left out); 2.5 ms between
            # ranks of unknown stage; an unknown spread
            "spread_ms": [3.0, 9.0, 20.0, 2.5, None],
        }
    )
    # per-rank median step times 1.0, 1.0, 1.0 + 2^-8 s: the slowest 2^-8 s = 3.90625 ms above the median rank
    ws = pd.DataFrame({"rank": [0, 1, 2, 2], "step_time_s": [1.0, 1.0, 1.00390625, 1.00390625]})
    t = {"step_breakdown": sb, "stages": st, "rank_stages": rs, "rank_imbalance": ri, "workload_steps": ws}
    b = time_budget(t, {"step_time_s": 0.1})
    # imbalance: the stages' 4 ms + the larger of 3, 2.5 and 3.90625 ms
    assert b == {
        "exposed": pytest.approx(2.0),
        "idle": pytest.approx(6.0),
        "overlapped": pytest.approx(0.2),
        "imbalance": pytest.approx(4.0 + 3.90625),
        "step": pytest.approx(100.0),
        "rank_step": pytest.approx(2.0 + 4.0 + 0.2),  # rank 0's parts; rank 2's overlap unknown: left out
    }
    one_rank = ws[ws["rank"] == 0]  # one rank: no step-time spread; 4 + 3 ms
    assert time_budget({**t, "workload_steps": one_rank}, {})["imbalance"] == pytest.approx(7.0)
    assert time_budget({"stages": st}, {})["imbalance"] == pytest.approx(4.0)
    # no stages known: every computing spread is within a stage: the largest of 3, 9 and 2.5 ms
    assert time_budget({"rank_imbalance": ri}, {})["imbalance"] == pytest.approx(9.0)
    assert time_budget({"stages": st.iloc[[0, 2]]}, {}) == {
        "exposed": None,
        "idle": None,
        "overlapped": None,
        "imbalance": None,
        "step": None,
        "rank_step": None,
    }


def _exposure_tables(exposed, p2p, comm=(5000.0, 3000.0, 1000.0, 1000.0), source=None):
    # four ranks, one step each of 10 ms with 5 ms compute; `comm` exposed communication per rank (step_breakdown),
    # `exposed` and `p2p` per rank (comm_exposure)
    sb = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "step": 1,
            "step_us": 10_000.0,
            "computing_us": 5_000.0,
            "communication_not_overlapped_us": list(comm),
        }
    )
    ex = pd.DataFrame(
        {"rank": [0, 1, 2, 3], "step": 1, "exposed_us": exposed, "exposed_p2p_us": p2p, "source": source or "kernels"}
    )
    return {"step_breakdown": sb, "comm_exposure": ex}


BASIS = (
    "the exposed communication per step (step_breakdown communication_not_overlapped_us, median per rank, the most "
    "exposed rank)"
)
# the tables below carry no operators or collectives: the time the collectives waited for a core is unknown, so
# nothing is taken off and the gain is called an upper bound
BASIS_LOAD_UNKNOWN = BASIS + "; an upper bound: the time its collectives waited for a core (load) is unknown"


def test_exposed_communication_mostly_pipeline_send_receive():
    from analyzers.analyses.advice import exposed_communication as ec

    # 10 of 40 ms exposed: 25% > 20%; p2p 3 + 2 of 10 ms = 50%, a majority; ranks with at least half the largest
    # rank's p2p (3 ms): 0 and 1; the gain: the most exposed rank's 5 ms
    t = _exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [3000.0, 2000.0, 0.0, 0.0])
    (row,) = ec.find(t, {"step_time_s": 0.01})
    assert row == {
        "severity": "medium",
        "kind": "pipeline",
        "ranks": [0, 1],
        "stage": None,
        "message": (
            "25% of step time is exposed communication and 50% of it is pipeline send/receive waiting, mostly on "
            "ranks 0, 1: the stages wait for each other, not for gradients. Balance the work across stages (see "
            "stage_imbalance) or use more micro-batches; overlapping gradient all-reduce would not help."
        ),
        "evidence": (
            "step_breakdown: sum communication_not_overlapped_us 10000 / sum step_us 40000; comm_exposure (median "
            "per rank over steps, summed over ranks): pipeline p2p 5.00 ms, collectives 5.00 ms (50% p2p)"
        ),
        "key": "all",
        "gain_ms": pytest.approx(5.0),
        "explains": "exposed",
        "generic": True,
        "basis": BASIS_LOAD_UNKNOWN,
    }
    stages = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]})
    (row,) = ec.find({**t, "rank_stages": stages}, {})  # both on stage 0
    assert row["stage"] == 0 and "mostly on stage 0 (ranks 0, 1): the stages" in row["message"]


def test_exposed_communication_mostly_collectives_and_its_limits():
    from analyzers.analyses.advice import exposed_communication as ec

    # p2p 2 + 2 of 10 ms = 40%: collectives; collective time per rank 3, 1, 1, 1 ms: rank 0 alone >= 1.5 ms
    t = _exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [2000.0, 2000.0, 0.0, 0.0])
    (row,) = ec.find(t, {})
    assert (row["kind"], row["ranks"], row["severity"]) == ("collective", [0], "medium")
    assert row["message"] == (
        "25% of step time is communication not hidden behind compute (> 20%), 60% of it in collectives (most on "
        "ranks 0): overlap gradient all-reduce with backward, fuse/bucket gradients, compress gradients, or use "
        "fewer, larger collectives."
    )
    assert row["try"] == {"parallel.grad_compression": "fp16"} and row["predicted_step_ms"] is None  # no comm_ops
    # the profiler counts rank 2's send with its collectives
    rough = ["kernels", "kernels", "profiler (receive only)", "kernels"]
    (row,) = ec.find(_exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [2000.0, 2000.0, 0.0, 0.0], source=rough), {})
    assert row["message"] == (
        "25% of step time is communication not hidden behind compute (> 20%), at least 40% of it pipeline "
        "receives; on ranks 2 the profiler counts send / batchSendRecv with the collectives, so how much is "
        "gradient all-reduce is not known without the kernels: check comm_types before overlapping or bucketing "
        "gradients."
    )
    # 16 of 40 ms = 40%: not above twice 20%, medium; 20 of 40 ms: high
    t40 = _exposure_tables([4000.0] * 4, [0.0] * 4, comm=[4000.0] * 4)
    assert ec.find(t40, {})[0]["severity"] == "medium"
    t50 = _exposure_tables([5000.0] * 4, [0.0] * 4, comm=[5000.0] * 4)
    assert ec.find(t50, {})[0]["severity"] == "high"
    # 8 of 40 ms = 20%: not above it
    assert ec.find(_exposure_tables([2000.0] * 4, [0.0] * 4, comm=[2000.0] * 4), {}) == []
    # a MindSpore script has no compression to try
    script = {"_config": {"workload": "script", "script": {"framework": "mindspore"}}}
    (row,) = ec.find({**t, **script}, {})
    assert "try" not in row
    (row,) = ec.find({**t, "_config": {"workload": "script", "script": {"framework": "pytorch"}}}, {})
    assert row["try"] == {"parallel.grad_compression": "fp16"}


def test_exposed_communication_with_the_split_unknown():
    from analyzers.analyses.advice import exposed_communication as ec

    t = _exposure_tables([0.0] * 4, [0.0] * 4)  # nothing exposed in comm_exposure: the split is unknown
    (row,) = ec.find(t, {})
    assert row["kind"] == "collective" and row["ranks"] == [] and row["stage"] is None
    assert row["message"] == (
        "25% of step time is communication not hidden behind compute (> 20%); which ops it is (pipeline "
        "send/receive or gradient collectives) is unknown: see comm_types."
    )
    assert row["evidence"] == "step_breakdown: sum communication_not_overlapped_us 10000 / sum step_us 40000"
    assert row["gain_ms"] == pytest.approx(5.0) and row["basis"] == BASIS_LOAD_UNKNOWN


def test_exposed_communication_of_the_faster_stages_waiting_for_the_bottleneck():
    from analyzers.analyses.advice import exposed_communication as ec

    # stage 1 computes 15 / 10 = 1.5x stage 0; stage 0's ranks 0, 1 carry 5 + 3 of the 10 ms exposed: 80% > 2 of 4
    # ranks; their p2p (3 + 2.5) / 8 = 69%; mean 4 ms per step
    t = _exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [3000.0, 2500.0, 0.0, 0.0])
    t["rank_stages"] = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]})
    t["stages"] = pd.DataFrame({"stage": [0, 1], "computing_ms": [10.0, 15.0], "ranks": ["0,1", "2,3"]})
    (row,) = ec.find(t, {})
    assert (row["kind"], row["ranks"], row["stage"]) == ("pipeline", [0, 1], None)
    assert row["message"] == (
        "25% of step time is exposed communication, most of it on the ranks of the faster stages (ranks 0, 1: 4 ms "
        "per step, 69% pipeline send/receive) while stage 1 computes 1.5x more: they wait for stage 1. Fix the "
        "stage imbalance first (see stage_imbalance); overlapping gradient all-reduce would not remove this wait."
    )
    # the faster stage carrying exactly its share (half of the ranks, half of the time): not waiting; the split
    # (p2p 5.5 of 10 ms) names pipeline send/receive
    even = _exposure_tables([2500.0] * 4, [1500.0, 1500.0, 1250.0, 1250.0])
    (row,) = ec.find({**even, "rank_stages": t["rank_stages"], "stages": t["stages"]}, {})
    assert row["message"].startswith("25% of step time is exposed communication and 55% of it is pipeline")


def test_step_ms_n_steps_and_stage_ranks():
    from analyzers.analyses.advice.common import n_steps, stage_ranks, step_ms

    assert step_ms({"step_time_s": 0.25}) == 250.0 and step_ms({"step_time_s": 2}) == 2000.0
    for bad in (0, -1.0, math.inf, math.nan, "0.1", None):
        assert step_ms({"step_time_s": bad}) is None
    assert step_ms(None) is None
    # steps 1, 2 and one that is not a number: 2 steps
    assert n_steps({"comm_ops": pd.DataFrame({"step": [1, 1, 2, "x"]})}) == 2
    assert n_steps({"comm_ops": pd.DataFrame({"step": ["x"]})}) is None
    assert n_steps({"comm_ops": pd.DataFrame({"rank": [0]})}) is None
    rs = pd.DataFrame({"rank": [3, 1, 2, 0], "stage": [1, 1, None, 0]})
    assert stage_ranks({"rank_stages": rs}, 1) == [1, 3] and stage_ranks({"rank_stages": rs}, "0") == [0]
    assert stage_ranks({}, 0) == []


def test_finish_sets_share_severity_basis_and_the_roots_prediction():
    from analyzers.analyses.advice.engine import _finish, severity

    def row(**kw):
        base = {"gain_ms": 5.0, "basis": None, "try": {"b": 1, "a": 2}, "predicted_step_ms": None}
        return {**base, "symptom_of": None, **kw}

    r = row()
    _finish(r, 100.0)  # 5 of 100 ms: 5%, medium; the root's step 100 - 5 ms
    assert r == {
        "gain_ms": 5.0,
        "basis": "not estimated",
        "try": '{"a": 2, "b": 1}',
        "predicted_step_ms": 95.0,
        "symptom_of": None,
        "gain_share": 0.05,
        "severity": "medium",
    }
    r = row(symptom_of="x:all", basis="b")
    _finish(r, 100.0)  # a symptom predicts nothing
    assert r["predicted_step_ms"] is None and r["basis"] == "b"
    r = row(predicted_step_ms=90.0)
    _finish(r, 100.0)  # the rule's own prediction stands
    assert r["predicted_step_ms"] == 90.0
    r = row(severity="high")
    _finish(r, None)  # no step: no share, the rule's label stays
    assert r["gain_share"] is None and r["severity"] == "high" and r["predicted_step_ms"] is None
    r = row(gain_ms=None)
    _finish(r, 100.0)
    assert r["gain_share"] is None and r["predicted_step_ms"] is None and r["severity"] == "medium"
    r = row(**{"try": None})
    _finish(r, 100.0)
    assert r["try"] is None and r["predicted_step_ms"] is None
    assert [severity({"gain_share": s}) for s in (0.1, 0.0999, 0.03, 0.0299)] == ["high", "medium", "medium", "low"]
    assert severity({"gain_share": None, "severity": "low"}) == "low" and severity({}) == "medium"


def test_unprofiled_scale_and_serial_share():
    from analyzers.analyses.advice.small_packets import serial_share, unprofiled_scale

    assert unprofiled_scale({"profiled_step_time_s": 2.0, "step_time_s": 1.0}) == 0.5
    assert unprofiled_scale({"profiled_step_time_s": 1.0, "step_time_s": 2.0}) == 1.0  # at most 1
    for bad in (0, None, math.inf, -1.0, "1"):
        assert unprofiled_scale({"profiled_step_time_s": bad, "step_time_s": 1.0}) == 1.0
        assert unprofiled_scale({"profiled_step_time_s": 2.0, "step_time_s": bad}) == 1.0
    assert unprofiled_scale(None) == 1.0
    df = pd.DataFrame(
        {
            "rank": 0,
            "step": 1,
            "group": ["a", "a", "b", "b", "c", "c", "a"],
            # a: [0, 10] and [5, 15] cover 15 of 20 us summed; b: [0, 10] and [20, 30], 20 of 20; c: no elapse; the
            # last (start unknown) is left out
            "start": [0.0, 5.0, 0.0, 20.0, 0.0, 1.0, None],
            "elapse": [10.0, 10.0, 10.0, 10.0, 0.0, 0.0, 10.0],
        }
    )
    s = serial_share(df)
    assert s[(0, 1, "a")] == pytest.approx(0.75) and s[(0, 1, "b")] == pytest.approx(1.0)
    assert math.isnan(s[(0, 1, "c")])
    assert serial_share(df.iloc[[6]]).empty and serial_share(df.iloc[[6]]).dtype == float
    # two collectives of 0.25 us at once: 0.25 of 0.5 us covered, however short
    tiny = pd.DataFrame({"rank": 0, "step": 1, "group": "d", "start": [0.0, 0.0], "elapse": [0.25, 0.25]})
    assert serial_share(tiny)[(0, 1, "d")] == pytest.approx(0.5)


def _packets(n_small, n_large, ranks=2, steps=2, small_ms=1.0):
    # per rank and step: n_small collectives of 1 KiB (small_ms each) and n_large of 2 MiB (1 ms each)
    rows = [
        (r, s, size, ms)
        for r in range(ranks)
        for s in range(steps)
        for size, ms, n in ((1024, small_ms, n_small), (2 << 20, 1.0, n_large))
        for _ in range(n)
    ]
    return pd.DataFrame(rows, columns=["rank", "step", "size_bytes", "elapse_ms"])


def test_small_packets_fires_at_20_percent_of_collectives_and_their_time_and_2_per_step(monkeypatch):
    from analyzers.analyses.advice import small_packets

    seen = []
    monkeypatch.setattr(
        small_packets, "fusion_gain", lambda co, observed=False: (seen.append(observed), (10.0, "b"))[1]
    )
    # 2 small + 8 large per rank and step: 8 of 40 small (20%, at the limit), 8 of their 40 ms; 10 per step per rank
    co = _packets(2, 8)
    (row,) = small_packets.find({"comm_ops": co}, {"profiled_step_time_s": 2.0, "step_time_s": 1.0})
    assert row == {
        "key": "all",
        "gain_ms": 5.0,  # 10 ms x the unprofiled 1 s over the profiled 2 s
        "basis": "b, x 0.5 (unprofiled / profiled step)",
        "explains": "exposed",
        "also_explains": (),
        "try": {"parallel.comm_fusion": "all"},
        "severity": "medium",
        "message": (
            "20% of collectives (20% of their time) move less than 1 MiB, 10 collectives per step per rank: fuse "
            "gradients into larger buckets (comm_fusion) or raise the batch size."
        ),
        "evidence": "comm_ops: 8/40 ops with size_bytes < 1048576, median size 2097152 B",
    }
    assert seen == [False]
    (row,) = small_packets.find({"comm_ops": co}, {})  # no step records: the fitted gain stands
    assert row["gain_ms"] == 10.0 and row["basis"] == "b"
    cpu = {"ops_for_checks": pd.DataFrame({"core_type": ["CPU"]})}
    (row,) = small_packets.find({"comm_ops": co, **cpu}, {})
    assert row["also_explains"] == ("overlapped",) and seen[-1] is True
    assert small_packets.find({"comm_ops": _packets(2, 9)}, {}) == []  # 8 of 44: under 20%
    assert small_packets.find({"comm_ops": _packets(2, 8, small_ms=0.1)}, {}) == []  # 0.8 of 32.8 ms
    # 5 of 10 small: high; one rank, one step, 2 collectives: at the minimum per step (two to fuse); 1: too few
    assert small_packets.find({"comm_ops": _packets(5, 5)}, {})[0]["severity"] == "high"
    assert small_packets.find({"comm_ops": _packets(4, 6)}, {})[0]["severity"] == "medium"
    assert len(small_packets.find({"comm_ops": _packets(2, 0, ranks=1, steps=1)}, {})) == 1
    assert small_packets.find({"comm_ops": _packets(1, 0, ranks=1, steps=1)}, {}) == []
    # only the kinds bucketing merges count: 2 small all-reduces, or a reduce-scatter and an all-gather (ZeRO), fire;
    # small broadcasts (DDP's buffers), sends and all-to-alls beside 5 large all-reduces do not
    kinds = _packets(2, 0, ranks=1, steps=1)
    for ops in (["allreduce", "AllReduce"], ["reducescatter", "allgather"]):
        assert len(small_packets.find({"comm_ops": kinds.assign(op_type=ops)}, {})) == 1
    for other in ("broadcast", "send", "alltoall"):
        mixed = pd.concat([_packets(2, 0, ranks=1, steps=1).assign(op_type=other),
                           _packets(0, 5, ranks=1, steps=1).assign(op_type="allreduce")])  # fmt: skip
        assert small_packets.find({"comm_ops": mixed}, {}) == [], other
    # without step and rank columns: one step, one rank; no elapse: the time share is the count share
    bare = _packets(8, 0, ranks=1, steps=1).drop(columns=["rank", "step", "elapse_ms"])
    (row,) = small_packets.find({"comm_ops": bare}, {})
    assert row["message"].startswith("100% of collectives (100% of their time) move less than 1 MiB, 8 collectives")
    monkeypatch.setattr(small_packets, "fusion_gain", lambda co, observed=False: (None, "no latency"))
    (row,) = small_packets.find({"comm_ops": co}, {"profiled_step_time_s": 2.0, "step_time_s": 1.0})
    assert row["gain_ms"] is None and row["basis"] == "no latency"


def _tp_tables(cfg=None):
    ex = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1],
            "step": [1, 1, 2, 1, 2],
            "comm_class": ["tensor_parallel", "data_parallel", "tensor_parallel", "tensor_parallel", "tensor_parallel"],
            "exposed_us": [30_000.0, 5_000.0, 20_000.0, 10_000.0, 5_000.0],
        }
    )
    # rank 0's steps take 100 ms, rank 1's first 50 ms and its second none (left out)
    steps = pd.DataFrame(
        {"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2], "start_us": [0.0, 1e5, 0.0, 5e4], "end_us": [1e5, 2e5, 5e4, 5e4]}
    )
    return {"comm_exposure_classes": ex, "steps": steps, "_config": cfg or {}}


def test_tensor_parallel_share_is_the_mean_over_rank_steps_of_each_steps_own_time():
    from analyzers.analyses.advice import tensor_parallel_comm as tpc

    # exposed tp per rank-step: 30 / 100, 20 / 100, 10 / 50: mean share (0.3 + 0.2 + 0.2) / 3 = 0.2333 > 0.2;
    # mean 20 ms exposed; mean step (100 + 100 + 50) / 3 = 83.33 ms. 8 ranks at tensor_parallel=4: 2 data-parallel
    # replicas already, so tensor_parallel=2 adds no collective and the gain is all 20 ms
    cfg = {"parallel": {"tensor_parallel": 4}, "train": {"batch_size": 8}, "world_size": 8}
    (row,) = tpc.find(_tp_tables(cfg), {"step_time_s": 0.1})
    assert row == {
        "key": "run",
        "severity": "medium",
        "message": (
            "Tensor-parallel all-reduce is 23% of the step (20.0 ms exposed per step, tensor_parallel=4): lower "
            "parallel.tensor_parallel (more data parallel instead) or keep each tensor-parallel group within a node "
            "(its all-reduces run twice per transformer block in forward and in backward)."
        ),
        "evidence": (
            "comm_exposure_classes[comm_class=tensor_parallel]: 20.00 ms exposed per rank and step (mean over 3 "
            "rank-steps) / step 83.33 ms = 0.23 (> 0.2)"
        ),
        "ranks": [0, 1],
        "stage": None,
        "gain_ms": pytest.approx(20.0),
        "explains": "exposed",
        "basis": (
            "the exposed tensor-parallel all-reduce time per step (upper bound); tensor_parallel=2 adds no collective "
            "(already data parallel)"
        ),
        "try": {"parallel.tensor_parallel": 2, "train.batch_size": 4},
    }
    # without the steps table: the run's 100 ms step; (30 + 20 + 10 + 5) / 4 = 16.25 ms is 16% of it: nothing
    t = _tp_tables(cfg)
    del t["steps"]
    assert tpc.find(t, {"step_time_s": 0.1}) == []
    # with 60 ms: 16.25 / 60 = 27%
    (row,) = tpc.find(t, {"step_time_s": 0.06})
    assert row["gain_ms"] == pytest.approx(16.25) and row["severity"] == "medium"
    (row,) = tpc.find(t, {"step_time_s": 0.04})  # 16.25 / 40 = 41%: high
    assert row["severity"] == "high"
    assert tpc.find(t, {}) == []  # no step time at all
    odd = {"parallel": {"tensor_parallel": 3}, "train": {"batch_size": 8}}
    assert tpc.find(_tp_tables(odd), {})[0]["try"] is None
    (row,) = tpc.find(_tp_tables({"parallel": {"tensor_parallel": 2}, "train": {"batch_size": 3}}), {})
    assert row["try"] == {"parallel.tensor_parallel": 1}
    (row,) = tpc.find(_tp_tables(), {})
    assert row["try"] is None and "tensor_parallel=" not in row["message"]


# 2^28 parameters: 1 GiB of fp32; Adam (2 states): 1 + 1 + 2 = 4 GiB of model states unsharded; 8 ranks in 2
# pipeline stages: 4 data-parallel ranks; ZeRO 1 shards the optimizer state: 1 + 1 + 0.5 = 2.5 GiB (1.5 GiB saved);
# ZeRO 2 the gradients too: 1 + 0.25 + 0.5 = 1.75 GiB (0.75 GiB saved)
P = 2**28
MEM_CFG = {"parallel": {"pipeline_stages": 2}, "world_size": 8, "train": {"optimizer": "adam"}}
# 30 ms exposed communication: a parameter broadcast costs 30 x 4 / (2 x 3) = 20 ms; recompute 90 / 3 = 30 ms
MEM_SUMMARY = {"communication_not_overlapped_s": 0.03, "computing_s": 0.09, "step_time_s": 0.5}
ZERO1_HOW = (
    "ZeRO stage 1: shards optimizer state over 4 data-parallel ranks, adds a broadcast of the parameters each step"
)
RECOMPUTE_HOW = "recompute the blocks' activations in backward (one more forward)"


def test_knob_options_savings_and_costs_by_hand():
    from analyzers.analyses.advice.memory_near_capacity import knob_options

    # activations: 29 GiB peak - 5 GiB baseline - 4 GiB model states = 20 GiB; recompute keeps 30%: 14 GiB saved
    opts = knob_options(29.0 * GiB, P, MEM_CFG, MEM_SUMMARY, 5.0 * GiB)
    assert opts == [
        {"try": {"parallel.zero_stage": 1}, "saving_bytes": 1.5 * GiB, "time_cost_ms": pytest.approx(20.0),
         "how": ZERO1_HOW},
        {"try": {"train.recompute": True}, "saving_bytes": pytest.approx(14.0 * GiB), "time_cost_ms":
         pytest.approx(30.0), "how": RECOMPUTE_HOW},
    ]  # fmt: skip
    z1 = knob_options(29.0 * GiB, P, {**MEM_CFG, "parallel": {"pipeline_stages": 2, "zero_stage": 1}}, MEM_SUMMARY)
    assert z1[0]["saving_bytes"] == 0.75 * GiB and z1[0]["try"] == {"parallel.zero_stage": 2}
    assert z1[0]["how"].startswith("ZeRO stage 2: shards gradients over 4 data-parallel ranks")
    # ZeRO 1 leaves 2.5 GiB of states: 29 - 2.5 = 26.5 GiB of activations, 70% of it
    assert z1[1]["saving_bytes"] == pytest.approx(0.7 * 26.5 * GiB)
    z2 = {**MEM_CFG, "parallel": {"pipeline_stages": 2, "zero_stage": 2}, "train": {"recompute": True}}
    assert knob_options(29.0 * GiB, P, z2, MEM_SUMMARY) == []  # nothing left
    # no exposed communication: the broadcast's cost is unknown and it sorts last
    opts = knob_options(29.0 * GiB, P, MEM_CFG, {"computing_s": 0.09}, 5.0 * GiB)
    assert [o["time_cost_ms"] for o in opts] == [pytest.approx(30.0), None]
    # one data-parallel rank: no ZeRO; SGD (no state) with momentum's default unknown: 1 + 1 GiB of states; the
    # compute time falls back to the step: 0.3 s / 3 = 100 ms
    one = {"parallel": {"pipeline_stages": 2}, "world_size": 2, "train": {"optimizer": "sgd"}}
    (o,) = knob_options(10.0 * GiB, P, one, {"step_time_s": 0.3})
    assert o["saving_bytes"] == pytest.approx(0.7 * 8.0 * GiB) and o["time_cost_ms"] == pytest.approx(100.0)
    # the measured ResNet-50 share: it keeps 12.7 of 16.6
    (o,) = knob_options(10.0 * GiB, P, {**one, "workload": "resnet50"}, {})
    assert o["saving_bytes"] == pytest.approx((1 - 12.7 / 16.6) * 8.0 * GiB) and o["time_cost_ms"] == 0.0
    # the default optimizer (momentum, 1 state): 3 GiB of states
    (o,) = knob_options(10.0 * GiB, P, {"world_size": 1}, {})
    assert o["saving_bytes"] == pytest.approx(0.7 * 7.0 * GiB)


def _capacity(peak_gib, baseline_gib=None, params=P, rank=0):
    return {
        "memory": pd.DataFrame(
            {
                "rank": [rank],
                "peak_bytes": [peak_gib * GiB],
                "capacity_bytes": [32.0 * GiB],
                "params": [params],
                "baseline_bytes": [None if baseline_gib is None else baseline_gib * GiB],
            }
        ),
        "_config": MEM_CFG,
    }


def test_near_capacity_picks_the_cheapest_knob_under_85_percent():
    from analyzers.analyses.advice import memory_near_capacity as mnc

    basis = (
        "memory model (perfbench/predict/memory.py): ZeRO-paper model states from the parameter count; cheapest knob "
        "by predicted time cost that brings the peak under 85% of capacity"
    )
    # 29 of 32 GiB (90.6% > 90%); 85% is 27.2 GiB: ZeRO 1 leaves 27.5 GiB (no fit), recompute 15 GiB (fits)
    (row,) = mnc.find(_capacity(29.0, 5.0), MEM_SUMMARY)
    assert row == {
        "key": "0",
        "severity": "high",
        "message": (
            "rank 0: peak memory 29.00 GiB is 91% of its 32.0 GiB: try train.recompute=True (" + RECOMPUTE_HOW + "): "
            "predicted saving 14.00 GiB -> 15.00 GiB (fits), ~30 ms more per step"
        ),
        "evidence": "memory[rank=0]: peak_bytes 31138512896 / capacity_bytes 34359738368 = 90.6%",
        "ranks": [0],
        "stage": None,
        "basis": basis,
        "try": {"train.recompute": True},
    }
    # 16 ranks, 8 data-parallel: ZeRO 1 leaves 1 + 1 + 2 / 8 = 2.25 GiB of states (1.75 GiB saved): 28.9 GiB ->
    # 27.15 GiB fits, at 30 x 8 / (2 x 7) = 17.1 ms, less than recompute's 30
    t = _capacity(28.9, 5.0)
    t["_config"] = {**MEM_CFG, "world_size": 16}
    (row,) = mnc.find(t, MEM_SUMMARY)
    assert row["try"] == {"parallel.zero_stage": 1}
    assert row["message"] == (
        "rank 0: peak memory 28.90 GiB is 90% of its 32.0 GiB: try parallel.zero_stage=1 (ZeRO stage 1: shards "
        "optimizer state over 8 data-parallel ranks, adds a broadcast of the parameters each step): predicted saving "
        "1.75 GiB -> 27.15 GiB (fits), ~17 ms more per step"
    )
    # 31.5 GiB with a 30 GiB baseline: no activations to recompute; ZeRO 1 (30 GiB) does not fit but saves most
    (row,) = mnc.find(_capacity(31.5, 30.0), {"communication_not_overlapped_s": 0.0})
    assert row["try"] == {"parallel.zero_stage": 1}
    assert row["message"].endswith(
        "predicted saving 1.50 GiB -> 30.00 GiB (still does not fit; the largest saving), unknown time cost"
    )
    assert mnc.find(_capacity(28.8), MEM_SUMMARY) == []  # exactly 90%: not above
    (row,) = mnc.find(_capacity(29.0, params=None), MEM_SUMMARY)
    assert row["try"] is None and row["basis"] == "no parameter count in the memory table"
    assert row["message"] == (
        "rank 0: peak memory 29.00 GiB is 91% of its 32.0 GiB; the parameter count is unknown, so no knob's saving "
        "can be predicted"
    )
    t = _capacity(29.0)
    t["_config"] = {**MEM_CFG, "parallel": {"pipeline_stages": 2, "zero_stage": 2}, "train": {"recompute": True}}
    (row,) = mnc.find(t, MEM_SUMMARY)
    assert row["try"] is None and row["basis"] == "memory model: no knob left"


def test_covered_excess_counts_the_wall_time_beyond_the_floors_once():
    from analyzers.analyses.advice.common import covered_excess_ms

    # one after another: [0, 2] and [3, 4] ms, 0.5 and 0.25 ms over their floors: 3 ms covered, 2.25 ms when each is
    # cut short by its excess: 0.75 ms, the summed excess
    assert covered_excess_ms([0.0, 3000.0], [2.0, 1.0], [0.5, 0.25]) == pytest.approx(0.75)
    # at once, both [0, 2] ms with 0.5 ms each: the step lost 0.5 ms, once
    assert covered_excess_ms([0.0, 0.0], [2.0, 2.0], [0.5, 0.5]) == pytest.approx(0.5)
    assert covered_excess_ms([0.0], [2.0], [0.0]) == 0.0  # at its floor: nothing
    assert covered_excess_ms([0.0], [2.0], [-1.0]) == 0.0  # below the floor counts as 0
    assert covered_excess_ms([0.0], [2.0], [5.0]) == pytest.approx(2.0)  # at most its own time


def _idle(free, ranks=(0, 1, 2)):
    # two 10 ms steps per rank, 5 ms of compute; `free`: the free_us of each rank's two steps
    rows = [(r, s + 1, 10_000.0, 5_000.0, free[i][s]) for i, r in enumerate(ranks) for s in range(2)]
    return pd.DataFrame(rows, columns=["rank", "step", "step_us", "computing_us", "free_us"])


# rank 0: 3 + 1 ms free (median 2), rank 1: 4 + 4 ms, rank 2: 1 + 1 ms (10% of its steps: not above)
FREE = [(3000.0, 1000.0), (4000.0, 4000.0), (1000.0, 1000.0)]
IDLE_MSG = (
    "{}% of step time nothing runs on the device (> 10%): the host is the bottleneck (data loading, Python overhead, "
    "op dispatch); try graph mode, data prefetch, more workers."
)
IDLE_BASIS = "the idle time per step no op runs in (step_breakdown free_us, median per rank, the most idle rank"


def _window(stage_windows):
    return pd.DataFrame(
        [(st, step, w) for st, w in stage_windows for step in (1, 2)], columns=["stage", "step", "window_us"]
    )


def test_free_time_share_gain_and_idle_ranks():
    from analyzers.analyses.advice import free_time

    # 14 of 60 ms free: 23%; the most idle rank's median 4 ms; ranks above 10% of their steps: 0 (20%) and 1 (40%)
    (row,) = free_time.find({"step_breakdown": _idle(FREE)}, {})
    assert row == {
        "key": "all",
        "severity": "medium",
        "gain_ms": pytest.approx(4.0),
        "explains": "idle",
        "basis": IDLE_BASIS + ")",
        "ranks": [0, 1],
        "message": IDLE_MSG.format(23),
        "evidence": "step_breakdown: sum free_us 14000 / sum step_us 60000",
    }
    even = [(1000.0, 1000.0)] * 3  # 6 of 60 ms: 10%, not above
    assert free_time.find({"step_breakdown": _idle(even)}, {}) == []


def test_free_time_outside_and_inside_the_pipeline_window_of_balanced_stages():
    from analyzers.analyses.advice import free_time

    # a 7 ms window in 10 ms steps: outside it at most 3 ms, at most the free time: rank 0 3 and 1 ms (median 2),
    # rank 1 3 ms, rank 2 1 ms: 6 of 30 ms = 20% > 10%; the gain the most idle rank's 3 ms; ranks above 10%: 0, 1
    t = {"step_breakdown": _idle(FREE), "pipeline": _window([(0, 7000.0), (1, 7000.0)])}
    (row,) = free_time.find(t, {})
    assert row["gain_ms"] == pytest.approx(3.0) and row["ranks"] == [0, 1] and "in_pipeline" not in row
    assert row["basis"] == (
        "the idle time per step outside the pipeline window (median over steps of step_us - window_us, the most "
        "idle rank): the idle time inside the window is the pipeline's bubble (pipeline_bubble)"
    )
    assert row["message"] == IDLE_MSG.format(23)
    assert row["evidence"] == (
        "step_breakdown: sum free_us 14000 / sum step_us 60000; pipeline: median window_us 7000, idle outside it per "
        "rank (median over steps of step_us - window_us, at most free_us): rank 0 2000 us, rank 1 3000 us, rank 2 "
        "1000 us"
    )
    # stage windows 9 and 10 ms: the median 9.5 ms; 0.5 ms outside per rank: 1.5 of 30 ms, inside the window
    t["pipeline"] = _window([(0, 9000.0), (1, 10000.0)])
    (row,) = free_time.find(t, {})
    assert row["in_pipeline"] is True and row["gain_ms"] == pytest.approx(4.0)
    assert row["message"] == (
        "23% of step time nothing runs on the device, inside the pipeline window: the pipeline's fill and drain (its "
        "bubble; see pipeline_bubble) and the host cost of the stages' own ops."
    )
    assert "pipeline: median window_us 9500," in row["evidence"]


def test_free_time_of_the_slowest_stage():
    from analyzers.analyses.advice import free_time

    # stage 1 (ranks 1, 2) computes 1.5x stage 0: only its ranks count: 10 of 40 ms = 25%, the gain rank 1's 4 ms
    t = {
        "step_breakdown": _idle(FREE),
        "stages": pd.DataFrame({"stage": [0, 1], "computing_ms": [10.0, 15.0]}),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2], "stage": [0, 1, 1]}),
    }
    on = "; ranks of the slowest pipeline stage 1; the other stages' idle time waits for it)"
    (row,) = free_time.find(t, {})
    assert (row["gain_ms"], row["ranks"], row["basis"]) == (pytest.approx(4.0), [1], IDLE_BASIS + on)
    assert row["message"] == IDLE_MSG.format(25)
    # its 7 ms window: 3 + 1 ms outside of 20 ms = 20%: the host's time between steps, rank 1's 3 ms
    (row,) = free_time.find({**t, "pipeline": _window([(0, 1000.0), (1, 7000.0)])}, {})
    assert row["gain_ms"] == pytest.approx(3.0) and row["ranks"] == [1]
    assert row["basis"] == (
        "the idle time per step outside the pipeline window on the slowest stage 1's ranks (median over steps of "
        "step_us - window_us, the most idle rank): the idle time inside the window is the stage's own host cost and "
        "its fill/drain wait (stage_imbalance)"
    )
    assert row["message"] == (
        "20% of step time nothing runs on the device outside the pipeline's forward/backward window (> 10%): the "
        "host is the bottleneck between steps (data loading, Python overhead, optimizer dispatch); try data "
        "prefetch, more workers, graph mode."
    )
    assert row["evidence"].endswith(
        "; pipeline[stage=1]: median window_us 7000, idle outside it per rank (median over steps of step_us - "
        "window_us, at most free_us): rank 1 3000 us, rank 2 1000 us"
    )
    # a 9.5 ms window: 0.5 ms outside per rank, 5%: inside, it moves with the layer split
    (row,) = free_time.find({**t, "pipeline": _window([(1, 9500.0)])}, {})
    assert row["in_pipeline"] is True
    assert row["message"] == (
        "25% of step time nothing runs on the device on the slowest pipeline stage 1, inside the pipeline window: "
        "the host cost of its own layers (op dispatch) and its wait at the pipeline's fill and drain. Both move with "
        "the layer split (see stage_imbalance)."
    )


def test_free_time_other_than_the_straggler():
    from analyzers.analyses.advice import free_time

    sr = _slow_ranks([("dp0", 1, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    # rank 1 is late; ranks 0 and 2: 6 of 40 ms = 15% > 10%: their idle time, rank 0's 2 ms; a window is not used
    t = {"step_breakdown": _idle(FREE), "slow_ranks": sr, "pipeline": _window([(0, 7000.0)])}
    (row,) = free_time.find(t, {})
    assert (row["gain_ms"], row["ranks"]) == (pytest.approx(2.0), [0])
    assert (
        row["basis"] == IDLE_BASIS + "; ranks other than the straggler 1: its idle time is why it is late (slow_rank))"
    )
    assert row["message"] == IDLE_MSG.format(15)
    # the others idle only 10%: the straggler's own idle time stays in (it folds under the straggler)
    quiet = [(1000.0, 1000.0), (4000.0, 4000.0), (1000.0, 1000.0)]
    (row,) = free_time.find({"step_breakdown": _idle(quiet), "slow_ranks": sr}, {})
    assert row["ranks"] == [1] and row["gain_ms"] == pytest.approx(4.0) and row["basis"] == IDLE_BASIS + ")"


def test_knob_options_defaults():
    from analyzers.analyses.advice.memory_near_capacity import knob_options

    # no exposed communication: ZeRO's cost is unknown, it sorts after recompute. No pipeline_stages: one stage,
    # 4 data-parallel ranks; an optimizer the table does not know: 1 state, as momentum: 1 + 1 + 1 GiB of states,
    # ZeRO 1 keeps 1 + 1 + 0.25 GiB: 0.75 GiB saved
    (_, z) = knob_options(10.0 * GiB, P, {"world_size": 4, "train": {"optimizer": "lion"}}, {"computing_s": 0.0})
    assert z["saving_bytes"] == 0.75 * GiB and "over 4 data-parallel ranks" in z["how"]
    # two data-parallel ranks still shard: 1 + 1 + 0.5 GiB, 0.5 GiB saved
    (_, z) = knob_options(10.0 * GiB, P, {"world_size": 2}, {"computing_s": 0.0})
    assert z["saving_bytes"] == 0.5 * GiB
    assert [o["try"] for o in knob_options(10.0 * GiB, P, {}, {})] == [{"train.recompute": True}]  # one rank


def test_exposed_communication_pipeline_ranks_partly_of_unknown_stage():
    from analyzers.analyses.advice import exposed_communication as ec

    t = _exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [3000.0, 2000.0, 0.0, 0.0])
    t["rank_stages"] = pd.DataFrame({"rank": [0], "stage": [0]})  # rank 1's stage unknown
    (row,) = ec.find(t, {})
    assert row["stage"] == 0 and "mostly on stage 0 (ranks 0, 1)" in row["message"]


def test_tensor_parallel_step_time_of_a_bad_step_record_is_unknown():
    from analyzers.analyses.advice import tensor_parallel_comm as tpc

    t = _tp_tables()
    # rank 1's first step has no readable end: left out; 30 / 100 and 20 / 100: 25% of 100 ms
    t["steps"] = t["steps"].astype({"end_us": object})
    t["steps"].loc[2, "end_us"] = "?"
    t["steps"]["start_us"] = t["steps"]["start_us"].astype(object)
    t["steps"].loc[3, "start_us"] = "?"  # rank 1's second step: no readable start either (it took no time anyway)
    (row,) = tpc.find(t, {})
    assert row["gain_ms"] == pytest.approx(25.0) and row["evidence"].endswith("/ step 100.00 ms = 0.25 (> 0.2)")
    del t["steps"]  # the run's 60 ms step: (30 + 20 + 10 + 5) / 4 = 16.25 ms, 27%
    (row,) = tpc.find(t, {"step_time_s": 0.06})
    assert row["evidence"] == (
        "comm_exposure_classes[comm_class=tensor_parallel]: 16.25 ms exposed per rank and step (mean over 4 "
        "rank-steps) / step 60.00 ms = 0.27 (> 0.2)"
    )


def test_near_capacity_fits_at_exactly_85_percent_and_names_the_rank():
    from analyzers.analyses.advice import memory_near_capacity as mnc

    # 20 GiB: 85% is 17 GiB; 18.5 GiB (92.5%) less ZeRO 1's 1.5 GiB is 17 GiB: fits (at most 85%); recompute frees
    # 0.7 x (18.5 - 14 - 4) = 0.35 GiB only
    t = _capacity(18.5, 14.0, rank=3)
    t["memory"]["capacity_bytes"] = 20.0 * GiB
    (row,) = mnc.find(t, MEM_SUMMARY)
    assert row["try"] == {"parallel.zero_stage": 1} and "(fits)" in row["message"]
    assert row["message"].startswith("rank 3: peak memory 18.50 GiB is 92% of its 20.0 GiB: try parallel.zero_stage=1")
    for t, basis in (
        (_capacity(29.0, params=None, rank=3), "no parameter count in the memory table"),
        (_capacity(29.0, rank=3), "memory model: no knob left"),
    ):
        if basis.endswith("left"):
            t["_config"] = {
                **MEM_CFG,
                "parallel": {"pipeline_stages": 2, "zero_stage": 2},
                "train": {"recompute": True},
            }
        (row,) = mnc.find(t, MEM_SUMMARY)
        assert (row["key"], row["ranks"], row["basis"]) == ("3", [3], basis)
        assert row["evidence"] == "memory[rank=3]: peak_bytes 31138512896 / capacity_bytes 34359738368 = 90.6%"
    assert row["message"] == (
        "rank 3: peak memory 29.00 GiB is 91% of its 32.0 GiB; zero_stage is at 2 (or one data-parallel rank) and "
        "recompute is on: fewer samples per micro-batch (parallel.micro_batches) or more ranks are left"
    )


def test_knob_options_order_and_empty_activations():
    from analyzers.analyses.advice.memory_near_capacity import knob_options

    # recompute at 30 / 3 = 10 ms is cheaper than ZeRO's 20 ms: first
    opts = knob_options(29.0 * GiB, P, MEM_CFG, {**MEM_SUMMARY, "computing_s": 0.03})
    assert [list(o["try"]) for o in opts] == [["train.recompute"], ["parallel.zero_stage"]]
    # no compute time: recompute costs 0 ms, ZeRO 0.06 x 4 / 6 = 0.04 ms: recompute first
    opts = knob_options(29.0 * GiB, P, MEM_CFG, {"communication_not_overlapped_s": 0.00006})
    assert [o["time_cost_ms"] for o in opts] == [0.0, pytest.approx(0.04)]
    # a peak under the model states and the baseline: nothing to recompute, exactly 0 bytes
    opts = knob_options(5.0 * GiB, P, MEM_CFG, MEM_SUMMARY, 3.0 * GiB)
    assert opts[1]["saving_bytes"] == 0.0
    # no baseline: 10 - 4 GiB of activations, 70% of it, to the byte
    (_, r) = knob_options(10.0 * GiB, P, MEM_CFG, MEM_SUMMARY)
    assert r["saving_bytes"] == pytest.approx(0.7 * 6.0 * GiB, rel=1e-13)


def test_pipeline_bubble_pool_with_parts_of_the_breakdown_unknown():
    from analyzers.analyses.advice import pipeline_bubble

    pl = _pipeline([(1, 0.45, 3 / 7, 77_000.0, 4, 4)])  # too few micro-batches (see above)

    def pool(sb):
        t = {"pipeline": pl, "rank_stages": STAGES} | ({} if sb is None else {"step_breakdown": sb})
        return pipeline_bubble.find(t, {})[0]["explains"]

    assert pool(None) == "exposed"  # stages known, no breakdown
    assert pool(pd.DataFrame({"free_us": [9000.0]})) == "exposed"  # no rank column
    # idle unknown, 0.5 ms exposed: exposed; 0.5 ms idle, exposed unknown: idle
    assert pool(pd.DataFrame({"rank": [2], "communication_not_overlapped_us": [500.0]})) == "exposed"
    assert pool(pd.DataFrame({"rank": [2], "free_us": [500.0]})) == "idle"


def test_free_time_window_of_steps_the_profile_says_took_no_time():
    from analyzers.analyses.advice import free_time

    # one rank, steps of 0, 0 and 10 ms (5 ms free): its median step is 0 ms, so is its idle time outside the window:
    # nothing outside, the finding is inside the window
    sb = pd.DataFrame(
        {
            "rank": 0,
            "step": [1, 2, 3],
            "step_us": [0.0, 0.0, 10_000.0],
            "computing_us": [0.0, 0.0, 5_000.0],
            "free_us": [0.0, 0.0, 5_000.0],
        }
    )
    (row,) = free_time.find({"step_breakdown": sb, "pipeline": _window([(0, 1000.0)])}, {})
    assert row["in_pipeline"] is True
    # steps of 0.4 us with 0.2 us free and a 0.1 us window: 0.2 of 0.4 us outside it, 50%
    tiny = pd.DataFrame({"rank": 0, "step": [1], "step_us": [0.4], "computing_us": [0.2], "free_us": [0.2]})
    (row,) = free_time.find({"step_breakdown": tiny, "pipeline": _window([(0, 0.1)])}, {})
    assert "in_pipeline" not in row and row["gain_ms"] == pytest.approx(0.0002)


def test_free_time_outside_the_window_names_only_the_ranks_idle_outside_it():
    from analyzers.analyses.advice import free_time

    # a 9 ms window; rank 0: 10 ms steps, 3 ms free, 1 ms outside (10%: not above); rank 1: 12 ms steps, 4 ms free,
    # 3 ms outside (25%): 4 of 22 ms outside, 18%; both ranks idle above 10% of their steps, only rank 1 outside
    sb = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "step": [1, 2, 1, 2],
            "step_us": [10_000.0, 10_000.0, 12_000.0, 12_000.0],
            "computing_us": 5_000.0,
            "free_us": [3000.0, 3000.0, 4000.0, 4000.0],
        }
    )
    (row,) = free_time.find({"step_breakdown": sb, "pipeline": _window([(0, 9000.0)])}, {})
    assert row["ranks"] == [1] and row["gain_ms"] == pytest.approx(3.0)
    # one rank, 10 ms steps, 2 ms free, a 9 ms window: 1 ms outside, exactly 10%: inside the window
    one = sb[sb["rank"] == 0].assign(free_us=2000.0)
    (row,) = free_time.find({"step_breakdown": one, "pipeline": _window([(0, 9000.0)])}, {})
    assert row["in_pipeline"] is True


def test_fusion_gain_on_the_host_counts_collectives_that_ran_at_once_together():
    from analyzers.analyses.advice.small_packets import fusion_gain

    # one rank, one step, one group: three barriers (1 ring hop each over 2 ranks, no bytes term) of 2 ms transit;
    # the fit's latency: 2 ms per hop; one fused barrier: max(the longest 2 ms, 2 ms x 1 hop) = 2 ms. They ran at
    # [0, 2], [1, 3] and [1, 3] ms: 3 of their 6 ms covered, serial share 0.5: 6 x 0.5 - 2 = 1 ms removed
    co = pd.DataFrame(
        {
            "rank": 0,
            "step": 1,
            "op_type": "barrier",
            "group_size": 2,
            "group": "g",
            "size_bytes": 1024.0,
            "transit_ms": 2.0,
            "start_us": [0.0, 1000.0, 1000.0],
            "elapse_ms": 2.0,
        }
    )
    gain, basis = fusion_gain(co, observed=True)
    assert gain == pytest.approx(1.0)
    assert basis == (  # 2 ms = 2e+03 us per hop; 3 collectives, 1 fused: 2 fewer
        "the collectives' own time fusion removes (operators on the host CPU: each collective also waits for its "
        "ranks to be scheduled, one fused collective once): per rank and step their summed time less one fused "
        "collective's (2e+03 us per ring hop and the bytes term fitted on this run's fastest collectives, at least "
        "the longest of them), 2 collectives fewer per step"
    )
    assert fusion_gain(co.drop(columns=["rank"]), observed=True) == (
        None,
        "not estimated: no collective with a size, a time and a step",
    )
    # a group size that is not a number is unknown: the ranks that took part (one here): no ring hop to fit
    assert fusion_gain(co.assign(group_size="?"), observed=True) == (
        None,
        "not estimated: no collective over more than one rank",
    )


def test_step_time_spread_of_two_ranks_whose_median_is_not_one_second():
    # per-rank medians 0.5 and 0.7 s: the ranks' median (0.5 + 0.7) / 2 = 0.6 s; 1.1 x 0.6 = 0.66 < 0.7: rank 1
    # fires, gain (0.7 - 0.6) s = 100 ms, 0.7 / 0.6 - 1 = 16.7% -> "17%"; rank 0 (0.5 s) does not
    ws = pd.DataFrame({"rank": [0, 0, 1, 1], "step_time_s": [0.4, 0.6, 0.7, 0.7]})
    (row,) = step_time_spread.find({"workload_steps": ws}, {})
    assert row["key"] == "1" and row["ranks"] == [1]
    assert row["gain_ms"] == pytest.approx(100.0)
    assert row["message"] == "Rank 1's median step time 0.7000 s is 17% above the ranks' median 0.6000 s."
    # without the rank or the step-time column there is nothing to compare
    assert step_time_spread.find({"workload_steps": ws[["step_time_s"]]}, {}) == []
    assert step_time_spread.find({"workload_steps": ws[["rank"]]}, {}) == []


def test_wait_ratio_per_step_of_one_step_and_of_steps_unknown():
    from analyzers.analyses.advice import wait_ratio

    # one step: wait 3 ms, transit 1 ms: ratio 0.75, 3 ms in that one step
    (row,) = wait_ratio.find({"comm_ops": _comm([(0, "allreduce", 7, 3.0, 1.0)])}, {})
    assert row["gain_ms"] == pytest.approx(3.0)
    # the step column is there but unknown (no step counted): the whole 3 ms is one step's, not 3 / 0
    (row,) = wait_ratio.find({"comm_ops": _comm([(0, "allreduce", None, 3.0, 1.0)])}, {})
    assert row["gain_ms"] == pytest.approx(3.0)


def test_rank_imbalance_and_slow_link_without_the_flag_column_say_nothing():
    from analyzers.analyses.advice import rank_imbalance

    ri = _imbalance([("all", "all", "computing", 1, 0, 12.0, 10.0, 2.0, 10.0, 0.2, True)])
    assert rank_imbalance.find({"rank_imbalance": ri.drop(columns=["flagged"])}, {}) == []
    sl = _slow_links()
    assert slow_link.find({**sl, "slow_links": sl["slow_links"].drop(columns=["slow"])}, {}) == []


def test_rank_imbalance_of_an_unknown_spread_has_no_gain():
    from analyzers.analyses.advice import rank_imbalance

    ri = _imbalance([("all", "all", "computing", 1, 0, 12.0, 10.0, math.nan, 10.0, 0.2, True)])
    (row,) = rank_imbalance.find({"rank_imbalance": ri}, {})
    assert row["gain_ms"] is None


def test_expert_imbalance_evidence_has_three_decimals():
    # max/mean 1.23456 (not above 1.5), cv 0.31234 > 0.3: evidence 1.235 and 0.312, message 1.23 and 0.31
    (row,) = expert_imbalance.find({"experts": pd.DataFrame({"max_mean_ratio": [1.23456], "cv": [0.31234]})}, {})
    assert row["evidence"] == "experts: mean max_mean_ratio 1.235, mean cv 0.312 over 1 steps"
    assert "(max/mean 1.23, CV 0.31)" in row["message"]


def test_memory_fragmentation_looks_at_every_rank_after_one_that_does_not_fire():
    # rank 0: nothing wasted (1 GiB of 1 GiB); rank 1: 1 GiB reserved, 0.5 GiB allocated: 512 MiB > max(0.3 GiB,
    # 256 MiB)
    mem = pd.DataFrame({"rank": [0, 1], "peak_allocated_bytes": [GiB, GiB // 2], "peak_reserved_bytes": [GiB, GiB]})
    assert [r["key"] for r in memory_fragmentation.find({"memory": mem}, {})] == ["1"]


def test_stage_imbalance_says_how_long_the_least_computing_stage_waits():
    from analyzers.analyses.advice import stage_imbalance

    # stage 0 (ranks 0, 1) computes 10 ms, stage 1 (ranks 2, 3) 13 ms: 1.3x. Stage 0's exposed communication:
    # rank 0 4 ms (3 ms send/receive), rank 1 2 ms (1 ms): mean (4 + 2) / 2 = 3 ms, p2p (3 + 1) / (4 + 2) = 67%
    t = _exposure_tables([4000.0, 2000.0, 500.0, 500.0], [3000.0, 1000.0, 0.0, 0.0])
    t["stages"] = _stages([(0, 10.0, "0,1"), (1, 13.0, "2,3")])
    t["rank_stages"] = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]})
    (row,) = stage_imbalance.find(t, {})
    assert row["message"] == (
        "Pipeline stage 1 is the bottleneck: stage 1 computes 1.3x more than stage 0 (13 vs 10 ms per step). "
        "Stage 0 spends 3 ms per step (median) in exposed communication (67% pipeline send/receive), waiting for "
        "it. Move layers off stage 1 (rebalance the layer split) or use more micro-batches."
    )


def test_profiler_only_needs_a_positive_profiled_excess_of_any_size():
    from analyzers.analyses.advice import slow_rank

    sr = _slow_ranks([("dp0", 2, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    t = {"slow_ranks": sr, "comm_ops": _two_step_comm()}
    # rank 2 burns what the others' median does when profiled (excess 0 ms) and 2^-7 s = 7.8125 ms less when not:
    # -7.8125 < 0.5 x 0, but nothing extra was burned while profiled: a straggler
    ws = _cpu_steps(1.0 - 0.0078125)
    ws.loc[(ws["rank"] == 2) & ws["profiled"], "cpu_s"] = 1.0
    (row,) = slow_rank.find({**t, "workload_steps": ws}, {})
    assert "profiler_only" not in row and row["gain_ms"] == pytest.approx(2.5)
    # 2^-10 s = 0.9765625 ms more when profiled (under 1 ms is still more) and none otherwise: the profiler's
    ws = _cpu_steps(1.0)
    ws.loc[(ws["rank"] == 2) & ws["profiled"], "cpu_s"] = 1.0009765625
    (row,) = slow_rank.find({**t, "workload_steps": ws}, {})
    assert row["profiler_only"] is True and row["gain_ms"] == 0.0
    said = (
        "rank 2 burned 0.98 ms more CPU per step than the group's other ranks in the profiled steps and 0.00 ms in the "
        "unprofiled ones (workload_steps cpu_s, median over the measured steps)"
    )
    was = "slow_ranks[group=dp0, rank=2]: dixon statistic 0.800 > 0.600, last in 9/10 ops"
    assert row["evidence"] == f"{was}; workload_steps: {said}"
    assert row["message"] == (
        "Rank 2 arrives last in the profiled steps only: it burned 0.98 ms more CPU per step than the others while "
        "profiled and 0.00 ms otherwise. That is the profiler's own work on this rank, not a straggler of the job."
    )


def test_slow_rank_of_a_group_of_unknown_kind():
    from analyzers.analyses.advice import slow_rank

    sr = _slow_ranks([("dp0", 2, True, "group", None, 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    (row,) = slow_rank.find({"slow_ranks": sr, "comm_ops": _two_step_comm()}, {})
    assert row["message"].startswith("Rank 2 is the rank the others wait for in group 'dp0' (mean 0.50 ms late")


def test_cpu_excess_needs_every_column_and_reads_numbers_from_text():
    from analyzers.analyses.advice.slow_rank import cpu_excess_ms

    ws = _cpu_steps(1.0078125)  # 15.625 ms more when profiled, 7.8125 ms when not (as above)
    for col in ("rank", "step", "cpu_s", "profiled"):
        assert cpu_excess_ms({"workload_steps": ws.drop(columns=[col])}, 2, [0, 1, 3]) is None
    # steps and CPU times written as text are read as numbers; an unreadable one is left out
    text = ws.astype({"step": str, "cpu_s": str})
    assert cpu_excess_ms({"workload_steps": text}, 2, [0, 1, 3]) == (15.625, 7.8125)
    bad = pd.DataFrame([(0, "?", 5.0, False), (2, 1, "?", False)], columns=ws.columns)
    assert cpu_excess_ms({"workload_steps": pd.concat([text, bad])}, 2, [0, 1, 3]) == (15.625, 7.8125)
    # a column the excess does not read, unknown on rank 2's unprofiled steps, leaves them in
    other = ws.assign(wall_s=[None if (r == 2 and not p) else 1.0 for r, p in zip(ws["rank"], ws["profiled"])])
    assert cpu_excess_ms({"workload_steps": other}, 2, [0, 1, 3]) == (15.625, 7.8125)


def test_cpu_excess_takes_the_median_of_a_ranks_records_of_one_step():
    from analyzers.analyses.advice.slow_rank import cpu_excess_ms

    # rank 2 has three records of unprofiled step 0: 1.0078125, 1.0078125 and 1.5 s: median 1.0078125 s (the mean
    # would be 1.171875 s); step 1's 1.0078125 s: unprofiled excess 7.8125 ms either step
    ws = _cpu_steps(1.0078125)
    extra = pd.DataFrame([(2, 0, 1.0078125, False), (2, 0, 1.5, False)], columns=ws.columns)
    assert cpu_excess_ms({"workload_steps": pd.concat([ws, extra])}, 2, [0, 1, 3]) == (15.625, 7.8125)


def test_group_members_needs_group_and_rank_and_leaves_unreadable_ranks_out():
    from analyzers.analyses.advice import slow_rank

    co = _two_step_comm(ranks=(0, 1))
    assert slow_rank.group_members({"comm_ops": co.drop(columns=["group"])}) == {}
    assert slow_rank.group_members({"comm_ops": co.drop(columns=["rank"])}) == {}
    co = pd.concat([co, pd.DataFrame({"group": ["dp0"], "rank": ["?"], "step": [1]})])
    assert slow_rank.group_members({"comm_ops": co}) == {"dp0": {0, 1}}


def test_stragglers_keep_a_rank_late_within_one_stage_while_the_stages_are_unbalanced():
    from analyzers.analyses.advice import slow_rank

    # stage 1 computes 13 / 10 = 1.3x stage 0 (a bottleneck); rank 2 is late in dp0, whose ranks 0, 1 all sit on
    # stage 0 and which is no pp group: its lateness is its own, not the split's
    sr = _slow_ranks([("dp0", 1, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    t = {
        "slow_ranks": sr,
        "comm_ops": _two_step_comm(ranks=(0, 1)),
        "stages": _stages([(0, 10.0, "0,1"), (1, 13.0, "2,3")]),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]}),
    }
    assert slow_rank.stragglers(t) == {1}


def test_transfer_ms_is_the_transit_else_the_elapse_less_the_wait():
    from analyzers.analyses.advice.common import transfer_ms

    # transit known: it is the transfer time, whatever elapse and wait say
    co = pd.DataFrame({"transit_ms": [2.0, 3.0], "elapse_ms": [10.0, 10.0], "wait_ms": [1.0, 1.0]})
    assert transfer_ms(co).tolist() == [2.0, 3.0]
    # transit unknown everywhere: elapse - wait, an unknown wait counted as 0: 5 - 1.5 = 3.5, 6 - 0 = 6
    co = pd.DataFrame({"transit_ms": [None, None], "elapse_ms": [5.0, 6.0], "wait_ms": [1.5, None]})
    assert transfer_ms(co).tolist() == [3.5, 6.0]
    assert transfer_ms(co.drop(columns=["transit_ms"])).tolist() == [3.5, 6.0]


def test_exposure_split_of_ranks_whose_median_exposure_is_zero():
    from analyzers.analyses.advice.common import exposure_split

    # rank 0 exposes 5 ms in one of three steps: 15 ms in all (> 0), but its median over steps is 0: no share
    ex = pd.DataFrame({"rank": 0, "step": [1, 2, 3], "exposed_us": [0.0, 0.0, 15000.0], "exposed_p2p_us": 0.0})
    share, per = exposure_split({"comm_exposure": ex}, pd.DataFrame({"rank": [0]}))
    assert share is None and per["exposed_us"].tolist() == [0.0]


def test_the_load_excess_on_an_accelerator_is_zero_computed_once_or_on_its_own():
    from analyzers.analyses.advice.common import LOAD_EXCESS_KEY, load_excess, with_load_excess

    # operators ran on the AI Core, not the host CPU: no time waiting for a host core (0 ms), not unknown
    t = {"ops_for_checks": pd.DataFrame({"core_type": ["AI_CORE"]})}
    assert with_load_excess(t)[LOAD_EXCESS_KEY] == 0.0
    assert load_excess(t) == 0.0


def test_free_time_names_the_ranks_idle_over_10_percent_of_their_own_steps():
    from analyzers.analyses.advice import free_time

    # rank 0: 5000 of 10000 us idle (50%); rank 1: steps of 0 us (left out, whatever its idle time); rank 2: 0.5 of
    # 1 us (50%: steps under a microsecond still count); rank 3: 500 of 10000 (5%)
    sb = pd.DataFrame({"rank": [0, 1, 2, 3], "free_us": [5000.0, 5.0, 0.5, 500.0], "step_us": [1e4, 0.0, 1.0, 1e4]})
    row = free_time._row(sb, 0.2, "")
    assert row["ranks"] == [0, 2]
    assert row["gain_ms"] == pytest.approx(5.0)  # the most idle rank's 5000 us


def test_pipeline_window_reads_text_leaves_out_empty_windows_and_needs_its_columns():
    from analyzers.analyses.advice.free_time import pipeline_window_us

    # stage 1: step 1 a 0.5 us window (under 1 us still counts), step 2 windows 0 (left out) and 4 us: median 4 us;
    # a row of an unreadable stage and one of an unreadable step are left out
    pl = pd.DataFrame(
        [("1", 1, 0.5), ("1", 2, 0.0), ("1", 2, 4.0), ("x", 1, 9.0), ("1", "?", 7.0)],
        columns=["stage", "step", "window_us"],
    )
    w = pipeline_window_us({"pipeline": pl}, 1)
    assert w.to_dict() == {1.0: 0.5, 2.0: 4.0}
    assert pipeline_window_us({"pipeline": pl[pl["window_us"] == 0.0]}, 1) is None  # no window known
    for col in ("stage", "step", "window_us"):
        assert pipeline_window_us({"pipeline": pl.drop(columns=[col])}, None) is None


def test_free_time_other_than_two_stragglers():
    from analyzers.analyses.advice import free_time

    # ranks 1 and 2 are late; ranks 0 and 3 idle 3 + 1 + 1 + 1 = 6 of 40 ms = 15% > 10%: their idle time, rank 0's
    # median 2 ms; of them only rank 0 idles above 10% of its steps (20%; rank 3 10%)
    sr = _slow_ranks(
        [
            ("dp0", 1, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9),
            ("dp0", 2, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9),
        ]
    )
    sb = _idle([(3000.0, 1000.0), (4000.0, 4000.0), (4000.0, 4000.0), (1000.0, 1000.0)], ranks=(0, 1, 2, 3))
    (row,) = free_time.find({"step_breakdown": sb, "slow_ranks": sr}, {})
    assert (row["gain_ms"], row["ranks"]) == (pytest.approx(2.0), [0])
    assert row["basis"] == (
        IDLE_BASIS + "; ranks other than the stragglers 1, 2: its idle time is why it is late (slow_rank))"
    )
    assert row["message"] == IDLE_MSG.format(15)


def test_free_time_of_a_slowest_stage_none_of_whose_ranks_was_profiled():
    from analyzers.analyses.advice import free_time

    # stage 1 computes 1.5x stage 0, but its ranks 5 and 6 are not in the breakdown: every profiled rank counts,
    # as with no stages (14 of 60 ms, rank 1's 4 ms; ranks 0 and 1 above 10%)
    t = {
        "step_breakdown": _idle(FREE),
        "stages": pd.DataFrame({"stage": [0, 1], "computing_ms": [10.0, 15.0]}),
        "rank_stages": pd.DataFrame({"rank": [0, 5, 6], "stage": [0, 1, 1]}),
    }
    (row,) = free_time.find(t, {})
    assert (row["gain_ms"], row["ranks"], row["basis"]) == (pytest.approx(4.0), [0, 1], IDLE_BASIS + ")")
    assert row["message"] == IDLE_MSG.format(23)


def test_aicpu_ops_names_the_five_longest_types_and_their_ms():
    # six AI_CPU op types, 2000 + 1900 + ... + 1500 us: the five longest lead; 2000 us = 2.000 ms
    rows = [(0, "AI_CPU", 2000.0 - 100.0 * i, "compute", f"T{i}") for i in range(6)]
    (row,) = aicpu_ops.find(_ops(rows + [(0, "AI_CORE", 1e6, "compute", "MatMul")]), {})
    assert "led by T0, T1, T2, T3, T4: AI_CPU ops" in row["message"]
    assert row["evidence"] == (
        "ops[core_type=AI_CPU, dur_us > 20.0]: 6 of 6 AI_CPU ops; T0 2.000 ms; T1 1.900 ms; T2 1.800 ms; T3 1.700 ms; "
        "T4 1.600 ms"
    )
    no_core = _ops(rows)["ops_for_checks"].drop(columns=["core_type"])  # where an op ran is unknown
    assert aicpu_ops.find({"ops_for_checks": no_core}, {}) == []


def test_aicpu_ops_share_of_compute_time_unknown_or_under_one_microsecond():
    # the long AI_CPU op is not a compute op and nothing else is: the compute time is 0, the share unknown (medium)
    (row,) = aicpu_ops.find(_ops([(0, "AI_CPU", 30.0, "other", "Cast")]), {})
    assert (
        row["severity"] == "medium" and "(0.03 ms, share of compute time unknown: no compute kernels)" in row["message"]
    )
    # 0.5 us of compute time: 30 / 0.5 = 6000% of it, high
    (row,) = aicpu_ops.find(_ops([(0, "AI_CPU", 30.0, "other", "Cast"), (0, "AI_CORE", 0.5, "compute", "M")]), {})
    assert row["severity"] == "high" and "6000.0% of compute time" in row["message"]


def test_time_budget_imbalance_edges():
    from analyzers.analyses.advice.budget import time_budget

    ri = pd.DataFrame({"dimension": ["computing"], "max_rank": [0], "min_rank": [9], "spread_ms": [3.0]})
    # rank 0 on stage 0, rank 9's stage unknown: the 3 ms spread counts as within a stage
    rs = pd.DataFrame({"rank": [0, 1], "stage": [0, 1]})
    assert time_budget({"rank_imbalance": ri, "rank_stages": rs}, {})["imbalance"] == pytest.approx(3.0)
    for col in ri.columns:  # a rank_imbalance table without one of its columns says nothing
        assert time_budget({"rank_imbalance": ri.drop(columns=[col])}, {})["imbalance"] is None
    # two ranks of median step 1.0 and 1.5 s: the slowest 1.5 - 1.25 s (their median) = 250 ms above
    ws = pd.DataFrame({"rank": [0, 1], "step_time_s": [1.0, 1.5]})
    assert time_budget({"workload_steps": ws}, {})["imbalance"] == pytest.approx(250.0)
    for col in ws.columns:
        assert time_budget({"workload_steps": ws.drop(columns=[col])}, {})["imbalance"] is None
    # stages of 0.5 and 2 ms compute: 1.5 ms apart (under 1 ms is still compute)
    st = pd.DataFrame({"stage": [0, 1], "computing_ms": [0.5, 2.0]})
    assert time_budget({"stages": st}, {})["imbalance"] == pytest.approx(1.5)


def test_exposed_communication_ranks_of_at_least_half_the_largest():
    from analyzers.analyses.advice import exposed_communication as ec

    per = pd.DataFrame({"x": [1.0, 4.0, 2.0]}, index=[0, 1, 2])  # rank 2 carries exactly half of rank 1's: kept
    assert ec._ranks(per, "x").index.tolist() == [1, 2]


def test_exposed_collectives_without_the_profilers_source_and_with_a_rough_split():
    from analyzers.analyses.advice import exposed_communication as ec

    # collectives 4 and 3 ms on ranks 0 and 1 (3 >= half of 4): both named; comm_exposure says nothing of its source
    per = pd.DataFrame({"exposed_collective_us": [4000.0, 3000.0]}, index=[0, 1])
    t = {"comm_exposure": pd.DataFrame({"rank": [0, 1], "exposed_us": [4000.0, 3000.0]})}
    row = ec._collective(t, per, 0.3, 0.1)
    assert (row["kind"], row["ranks"], row["stage"]) == ("collective", [0, 1], None)
    assert row["message"] == (
        "30% of step time is communication not hidden behind compute (> 20%), 90% of it in collectives (most on "
        "ranks 0, 1): overlap gradient all-reduce with backward, fuse/bucket gradients, compress gradients, or use "
        "fewer, larger collectives."
    )
    t["comm_exposure"]["source"] = "profiler (receive only)"  # both ranks: the profiler counts sends with them
    row = ec._collective(t, per, 0.3, 0.1)
    assert row["message"] == (
        "30% of step time is communication not hidden behind compute (> 20%), at least 10% of it pipeline receives; "
        "on ranks 0, 1 the profiler counts send / batchSendRecv with the collectives, so how much is gradient "
        "all-reduce is not known without the kernels: check comm_types before overlapping or bucketing gradients."
    )


def test_waiting_on_the_bottleneck_under_a_microsecond_and_its_ms_per_step():
    from analyzers.analyses.advice import exposed_communication as ec

    t = {"stages": pd.DataFrame({"stage": [0, 1], "computing_ms": [10.0, 15.0], "ranks": ["0", "1"]})}
    # rank 0 (stage 0) carries 1 us of the 1.5 us exposed: 67% > 1 of 2 ranks; all of it send/receive: 100%
    per = pd.DataFrame({"exposed_us": [1.0, 0.5], "exposed_p2p_us": [1.0, 0.0], "stage": [0, 1]}, index=[0, 1])
    assert "0.001 ms per step, 100% pipeline send/receive" in ec._waiting_on_bottleneck(t, per, 0.3)["message"]
    # 9990 us per step: 9.99 ms
    per = pd.DataFrame({"exposed_us": [9990.0, 10.0], "exposed_p2p_us": [0.0, 0.0], "stage": [0, 1]}, index=[0, 1])
    assert "(ranks 0: 9.99 ms per step, 0% pipeline" in ec._waiting_on_bottleneck(t, per, 0.3)["message"]


def _grad_ops(rows):
    # all-reduces over a group of 2 (factor 2 (2 - 1) / 2 = 1): (rank, step, size_bytes, transit_ms, group_size)
    df = pd.DataFrame(rows, columns=["rank", "step", "size_bytes", "transit_ms", "group_size"])
    return df.assign(op_type="allreduce", wait_ms=0.0, elapse_ms=df["transit_ms"])


def test_compression_try_with_the_exposed_time_unknown_and_the_casts_on_the_cpu():
    from analyzers.analyses.advice.exposed_communication import compression_try

    # 2 ranks x 4 steps, one 64e6 B all-reduce of 10 ms each: 10 ms of bytes per rank and step; the exposed time
    # unknown (no step_breakdown): half of it saved, 200 - 5 = 195 ms. One op's group size is unreadable: the 2 ranks
    rows = [(r, s, 64e6, 10.0, 2) for r in range(2) for s in range(4)]
    co = _grad_ops(rows).astype({"group_size": object})
    co.loc[0, "group_size"] = "?"
    knob, step = compression_try({"comm_ops": co}, {"step_time_s": 0.2})
    assert knob == {"parallel.grad_compression": "fp16"} and step == pytest.approx(195.0)
    # the casts on the host CPU: 1.6 ns x 8 x 64e6 B / 4 steps / 2 ranks = 102.4 ms per step added: 200 - (5 - 102.4)
    # = 297.4 ms. An all-reduce over a group of 1 (factor 0, nothing moved) is left out, its bytes too
    co = _grad_ops(rows + [(0, 0, 64e6, 10.0, 1)])
    cpu = pd.DataFrame({"core_type": ["CPU"]})
    _, step = compression_try({"comm_ops": co, "ops_for_checks": cpu}, {"step_time_s": 0.2})
    assert step == pytest.approx(297.4, abs=1e-6)


def test_small_packets_leave_out_activation_collectives_and_count_only_under_1_mib():
    from analyzers.analyses.advice import small_packets

    # one rank, one step: 8 small gradient collectives (data_parallel) and 100 large tensor-parallel ones: the
    # tensor-parallel ones are activations (comm_fusion cannot fuse them): 8 of 8 small
    grads = _packets(8, 0, ranks=1, steps=1).assign(comm_class="data_parallel")
    tp = _packets(0, 100, ranks=1, steps=1).assign(comm_class="tensor_parallel")
    (row,) = small_packets.find({"comm_ops": pd.concat([grads, tp], ignore_index=True)}, {})
    assert row["evidence"] == "comm_ops: 8/8 ops with size_bytes < 1048576, median size 1024 B"
    assert small_packets.find({"comm_ops": tp}, {}) == []  # nothing but activations
    # 8 collectives of exactly 1 MiB: not under it
    assert small_packets.find({"comm_ops": grads.assign(size_bytes=1 << 20)}, {}) == []


def test_small_packets_time_share_under_a_millisecond_and_steps_written_as_text():
    from analyzers.analyses.advice import small_packets

    # 8 small collectives of 0.001 ms and 2 large of 0.1 ms: 80% of them small but 0.008 of 0.208 ms (3.8%) of
    # their time: no finding
    co = pd.concat([_packets(8, 0, ranks=1, steps=1, small_ms=0.001), _packets(0, 2, ranks=1, steps=1)])
    co.loc[co["size_bytes"] > 1024, "elapse_ms"] = 0.1
    assert small_packets.find({"comm_ops": co}, {}) == []
    # an unreadable step counts no step: at least one, 8 collectives per step
    text = _packets(8, 0, ranks=1, steps=1).astype({"step": object}).assign(step="?")
    assert small_packets.find({"comm_ops": text}, {})[0]["message"].startswith("100% of collectives (100% of their")


def test_free_time_scope_of_the_ranks_other_than_the_straggler_whose_steps_are_short():
    from analyzers.analyses.advice import free_time

    sr = _slow_ranks([("dp0", 1, True, "group", "dp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    # rank 1 is late; rank 0's steps took 0 us in all (its idle time is no share of anything): all ranks stay
    sb = pd.DataFrame({"rank": [0, 1], "step_us": [0.0, 1e4], "free_us": [5.0, 4000.0]})
    out, share, on, _, _ = free_time._scope({"slow_ranks": sr}, sb, 0.4)
    assert out["rank"].tolist() == [0, 1] and share == 0.4 and on == ""
    # rank 0's step of 1 us, 0.5 us idle: 50% > 10%: only rank 0 counts
    sb = pd.DataFrame({"rank": [0, 1], "step_us": [1.0, 1e4], "free_us": [0.5, 4000.0]})
    out, share, on, _, _ = free_time._scope({"slow_ranks": sr}, sb, 0.4)
    assert out["rank"].tolist() == [0] and share == 0.5


def test_compression_try_fits_bytes_terms_under_one():
    from analyzers.analyses.advice.exposed_communication import compression_try

    # two 1-byte all-gathers over 2 ranks (factor (2 - 1) / 2 = 0.5: bytes terms 0.5 each, their squares 0.5 in all)
    # of 1 ms in one step: 1 / 0.5 = 2 ms per unit, bytes 2 x (0.5 + 0.5) / 1 step / 2 ranks = 1 ms, half saved
    co = _grad_ops([(0, 0, 1.0, 1.0, 2), (1, 0, 1.0, 1.0, 2)]).assign(op_type="allgather")
    _, step = compression_try({"comm_ops": co}, {"step_time_s": 0.2})
    assert step == pytest.approx(199.5)


def test_tensor_parallel_limits_and_knob_types():
    from analyzers.analyses.advice import tensor_parallel_comm as tpc

    ex = pd.DataFrame({"rank": [0], "step": [1], "comm_class": ["tensor_parallel"], "exposed_us": [20_000.0]})
    # 20 ms of a 100 ms step: exactly 20%, not above
    assert tpc.find({"comm_exposure_classes": ex}, {"step_time_s": 0.1}) == []
    # without comm_class nothing says which collectives are tensor-parallel
    assert tpc.find({"comm_exposure_classes": ex.drop(columns=["comm_class"])}, {"step_time_s": 0.05}) == []
    # 20 of 50 ms; no run config: the whole exposed time, an upper bound, and no knob
    (row,) = tpc.find({"comm_exposure_classes": ex}, {"step_time_s": 0.05})
    assert row["basis"] == (
        "upper bound: all exposed tensor-parallel all-reduce time per step goes with tensor_parallel=1"
    )
    # T = 4, B = 2 over 8 ranks (already data parallel): halve both, as integers (T 2, B 1)
    cfg = {"parallel": {"tensor_parallel": 4}, "train": {"batch_size": 2}, "world_size": 8}
    (row,) = tpc.find({"comm_exposure_classes": ex, "_config": cfg}, {"step_time_s": 0.05})
    assert row["try"] == {"parallel.tensor_parallel": 2, "train.batch_size": 1}
    assert [type(v) for v in row["try"].values()] == [int, int]


def test_tensor_parallel_step_times_of_other_ranks_and_under_a_millisecond():
    from analyzers.analyses.advice import tensor_parallel_comm as tpc

    # rank 0's step 1 took 0.5 ms, 0.2 ms of it exposed tensor-parallel: 40%; rank 5's 300 ms step has no
    # tensor-parallel time and is not part of the mean step
    ex = pd.DataFrame({"rank": [0], "step": [1], "comm_class": ["tensor_parallel"], "exposed_us": [200.0]})
    steps = pd.DataFrame({"rank": [0, 5], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [500.0, 300_000.0]})
    (row,) = tpc.find({"comm_exposure_classes": ex, "steps": steps}, {})
    assert row["evidence"] == (
        "comm_exposure_classes[comm_class=tensor_parallel]: 0.20 ms exposed per rank and step (mean over 1 "
        "rank-steps) / step 0.50 ms = 0.40 (> 0.2)"
    )
    assert row["severity"] == "medium"  # 40% is not above 40%
    assert row["message"].startswith(
        "Tensor-parallel all-reduce is 40% of the step (0.2 ms exposed per step): lower parallel.tensor_parallel (more"
    )
    # at T = 4 over 8 ranks (already data parallel) halving adds nothing: the gain is all 0.2 ms, the knob kept
    cfg = {"parallel": {"tensor_parallel": 4}, "train": {"batch_size": 8}, "world_size": 8}
    (row,) = tpc.find({"comm_exposure_classes": ex, "steps": steps, "_config": cfg}, {})
    assert row["gain_ms"] == pytest.approx(0.2) and row["try"] == {"parallel.tensor_parallel": 2, "train.batch_size": 4}


def test_tensor_parallel_halving_that_adds_more_collectives_than_it_removes():
    from analyzers.analyses.advice import tensor_parallel_comm as tpc
    from tests.unit.test_advice_tensor_parallel import EX, STEPS, _cfg
    from tests.unit.test_advice_tensor_parallel import _ops as _update_ops

    # tests/unit/test_advice_tensor_parallel.py's case by hand: 2 ranks at T = 2 (one replica), 40 ms exposed per
    # rank and step in 12 tensor-parallel all-reduces (3.33 ms each); T = 1 with batch 2 adds 12 expert dispatch /
    # combine and 32 - 8 = 24 unfused gradient all-reduces (32 update ops per rank and step, the experts' 8 left out):
    # 40 x (1 - 36 / 12) = -80 ms, not positive: no knob, gain 0
    t = {"comm_exposure_classes": EX, "steps": STEPS, "_config": _cfg(), "ops_for_checks": _update_ops(32)}
    (row,) = tpc.find(t, {})
    assert row["gain_ms"] == 0.0 and row["try"] is None
    assert row["basis"] == (
        "exposed tensor-parallel time 40.0 ms x (1 - 36 added / 12 tensor-parallel collectives per step) = -80.0 ms"
    )
    assert row["evidence"].endswith(
        "; tensor_parallel=1 adds 36 collectives per step (12 expert_dispatch, 24 dp_grad) at 3.33 ms each (this "
        "run's 12 tensor-parallel all-reduces: 40.00 ms) -> net -80.00 ms"
    )
    assert row["message"] == (
        "Tensor-parallel all-reduce is 40% of the step (40.0 ms exposed per step, tensor_parallel=2): lowering "
        "parallel.tensor_parallel would not pay (its data-parallel collectives cost more than the 40.0 ms it "
        "removes): keep each tensor-parallel group within a node (its all-reduces run twice per transformer block "
        "in forward and in backward)."
    )
    # 8 update ops, all the experts': 12 added for 12 removed, a gain of exactly 0: still no knob
    (row,) = tpc.find({**t, "ops_for_checks": _update_ops(8)}, {})
    assert row["gain_ms"] == 0.0 and row["try"] is None
    # no update ops: the unfused gradient all-reduces cannot be counted: unknown, with the knob kept
    (row,) = tpc.find({k: v for k, v in t.items() if k != "ops_for_checks"}, {})
    assert row["gain_ms"] is None and row["try"] == {"parallel.tensor_parallel": 1, "train.batch_size": 2}
    assert row["basis"] == (
        "unknown: what tensor_parallel=1 adds (the data-parallel collectives of the doubled replicas) needs the "
        "world size, the MoE layout and the optimizer's update ops"
    )


def test_bandwidth_reference_needs_the_transport():
    from analyzers.analyses.advice import bandwidth_reference as br

    cb = _bandwidth([(0, "hccs", 8.0, 2.0)])  # 4 GB/s on HCCS would be under half its 18 GB/s
    assert len(br.find({"comm_bandwidth": cb}, {})) == 1
    assert br.find({"comm_bandwidth": cb.drop(columns=["transport"])}, {}) == []


def test_exposed_communication_less_the_load_excess_and_its_evidence():
    from analyzers.analyses.advice import exposed_communication as ec
    from analyzers.analyses.advice.common import LOAD_EXCESS_KEY

    # collectives (no p2p); the most exposed rank's 5 ms. No load excess: the whole 5 ms, nothing said
    t = _exposure_tables([5000.0, 3000.0, 1000.0, 1000.0], [0.0] * 4)
    (row,) = ec.find({**t, LOAD_EXCESS_KEY: 0.0}, {})
    assert row["gain_ms"] == pytest.approx(5.0) and row["basis"] == BASIS
    load = "its collectives took beyond the fastest of their kind (load)"
    (row,) = ec.find({**t, LOAD_EXCESS_KEY: 0.5}, {})  # 0.5 ms of it the collectives' wait for a core
    assert row["gain_ms"] == pytest.approx(4.5) and row["basis"] == f"{BASIS}; less 0.5 ms {load}"
    (row,) = ec.find({**t, LOAD_EXCESS_KEY: 10.0}, {})  # more than all of it: nothing left
    assert row["gain_ms"] == 0.0 and row["basis"] == f"{BASIS}; less 5 ms {load}"
    # fp16 on 2 ranks x 4 steps of one 64e6 B all-reduce of 10 ms: 10 ms of bytes, half of it (5 ms, all the exposed
    # time) saved of a 200 ms step
    co = _grad_ops([(r, s, 64e6, 10.0, 2) for r in range(2) for s in range(4)])
    (row,) = ec.find({**t, LOAD_EXCESS_KEY: 0.0, "comm_ops": co}, {"step_time_s": 0.2})
    assert row["try"] == {"parallel.grad_compression": "fp16"} and row["predicted_step_ms"] == pytest.approx(195.0)
    # the split unknown (no comm_exposure): 25% exposed, medium
    (row,) = ec.find({"step_breakdown": t["step_breakdown"], LOAD_EXCESS_KEY: 0.0}, {})
    assert row["severity"] == "medium"
    # 9.99 ms of p2p and 9.99 ms of collectives (medians per rank, summed)
    t = _exposure_tables([9990.0, 9990.0, 0.0, 0.0], [9990.0, 0.0, 0.0, 0.0])
    (row,) = ec.find({**t, LOAD_EXCESS_KEY: 0.0}, {})
    assert row["evidence"].endswith("pipeline p2p 9.99 ms, collectives 9.99 ms (50% p2p)")


def test_wait_ratio_needs_ranks_and_the_slowest_stage_may_list_none():
    from analyzers.analyses.advice import stage_imbalance, wait_ratio

    co = _comm([(0, "allreduce", 1, 3.0, 1.0)])
    assert wait_ratio.find({"comm_ops": co.drop(columns=["rank"])}, {}) == []
    # stage 1 (13 ms) is the bottleneck but its ranks are not listed: it names no rank
    (row,) = stage_imbalance.find({"stages": _stages([(0, 10.0, "0"), (1, 13.0, "")])}, {})
    assert row["ranks"] == [] and row["stage"] == 1


def test_fusion_gain_on_the_host_with_the_latency_alone_and_nothing_to_remove():
    from analyzers.analyses.advice.small_packets import fusion_gain

    # one rank, one step, one group: all-reduces over 2 ranks (2 ring hops each), 1000 B in 2 ms and 2000 B in 1 ms:
    # the larger is faster (a negative bytes term): latency alone, (2 x 2 + 2 x 1) / (2^2 + 2^2) = 0.75 ms per hop.
    # One fused all-reduce: max(the longest 2 ms, 0.75 x 2 hops) = 2 ms; they ran one after another (no starts):
    # 3 - 2 = 1 ms removed
    co = pd.DataFrame(
        {
            "rank": 0,
            "step": 1,
            "op_type": "allreduce",
            "group_size": 2,
            "group": "g",
            "size_bytes": [1000.0, 2000.0],
            "transit_ms": [2.0, 1.0],
            "elapse_ms": [2.0, 1.0],
        }
    )
    gain, basis = fusion_gain(co, observed=True)
    assert gain == pytest.approx(1.0) and "(750 us per ring hop" in basis
    # both started at 0 and took 2 ms: 2 of their 4 ms covered, serial share 0.5: 3 x 0.5 = 1.5 ms, less than the
    # fused 2 ms: nothing removed
    gain, _ = fusion_gain(co.assign(start_us=0.0, elapse_ms=2.0), observed=True)
    assert gain == 0.0
    # barriers of 0.1234 ms (no bytes term): 123.4 us per hop
    barriers = co.assign(op_type="barrier", transit_ms=0.1234, size_bytes=1024.0)
    assert "(123 us per ring hop" in fusion_gain(barriers, observed=True)[1]


def test_load_excess_kinds_group_sizes_and_columns():
    from analyzers.analyses.advice.common import load_excess_ms

    cpu = {"ops_for_checks": pd.DataFrame({"core_type": ["CPU"]})}

    def co(rows, cols=("rank", "step", "op_type", "group_size", "size_bytes", "transit_ms")):
        return pd.DataFrame(rows, columns=list(cols))

    # two steps, one 1 KiB all-reduce each, 2 and 5 ms: floor 2 ms, excess 0 and 3 ms, the median 1.5 ms
    base = [(0, 0, "AllReduce", 2, 1024.0, 2.0), (0, 1, "AllReduce", 2, 1024.0, 5.0)]
    assert load_excess_ms({"comm_ops": co(base), **cpu}) == pytest.approx(1.5)
    # pipeline sends and receives (2 and 11 ms in the two steps) are not collectives: left out
    p2p = [(0, s, k, 2, 1024.0, t) for k in ("Send", "Recv") for s, t in ((0, 2.0), (1, 11.0))]
    assert load_excess_ms({"comm_ops": co(base + p2p), **cpu}) == pytest.approx(1.5)
    assert load_excess_ms({"comm_ops": co(p2p), **cpu}) == 0.0  # nothing but them: none waited
    # the same size over groups of 2 and 4 ranks are two kinds: each at its own floor, no excess
    mixed = [(0, 0, "AllReduce", 2, 1024.0, 2.0), (0, 1, "AllReduce", 4, 1024.0, 5.0)]
    assert load_excess_ms({"comm_ops": co(mixed), **cpu}) == 0.0
    # group sizes unknown (NaN or unreadable) are one kind of their own (0): 2 and 5 ms -> 1.5 ms; a 1 ms all-reduce
    # over a group of 1 in step 0 is another kind (excess 0): step 0 0 ms, step 1 3 ms
    unknown = [(0, 0, "AllReduce", None, 1024.0, 2.0), (0, 1, "AllReduce", "?", 1024.0, 5.0)]
    assert load_excess_ms({"comm_ops": co(unknown), **cpu}) == pytest.approx(1.5)
    one = [(0, 0, "AllReduce", 1, 1024.0, 1.0)]
    assert load_excess_ms({"comm_ops": co(unknown + one), **cpu}) == pytest.approx(1.5)
    # without a group_size column every all-reduce is one kind
    assert load_excess_ms({"comm_ops": co(base).drop(columns=["group_size"]), **cpu}) == pytest.approx(1.5)
    for col in ("rank", "step", "op_type", "size_bytes"):  # a column it needs missing: unknown
        assert load_excess_ms({"comm_ops": co(base).drop(columns=[col]), **cpu}) is None
    # operators whose core is not said: where they ran is unknown
    assert load_excess_ms({"comm_ops": co(base), "ops_for_checks": pd.DataFrame({"op_name": ["MatMul"]})}) is None


def test_pipeline_bubble_exactly_10_points_over_the_ideal_and_without_bubble_fractions():
    from analyzers.analyses.advice import pipeline_bubble

    # one stage, ideal 0 (its schedule never idles it), bubble 10%: 0.1 over the ideal is not above 0.1
    pl = _pipeline([(0, 0.1, 0.0, 90_000.0, 1, 4)])
    assert pipeline_bubble.find({"pipeline": pl}, {"step_time_s": 0.1}) == []
    assert len(pipeline_bubble.find({"pipeline": pl.assign(bubble_fraction=0.2)}, {"step_time_s": 0.1})) == 1
    assert pipeline_bubble.find({"pipeline": pl.drop(columns=["bubble_fraction"])}, {}) == []


def test_slow_rank_in_a_pp_group_of_unbalanced_stages_and_rows_without_a_scope():
    from analyzers.analyses.advice import slow_rank

    # stage 1 computes 13 / 10 = 1.3x stage 0; rank 2 (stage 1) and rank 7 (stage unknown) are late in the pp group
    # 'pp0': the pipeline split's lateness, not a slow rank
    sr = _slow_ranks(
        [
            ("pp0", 2, True, "group", "pp", 0.5, 10, None, "dixon", 0.8, 0.6, 9),
            ("pp0", 7, True, "group", "pp", 0.5, 10, None, "dixon", 0.8, 0.6, 9),
        ]
    )
    t = {
        "slow_ranks": sr,
        "stages": _stages([(0, 10.0, "0,1"), (1, 13.0, "2,3")]),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]}),
    }
    a, b = slow_rank.find(t, {})
    tail = (
        "arrives last in group 'pp0' between pipeline stages (mean 0.50 ms late per transfer) while stage 1 computes "
        "1.3x the least stage: the other stage waits for the slower one. This is the pipeline split, not a slow "
        "rank: rebalance the layers across stages (see stage_imbalance)."
    )
    assert a["cross_stage"] is True and a["message"] == f"Rank 2 (stage 1) {tail}"
    assert b["message"] == f"Rank 7 {tail}"
    # a slow_ranks table without a scope column: every row is a group's
    (row,) = slow_rank.find({"slow_ranks": sr.iloc[:1].drop(columns=["scope"])}, {})
    assert row["ranks"] == [2]
    assert slow_rank.find({"slow_ranks": sr.drop(columns=["slow"])}, {}) == []  # which rank is slow: unknown


def test_breakdown_share_needs_compute_and_step_time():
    from analyzers.analyses.advice.common import breakdown_share

    sb = pd.DataFrame({"rank": [0], "step_us": [10_000.0], "computing_us": [5_000.0], "free_us": [2_000.0]})
    share, _ = breakdown_share({"step_breakdown": sb}, "free_us")
    assert share == pytest.approx(0.2)
    assert breakdown_share({"step_breakdown": sb.assign(computing_us=0.0)}, "free_us") is None  # no op profiled
    assert breakdown_share({"step_breakdown": sb.assign(step_us=0.0)}, "free_us") is None  # steps of no time


def test_edges_of_the_shared_helpers_stages_and_the_bubble():
    from analyzers.analyses.advice import pipeline_bubble, slow_rank, stage_imbalance
    from analyzers.analyses.advice.common import budget_part, load_excess_ms, trusted

    # gloo's pipeline send/receive names no group: the message names none
    sr = _slow_ranks([("", 2, True, "group", "pp", 0.5, 10, None, "dixon", 0.8, 0.6, 9)])
    t = {
        "slow_ranks": sr,
        "stages": _stages([(0, 10.0, "0,1"), (1, 13.0, "2,3")]),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]}),
    }
    (row,) = slow_rank.find(t, {})
    assert row["message"].startswith("Rank 2 (stage 1) arrives last between pipeline stages (mean 0.50 ms late")
    # stages: computing under 1 ms still counts (0.5 vs 2 ms: 4x); unknown ranks keep a stage; no computing column
    # or no stage with compute: nothing
    (row,) = stage_imbalance.find({"stages": _stages([(0, 0.5, None), (1, 2.0, "1")])}, {})
    assert row["stage"] == 1 and "computes 4.0x more than stage 0" in row["message"]
    assert stage_imbalance.find({"stages": _stages([(0, 0.5, "0")]).drop(columns=["computing_ms"])}, {}) == []
    assert stage_imbalance.find({"stages": _stages([(0, 0.0, "0"), (1, 0.0, "1")])}, {}) == []
    # a rank of unknown consistency is kept; nothing consistent: no breakdown
    sb = pd.DataFrame({"rank": [0, 1], "free_us": [1000.0, 3000.0], "consistent": [True, None]})
    assert trusted(sb)["rank"].tolist() == [0, 1]
    assert trusted(sb.assign(consistent=False)) is None
    assert budget_part(sb.drop(columns=["rank"]), "free_us") is None  # per rank: which rank unknown
    # load excess under 1 ms: 2 and 3 ms all-reduces of one size: 0 and 1 ms over the floor, median 0.5 ms
    co = pd.DataFrame(
        {"rank": 0, "step": [0, 1], "op_type": "AllReduce", "group_size": 2, "size_bytes": 1024.0, "transit_ms": [2, 3]}
    )
    assert load_excess_ms({"comm_ops": co, "ops_for_checks": pd.DataFrame({"core_type": ["CPU"]})}) == 0.5
    # the bubble: 0.4 over an ideal 0.2 with no window: no gain (not NaN); a 99.9 ms window in the basis
    pl = pd.DataFrame({"stage": [0], "bubble_fraction": [0.4], "ideal_fraction": [0.2]})
    assert pipeline_bubble.find({"pipeline": pl}, {})[0]["gain_ms"] is None
    (row,) = pipeline_bubble.find({"pipeline": _pipeline([(0, 0.4, 0.2, 99_900.0, 2, 4)])}, {})
    assert row["basis"].endswith("0.200 x 99.9 ms (medians over steps)")


def test_a_bubble_above_its_ideal_explains_exposed_time_even_where_its_ranks_idle_more():
    from analyzers.analyses.advice import pipeline_bubble

    # stage 0 (ranks 0, 1): 0.4 over an ideal 0.2; its ranks idle 5 ms and expose 1 ms per step. Only a bubble at its
    # ideal (too few micro-batches) is drawn from where it shows; one above it is exposed time
    sb = pd.DataFrame({"rank": [0, 1], "free_us": [5000.0] * 2, "communication_not_overlapped_us": [1000.0] * 2})
    t = {"pipeline": _pipeline([(0, 0.4, 0.2, 20_000.0, 2, 4)]), "rank_stages": STAGES, "step_breakdown": sb}
    assert pipeline_bubble.find(t, {})[0]["explains"] == "exposed"
