"""Hand-computed cases of the advice rules' thresholds, gains and decisions that the other advice tests leave open
(found by `make mutation` over analyzers/analyses/advice/: each test fails on a one-line change of a number or a
decision there)."""

from __future__ import annotations


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
