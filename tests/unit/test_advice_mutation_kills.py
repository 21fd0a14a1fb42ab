"""Hand-computed edge cases of the advice's numbers and decisions that the other advice tests leave open (found by
`make mutation`: each test fails on a one-line change of a number or a decision in analyzers/analyses/advice/)."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzers.analyses.advice import link as _link


def _f(id_, rule, gain=None, **kw):
    return {"id": id_, "rule": rule, "gain_ms": gain, "ranks": kw.pop("ranks", []), "explains": None, **kw}


def test_a_rule_folding_under_itself_keeps_the_known_gain_as_its_root():
    # wait_ratio folds under its own largest finding; an unknown gain counts as 0, so 0.5 ms is the largest
    rows = [_f("wait_ratio:0", "wait_ratio", 0.5), _f("wait_ratio:1", "wait_ratio", None)]
    _link(rows)
    assert [r["symptom_of"] for r in rows] == [None, "wait_ratio:0"]


def test_excess_over_a_bandwidth_per_step():
    from analyzers.analyses.advice.common import excess_ms_per_step

    # 1 MB at 2 GB/s takes 0.5 ms: 0.8 ms is 0.3 ms over it, in one step
    assert excess_ms_per_step(0.8, 1.0, 2.0, 1) == pytest.approx(0.3)
    assert excess_ms_per_step(0.2, 1.0, 2.0, 2) == 0.0  # faster than the bandwidth: nothing to gain
    assert excess_ms_per_step(3.0, 1.0, 0.5, 2) == pytest.approx(0.5)  # 1 MB at 0.5 GB/s = 2 ms; (3 - 2) / 2
    assert excess_ms_per_step(1.0, 1.0, 0.0, 2) is None  # no bandwidth to compare with
    assert excess_ms_per_step(1.0, 1.0, 2.0, None) is None and excess_ms_per_step(1.0, 1.0, 2.0, 0) is None


def _exposure(rows):
    return pd.DataFrame(rows, columns=["rank", "step", "exposed_us", "exposed_p2p_us", "source"])


def test_exposure_split_over_the_trusted_ranks_with_their_stages():
    from analyzers.analyses.advice.common import exposure_split

    sb = pd.DataFrame({"rank": [0, 1]})
    ex = _exposure(
        [(0, s, 100.0, 60.0, None) for s in range(3)]  # no source: still counted
        + [(1, s, 50.0, 0.0, "profiler") for s in range(3)]
        + [(1, 3, 9999.0, None, "profiler")]  # its p2p part unknown: left out
        + [(2, 0, 1000.0, 1000.0, "profiler")]  # rank 2 is not among the trusted ranks
    )
    stages = pd.DataFrame({"rank": [0, 1, 2], "stage": [0, None, 1]})
    share, per = exposure_split({"comm_exposure": ex, "rank_stages": stages}, sb)
    # rank 0: 100 us exposed, 60 p2p; rank 1: 50, 0 -> 60 / 150 p2p
    assert share == pytest.approx(0.4)
    assert list(per.index) == [0, 1]
    assert list(per["exposed_collective_us"]) == [40.0, 50.0]
    assert per.loc[0, "stage"] == 0 and pd.isna(per.loc[1, "stage"])  # rank 1's stage is unknown
    assert exposure_split({"comm_exposure": _exposure([(0, 0, 0.0, 0.0, "x")])}, sb) == (None, None)
    share, per = exposure_split({"comm_exposure": _exposure([(0, 0, 0.5, 0.25, "x")])}, sb)  # under 1 us counts
    assert share == pytest.approx(0.5) and pd.isna(per.loc[0, "stage"])  # no rank_stages: stage unknown


def test_fastest_floor_per_kind_and_group_size_from_the_sizes_at_or_above():
    from analyzers.analyses.advice.common import fastest

    df = pd.DataFrame(
        [
            ("a", 2, 1.0, 3.0),
            ("a", 2, 1.0, 5.0),
            ("a", 2, 2.0, 2.0),
            ("a", 2, 4.0, 4.0),
            ("a", 4, 1.0, 0.5),  # another group size: its own floor
            ("b", 2, 1.0, 1.0),  # another kind: its own floor
        ],
        columns=["op_type", "n", "size", "t"],
    )
    # kind a, 2 ranks: fastest per size 3 (1 B), 2 (2 B), 4 (4 B); floor = least at that size or larger: 2, 2, 4
    assert list(fastest(df)["floor"]) == [2.0, 2.0, 2.0, 4.0, 0.5, 1.0]


def test_balanced_split_step_with_little_or_no_exposed_collective_on_the_slowest_stage():
    from analyzers.analyses.advice.stage_imbalance import _balanced_split_step
    from tests.unit.test_advice_gains import _sb

    sb = _sb(0.0, 0.0, ranks=(0, 1, 2, 3), step_us=100000.0)
    # the slowest stage's ranks 2, 3: exposed 0.6 ms per step, 0.2 of it p2p -> 0.4 ms of collectives stays fixed;
    # the rest of the 100 ms step scales by 0.5: 0.4 + 99.6 x 0.5 = 50.2 ms
    ex = _exposure([(r, s, 600.0, 200.0, "p") for r in (2, 3) for s in range(3)])
    assert _balanced_split_step({"step_breakdown": sb, "comm_exposure": ex}, {"step_time_s": 0.1}, [2, 3], 0.5) == (
        pytest.approx(50.2)
    )
    # the slowest stage's ranks are not in comm_exposure: nothing fixed, the whole step scales
    ex01 = _exposure([(r, s, 600.0, 200.0, "p") for r in (0, 1) for s in range(3)])
    assert _balanced_split_step({"step_breakdown": sb, "comm_exposure": ex01}, {"step_time_s": 0.1}, [2, 3], 0.5) == (
        pytest.approx(50.0)
    )


def _budget_tables():
    sb = pd.DataFrame(
        [(0, s, 2000.0, 5000.0, 500.0, True) for s in range(3)]
        + [(1, s, e, 1000.0, o, True) for s, e, o in zip(range(3), (1000.0, 3000.0, 4000.0), (1000.0, 4000.0, 2000.0))]
        + [(2, s, 90000.0, 90000.0, 90000.0, False) for s in range(3)],  # inconsistent with its kernels: left out
        columns=["rank", "step", "communication_not_overlapped_us", "free_us", "overlapped_us", "consistent"],
    )
    ri = pd.DataFrame(
        [
            ("computing", 4.0, 0, 1),  # ranks 0 and 1 share stage 0: within a stage
            ("computing", 7.0, 2, 3),  # stage 1 vs stage 0: the stages' spread, counted from `stages`
            ("computing", 6.0, 4, 5),  # stages unknown: counted
            ("computing", None, 0, 1),  # no spread: nothing
            ("free", 100.0, 0, 1),  # not computing
        ],
        columns=["dimension", "spread_ms", "max_rank", "min_rank"],
    )
    ws = pd.DataFrame(
        [(0, s, t) for s, t in enumerate((0.010, 0.011, 0.012))]
        + [(1, s, 0.010) for s in range(3)]
        + [(2, s, 0.0125) for s in range(3)],
        columns=["rank", "step", "step_time_s"],
    )
    return {
        "step_breakdown": sb,
        "stages": pd.DataFrame({"stage": [0, 1, 2, 3], "computing_ms": [30.0, 10.0, None, 0.0]}),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 0]}),
        "rank_imbalance": ri,
        "workload_steps": ws,
    }


def test_time_budget_by_hand():
    from analyzers.analyses.advice import LOAD_EXCESS_KEY, time_budget

    t = dict(_budget_tables(), **{LOAD_EXCESS_KEY: 0.5})
    # exposed: the medians per rank 2.0 and 3.0 ms, the largest (the collectives' wait for a core, the load excess,
    # stays in: fusion removes it with the collectives); idle: rank 0's 5 ms; imbalance: stages 30 - 10 ms + the
    # largest within-stage spread max(4, 6, workload steps 12.5 - 11 = 1.5); overlapped: rank 0 0.5 ms, rank 1's
    # median of (1, 4, 2) = 2 ms, the largest
    assert time_budget(t, {"step_time_s": 0.05}) == {
        "exposed": pytest.approx(3.0),
        "idle": pytest.approx(5.0),
        "overlapped": pytest.approx(2.0),
        "imbalance": pytest.approx(26.0),
        "step": pytest.approx(50.0),
        # one rank's exposed + free + overlapped medians: rank 0 2 + 5 + 0.5 = 7.5, rank 1 3 + 1 + 2 = 6
        "rank_step": pytest.approx(7.5),
    }
    assert time_budget(dict(t, **{LOAD_EXCESS_KEY: 10.0}), {})["exposed"] == pytest.approx(3.0)
    no_ri = {k: v for k, v in t.items() if k != "rank_imbalance"}
    assert time_budget(no_ri, {})["imbalance"] == pytest.approx(21.5)  # 20 + the step-time spread 1.5
    one = {
        "stages": t["stages"].iloc[:1],
        "workload_steps": t["workload_steps"][t["workload_steps"]["rank"] == 0],
    }
    assert time_budget(one, {}) == {
        "exposed": None,
        "idle": None,
        "overlapped": None,
        "imbalance": None,
        "step": None,
        "rank_step": None,
    }


def test_idle_outside_the_window_with_steps_unknown():
    from analyzers.analyses.advice.free_time import idle_outside

    window = pd.Series({0: 70.0, 1: 90.0})  # us per step; median 80
    sb = pd.DataFrame({"step": [0, 1, "?", 0], "step_us": [100.0] * 3 + [60.0], "free_us": [50.0, 5.0, 50.0, 50.0]})
    # step 0: 100 - 70 = 30; step 1: 100 - 90 = 10, at most its 5 us free; step "?": 100 - 80 (median window) = 20;
    # a step shorter than its window: 0
    assert list(idle_outside(sb, window)) == [30.0, 5.0, 20.0, 0.0]
    # no steps: the median window
    assert list(idle_outside(sb.drop(columns="step"), window)) == [20.0, 5.0, 20.0, 0.0]


def _allreduce(rows, **extra):
    """comm_ops rows (rank, step, size_bytes, transit_ms): all-reduces over a group of 2 (factor 1)."""
    df = pd.DataFrame(rows, columns=["rank", "step", "size_bytes", "transit_ms"])
    df["op_type"], df["group_size"], df["wait_ms"] = "allreduce", 2, 0.0
    df["elapse_ms"] = df["transit_ms"]
    return df.assign(**extra)


def _try(co, exposed_us=20000.0, step_s=0.2):
    from analyzers.analyses.advice.exposed_communication import compression_try
    from tests.unit.test_advice_gains import _sb

    tables = {"comm_ops": co, "step_breakdown": _sb(exposed_us, 0.0, ranks=(0, 1))}
    knob, step = compression_try(tables, {"step_time_s": step_s} if step_s else {})
    assert knob == {"parallel.grad_compression": "fp16"}
    return step


def test_fp16_compression_prediction_by_hand():
    # one 64e6 B all-reduce of 10 ms per rank and step (2 ranks, 4 steps): the bytes term is 10 ms per rank and
    # step, fp16 halves it: 5 ms of a 200 ms step, at most the exposed time
    base = [(r, s, 64e6, 10.0) for r in range(2) for s in range(4)]
    assert _try(_allreduce(base)) == pytest.approx(195.0)
    assert _try(_allreduce(base), exposed_us=3000.0) == pytest.approx(197.0)  # only 3 ms exposed: 3 ms saved
    assert _try(_allreduce(base), step_s=None) is None  # no step time: no prediction
    assert _try(_allreduce(base).drop(columns="group_size")) == pytest.approx(195.0)  # group size = the ranks
    # pipeline receives (1 s each) are not gradient collectives: left out of the fit
    recv = _allreduce([(r, s, 64e6, 1000.0) for r in range(2) for s in range(4)], op_type="recv")
    assert _try(pd.concat([_allreduce(base), recv], ignore_index=True)) == pytest.approx(195.0)
    # one rank's profile: its own bytes term, 10 ms per step
    assert _try(_allreduce([(0, s, 64e6, 10.0) for s in range(4)])) == pytest.approx(195.0)
    # two collectives are enough for the fit: (10 + 10) ms / 1 step / 2 ranks = 10 ms, half saved
    assert _try(_allreduce([(0, 0, 64e6, 10.0), (1, 0, 64e6, 10.0)])) == pytest.approx(195.0)
    assert _try(_allreduce([(0, 0, 64e6, 10.0)])) is None  # one: no fit
    # two sizes on one bandwidth (64e6 B: 10 ms, 32e6 B: 5 ms) and one collective of unknown size (left out):
    # 15 ms of bytes per rank and step, 7.5 ms saved
    two = [(r, s, b, t) for r in range(2) for s in range(4) for b, t in ((64e6, 10.0), (32e6, 5.0))]
    assert _try(_allreduce(two + [(0, 0, None, 3.0)])) == pytest.approx(192.5)
    # no time or no bytes to fit a bandwidth on: no prediction
    assert _try(_allreduce([(r, s, 64e6, 0.0) for r in range(2) for s in range(4)])) is None
    assert _try(_allreduce([(r, s, 0.0, 10.0) for r in range(2) for s in range(4)])) is None


def test_micro_batch_try_by_hand():
    from analyzers.analyses.advice.pipeline_bubble import _micro_batch_try

    # S = 2, M = 4: ideal 1/5, with 8 micro-batches 1/9; x a 90 ms window: 8 ms saved of a 100 ms step
    r = pd.Series({"S": 2, "M": 4, "window": 90000.0})
    knob, step = _micro_batch_try(r, 100.0)
    assert knob == {"parallel.micro_batches": 8} and step == pytest.approx(100.0 - (1 / 5 - 1 / 9) * 90.0)
    assert _micro_batch_try(r, None) == ({"parallel.micro_batches": 8}, None)  # no step time: no prediction
    assert _micro_batch_try(pd.Series({"S": 1, "M": 4, "window": 90000.0}), 100.0) == (None, None)  # no pipeline
    assert _micro_batch_try(pd.Series({"S": 2, "M": 4}), 100.0) == (None, None)  # window unknown
