"""Which finding is the root (analyzers/analyses/advice/), on hand-built runs whose expected order and gains are
worked out by hand below:

- a pipeline with unbalanced stages: the point-to-point lateness between stages (a "slow rank" of a pp group) and
  the slowest stage's idle time inside the pipeline window are the stage imbalance's symptoms, not causes;
- one rank alone slow (host work before its step): the straggler is the first root, its own idle time folds under
  it, and free time counts only the other ranks' idle time (the host work every rank pays);
- a rank late only while profiled (its extra CPU time per step gone in the measured unprofiled steps): the
  profiler's own work on it, gain 0 and no straggler for the other rules;
- the unbalanced split of tests/integration/test_advise_try_msrun.py: the slowest stage's idle time, which grows
  with the machine's load, stays under the stage imbalance; only idle time outside the pipeline window is the
  host's."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzers.analyses.advice import advise


def _roots(out):
    return out[out["symptom_of"].isna()]


def _by_id(out):
    return {r["id"]: r for _, r in out.iterrows()}


# ---- pipeline: 4 ranks, 2 stages x data parallel 2, an 810 ms step ------------------------------------------------
# stage 0 = ranks 0, 1 computes 232.0 ms per step; stage 1 = ranks 2, 3 computes 401.6 ms (1.73x).
# pp groups (send/receive between the stages): pp-0-2 = {0, 2}, pp-1-3 = {1, 3}; dp groups dp-0-1, dp-2-3.
# the stage-1 rank of each pp group arrives last: rank 3 is 327.2 ms late in all over the 2 profiled steps
# (163.6 ms per step), rank 2 316.2 ms (158.1 ms per step).

STEP_MS = 810.0
C0, C1 = 232.0, 401.6
FREE0, FREE1 = 148.0, 148.4  # idle ms per step, stage 0 (its wait for stage 1) and stage 1
WINDOW1 = 790.0  # stage 1's pipeline window (profiler stage time): 20 ms of its idle time lies outside it


def _pipeline_tables(group_kind_known=True):
    stage_of = {0: 0, 1: 0, 2: 1, 3: 1}
    comm = []
    for step in (1, 2):
        for group, ranks, op in (
            ("pp-0-2", (0, 2), "send"),
            ("pp-1-3", (1, 3), "send"),
            ("dp-0-1", (0, 1), "allreduce"),
            ("dp-2-3", (2, 3), "allreduce"),
        ):
            for r in ranks:
                comm.append(
                    {
                        "rank": r,
                        "step": step,
                        "op_name": f"{op}-{group}",
                        "op_type": op,
                        "group": group,
                        "group_size": 2,
                        "wait_ms": 0.0,
                        "transit_ms": 5.0,
                        "elapse_ms": 5.0,
                        "size_bytes": 64e6,
                    }
                )
    sr = pd.DataFrame(
        [
            {
                "group": "pp-1-3",
                "group_kind": "pp" if group_kind_known else None,
                "scope": "group",
                "rank": 3,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 40.9,
                "total_lateness_ms": 327.2,
                "statistic": 1.0,
                "critical": 0.9,
                "test": "pair",
                "slow": True,
            },
            {
                "group": "pp-0-2",
                "group_kind": None,  # only the ranks' stages say that this group runs between stages
                "scope": "group",
                "rank": 2,
                "n_ops": 8,
                "last_arrivals": 8,
                "mean_lateness_ms": 39.525,
                "total_lateness_ms": 316.2,
                "statistic": 1.0,
                "critical": 0.9,
                "test": "pair",
                "slow": True,
            },
        ]
    )
    sb, ex = [], []
    for r, s in stage_of.items():
        comp, free = (C0, FREE0) if s == 0 else (C1, FREE1)
        exposed = STEP_MS - comp - free  # stage 0: 430 ms, stage 1: 260 ms
        for step in (1, 2):
            sb.append(
                {
                    "rank": r,
                    "step": step,
                    "step_us": STEP_MS * 1000,
                    "computing_us": comp * 1000,
                    "communication_not_overlapped_us": exposed * 1000,
                    "free_us": free * 1000,
                }
            )
            ex.append({"rank": r, "step": step, "exposed_us": exposed * 1000, "exposed_p2p_us": 0.9 * exposed * 1000})
    pl = pd.DataFrame(
        [
            {
                "step": step,
                "stage": s,
                "window_us": WINDOW1 * 1000,
                "busy_us": c * 1000,
                "bubble_us": (WINDOW1 - c) * 1000,
                "bubble_fraction": (WINDOW1 - c) / WINDOW1,
                "stages": 2,
                "micro_batches": 4,
                "ideal_fraction": 0.2,
            }
            for step in (1, 2)
            for s, c in ((0, C0), (1, C1))
        ]
    )
    return {
        "comm_ops": pd.DataFrame(comm),
        "slow_ranks": sr,
        "stages": pd.DataFrame(
            [{"stage": 0, "ranks": "0,1", "computing_ms": C0}, {"stage": 1, "ranks": "2,3", "computing_ms": C1}]
        ),
        "rank_stages": pd.DataFrame({"rank": [0, 1, 2, 3], "stage": [0, 0, 1, 1]}),
        "step_breakdown": pd.DataFrame(sb),
        "comm_exposure": pd.DataFrame(ex),
        "pipeline": pl,
    }


def test_lateness_between_unbalanced_stages_folds_under_the_stage_imbalance():
    out = advise(_pipeline_tables(), {"step_time_s": STEP_MS / 1000})
    rows = _by_id(out)
    top = out.iloc[0]
    # the slowest stage's compute above the stages' mean: 401.6 - (232.0 + 401.6) / 2 = 84.8 ms
    assert top["id"] == "stage_imbalance:1" and pd.isna(top["symptom_of"])
    assert top["gain_ms"] == pytest.approx(84.8)
    # the two pp groups' "slow ranks" are the stage-1 rank of each: symptoms, their own estimate kept for reference
    for rid, gain in (("slow_rank:pp-1-3:3", 163.6), ("slow_rank:pp-0-2:2", 158.1)):
        assert rows[rid]["symptom_of"] == "stage_imbalance:1"
        assert rows[rid]["gain_ms"] == pytest.approx(gain)
        assert "pipeline split, not a slow rank" in rows[rid]["message"] and "host load" not in rows[rid]["message"]
    # stage 1's idle time (148.4 ms): 810 - 790 = 20 ms outside the window (2.5% <= 10%), the rest the host cost of
    # its layers and its wait at fill and drain: a symptom of the imbalance, with no "host is the bottleneck" root
    assert rows["free_time:all"]["symptom_of"] == "stage_imbalance:1"
    assert rows["free_time:all"]["gain_ms"] == pytest.approx(FREE1)
    # the exposed communication is stage 0 waiting on p2p for stage 1 (pipeline kind), and both bubbles
    assert rows["exposed_communication:all"]["symptom_of"] == "stage_imbalance:1"
    assert rows["pipeline_bubble:0"]["symptom_of"] == "stage_imbalance:1"
    # one root: nothing counted twice, the roots no more than the stages' compute spread (169.6 ms) or the step
    assert list(_roots(out)["id"]) == ["stage_imbalance:1"]
    assert _roots(out)["gain_ms"].sum() <= min(C1 - C0, STEP_MS)


def test_lateness_between_stages_without_a_stage_imbalance_stays_a_straggler():
    """Balanced stages (401.6 vs 400 ms, ratio 1.004 <= 1.2): the pp group's late rank is a straggler again."""
    tables = _pipeline_tables()
    tables["stages"] = tables["stages"].assign(computing_ms=[400.0, C1])
    out = advise(tables, {"step_time_s": STEP_MS / 1000})
    rows = _by_id(out)
    assert "stage_imbalance:1" not in rows
    assert pd.isna(rows["slow_rank:pp-1-3:3"]["symptom_of"]) and "host load" in rows["slow_rank:pp-1-3:3"]["message"]
    assert {"slow_rank:pp-1-3:3", "slow_rank:pp-0-2:2"} <= set(_roots(out)["id"])


@pytest.mark.parametrize("string_dtype", [False, True])
def test_the_group_kind_or_the_ranks_stages_mark_a_group_between_stages(string_dtype):
    tables = _pipeline_tables(group_kind_known=False)
    if string_dtype:  # a stored table's unknown kind reads back as <NA>
        tables["slow_ranks"]["group_kind"] = pd.array([pd.NA, pd.NA], dtype="string")
    out = advise(tables, {"step_time_s": STEP_MS / 1000})
    rows = _by_id(out)
    assert rows["slow_rank:pp-1-3:3"]["symptom_of"] == rows["slow_rank:pp-0-2:2"]["symptom_of"] == "stage_imbalance:1"


# ---- one straggler: 2 ranks, fused gradients (one all-reduce per step), a 202 ms step ------------------------------
# rank 1 burns host time before every step: it idles 142.5 ms per step, rank 0 45.8 ms (the host work every rank
# pays); rank 0 waits 103 ms for rank 1 at the step's all-reduce (2 steps: 206 ms late in all). Both transfer 2 ms.
# rank 0: compute 202 - 105 - 45.8 = 51.2 ms; rank 1: compute 202 - 2 - 142.5 = 57.5 ms.


def _straggler_tables():
    comm = [
        {
            "rank": r,
            "step": s,
            "op_name": "allreduce-fused",
            "op_type": "allreduce",
            "group": "world",
            "group_size": 2,
            "wait_ms": 103.0 if r == 0 else 0.0,
            "transit_ms": 2.0,
            "elapse_ms": (105.0 if r == 0 else 2.0),
            "size_bytes": 64e6,
        }
        for r in (0, 1)
        for s in (5, 6)
    ]
    sr = pd.DataFrame(
        [
            {
                "group": "world",
                "scope": "group",
                "rank": 1,
                "n_ops": 2,
                "last_arrivals": 2,
                "mean_lateness_ms": 103.0,
                "total_lateness_ms": 206.0,
                "statistic": 1.0,
                "critical": 0.9,
                "test": "pair",
                "slow": True,
            }
        ]
    )
    part = {0: (51.2, 105.0, 45.8), 1: (57.5, 2.0, 142.5)}  # compute, exposed, free (ms per step)
    sb = pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "step_us": 202_000.0,
                "computing_us": part[r][0] * 1000,
                "communication_not_overlapped_us": part[r][1] * 1000,
                "free_us": part[r][2] * 1000,
            }
            for r in (0, 1)
            for s in (5, 6)
        ]
    )

    def imb(dim, hi, hi_ms, lo, lo_ms):
        return {
            "group": "all",
            "kind": "all",
            "ranks": "0,1",
            "dimension": dim,
            "max_rank": hi,
            "max_ms": hi_ms,
            "min_rank": lo,
            "min_ms": lo_ms,
            "spread_ms": hi_ms - lo_ms,
            "mean_total_ms": 202.0,
            "ratio": (hi_ms - lo_ms) / 202.0,
            "flagged": True,
        }

    ri = pd.DataFrame([imb("free", 1, 142.5, 0, 45.8), imb("communication", 0, 105.0, 1, 2.0)])
    return {"comm_ops": pd.DataFrame(comm), "slow_ranks": sr, "step_breakdown": sb, "rank_imbalance": ri}


def test_one_slow_rank_is_the_first_root_and_owns_its_idle_time():
    out = advise(_straggler_tables(), {"step_time_s": 0.202})
    rows = _by_id(out)
    roots = _roots(out)
    # the straggler: 206 ms late in all / 2 steps = 103 ms per step, from the exposed time (most exposed rank 105 ms)
    assert list(roots["id"]) == ["slow_rank:world:1", "free_time:all"]
    assert roots.iloc[0]["gain_ms"] == pytest.approx(103.0) and list(roots.iloc[0]["ranks"]) == [1]
    # free time counts rank 0 alone (45.8 / 202 = 23% > 10%): the host work every rank pays; rank 1's idle time is
    # why it is late. Not cut: 103 + 45.8 = 148.8 ms <= the 202 ms step, 45.8 <= the idle pool (142.5)
    ft = rows["free_time:all"]
    assert ft["gain_ms"] == pytest.approx(45.8) and list(ft["ranks"]) == [0]
    assert "other than the straggler 1" in ft["basis"] and "23%" in ft["message"]
    # "rank 1 idles 142.5 ms per step and rank 0 45.8 ms": the straggler's own idle time, under it
    assert rows["rank_imbalance:all:free"]["symptom_of"] == "slow_rank:world:1"
    assert rows["rank_imbalance:all:communication"]["symptom_of"] == "slow_rank:world:1"
    # the exposed communication (105 ms, rank 0's wait) and rank 0's wait ratio: 103 >= 0.5 x 105, the straggler's
    assert rows["exposed_communication:all"]["symptom_of"] == "slow_rank:world:1"
    assert rows["wait_ratio:0"]["symptom_of"] == "slow_rank:world:1"
    assert roots["gain_ms"].sum() == pytest.approx(148.8)


def test_a_straggler_idle_alone_folds_its_free_time():
    """Rank 0 idles 10 ms of 202 (5% <= 10%): no host work beyond the straggler's, so free time names rank 1 and
    folds under it with its whole idle time (142.5 ms)."""
    tables = _straggler_tables()
    sb = tables["step_breakdown"]
    tables["step_breakdown"] = sb.assign(free_us=[10_000.0 if r == 0 else 142_500.0 for r in sb["rank"]])
    out = advise(tables, {"step_time_s": 0.202})
    ft = _by_id(out)["free_time:all"]
    assert ft["symptom_of"] == "slow_rank:world:1" and list(ft["ranks"]) == [1]
    assert ft["gain_ms"] == pytest.approx(142.5)
    assert list(_roots(out)["id"]) == ["slow_rank:world:1"]


# ---- a rank late only while profiled: the workload's own step records (cpu_s per rank and step) ---------------------
# steps 0-2 warm-up (train.warmup_steps 3: compile, rank 1 +50 ms of CPU), steps 5 and 6 profiled (the comm_ops
# steps), steps 3, 4 and 7 measured without the profiler. Rank 0 burns 40 ms of CPU per measured step.


def _with_cpu(tables, profiled_ms, unprofiled_ms, warmup_ms=50.0):
    """`tables` with workload_steps: rank 1's CPU per step above rank 0's 40 ms by `profiled_ms` in the profiled
    steps 5, 6, by `unprofiled_ms` in the measured unprofiled steps 3, 4, 7 and by `warmup_ms` in the warm-up."""
    rows = []
    for s in range(8):
        extra = profiled_ms if s in (5, 6) else warmup_ms if s < 3 else unprofiled_ms
        for r in (0, 1):
            cpu = 0.040 + (extra / 1000.0 if r == 1 else 0.0)
            rows.append({"rank": r, "step": s, "step_time_s": 0.202, "cpu_s": cpu, "profiled": s in (5, 6)})
    return dict(tables, workload_steps=pd.DataFrame(rows), _config={"train": {"warmup_steps": 3}})


def test_a_rank_late_only_while_profiled_is_no_straggler():
    # rank 1 burns 10 ms more CPU than rank 0 in the profiled steps and none in the measured unprofiled ones
    # (0 < 0.5 x 10): the profiler's work on it. Its finding stays, with gain 0; free time counts every rank (the
    # most idle, rank 1: 142.5 ms, not only rank 0's 45.8) and the exposed communication (105 ms) is a root of its
    # own, cut to what the 202 ms step leaves (202 - 142.5 = 59.5 ms)
    out = advise(_with_cpu(_straggler_tables(), 10.0, 0.0), {"step_time_s": 0.202})
    rows = _by_id(out)
    sr = rows["slow_rank:world:1"]
    assert sr["gain_ms"] == 0.0 and "profiled steps only" in sr["message"]
    assert "10.00 ms more CPU" in sr["basis"] and "0.00 ms in the unprofiled" in sr["basis"]
    assert list(_roots(out)["id"]) == ["free_time:all", "exposed_communication:all", "slow_rank:world:1"]
    assert rows["free_time:all"]["gain_ms"] == pytest.approx(142.5) and list(rows["free_time:all"]["ranks"]) == [0, 1]
    assert rows["exposed_communication:all"]["gain_ms"] == pytest.approx(59.5)


def test_a_rank_that_burns_more_cpu_unprofiled_too_stays_the_straggler():
    # the same extra CPU in the unprofiled steps (a straggler of the job, like inject.straggler_rank): unchanged
    for unprofiled in (10.0, 6.0):  # 6.0: above PROFILED_ONLY_SHARE x 10
        out = advise(_with_cpu(_straggler_tables(), 10.0, unprofiled), {"step_time_s": 0.202})
        assert list(_roots(out)["id"]) == ["slow_rank:world:1", "free_time:all"], unprofiled
        assert _roots(out).iloc[0]["gain_ms"] == pytest.approx(103.0)
    # just below the share: the profiler's
    out = advise(_with_cpu(_straggler_tables(), 10.0, 4.0), {"step_time_s": 0.202})
    assert _by_id(out)["slow_rank:world:1"]["gain_ms"] == 0.0
    # no extra CPU while profiled either (late for another reason): a straggler, as without step records
    out = advise(_with_cpu(_straggler_tables(), 0.0, 0.0), {"step_time_s": 0.202})
    assert _roots(out).iloc[0]["id"] == "slow_rank:world:1"


def test_the_warm_up_steps_do_not_count_as_unprofiled():
    # warm-up steps 0-2 with rank 1 +50 ms (compile) would put the unprofiled median at (50 + 0) / 2 = 25 ms, above
    # half the profiled 10 ms; only the measured steps count: 0 ms, the profiler's
    from analyzers.analyses.advice.slow_rank import cpu_excess_ms

    t = _with_cpu(_straggler_tables(), 10.0, 0.0)
    assert cpu_excess_ms(t, 1, {0, 1}) == (pytest.approx(10.0), pytest.approx(0.0))
    assert cpu_excess_ms(t, 0, {0, 1}) == (pytest.approx(-10.0), pytest.approx(0.0))
    assert cpu_excess_ms(dict(t, _config={}), 1, {0, 1}) == (pytest.approx(10.0), pytest.approx(25.0))
    assert cpu_excess_ms(t, 1, {1}) is None  # no other rank to compare with
    only_profiled = dict(t, workload_steps=t["workload_steps"].query("profiled"))
    assert cpu_excess_ms(only_profiled, 1, {0, 1}) is None
    assert _by_id(advise(dict(t, _config={}), {"step_time_s": 0.202}))["slow_rank:world:1"]["gain_ms"] == 103.0


# ---- the unbalanced split (pipeline_split [2, 16], 2 ranks, 2 stages, 4 micro-batches; spans) ---------------------
# measured on a loaded machine: rank 0 (stage 0) computes 74.3 ms of a 716.8 ms step and idles 642.6 ms (its wait
# for stage 1); rank 1 (stage 1) computes 333.7 ms of 715.0 and idles 381.3 ms; the pipeline window (first
# forward to last backward/send/recv of any stage) is 710.0 ms.


def _split_tables(step1_ms=715.0, free1_ms=381.3, window_ms=710.0):
    sb = pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "step_us": step * 1000,
                "computing_us": comp * 1000,
                "communication_not_overlapped_us": 0.0,
                "free_us": free * 1000,
            }
            for r, step, comp, free in ((0, 716.8, 74.3, 642.5), (1, step1_ms, 333.7, free1_ms))
            for s in (3, 4)
        ]
    )
    pl = pd.DataFrame(
        [
            {
                "step": s,
                "stage": st,
                "window_us": window_ms * 1000,
                "busy_us": busy,
                "bubble_us": window_ms * 1000 - busy,
                "bubble_fraction": 1 - busy / (window_ms * 1000),
                "stages": 2,
                "micro_batches": 4,
                "ideal_fraction": 0.2,
            }
            for s in (3, 4)
            for st, busy in ((0, 120_000.0), (1, 600_000.0))
        ]
    )
    return {
        "step_breakdown": sb,
        "pipeline": pl,
        "stages": pd.DataFrame(
            [{"stage": 0, "ranks": "0", "computing_ms": 74.3}, {"stage": 1, "ranks": "1", "computing_ms": 333.7}]
        ),
        "rank_stages": pd.DataFrame({"rank": [0, 1], "stage": [0, 1]}),
        "_config": {"parallel": {"pipeline_stages": 2, "micro_batches": 4, "pipeline_split": [2, 16]}},
    }


def test_the_slowest_stages_idle_time_inside_the_window_is_the_stage_imbalances():
    out = advise(_split_tables(), {"step_time_s": 0.7168})
    rows = _by_id(out)
    # 333.7 - (74.3 + 333.7) / 2 = 129.7 ms; stage 1's 381.3 ms idle lies inside the window but for 715 - 710 = 5 ms
    # (0.7% <= 10%): under the stage imbalance, however large the load makes it
    assert out.iloc[0]["id"] == "stage_imbalance:1" and out.iloc[0]["gain_ms"] == pytest.approx(129.7)
    assert rows["free_time:all"]["symptom_of"] == "stage_imbalance:1"
    assert list(_roots(out)["id"]) == ["stage_imbalance:1"]
    # twice the idle time, inside a window as much longer (host dispatch slowed down by load): still the stage
    # imbalance's (1096.3 - 1091.3 = 5 ms outside the window)
    out = advise(_split_tables(free1_ms=762.6, step1_ms=1096.3, window_ms=1091.3), {"step_time_s": 1.0963})
    assert list(_roots(out)["id"]) == ["stage_imbalance:1"]


def test_idle_time_outside_the_pipeline_window_stays_the_hosts():
    """Stage 1's step 900 ms with the same 710 ms window: 190 ms of its 566.3 ms idle time lie outside the window
    (21% > 10%): a free_time root of 190 ms (it outranks the stage's 129.7 ms), naming rank 1."""
    out = advise(_split_tables(step1_ms=900.0, free1_ms=566.3), {"step_time_s": 0.9})
    ft = _by_id(out)["free_time:all"]
    assert pd.isna(ft["symptom_of"]) and ft["gain_ms"] == pytest.approx(190.0) and list(ft["ranks"]) == [1]
    assert "outside the pipeline" in ft["message"]
    assert list(_roots(out)["id"]) == ["free_time:all", "stage_imbalance:1"]


def test_idle_outside_the_window_is_taken_step_by_step():
    """Measured with one core kept busy: stage 1's profiled steps 3 and 4 took 2338.0 and 1693.7 ms with windows of
    2319.3 and 1649.3 ms; the pipeline table also has step 5 (window 1559.3 ms, not profiled). Step by step 18.76 and
    44.41 ms lie outside the window (median 31.58 ms, 1.6% of the 2015.9 ms median step <= 10%): the idle time folds
    under the stage imbalance. (The medians compared across different steps, 2015.9 - 1649.3 = 366.6 ms, would have
    made it a host root.)"""
    tables = _split_tables()
    sb = tables["step_breakdown"]
    one = sb["rank"] == 1
    sb.loc[one, "step_us"] = [2_338_012.25, 1_693_744.5]
    sb.loc[one, "computing_us"] = [1_203_470.25, 1_005_843.25]
    sb.loc[one, "free_us"] = sb.loc[one, "step_us"] - sb.loc[one, "computing_us"]
    windows = {3: 2_319_256.5, 4: 1_649_331.5, 5: 1_559_328.75}
    pl = pd.concat([tables["pipeline"], tables["pipeline"][tables["pipeline"]["step"] == 4].assign(step=5)])
    pl["window_us"] = pl["step"].map(windows)
    tables.update(step_breakdown=sb, pipeline=pl)
    tables["stages"] = tables["stages"].assign(computing_ms=[184.55, 1104.66])
    out = advise(tables, {"step_time_s": 1.6167})
    ft = _by_id(out)["free_time:all"]
    assert ft["symptom_of"] == "stage_imbalance:1"
    assert "rank 1 31584 us" in ft["evidence"]
    assert list(_roots(out)["id"]) == ["stage_imbalance:1"]
