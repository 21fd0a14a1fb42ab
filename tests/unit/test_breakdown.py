"""Step breakdown: interval arithmetic on hand-made intervals (expected values worked out by hand), and
reconciliation with the profiler's own step_trace_time on the real fixture sets.

Tolerance against the profiler: |computed - reference| <= 3 us or <= 0.01 % of the step. Why: the
reference and we both hold epoch-scale timestamps (~1.7e15 us) in float64, which resolves 0.25 us, so
every interval edge can move by up to 0.25 us; a union over ~200 kernels accumulates a few us at most.
Differences beyond that would be a different definition (window, categories), which is what this checks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import analyzers
from analyzers.analyses.breakdown import assign_steps, reconcile, step_breakdown
from analyzers.stats import union_length
from analyzers.schema import OPS, STEPS, conform
from tests.support import fixture_path

ABS_US = 3.0
REL_STEP = 1e-4


def test_union_length_cases():
    assert union_length(np.array([]), np.array([])) == 0.0
    assert union_length(np.array([0.0, 5.0]), np.array([10.0, 7.0])) == 10.0  # nested
    assert union_length(np.array([0.0, 5.0]), np.array([6.0, 9.0])) == 9.0  # overlapping
    assert union_length(np.array([0.0, 6.0]), np.array([5.0, 9.0])) == 8.0  # disjoint
    assert union_length(np.array([6.0, 0.0, 2.0]), np.array([9.0, 3.0, 4.0])) == 7.0  # unsorted, touching chain


def _ops(rows):
    df = pd.DataFrame(rows, columns=["rank", "step", "name", "category", "start_us", "dur_us"])
    return conform(df, OPS)


def test_breakdown_by_hand():
    # window 0..100; compute [0,30) [20,50); comm [40,70) and a receive [80,90)
    ops = _ops(
        [
            (0, 1, "MatMul", "compute", 0, 30),
            (0, 1, "Add", "compute", 20, 30),
            (0, 1, "hcom_allReduce_1", "communication", 40, 30),
            (0, 1, "hcom_receive_2", "communication", 80, 10),
        ]
    )
    steps = conform(
        pd.DataFrame({"rank": [0], "step": [1], "start_us": [0.0], "end_us": [100.0], "host_start_us": [-5.0]}), STEPS
    )
    b = step_breakdown(ops, steps).iloc[0]
    assert b["computing_us"] == 50  # [0,50)
    assert b["communication_us"] == 40  # [40,70) + [80,90)
    assert b["overlapped_us"] == 10  # [40,50)
    assert b["communication_not_overlapped_us"] == 30
    assert b["free_us"] == 100 - 80  # union [0,70) + [80,90) = 80
    assert b["bubble_us"] == 10 and b["stage_us"] == 90
    assert b["preparing_us"] == 5


def test_ops_are_clipped_to_window_and_assigned_by_start():
    ops = _ops([(0, None, "k", "compute", 90, 20), (0, None, "k", "compute", 105, 10)])
    steps = conform(
        pd.DataFrame({"rank": [0, 0], "step": [1, 2], "start_us": [0.0, 100.0], "end_us": [100.0, 120.0]}), STEPS
    )
    assert list(assign_steps(ops, steps)) == [1, 2]
    b = step_breakdown(ops, steps).set_index("step")
    assert b.loc[1, "computing_us"] == 10  # [90,110) clipped to [90,100)
    assert b.loc[2, "computing_us"] == 10  # [105,115)
    assert b.loc[2, "free_us"] == 10


B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
C = ("Ascend__msinsight", "test", "data", "pytorch", "db")


def _check(profile):
    sb = step_breakdown(profile.ops, profile.steps)
    rec = reconcile(sb, profile.reference_breakdown)
    assert rec is not None and len(rec) >= 6 * len(sb)
    step = rec.merge(sb[["rank", "step", "step_us"]], on=["rank", "step"])
    ok = (step["diff_us"].abs() <= ABS_US) | (step["diff_us"].abs() <= REL_STEP * step["step_us"])
    bad = step[~ok]
    assert bad.empty, bad.to_string()
    return sb, rec


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_text_breakdown_matches_step_trace_time(level):
    sb, rec = _check(analyzers.load_profile(fixture_path(*B, level)))
    # the reconciled metrics include the overlap-dependent ones
    assert {"computing", "communication_not_overlapped", "overlapped", "free", "preparing", "stage"} <= set(
        rec["metric"]
    )
    assert (sb["communication_us"] > 0).all()


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_db_breakdown_matches_analysis_db(fixture_copy, level):
    _check(analyzers.load_profile(fixture_copy(*C, level)))


def test_multi_step_set_j_windows_run_to_next_step():
    base = fixture_path("hicann__oam-tools")
    j = next(p for p in base.rglob("*_ascend_pt") if p.is_dir())
    sb, rec = _check(analyzers.load_profile(j))
    assert len(sb) == 5
    # windows tile the profiled range: each step ends where the next begins
    p = analyzers.load_profile(j)
    st = p.steps.sort_values("step")
    assert np.allclose(st["end_us"].to_numpy()[:-1], st["start_us"].to_numpy()[1:])


@pytest.mark.parametrize(
    "stages, p2p, expected_bubble",
    [
        (2, "Broadcast-op3", None),  # pipeline, p2p not identifiable as a receive (CPU): unknown
        (2, "Receive-op3", 20.0),  # pipeline with a receive op: its time, [60,80)
        (1, "Broadcast-op3", 0.0),  # no pipeline: no bubble, known
    ],
)
def test_pipeline_run_without_receive_op_has_unknown_bubble(stages, p2p, expected_bubble):
    from analyzers.analyses.breakdown import analysis
    from analyzers.registry import Context
    from analyzers.schema import Profile

    ops = _ops(
        [(r, 1, "MatMul", "compute", 0, 50) for r in (0, 1)] + [(r, 1, p2p, "communication", 60, 20) for r in (0, 1)]
    )
    steps = conform(
        pd.DataFrame({"rank": [0, 1], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [100.0, 100.0]}), STEPS
    )
    ctx = Context(
        profile=Profile(source="test", path="-", ops=ops, steps=steps),
        config={"parallel": {"pipeline_stages": stages, "micro_batches": 2}},
    )
    sb = analysis(ctx).tables["step_breakdown"]
    assert len(sb) == 2 and (sb["computing_us"] == 50).all()  # the rest stays known
    if expected_bubble is None:
        assert sb["bubble_us"].isna().all() and sb["stage_us"].isna().all()
    else:
        assert (sb["bubble_us"] == expected_bubble).all()
        assert (sb["stage_us"] == 100 - expected_bubble).all()


def test_step_of_puts_each_row_in_its_ranks_window_by_hand():
    from analyzers.schema import step_of

    steps = pd.DataFrame(
        {"rank": [0, 0, 1], "step": [5, 6, 5], "start_us": [10.0, 20.0, 100.0], "end_us": [20.0, 25.0, 110.0]}
    )
    rows = pd.DataFrame(
        {
            "rank": [0, 0, 0, 0, 0, 1, 1, 2],
            # window start is inside, its end is not (the next window's start is); a gap; before; unknown; rank 1's
            # own window; rank 0's window on rank 1 is not; a rank without steps
            "start_us": [10.0, 20.0, 26.0, 9.0, np.nan, 105.0, 15.0, 15.0],
        }
    )
    got = step_of(rows, steps)
    assert str(got.dtype) == "Int64"
    assert got.tolist() == [5, 6, pd.NA, pd.NA, pd.NA, 5, pd.NA, pd.NA]
    assert step_of(rows, None).isna().all() and step_of(rows.iloc[0:0], steps).empty
    # another column than the start
    assert step_of(rows.assign(end_us=[24.0] * 8), steps, col="end_us").tolist()[:2] == [6, 6]
