"""Pipeline stages, stage imbalance and the advice that names the bottleneck stage.

Set G (MindSpore 1.x, PP2 over 4 ranks): the expected numbers are read at test time from the profiler's
own `ascend_cluster_analyse_pipeline-parallel_2_4_{r}.csv` (computation_time per step, ms; the rows that
match the steps of `step_trace_raw_{r}_detail_time.csv`, whose last row "-" is an average). Hand-built
breakdowns check the PP2 x DP2 case of the issue and that inconsistent ranks carry no advice.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

import analyzers
from analyzers.analyses.advice import advise
from analyzers.analyses.comm_exposure import comm_exposure
from analyzers.analyses.stages import stage_compute_imbalance, stage_table
from tests.support import fixture_path, perfbench_in_process

G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")


def _g_expected():
    """{rank: (stage, mean computation_time ms over the profiled steps)} from the profiler's files."""
    out = {}
    for f in fixture_path(*G).glob("ascend_cluster_analyse_pipeline-parallel_*_*_*.csv"):
        s, n, r = map(int, re.search(r"_(\d+)_(\d+)_(\d+)\.csv$", f.name).groups())
        steps = pd.read_csv(fixture_path(*G, f"step_trace_raw_{r}_detail_time.csv"), usecols=["step_num"])
        n_steps = int((steps["step_num"].astype(str) != "-").sum())
        comp = pd.read_csv(f)["computation_time"].head(n_steps)
        out[r] = (r // (n // s), float(comp.mean()))
    return out


@pytest.fixture(scope="module")
def g_analysis():
    p = analyzers.load_profile(fixture_path(*G))
    return p, analyzers.analyze(p)


def test_g_stage_table_and_imbalance(g_analysis):
    exp = _g_expected()
    st = g_analysis[1].tables["stages"]
    assert st["stage"].tolist() == [0, 1]
    for stage in (0, 1):
        ranks = sorted(r for r, (s, _) in exp.items() if s == stage)
        want = np.mean([exp[r][1] for r in ranks])
        row = st[st["stage"] == stage].iloc[0]
        assert row["ranks"] == ",".join(map(str, ranks))
        assert row["computing_ms"] == pytest.approx(want, rel=1e-9)
    ratio = st["computing_ms"].max() / st["computing_ms"].min()
    assert g_analysis[1].summary["stage_compute_imbalance"] == pytest.approx(ratio)
    assert stage_compute_imbalance(st) == pytest.approx(8.43, abs=0.01)  # the "8.4x (123 vs 14.6 ms)"


def test_g_advice_names_stage_1_with_the_profilers_numbers(g_analysis):
    exp = _g_expected()
    s0 = np.mean([c for s, c in exp.values() if s == 0])
    s1 = np.mean([c for s, c in exp.values() if s == 1])
    adv = g_analysis[1].tables["advice"]
    row = adv[adv["rule"] == "stage_imbalance"].iloc[0]
    assert f"stage 1 computes {s1 / s0:.1f}x more than stage 0 ({s1:.3g} vs {s0:.3g} ms" in row["message"]
    assert "stage 1 computes 8.4x more than stage 0 (123 vs 14.6 ms" in row["message"]
    assert row["stage"] == 1 and row["ranks"] == [2, 3] and row["severity"] == "high"
    assert "micro-batches" in row["message"] and "Move layers off stage 1" in row["message"]
    # the exposed communication is not blamed on gradient all-reduce while a stage is the bottleneck
    ex = adv[adv["rule"] == "exposed_communication"]
    assert len(ex) == 1 and "overlap gradient all-reduce with backward" not in ex.iloc[0]["message"]
    assert "wait for stage 1" in ex.iloc[0]["message"]


def test_g_json_has_rank_stages_and_advice_fields(tmp_path):
    import shutil

    data = tmp_path / "g"
    shutil.copytree(fixture_path(*G), data)
    doc = json.loads(perfbench_in_process("analyze", data, "--json", "--no-store").stdout)
    assert {r["rank"]: r["stage"] for r in doc["ranks"]} == {r: s for r, (s, _) in _g_expected().items()}
    assert [s["stage"] for s in doc["stages"]] == [0, 1]
    for a in doc["advice"]:
        assert set(a) >= {"rule", "severity", "message", "evidence", "ranks", "stage"}
        assert isinstance(a["ranks"], list)
    st = next(a for a in doc["advice"] if a["rule"] == "stage_imbalance")
    assert st["stage"] == 1 and st["ranks"] == [2, 3]


def test_stage_unknown_is_null_in_json(tmp_path):
    import shutil

    data = tmp_path / "b"
    shutil.copytree(fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level0"), data)
    doc = json.loads(perfbench_in_process("analyze", data, "--json", "--no-store").stdout)
    assert [r["stage"] for r in doc["ranks"]] == [None, None]
    assert doc["stages"] == []


# ---- hand-built PP2 x DP2: stage 1 computes ~1.7x stage 0, stage 0 waits in hcom_batchSendRecv -------------


def _pp2dp2(consistent=(True, True, True, True)):
    """Ranks 0, 1 = stage 0 (computes 40 ms), ranks 2, 3 = stage 1 (computes 68 ms); step 100 ms.
    Stage 0 ops: compute [0, 40], batchSendRecv [40, 95] (waiting for stage 1), all-reduce [95, 100].
    Stage 1 ops: compute [0, 68], batchSendRecv [68, 75], all-reduce [75, 80]."""
    sb, ops, steps = [], [], []
    for r in range(4):
        st = 0 if r < 2 else 1
        comp = 40.0 if st == 0 else 68.0
        p2p_end = 95.0 if st == 0 else 75.0
        ar_end = 100.0 if st == 0 else 80.0
        ops += [
            (r, 1, "MatMul", "compute", 0.0, comp * 1000),
            (r, 1, "hcom_batchSendRecv__1_1_1", "communication", comp * 1000, (p2p_end - comp) * 1000),
            (r, 1, "hcom_allReduce__2_1_1", "communication", p2p_end * 1000, (ar_end - p2p_end) * 1000),
        ]
        steps.append((r, 1, 0.0, 100_000.0))
        sb.append(
            {
                "rank": r,
                "step": 1,
                "step_us": 100_000.0,
                "computing_us": comp * 1000,
                "communication_not_overlapped_us": (ar_end - comp) * 1000,
                "free_us": (100.0 - ar_end) * 1000,
                "bubble_us": np.nan,
                "consistent": consistent[r],
            }
        )
    ops = pd.DataFrame(ops, columns=["rank", "step", "name", "category", "start_us", "dur_us"])
    steps = pd.DataFrame(steps, columns=["rank", "step", "start_us", "end_us"])
    sb = pd.DataFrame(sb)
    sb["consistent"] = sb["consistent"].astype("boolean")
    rs = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": pd.array([0, 0, 1, 1], dtype="Int64")})
    comm = pd.DataFrame({"rank": [0, 1, 2, 3], "op_type": ["send"] * 4})
    return {
        "step_breakdown": sb,
        "rank_stages": rs,
        "stages": stage_table(sb, rs),
        "comm_exposure": comm_exposure(sb, None, ops, steps, comm),
    }


def test_pp2dp2_stage_1_is_the_bottleneck_not_gradient_allreduce():
    t = _pp2dp2()
    assert t["stages"]["computing_ms"].tolist() == [40.0, 68.0]
    ex = t["comm_exposure"].set_index("rank")
    # stage 0: exposed 60 ms = batchSendRecv [40, 95] 55 ms + all-reduce [95, 100] 5 ms
    assert ex.loc[0, "exposed_p2p_us"] == pytest.approx(55_000) and ex.loc[0, "exposed_collective_us"] == pytest.approx(
        5_000
    )
    assert set(ex["source"]) == {"ops"}
    adv = advise(t, {})
    st = adv[adv["rule"] == "stage_imbalance"].iloc[0]
    assert "stage 1 computes 1.7x more than stage 0 (68 vs 40 ms" in st["message"]
    assert st["ranks"] == [2, 3] and st["stage"] == 1
    assert "92% pipeline send/receive" in st["message"]  # stage 0: 55 of 60 ms
    msgs = " ".join(adv["message"])
    assert "overlap gradient all-reduce with backward" not in msgs


def test_no_advice_rests_on_inconsistent_ranks():
    t = _pp2dp2(consistent=(True, True, False, False))  # stage 1's numbers disagree with the profiler
    assert t["stages"] is None or len(t["stages"]) < 2
    t["stages"] = stage_table(t["step_breakdown"], t["rank_stages"])
    adv = advise(t, {})
    assert "stage_imbalance" not in set(adv["rule"])
    assert all(2 not in r and 3 not in r for r in adv["ranks"])


def test_g_console_shows_stages(tmp_path):
    import shutil

    data = tmp_path / "g"
    shutil.copytree(fixture_path(*G), data)
    out = perfbench_in_process("analyze", data, "--no-store", "--results", tmp_path / "res").stdout
    assert "pipeline stages" in out and "stage 1 computes 8.4x more than stage 0" in " ".join(out.split())
    # the table's head, not the title line, which names the data folder (the test's tmp path holds "stage")
    lines = [line for line in out.splitlines() if str(data) not in line]
    head = next(line for line in lines if "rank" in line and "stage" in line and "steps" in line)
    assert head.index("rank") < head.index("stage") < head.index("steps")


def test_g_bubble_and_free_advice_name_their_ranks(g_analysis):
    adv = g_analysis[1].tables["advice"]
    pb = adv[adv["rule"] == "pipeline_bubble"]
    for _, r in pb.iterrows():
        assert r["ranks"] == sorted(k for k, (s, _) in _g_expected().items() if s == r["stage"])
    assert len(pb) >= 1


def test_gradient_time_on_every_stage_is_still_called_gradient_time():
    """Stage 1 computes more, but both stages spend the same exposed time in all-reduce (no p2p wait):
    the exposed-communication advice stays the gradient advice."""
    t = _pp2dp2()
    ex = t["comm_exposure"].copy()
    ex["exposed_us"] = 30_000.0
    ex["exposed_p2p_us"] = 0.0
    ex["exposed_collective_us"] = 30_000.0
    t["comm_exposure"] = ex
    sb = t["step_breakdown"].copy()
    sb["communication_not_overlapped_us"] = 30_000.0
    t["step_breakdown"] = sb
    adv = advise(t, {})
    msg = adv[adv["rule"] == "exposed_communication"].iloc[0]["message"]
    assert "overlap gradient all-reduce with backward" in msg
    assert "stage_imbalance" in set(adv["rule"])


def test_rank_stages_from_the_workloads_meta_when_the_profile_has_no_layout():
    """A perfbench pipeline run's CPU profile records no layout: each rank's meta names its stage (the pipeline
    trainer's `stage`), so the stage table, and with it the stage imbalance advice, exists for those runs too."""
    from analyzers.analyses.parallel_groups import rank_stages
    from analyzers.schema import Profile

    prof = Profile(source="mindspore-cpu", path="-", ranks=pd.DataFrame({"rank": [0, 1, 2, 3]}))
    meta = {r: {"stage": r // 2, "pipeline_stages": 2} for r in range(4)}
    t = rank_stages(prof, meta)
    assert t["stage"].tolist() == [0, 0, 1, 1] and set(t["stage_source"]) == {"workload"}
    # no pipeline (one stage): the meta's stage 0 says nothing about a layout
    flat = rank_stages(prof, {r: {"stage": 0, "pipeline_stages": 1} for r in range(4)})
    assert flat["stage"].isna().all() and flat["stage_source"].isna().all()
    assert rank_stages(prof)["stage"].isna().all()
