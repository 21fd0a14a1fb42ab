"""Pipeline bubble per stage vs the ideal (S-1)/(M+S-1): hand-built GPipe/1F1B span timelines with
hand-computed bubbles, and the profiler breakdown of the real 2-stage set G."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from analyzers.analyses.pipeline import ideal_bubble_fraction, mean_bubble_fraction, pipeline_bubbles
from analyzers.schema import Profile
from tests.support import fixture_path


def _gpipe(stages: int, mbs: int, f: float = 1.0, b: float = 2.0, step: int = 0, t0: float = 100.0, dp: int = 1):
    """Spans of an ideal GPipe schedule: forward of mb m on stage s at (m+s)*f, then backwards in
    reverse stage order. Times in seconds; `dp` replicas per stage (ranks stage*dp + k)."""
    rows = []
    fwd_end = (mbs + stages - 1) * f
    for s in range(stages):
        for k in range(dp):
            rank = s * dp + k
            for m in range(mbs):
                st = t0 + (m + s) * f
                rows.append(
                    {
                        "rank": rank,
                        "step": step,
                        "kind": "forward",
                        "mb": m,
                        "stage": s,
                        "start_ts": st,
                        "end_ts": st + f,
                    }
                )
                bs = t0 + fwd_end + (m + (stages - 1 - s)) * b
                rows.append(
                    {
                        "rank": rank,
                        "step": step,
                        "kind": "backward",
                        "mb": m,
                        "stage": s,
                        "start_ts": bs,
                        "end_ts": bs + b,
                    }
                )
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "kind": "optimizer",
                    "mb": None,
                    "stage": s,
                    "start_ts": t0 + fwd_end + (mbs + stages - 1) * b + 5,
                    "end_ts": t0 + fwd_end + (mbs + stages - 1) * b + 6,
                }
            )
    return pd.DataFrame(rows)


def test_ideal_formula():
    assert ideal_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert ideal_bubble_fraction(1, 8) == 0.0
    assert ideal_bubble_fraction(2, None) != ideal_bubble_fraction(2, None)  # NaN


@pytest.mark.parametrize("stages,mbs", [(2, 2), (4, 4), (4, 8), (3, 1)])
def test_gpipe_schedule_matches_the_ideal(stages, mbs):
    res = pipeline_bubbles(None, _gpipe(stages, mbs), {"parallel": {"pipeline_stages": stages, "micro_batches": mbs}})
    assert list(res["stage"]) == list(range(stages))
    # window = (M+S-1)(f+b) = 3(M+S-1) s; busy = M(f+b) = 3M s; the optimizer lies outside the window
    window = 3.0 * (mbs + stages - 1) * 1e6
    assert res["window_us"].tolist() == pytest.approx([window] * stages)
    assert res["busy_us"].tolist() == pytest.approx([3.0 * mbs * 1e6] * stages)
    assert res["bubble_fraction"].tolist() == pytest.approx([(stages - 1) / (mbs + stages - 1)] * stages)
    assert res["excess_fraction"].abs().max() == pytest.approx(0.0, abs=1e-12)
    assert mean_bubble_fraction(res) == pytest.approx((stages - 1) / (mbs + stages - 1))


def test_slow_stage_shows_excess_bubble():
    sp = _gpipe(2, 4)
    # stage 1 forward of the last micro-batch starts 2 s late -> everything after it shifts
    late = (sp["stage"] == 1) & (sp["kind"] == "forward") & (sp["mb"] == 3)
    sp.loc[late, ["start_ts", "end_ts"]] += 2.0
    bw = sp["kind"] == "backward"
    sp.loc[bw, ["start_ts", "end_ts"]] += 2.0
    res = pipeline_bubbles(None, sp, {"pipeline_stages": 2, "micro_batches": 4})
    window = 3.0 * 5 + 2.0
    assert res["window_us"].iloc[0] == pytest.approx(window * 1e6)
    assert res["bubble_fraction"].tolist() == pytest.approx([(window - 12) / window] * 2)
    assert (res["excess_fraction"] > 0.05).all()


def test_data_parallel_replicas_are_averaged_and_mb_count_inferred():
    res = pipeline_bubbles(None, _gpipe(2, 3, dp=2), None)  # S, M from the spans themselves
    assert res["ranks"].tolist() == [2, 2]
    assert res["stages"].iloc[0] == 2 and res["micro_batches"].iloc[0] == 3
    assert res["bubble_fraction"].tolist() == pytest.approx([1 / 4, 1 / 4])


def test_steps_are_separate():
    sp = pd.concat([_gpipe(2, 2, step=0), _gpipe(2, 4, step=1, t0=1000.0)])
    res = pipeline_bubbles(None, sp, {"pipeline_stages": 2})
    per = res.groupby("step")["window_us"].first()
    assert per[0] == pytest.approx(9e6) and per[1] == pytest.approx(15e6)


def test_no_pipeline_returns_none():
    one = _gpipe(1, 4)
    assert pipeline_bubbles(None, one, None) is None
    assert pipeline_bubbles(None, None, None) is None
    assert pipeline_bubbles(None, one.drop(columns="stage"), None) is None
    assert pipeline_bubbles(Profile(source="x", path="x"), None, None) is None


def test_profiler_breakdown_of_set_g():
    from analyzers.parsers.legacy import parse

    d = fixture_path("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")
    p = parse(d)
    res = pipeline_bubbles(p, None, {"parallel": {"pipeline_stages": 2, "micro_batches": 4}})
    assert set(res["stage"]) == {0, 1} and set(res["source"]) == {"profiler"}
    assert res["ideal_fraction"].iloc[0] == pytest.approx(1 / 5)
    # stage 0 = ranks 0, 1: bubble = receive_alone_time / stage_time, averaged over the two ranks
    rows = {}
    for r in (0, 1):
        with open(d / f"ascend_cluster_analyse_pipeline-parallel_2_4_{r}.csv", newline="") as fh:
            rows[r] = list(csv.DictReader(fh))
    step3 = res[(res["stage"] == 0) & (res["step"] == 3)].iloc[0]
    stage_t = sum(float(rows[r][2]["stage_time"]) for r in (0, 1)) / 2
    recv_t = sum(float(rows[r][2]["receive_alone_time"]) for r in (0, 1)) / 2
    assert step3["window_us"] == pytest.approx(stage_t * 1000)
    assert step3["bubble_fraction"] == pytest.approx(recv_t / stage_t)
    # first step: the other stage was still compiling, receive > stage time; the bubble is capped
    assert (res["bubble_fraction"] <= 1.0).all()


def test_profiler_breakdown_raw_ascend_columns():
    ref = pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [1, 1, 2, 2],
            "Stage": [100.0, 80.0, 100.0, 80.0],
            "Bubble": [25.0, 8.0, 35.0, 12.0],
        }
    )
    ranks = pd.DataFrame({"rank": [0, 1], "stage": [0, 1]})
    p = Profile(source="ascend-text", path="x", ranks=ranks, reference_breakdown=ref)
    res = pipeline_bubbles(p, None, None)
    assert res["bubble_fraction"].tolist() == pytest.approx([0.25, 0.1, 0.35, 0.15])
    assert res["ideal_fraction"].isna().all()


def test_stage_from_parallel_groups_or_layout():
    ref = pd.DataFrame(
        {"rank": [0, 1, 2, 3], "step": [1] * 4, "stage_us": [100.0] * 4, "bubble_us": [10.0, 30.0, 20.0, 40.0]}
    )
    # pipeline groups {0, 2} and {1, 3}: ranks 0, 1 run stage 0; ranks 2, 3 stage 1
    p = Profile(
        source="ascend-text",
        path="x",
        reference_breakdown=ref,
        meta={"parallel_groups": {"pp_group_0": [0, 2], "pp_group_1": [1, 3], "dp_group_0": [0, 1]}},
    )
    res = pipeline_bubbles(p, None, None)
    assert res["bubble_fraction"].tolist() == pytest.approx([0.2, 0.3])
    # no groups: S = 2 from the config and the contiguous layout (ranks 0, 1 | 2, 3)
    p = Profile(source="ascend-text", path="x", reference_breakdown=ref)
    res = pipeline_bubbles(p, None, {"parallel": {"pipeline_stages": 2, "micro_batches": 3}})
    assert res["bubble_fraction"].tolist() == pytest.approx([0.2, 0.3])
    assert res["ideal_fraction"].tolist() == pytest.approx([0.25, 0.25])
    assert pipeline_bubbles(p, None, None) is None  # stages unknown


def test_warmup_steps_are_left_out():
    sp = pd.concat([_gpipe(2, 2, step=0, f=10.0), _gpipe(2, 2, step=1, t0=1000.0)])
    res = pipeline_bubbles(None, sp, {"train": {"warmup_steps": 1}, "parallel": {"pipeline_stages": 2}})
    assert set(res["step"]) == {1}
    assert set(pipeline_bubbles(None, sp, None)["step"]) == {0, 1}
