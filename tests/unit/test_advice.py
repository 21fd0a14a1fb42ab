"""Advice rules: each fires just above its documented threshold, stays quiet just below, and points
at the evidence (table and rows). One end-to-end check on the real legacy cluster set G."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice import advise
from analyzers.analyses.advice.bandwidth_reference import BANDWIDTH_REFERENCE_RATIO, REFERENCE_BANDWIDTH_GBPS
from analyzers.analyses.advice.dropped_tokens import DROPPED_FRACTION
from analyzers.analyses.advice.expert_imbalance import EXPERT_MAX_MEAN
from analyzers.analyses.advice.exposed_communication import EXPOSED_COMM_SHARE
from analyzers.analyses.advice.free_time import FREE_SHARE
from analyzers.analyses.advice.pipeline_bubble import BUBBLE_EXCESS
from analyzers.analyses.advice.small_packets import SMALL_PACKET_BYTES, SMALL_PACKET_MIN_PER_STEP
from analyzers.analyses.advice.step_time_spread import STEP_TIME_SPREAD
from analyzers.analyses.advice.wait_ratio import WAIT_MIN_MS_PER_STEP, WAIT_RATIO
from tests.support import fixture_path


def _rules(df):
    return list(df["rule"])


def test_columns_and_empty():
    out = advise({}, {})
    assert list(out.columns) == [
        "id",
        "rule",
        "severity",
        "message",
        "evidence",
        "ranks",
        "stage",
        "gain_ms",
        "gain_share",
        "basis",
        "symptom_of",
        "try",
        "predicted_step_ms",
        "explains",
    ]
    assert out.empty
    assert advise({"comm_ops": pd.DataFrame()}, {}).empty


def _comm(ratio: float, steps: int = 4, per_step_wait: float = 5.0, op_type="allreduce"):
    # one collective per step per rank; wait/(wait+transit) = ratio
    transit = per_step_wait * (1 - ratio) / ratio
    return pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "op_name": "ar",
                "op_type": op_type,
                "wait_ms": per_step_wait,
                "transit_ms": transit,
                "elapse_ms": per_step_wait + transit,
                "size_bytes": 64e6,
            }
            for r in range(2)
            for s in range(steps)
        ]
    )


def test_wait_ratio_threshold():
    hi = advise({"comm_ops": _comm(WAIT_RATIO + 0.02)}, {})
    assert _rules(hi).count("wait_ratio") == 2
    ev = hi[hi["rule"] == "wait_ratio"]["evidence"].iloc[0]
    assert ev.startswith("comm_ops[rank=") and f"{WAIT_RATIO + 0.02:.2f}" in ev
    assert "wait_ratio" not in _rules(advise({"comm_ops": _comm(WAIT_RATIO - 0.02)}, {}))
    # pipeline send/recv waits are the bubble, not a wait-for-peers problem
    assert "wait_ratio" not in _rules(advise({"comm_ops": _comm(0.9, op_type="recv")}, {}))
    # tiny absolute waits are ignored
    assert "wait_ratio" not in _rules(advise({"comm_ops": _comm(0.9, per_step_wait=WAIT_MIN_MS_PER_STEP / 2)}, {}))


def test_slow_rank_and_slow_link_rows_are_reported():
    sr = pd.DataFrame(
        [
            {
                "group": "g",
                "scope": "group",
                "op_name": "",
                "rank": 3,
                "ranks_compared": 4,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 6.0,
                "total_lateness_ms": 48.0,
                "mean_elapse_ms": 7.0,
                "test": "dixon_q",
                "statistic": 0.95,
                "critical": 0.829,
                "slow": True,
            },
            {
                "group": "g",
                "scope": "group",
                "op_name": "",
                "rank": 2,
                "ranks_compared": 4,
                "n_ops": 8,
                "last_arrivals": 0,
                "mean_lateness_ms": 0.1,
                "total_lateness_ms": 0.8,
                "mean_elapse_ms": 7.0,
                "test": "dixon_q",
                "statistic": float("nan"),
                "critical": float("nan"),
                "slow": False,
            },
        ]
    )
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
    out = advise({"slow_ranks": sr, "slow_links": sl}, {})
    assert _rules(out) == ["slow_rank", "slow_link"]
    assert "slow_ranks[group=g, rank=3]" in out["evidence"].iloc[0] and "0.950 > 0.829" in out["evidence"].iloc[0]
    assert "slow_links[kind=link" in out["evidence"].iloc[1] and "src=1, dst=2" in out["evidence"].iloc[1]


def test_small_packets():
    n = SMALL_PACKET_MIN_PER_STEP * 2
    rows = [
        {"rank": 0, "step": s, "op_name": f"ar{i}", "op_type": "allreduce", "size_bytes": 4096.0, "elapse_ms": 0.1}
        for s in range(2)
        for i in range(n)
    ]
    out = advise({"comm_ops": pd.DataFrame(rows)}, {})
    assert "small_packets" in _rules(out)
    assert f"{2 * n}/{2 * n} ops" in out[out["rule"] == "small_packets"]["evidence"].iloc[0]
    big = [{**r, "size_bytes": 64e6} for r in rows]
    assert "small_packets" not in _rules(advise({"comm_ops": pd.DataFrame(big)}, {}))
    few = [r for r in rows if r["op_name"] == "ar0"]  # one collective per step: nothing to fuse
    assert "small_packets" not in _rules(advise({"comm_ops": pd.DataFrame(few)}, {}))


def test_bandwidth_far_under_reference():
    ref = REFERENCE_BANDWIDTH_GBPS["RDMA"]
    slow = ref * BANDWIDTH_REFERENCE_RATIO * 0.9
    cb = pd.DataFrame(
        [
            {"rank": 0, "step": 0, "op_name": "ar", "transport": "RDMA", "size_mb": 100.0, "time_ms": 100.0 / slow},
            {"rank": 1, "step": 0, "op_name": "ar", "transport": "RDMA", "size_mb": 100.0, "time_ms": 100.0 / ref},
            {"rank": 2, "step": 0, "op_name": "ar", "transport": "MCCL", "size_mb": 100.0, "time_ms": 1000.0},
        ]
    )
    out = advise({"comm_bandwidth": cb}, {})
    hit = out[out["rule"] == "bandwidth_reference"]
    assert len(hit) == 1 and "rank=0, transport=RDMA" in hit["evidence"].iloc[0]


def _sb(comm_no, free):
    return pd.DataFrame(
        [
            {
                "rank": 0,
                "step": s,
                "step_us": 1000.0,
                "computing_us": 500.0,
                "communication_not_overlapped_us": comm_no,
                "free_us": free,
            }
            for s in range(3)
        ]
    )


def test_breakdown_rules():
    out = advise({"step_breakdown": _sb(1000 * EXPOSED_COMM_SHARE + 10, 1000 * FREE_SHARE + 10)}, {})
    assert {"exposed_communication", "free_time"} <= set(_rules(out))
    assert "step_breakdown: sum free_us" in out[out["rule"] == "free_time"]["evidence"].iloc[0]
    out = advise({"step_breakdown": _sb(1000 * EXPOSED_COMM_SHARE - 10, 1000 * FREE_SHARE - 10)}, {})
    assert out.empty


def test_pipeline_and_experts():
    pl = pd.DataFrame(
        [
            {
                "step": s,
                "stage": st,
                "bubble_fraction": 0.2 + BUBBLE_EXCESS + 0.05 if st == 1 else 0.2,
                "ideal_fraction": 0.2,
            }
            for s in range(3)
            for st in range(2)
        ]
    )
    out = advise({"pipeline": pl}, {})
    assert _rules(out) == ["pipeline_bubble"] and "pipeline[stage=1]" in out["evidence"].iloc[0]
    ex = pd.DataFrame(
        [{"step": 0, "max_mean_ratio": EXPERT_MAX_MEAN + 0.1, "cv": 0.1, "dropped_fraction": DROPPED_FRACTION * 2}]
    )
    assert set(_rules(advise({"experts": ex}, {}))) == {"expert_imbalance", "dropped_tokens"}
    ok = pd.DataFrame([{"step": 0, "max_mean_ratio": 1.1, "cv": 0.05, "dropped_fraction": 0.0}])
    assert advise({"experts": ok}, {}).empty


def test_step_spread():
    ws = pd.DataFrame(
        [
            {"rank": r, "step": s, "step_time_s": 1.0 + (STEP_TIME_SPREAD + 0.1 if r == 2 else 0.0)}
            for r in range(4)
            for s in range(3)
        ]
    )
    out = advise({"workload_steps": ws}, {})
    assert _rules(out) == ["step_time_spread"] and "rank=2" in out["evidence"].iloc[0]


def test_on_real_legacy_cluster():
    from analyzers.parsers.legacy import parse
    from analyzers.analyses.pipeline import pipeline_bubbles
    from analyzers.analyses.slow_ranks import find_slow_links, find_slow_ranks

    p = parse(fixture_path("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose"))
    tables = {
        "comm_ops": p.comm_ops,
        "comm_bandwidth": p.comm_bandwidth,
        "slow_ranks": find_slow_ranks(p.comm_ops),
        "slow_links": find_slow_links(p.links, p.comm_bandwidth),
        "pipeline": pipeline_bubbles(p, None, None),
    }
    out = advise(tables, {})
    # ~90 unfused AllReduces of a few KB per step: fusion advice; stage 0 waits for stage 1 ~45 % of its time
    sizes = p.comm_ops[p.comm_ops["op_type"] == "allreduce"]["size_bytes"].dropna()
    assert (sizes < SMALL_PACKET_BYTES).mean() > 0.9
    assert "small_packets" in _rules(out)
    pb = out[out["rule"] == "pipeline_bubble"]
    assert list(pb["evidence"].str.extract(r"stage=(\d)")[0]) == ["0"]
    assert out["evidence"].str.len().min() > 10


# ---- operator-level checks (msprof-analyze advisor's AICPU and dynamic-shape checkers) ------------------


def test_aicpu_kernels_from_a_real_kernel_details(tmp_path):
    """Set E's compute_advice kernel_details.csv (msprof-analyze's own advisor test data) holds AI_CPU Cast
    kernels; expected counts and time are read from the file."""
    import shutil

    import analyzers
    from analyzers.analyses.advice.aicpu_ops import AICPU_MIN_TASK_US
    from tests.support import fixture_path

    src = fixture_path(
        "Ascend__msprof-analyze", "test", "ut", "advisor", "advisor_backend", "compute_advice", "kernel_details.csv"
    )
    out = tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy2(src, out / "kernel_details.csv")
    k = pd.read_csv(src)
    ai = k[(k["Accelerator Core"] == "AI_CPU") & (k["Duration(us)"] > AICPU_MIN_TASK_US)]
    assert len(ai) > 0
    adv = analyzers.analyze(analyzers.load_profile(tmp_path)).tables["advice"]
    row = adv[adv["rule"] == "aicpu_ops"].iloc[0]
    assert row["message"].startswith(
        f"{len(ai)} AI_CPU kernels run longer than 20 us ({ai['Duration(us)'].sum() / 1000:.2f} ms"
    )
    assert "Cast" in row["message"] and row["ranks"] == [0]


def test_aicpu_short_kernels_are_not_flagged():
    ops = pd.DataFrame(
        {
            "rank": [0, 0],
            "name": ["a", "b"],
            "type": ["Cast", "MatMul"],
            "category": ["compute"] * 2,
            "core_type": ["AI_CPU", "AI_CORE"],
            "dur_us": [19.0, 500.0],
        }
    )
    assert advise({"ops_for_checks": ops}, {}).empty
    ops.loc[0, "dur_us"] = 21.0
    assert advise({"ops_for_checks": ops}, {})["rule"].tolist() == ["aicpu_ops"]


def test_dynamic_shape_on_set_b_level1():
    """Every kernel of set B level1 has OP State 'dynamic' (msprof-analyze's advisor reports 'all operators
    are dynamic shape' on this data); the count comes from the kernel_details.csv files."""
    import analyzers
    from tests.support import fixture_path

    root = fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")
    states = pd.concat(
        [pd.read_csv(f, usecols=["OP State"]) for f in root.glob("rank*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")]
    )
    n_dyn = int((states["OP State"].astype(str).str.lower() == "dynamic").sum())
    assert n_dyn > 0 and not (states["OP State"].astype(str).str.lower() == "static").any()
    adv = analyzers.analyze(analyzers.load_profile(root)).tables["advice"]
    row = adv[adv["rule"] == "dynamic_shape"].iloc[0]
    assert f"{n_dyn} ops 'dynamic', 0 'static'" in row["evidence"] and row["ranks"] == [0, 1]
