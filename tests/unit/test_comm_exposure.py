"""Exposed communication split into pipeline point-to-point and collectives (analyzers/analyses/comm_exposure.py).

Expected values: hand-computed interval unions, and the profiler's own split in set G's
ascend_cluster_analyse_pipeline-parallel files (receive_alone_time = communication_alone_time -
collective_communication_alone_time) and set B's step_trace_time.csv (Exclude Receive column).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

import analyzers
from analyzers.analyses.comm_exposure import comm_exposure, is_p2p
from tests.support import fixture_path

G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")


def test_p2p_names_of_every_producer():
    names = pd.Series(
        [
            "hcom_batchSendRecv__12_0_1",
            "hcom_receive__3_1",
            "hcom_send__4_1",
            "Receive-op663",
            "Default/network/Send-op12",
            "hcom_allReduce__5_1",
            "AllReduce-op4542",
            "hcom_allGather__1",
        ]
    )
    assert is_p2p(names).tolist() == [True, True, True, True, True, False, False, False]


def test_split_from_the_op_timeline_hand_computed():
    # window [0, 30] us: compute [0, 10], receive [8, 20], all-reduce [15, 30]
    ops = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "step": [1, 1, 1],
            "name": ["MatMul", "hcom_receive__1", "hcom_allReduce__2"],
            "category": ["compute", "communication", "communication"],
            "start_us": [0.0, 8.0, 15.0],
            "dur_us": [10.0, 12.0, 15.0],
        }
    )
    steps = pd.DataFrame({"rank": [0], "step": [1], "start_us": [0.0], "end_us": [30.0]})
    sb = pd.DataFrame({"rank": [0], "step": [1], "communication_not_overlapped_us": [20.0]})
    ex = comm_exposure(sb, None, ops, steps, None).iloc[0]
    # p2p = |P ∪ C| - |C| = 20 - 10; collective = |K ∪ P ∪ C| - |P ∪ C| = 30 - 20
    assert (ex["exposed_p2p_us"], ex["exposed_collective_us"], ex["source"]) == (10.0, 10.0, "ops")


def test_set_g_split_is_the_profilers_receive_alone_time():
    p = analyzers.load_profile(fixture_path(*G))
    ex = analyzers.analyze(p).tables["comm_exposure"]
    n = 0
    for f in fixture_path(*G).glob("ascend_cluster_analyse_pipeline-parallel_*_*_*.csv"):
        r = int(re.search(r"_(\d+)\.csv$", f.name).group(1))
        pipe = pd.read_csv(f)
        mine = ex[ex["rank"] == r].sort_values("step")
        want = (pipe["communication_alone_time"] - pipe["collective_communication_alone_time"]).head(len(mine)) * 1000
        assert mine["exposed_p2p_us"].tolist() == pytest.approx(want.tolist(), rel=1e-6)
        assert mine["exposed_p2p_us"].tolist() == pytest.approx(
            (pipe["receive_alone_time"].head(len(mine)) * 1000).tolist(), abs=0.2
        )  # the profiler's own receive-alone column
        assert set(mine["source"]) == {"profiler (receive only)"}  # G ranks also run Send-opN
        n += len(mine)
    assert n == 20


def test_set_b_has_no_p2p():
    p = analyzers.load_profile(fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1"))
    a = analyzers.analyze(p)
    ex = a.tables["comm_exposure"]
    for f in sorted(
        fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1").glob(
            "rank*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
        )
    ):
        st = pd.read_csv(f).iloc[0]
        r = int(re.search(r"rank(\d+)", str(f)).group(1))
        row = ex[ex["rank"] == r].iloc[0]
        assert row["exposed_p2p_us"] == pytest.approx(
            st["Communication(Not Overlapped)"] - st["Communication(Not Overlapped and Exclude Receive)"], abs=1e-6
        )
        assert row["exposed_collective_us"] == pytest.approx(st["Communication(Not Overlapped)"], rel=1e-9)
    assert a.summary["exposed_p2p_s"] == 0.0


def test_receive_only_split_is_not_read_as_gradient_time():
    """A rank with only the step trace and communication.json (no kernels): the profiler's split separates
    receives only; batchSendRecv waiting must not become 'overlap gradient all-reduce' advice."""
    from analyzers.analyses.advice import advise

    sb = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [1, 1],
            "step_us": [100e3] * 2,
            "computing_us": [40e3] * 2,
            "communication_not_overlapped_us": [55e3] * 2,
            "free_us": [5e3] * 2,
        }
    )
    ref = sb.assign(communication_not_overlapped_exclude_receive_us=[50e3, 50e3])
    co = pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "op_type": ["send", "send", "allreduce", "allreduce"],
            "op_name": ["hcom_batchSendRecv__1"] * 2 + ["hcom_allReduce__2"] * 2,
        }
    )
    ex = comm_exposure(sb, ref, None, None, co)
    assert ex["exposed_p2p_us"].tolist() == [5e3, 5e3] and set(ex["source"]) == {"profiler (receive only)"}
    adv = advise({"step_breakdown": sb, "comm_exposure": ex}, {})
    msg = adv[adv["rule"] == "exposed_communication"].iloc[0]["message"]
    assert "at least 9% of it pipeline receives" in msg and "overlap gradient all-reduce with backward" not in msg
