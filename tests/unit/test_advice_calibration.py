"""Gain formulas corrected by the calibration bench (bench/bench_advice_calibration.py, docs/advice.md
"Calibration"), each against a hand-computed value: the fusion latency fit that load cannot inflate, fp16
compression's cast cost on the CPU, and the knob's own predicted gain in the trials table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analyzers.analyses import advice as A
from analyzers.analyses.advice import exposed_communication as EC
from analyzers.analyses.advice.common import covered_excess_ms, load_excess_ms
from analyzers.analyses.advice.small_packets import fusion_gain
from analyzers.analyses.advice.stage_imbalance import _balanced_split_step
from tests.unit.test_advice_gains import _rank_stages, _sb, _small, _stages


#: the operators of a MindSpore CPU run (every core_type CPU) and of an accelerator run
CPU_OPS = pd.DataFrame({"op_name": ["Conv2D", "MatMul"], "core_type": ["CPU", "CPU"]})
DEVICE_OPS = pd.DataFrame({"op_name": ["Conv2D", "MatMul"], "core_type": ["AI_CORE", "AI_CORE"]})


def test_fusion_latency_fit_reads_the_fastest_of_each_kind_so_load_cannot_inflate_it():
    # _small(): 16 all-reduces per rank and step (2 sizes), 2 ranks, 2 steps, 0.05 ms per hop + bytes: 1.5 ms.
    # A loaded machine adds time to some of them (a rank waiting for a core): step 1's all-reduces on rank 1 take
    # 5 ms more, rank 0's first all-reduce of step 0 20 ms more. The fastest of each size is still the unloaded
    # cost, so the gain stays 0.05 ms x 30 hops = 1.5 ms (the mean of the times would give ~40 ms)
    co = _small()
    co.loc[(co["rank"] == 1) & (co["step"] == 1), "transit_ms"] += 5.0
    co.loc[(co["rank"] == 0) & (co["step"] == 0) & (co["op_name"] == "ar0"), "transit_ms"] += 20.0
    co["elapse_ms"] = co["transit_ms"]
    gain, basis = fusion_gain(co)
    assert gain == pytest.approx(1.5) and "50 us per ring hop x 30 hops" in basis


def _one_allreduce():
    # one 64 MB all-reduce per rank and step over 2 ranks (factor 1), 10 ms each, 4 steps
    return pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "op_name": "ar",
                "op_type": "allreduce",
                "group": "g",
                "group_size": 2,
                "wait_ms": 0.0,
                "transit_ms": 10.0,
                "elapse_ms": 10.0,
                "size_bytes": 64e6,
            }
            for r in range(2)
            for s in range(4)
        ]
    )


def test_fp16_compression_prediction_counts_the_cast_on_the_cpu():
    # bandwidth fit: 10 ms per 64e6 B; bytes term per rank and step 10 ms; fp16 halves it: 5 ms saved, under the
    # 20 ms exposed. On Ascend (no CPU ops): predicted step 200 - 5 = 195 ms. On the CPU the two casts of the 64e6
    # fp32 gradient bytes a rank exchanges per step cost 1.6 ns x 64e6 = 102.4 ms: 200 - 5 + 102.4 = 297.4 ms
    tables = {"comm_ops": _one_allreduce(), "step_breakdown": _sb(20000.0, 0.0, ranks=(0, 1))}
    knob, step = EC.compression_try(tables, {"step_time_s": 0.2})
    assert knob == {"parallel.grad_compression": "fp16"} and step == pytest.approx(195.0)
    cpu = dict(
        tables, ops_for_checks=pd.DataFrame({"rank": [0, 1], "type": ["Conv2D", "AllReduce"], "core_type": "CPU"})
    )
    _, step = EC.compression_try(cpu, {"step_time_s": 0.2})
    assert EC.CPU_CAST_NS_PER_BYTE == 1.6 and step == pytest.approx(200.0 - 5.0 + 102.4)
    npu = dict(tables, ops_for_checks=pd.DataFrame({"rank": [0], "type": ["Conv2D"], "core_type": "AI_CORE"}))
    assert EC.compression_try(npu, {"step_time_s": 0.2})[1] == pytest.approx(195.0)


def test_the_trials_predicted_gain_is_the_knobs_own():
    from perfbench.run.advise_try import knob_gain

    rec = {"status": "ok", "metrics": {"step_time_s": 0.2}}
    # exposed_communication explains 20 ms but its knob (fp16) is predicted to make the step 297.4 ms: -97.4 ms
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": 297.4}, rec) == pytest.approx(-97.4)
    # a finding without its own prediction: its gain
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": None}, rec) == 20.0
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": 150.0}, {"status": "ok", "metrics": {}}) == 20.0


def test_balanced_split_step_scales_the_slowest_stage_but_its_collectives():
    # stages compute 10 and 30 ms per step (mean 20), step 100 ms, split given by hand. Stage 1's ranks (2, 3)
    # spend a median 12 ms per step in exposed communication, 2 ms of it pipeline send/receive: 10 ms of
    # data-parallel collectives stay; the other 90 ms move with the layers: 10 + 90 x 20 / 30 = 70 ms, a knob
    # gain of 30 ms (the compute-only formula, 30 - 20 = 10 ms, missed the waits and host work that go with it;
    # the finding's gain_ms, what it explains of the imbalance, stays 10 ms)
    ex = pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "exposed_us": 12000.0 if r >= 2 else 40000.0,
                "exposed_p2p_us": 2000.0 if r >= 2 else 40000.0,
            }
            for r in range(4)
            for s in range(3)
        ]
    )
    tables = {
        "stages": _stages(10.0, 30.0),
        "rank_stages": _rank_stages(),
        "step_breakdown": _sb(12000.0, 0.0, ranks=(0, 1, 2, 3), step_us=100000.0),
        "comm_exposure": ex,
        A.CONFIG_KEY: {"parallel": {"pipeline_stages": 2, "pipeline_split": [2, 16]}},
    }
    out = A.advise(tables, {"step_time_s": 0.1})
    st = out[out["rule"] == "stage_imbalance"].iloc[0]
    assert st["predicted_step_ms"] == pytest.approx(10.0 + 90.0 * 20.0 / 30.0)
    assert st["gain_ms"] == pytest.approx(10.0)
    assert _balanced_split_step(tables, {}, [2, 3], 0.5) is None  # no step: no prediction


def test_exposed_communication_leaves_out_the_time_its_collectives_waited_for_a_core():
    # _small(): 16 all-reduces per rank and step; on step 1 each takes 0.5 ms more on both ranks (a loaded
    # machine). Per rank and step the time beyond the fastest of each size: step 0: 0, step 1: 16 x 0.5 = 8 ms;
    # median over (rank, step) of (0, 0, 8, 8) = 4 ms. Exposed 10 ms per step -> its own estimate 10 - 4 = 6 ms.
    # The exposed pool keeps the 10 ms (one fused collective waits once: fusion removes the waits). small_packets,
    # the operators on the CPU, counts the collectives' own time: step 0 16 x 0.1 + 8 x 0.0004096 + 8 x 0.0008192
    # = 1.6098304 ms less the fused one (0.05 x 2 + 0.0098304) = 1.5 ms; step 1 9.6098304 less the longest
    # (0.6008192, above the fused one's 0.1098304) = 9.0090112 ms; mean 5.2545056 ms. It claims that first:
    # exposed_communication keeps 10 - 5.2545056 = 4.7454944 ms
    co = _small()
    co.loc[co["step"] == 1, "transit_ms"] += 0.5
    co["elapse_ms"] = co["transit_ms"]
    assert load_excess_ms({"comm_ops": co, "ops_for_checks": CPU_OPS}) == pytest.approx(4.0)
    assert load_excess_ms({"comm_ops": _small(), "ops_for_checks": CPU_OPS}) == 0.0
    assert load_excess_ms({"ops_for_checks": CPU_OPS}) is None  # no collectives table: unknown, not 0
    # on an accelerator the spread among same-size collectives is not a wait for a host core: nothing left out
    assert load_excess_ms({"comm_ops": co, "ops_for_checks": DEVICE_OPS}) == 0.0
    assert load_excess_ms({"comm_ops": co}) is None  # where the operators ran is unknown: so is the excess
    out = A.advise(
        {"comm_ops": co, "ops_for_checks": CPU_OPS, "step_breakdown": _sb(10000.0, 0.0, ranks=(0, 1), step_us=40000.0)},
        {"step_time_s": 0.04},
    )
    roots = out[out["symptom_of"].isna()].set_index("rule")
    budget = A.time_budget(
        {"comm_ops": co, "ops_for_checks": CPU_OPS, "step_breakdown": _sb(10000.0, 0.0, ranks=(0, 1))}, {}
    )
    assert budget["exposed"] == pytest.approx(10.0)
    device = {"comm_ops": co, "ops_for_checks": DEVICE_OPS, "step_breakdown": _sb(10000.0, 0.0, ranks=(0, 1))}
    assert A.time_budget(device, {})["exposed"] == pytest.approx(10.0)
    assert roots.loc["small_packets", "gain_ms"] == pytest.approx(5.2545056)
    assert roots.loc["exposed_communication", "gain_ms"] == pytest.approx(4.7454944)
    assert "less 4 ms" in roots.loc["exposed_communication", "basis"]


def _three_overlapping():
    # rank 0, 3 steps, three all-reduces per step (1024, 2048 and 4096 B, group of 2). Step 1: one after another,
    # 1 ms each at 0, 1 and 2 ms (the fastest of each size: every floor is 1 ms). Steps 0 and 2: on two gloo worker
    # threads at once, A [0, 4] ms, B [1, 5] ms, C [3, 9] ms (4, 4 and 6 ms: 3, 3 and 5 ms beyond their floors)
    rows = []
    for s in range(3):
        spans = [(0.0, 1.0), (1.0, 1.0), (2.0, 1.0)] if s == 1 else [(0.0, 4.0), (1.0, 4.0), (3.0, 6.0)]
        for i, (start, el) in enumerate(spans):
            rows.append(
                {
                    "rank": 0,
                    "step": s,
                    "op_name": f"ar{i}",
                    "op_type": "allreduce",
                    "group": "g",
                    "group_size": 2,
                    "size_bytes": 1024.0 * 2**i,
                    "start_us": 1e6 * s + 1000.0 * start,
                    "elapse_ms": el,
                    "transit_ms": el,
                    "wait_ms": 0.0,
                }
            )
    return pd.DataFrame(rows)


def test_load_excess_counts_collectives_that_ran_at_once_by_their_covered_time():
    # By hand, steps 0 and 2: the three intervals cover [0, 9] = 9 ms; each cut short by its excess (A [0, 1],
    # B [1, 2], C [3, 4]) they cover [0, 2] + [3, 4] = 3 ms: 9 - 3 = 6 ms of wall time beyond the floors (their
    # summed excess, 3 + 3 + 5 = 11 ms, counts the time two threads waited at once twice). Step 1: 0. Median over
    # (rank, step) of (6, 0, 6) = 6 ms; exposed 10 ms per step -> exposed_communication keeps 10 - 6 = 4 ms (the
    # summed excess left it 0)
    co = _three_overlapping()
    tables = {"comm_ops": co, "ops_for_checks": CPU_OPS}
    assert covered_excess_ms(
        co["start_us"][:3].to_numpy(), co["elapse_ms"][:3].to_numpy(), [3.0, 3.0, 5.0]
    ) == pytest.approx(6.0)
    assert load_excess_ms(tables) == pytest.approx(6.0)
    # one after another (MindSpore's): the covered time is the sum: A [0, 4], B [4, 8], C [8, 14] -> 14 - (1 + 1 + 1)
    assert covered_excess_ms([0.0, 4000.0, 8000.0], [4.0, 4.0, 6.0], [3.0, 3.0, 5.0]) == pytest.approx(11.0)
    # a start unknown: that step's summed excess (11, 0, 11 -> 11 ms)
    assert load_excess_ms({"comm_ops": co.drop(columns="start_us"), "ops_for_checks": CPU_OPS}) == pytest.approx(11.0)
    out = A.advise(dict(tables, step_breakdown=_sb(10000.0, 0.0, ranks=(0,), step_us=20000.0)), {"step_time_s": 0.02})
    ec = out.set_index("rule").loc["exposed_communication"]
    assert ec["gain_ms"] == pytest.approx(4.0) and "less 6 ms" in ec["basis"]


def test_fusion_on_the_cpu_counts_each_collectives_wait_for_a_core():
    # Measured 2026-11-27 (load ~5, the 2-core VM): the tiny unfused ResNet-50 (53 all-reduces per rank and step)
    # took 191 ms per step, its collectives 89-120 ms per rank and step (0.25-0.4 ms the fastest of each size);
    # the same run fused, 89 ms: fusion removed the collectives' waits for a core, not only their latency terms.
    # By hand, _small() with every all-reduce 1 ms slower on rank 1's step 1: on the CPU the removed time per rank
    # and step is the collectives' own summed time less one fused collective's (the fit on the fastest: 0.05 ms x 2
    # hops + the bytes 0.0098304 ms, or the longest of them when that is longer): 1.5 ms on rank 0's two steps and
    # rank 1's step 0; rank 1's step 1: 1.6098304 + 16 - 1.1008192 = 16.5090112 ms. Mean per rank, then over ranks:
    # (1.5 + (1.5 + 16.5090112) / 2) / 2 = (1.5 + 9.0045056) / 2 = 5.2522528 ms. On an accelerator the fit alone:
    # 0.05 ms x 30 hops
    co = _small()
    co.loc[(co["rank"] == 1) & (co["step"] == 1), "transit_ms"] += 1.0
    co["elapse_ms"] = co["transit_ms"]
    gain, basis = fusion_gain(co, observed=True)
    assert gain == pytest.approx(5.2522528) and "15 collectives fewer per step" in basis
    assert fusion_gain(co)[0] == pytest.approx(1.5)
    assert fusion_gain(_small(), observed=True)[0] == pytest.approx(1.5)  # an idle machine: the latency terms
    # a second group with one collective per rank and step (16384 B, on the model: 0.1 + 0.0016384 ms): nothing to
    # fuse there, 0 ms, never more
    one = _small().query("op_name == 'ar0'").assign(group="h", size_bytes=16384.0, transit_ms=0.1016384)
    one["elapse_ms"] = one["transit_ms"]
    assert fusion_gain(pd.concat([_small(), one], ignore_index=True), observed=True)[0] == pytest.approx(1.5)
    cpu = A.advise({"comm_ops": co, "ops_for_checks": CPU_OPS}, {"step_time_s": 0.1})
    npu = A.advise({"comm_ops": co, "ops_for_checks": DEVICE_OPS}, {"step_time_s": 0.1})
    assert cpu.set_index("rule").loc["small_packets", "gain_ms"] == pytest.approx(5.2522528)
    assert npu.set_index("rule").loc["small_packets", "gain_ms"] == pytest.approx(1.5)


def test_a_slow_input_stays_the_top_root_when_load_stretches_the_collectives():
    # every rank idles 300 ms per step (a slow input pipeline); the 16 small all-reduces of _small() take 5 ms more
    # each on every rank and step but rank 0's step 0 (a busy core; the real input-delay run at load ~5 spent
    # 158-184 ms per rank and step in its 53 all-reduces against 324 ms of idle time). Fusion, on the CPU, removes
    # the collectives' own time less one fused collective's: 1.5 ms on rank 0's step 0, 1.6098304 + 80 - 5.1008192
    # = 76.5090112 ms on the others; per rank (1.5 + 76.5090112) / 2 = 39.0045056 and 76.5090112, mean
    # 57.7567584 ms. The idle time
    # stays the first root (300 ms), fusion second. The time beyond each size's fastest: 0 on rank 0 step 0, 80 ms
    # on the other three: the load excess is 80 ms, which exposed_communication leaves out
    co = _small()
    loaded = ~((co["rank"] == 0) & (co["step"] == 0))
    co.loc[loaded, "transit_ms"] += 5.0
    co["elapse_ms"] = co["transit_ms"]
    per = co.groupby(["rank", "step"])["transit_ms"].sum()
    sb = _sb(lambda r, s: per[(r, s)] * 1000.0, 300000.0, ranks=(0, 1), steps=2, step_us=1e6)
    out = A.advise({"comm_ops": co, "ops_for_checks": CPU_OPS, "step_breakdown": sb}, {"step_time_s": 1.0})
    roots = out[out["symptom_of"].isna()]
    assert roots.iloc[0]["rule"] == "free_time" and roots.iloc[0]["gain_ms"] == pytest.approx(300.0)
    assert roots.iloc[1]["rule"] == "small_packets" and roots.iloc[1]["gain_ms"] == pytest.approx(57.7567584)
    assert load_excess_ms({"comm_ops": co, "ops_for_checks": CPU_OPS}) == pytest.approx(80.0)


def test_advise_computes_the_load_excess_once_for_the_budget_and_the_rule(monkeypatch):
    # the same loaded run as above (load excess 4 ms): exposed_communication leaves it out, and advise computes it
    # once; a caller that hands it in (LOAD_EXCESS_KEY) is not recomputed
    from analyzers.analyses.advice import common

    co = _small()
    co.loc[co["step"] == 1, "transit_ms"] += 0.5
    co["elapse_ms"] = co["transit_ms"]
    calls = []
    real = common.load_excess_ms
    monkeypatch.setattr(common, "load_excess_ms", lambda t: calls.append(1) or real(t))
    tables = {"comm_ops": co, "ops_for_checks": CPU_OPS, "step_breakdown": _sb(10000.0, 0.0, ranks=(0, 1))}
    out = A.advise(tables, {"step_time_s": 0.04})
    assert len(calls) == 1
    assert out.set_index("rule").loc["exposed_communication", "gain_ms"] == pytest.approx(4.7454944)
    given = A.advise(dict(tables, **{A.LOAD_EXCESS_KEY: 8.0}), {"step_time_s": 0.04})
    assert len(calls) == 1  # handed in: 10 - 8 = 2 ms exposed, under what small_packets' 5.25 ms leaves
    assert given.set_index("rule").loc["exposed_communication", "gain_ms"] == pytest.approx(2.0)
    assert common.load_excess({}) is None and len(calls) == 2  # on its own: computed there (nothing known: None)


def _pipeline_run(window_us, micro_batches=1, frac=0.53):
    """2 balanced stages (rank 0: stage 0, rank 1: stage 1), 3 steps of 2 s, 1.1 s idle, no exposed communication
    (the CPU profile: a stage waiting for the other runs no op)."""
    pl = pd.DataFrame(
        [
            {
                "step": s,
                "stage": st,
                "bubble_fraction": frac,
                "ideal_fraction": 1 / (micro_batches + 1),
                "window_us": window_us,
                "stages": 2,
                "micro_batches": micro_batches,
            }
            for s in range(3)
            for st in (0, 1)
        ]
    )
    sb = _sb(0.0, 1100000.0, ranks=(0, 1), step_us=2000000.0)
    return {"pipeline": pl, "step_breakdown": sb, "rank_stages": pd.DataFrame({"rank": [0, 1], "stage": [0, 1]})}


def test_too_few_micro_batches_is_the_bubble_not_the_host():
    # gpipe, S = 2, M = 1: the ideal bubble (S-1)/(M+S-1) = 1/2, measured 0.53 (0.03 above it: not an excess).
    # Twice the micro-batches: ideal 1/3, saving (1/2 - 1/3) x the 1850 ms window = 308.3 ms, predicted step 2000 -
    # 308.3 = 1691.7 ms. The idle time, 1.1 s of 2 s, sits inside the window but 150 ms (2000 - 1850 = 7.5% of the
    # step, under FREE_SHARE): it is the bubble, so free_time folds under it; the stage 1 finding under stage 0's
    out = A.advise(_pipeline_run(1850000.0), {"step_time_s": 2.0})
    roots = out[out["symptom_of"].isna()]
    assert list(roots["id"]) == ["pipeline_bubble:0"]
    top = roots.iloc[0]
    assert top["gain_ms"] == pytest.approx(1850.0 / 6) and top["predicted_step_ms"] == pytest.approx(2000 - 1850 / 6)
    assert top["try"] == '{"parallel.micro_batches": 2}' and top["explains"] == "idle"
    sym = out.set_index("id")["symptom_of"]
    assert sym["free_time:all"] == "pipeline_bubble:0" and sym["pipeline_bubble:1"] == "pipeline_bubble:0"
    # a 1500 ms window leaves 500 ms idle outside it (25% of the step): that part is the host's, its own root
    out = A.advise(_pipeline_run(1500000.0), {"step_time_s": 2.0}).set_index("id")
    assert pd.isna(out.loc["free_time:all", "symptom_of"]) and out.loc["free_time:all", "gain_ms"] == 500.0
    assert out.loc["pipeline_bubble:0", "gain_ms"] == pytest.approx(250.0)
    # M = 4: the ideal 1/5 is under BUBBLE_IDEAL and 0.22 is no excess over it: no bubble finding
    assert "pipeline_bubble" not in set(A.advise(_pipeline_run(1850000.0, 4, 0.22), {"step_time_s": 2.0})["rule"])


def test_a_mindspore_script_is_not_offered_gradient_compression():
    # the own-job MindSpore script refuses parallel.grad_compression before running: the exposed communication
    # finding keeps its gain (20 ms exposed per step) but has no knob there; a PyTorch script and the reference
    # workloads keep the fp16 try
    tables = {"comm_ops": _one_allreduce(), "step_breakdown": _sb(20000.0, 0.0, ranks=(0, 1))}

    def top(config):
        out = A.advise(dict(tables, **{A.CONFIG_KEY: config}), {"step_time_s": 0.2})
        return out.set_index("rule").loc["exposed_communication"]

    ms = top({"workload": "script", "script": {"framework": "mindspore"}})
    assert ms["gain_ms"] == pytest.approx(20.0) and ms["try"] is None and pd.isna(ms["predicted_step_ms"])
    for config in ({"workload": "script", "script": {"framework": "pytorch"}}, {"workload": "resnet50"}, None):
        assert top(config)["try"] == '{"parallel.grad_compression": "fp16"}'


def test_a_root_draws_on_the_further_pools_it_names_after_its_own():
    # budget: 8 ms exposed, 3 ms overlapped, 100 ms step. Fusion (12 ms, exposed then overlapped): cut to 8 + 3 =
    # 11 ms, all of both pools; then the generic exposed finding (5 ms) gets 0 and a finding of the overlapped pool
    # alone 0. With 9 ms instead: 8 exposed + 1 overlapped, leaving 2 ms overlapped for the last one (5 -> 2)
    from analyzers.analyses.advice import engine

    def rows(fusion):
        return [
            {"id": "f", "rule": "f", "symptom_of": None, "gain_ms": fusion, "basis": "b", "explains": "exposed",
             "also_explains": ("overlapped",)},
            {"id": "e", "rule": "e", "symptom_of": None, "gain_ms": 5.0, "basis": "b", "explains": "exposed",
             "generic": True},
            {"id": "o", "rule": "o", "symptom_of": None, "gain_ms": 5.0, "basis": "b", "explains": "overlapped",
             "generic": True},
        ]  # fmt: skip

    budget = {"exposed": 8.0, "overlapped": 3.0, "step": 100.0}
    r = rows(12.0)
    engine.account(r, dict(budget))
    assert [x["gain_ms"] for x in r] == [pytest.approx(11.0), 0.0, 0.0]
    assert "cut to the exposed + overlapped time no larger finding explains (11 ms of 12)" in r[0]["basis"]
    r = rows(9.0)
    engine.account(r, dict(budget))
    assert [x["gain_ms"] for x in r] == [pytest.approx(9.0), 0.0, pytest.approx(2.0)]
    # the step caps the sum: 9 ms of a 6 ms step
    r = rows(9.0)
    engine.account(r, dict(budget, step=6.0))
    assert r[0]["gain_ms"] == pytest.approx(6.0) and "cut to the step time" in r[0]["basis"]


def test_fusion_on_the_cpu_draws_on_the_communication_overlapped_with_compute():
    # _small() (an idle machine): fusion saves 1.5 ms per step. The breakdown shows 1.0 ms exposed and 0.4 ms
    # overlapped with compute per step. On the host CPU the collectives' threads share the cores with the compute,
    # so the overlapped 0.4 ms is theirs to give too: 1.0 + 0.4 = 1.4 ms; on an accelerator, overlapped
    # communication is hidden: the exposed 1.0 ms
    sb = _sb(1000.0, 0.0, ranks=(0, 1), step_us=10000.0).assign(overlapped_us=400.0)
    cpu = A.advise({"comm_ops": _small(), "ops_for_checks": CPU_OPS, "step_breakdown": sb}, {"step_time_s": 0.01})
    npu = A.advise({"comm_ops": _small(), "ops_for_checks": DEVICE_OPS, "step_breakdown": sb}, {"step_time_s": 0.01})
    sp = cpu.set_index("rule").loc["small_packets"]
    assert sp["gain_ms"] == pytest.approx(1.4) and "exposed + overlapped" in sp["basis"]
    assert sp["predicted_step_ms"] == pytest.approx(10.0 - 1.4)
    assert npu.set_index("rule").loc["small_packets", "gain_ms"] == pytest.approx(1.0)


def test_halving_tensor_parallel_keeps_the_global_batch():
    # Measured 2026-11-27 17:00 UTC (the MoE, 2 ranks, tensor_parallel 2, batch 4 per replica): the knob alone
    # (tensor_parallel 1) doubled the data-parallel replicas and so the samples per step (128 -> 256), and the
    # fix's step carried twice the work. Halving the per-replica batch with it keeps the global batch: T = 2, B = 4
    # -> {T: 1, B: 2}; an odd batch cannot be halved: the knob alone, as before. 4 ranks (2 data-parallel replicas
    # already): T = 1 adds no collective, so the gain stays the exposed 40 ms (tests/unit/test_advice_tensor_parallel.py
    # prices what the knob adds where the data-parallel size was 1)
    ex = pd.DataFrame(
        {"rank": [0, 1], "step": [1, 1], "comm_class": ["tensor_parallel"] * 2, "time_us": [0.0] * 2,
         "exposed_us": [30_000.0, 50_000.0]}
    )  # fmt: skip
    steps = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [100_000.0] * 2})

    def tried(train):
        cfg = {"world_size": 4, "parallel": {"tensor_parallel": 2}, "train": train}
        out = A.advise({"comm_exposure_classes": ex, "steps": steps, A.CONFIG_KEY: cfg}, {"step_time_s": 0.1})
        row = out.set_index("rule").loc["tensor_parallel_comm"]
        assert row["predicted_step_ms"] == pytest.approx(100.0 - 40.0)
        return json.loads(row["try"])

    assert tried({"batch_size": 4}) == {"parallel.tensor_parallel": 1, "train.batch_size": 2}
    assert tried({"batch_size": 3}) == {"parallel.tensor_parallel": 1}
    assert tried({}) == {"parallel.tensor_parallel": 1}


#: stage 0 on rank 0 computing 105 ms per step, stage 1 on rank 1 143 ms (the `stages` table's columns)
_STAGES = pd.DataFrame({"stage": [0, 1], "ranks": ["0", "1"], "computing_ms": [105.0, 143.0]})


def test_too_few_micro_batches_stays_a_root_beside_an_unbalanced_split():
    # the calibration's bubble case (2 stages, gpipe, 1 micro-batch) on its default split: stage 1 computes 143 ms
    # and stage 0 105 ms (ratio 1.36 > 1.2: stage_imbalance, gain 143 - 124 = 19 ms). The ideal bubble 1/2 of 1
    # micro-batch is there with balanced stages too, so the too-few-micro-batches finding is a root of its own:
    # (1/2 - 1/3) x the 1850 ms window = 308.3 ms, first; the other stage's bubble folds under it
    run = dict(_pipeline_run(1850000.0), stages=_STAGES)
    out = A.advise(run, {"step_time_s": 2.0})
    roots = out[out["symptom_of"].isna()]
    assert list(roots["id"]) == ["pipeline_bubble:0", "stage_imbalance:1"]
    assert list(roots["gain_ms"]) == [pytest.approx(1850.0 / 6), pytest.approx(19.0)]
    assert out.set_index("id").loc["pipeline_bubble:1", "symptom_of"] == "pipeline_bubble:0"
    # a bubble above the schedule's ideal (0.75 for an ideal of 1/5 with 4 micro-batches) is what the slowest stage
    # makes the others wait: it folds under the stage imbalance
    run = dict(_pipeline_run(1850000.0, 4, 0.75), stages=_STAGES)
    sym = A.advise(run, {"step_time_s": 2.0}).set_index("id")["symptom_of"]
    assert sym["pipeline_bubble:0"] == "stage_imbalance:1" and sym["pipeline_bubble:1"] == "stage_imbalance:1"


def test_the_balanced_split_is_priced_by_each_layers_measured_speed():
    # Measured 2026-11-28 (the calibration's unbalanced split, 2 quiet runs a side x 3): the cost-balanced split
    # saved 116 ms of a 436 ms step where the stages' mean predicted 189: the workload balances the layers' estimated
    # costs, and layers of one cost do not run at one speed. By hand, the MoE (4 blocks: layer costs 0.25 (the
    # embedding), 1, 1, 1, 1, 0.5 (the head)), split [1, 5] by hand: stage 0 = the embedding, 20 ms (80 ms per unit of
    # cost), stage 1 = the blocks and the head, 4.5 units, 90 ms (20 ms per unit). The balanced split cuts after the
    # second block ((0.25 + 1 + 1) | (1 + 1 + 0.5): 2.25 | 2.5, against 3.25 | 1.5 one block later): stage 0 =
    # 20 + 2 x 20 = 60 ms, stage 1 = 2.5 x 20 = 50 ms. The slowest, 60 ms, is 2/3 of 90: a 200 ms step (no collective
    # communication) is predicted at 200 x 2/3 = 133.3 ms (the stages' mean, 55 / 90, would say 122.2)
    st = pd.DataFrame({"stage": [0, 1], "ranks": ["0", "1"], "computing_ms": [20.0, 90.0]})
    cfg = {"workload": "moe", "model": {"num_layers": 4}, "parallel": {"pipeline_stages": 2, "pipeline_split": [1, 5]}}
    out = A.advise({"stages": st, A.CONFIG_KEY: cfg}, {"step_time_s": 0.2}).set_index("rule").loc["stage_imbalance"]
    assert out["try"] == '{"parallel.pipeline_split": null}'
    assert out["predicted_step_ms"] == pytest.approx(200.0 * 60 / 90)
    assert out["gain_ms"] == pytest.approx(90.0 - 55.0)  # the finding's gain: the compute above the mean
    # a workload whose layer costs are unknown (a script, a model without its numbers): the stages' mean
    for other in ({**cfg, "workload": "script"}, {**cfg, "model": {}}):
        got = A.advise({"stages": st, A.CONFIG_KEY: other}, {"step_time_s": 0.2}).set_index("rule")
        assert got.loc["stage_imbalance", "predicted_step_ms"] == pytest.approx(200.0 * 55 / 90)
    # the balanced split's slower stage is the one priced: the same split with stage 0 at 8 ms (32 ms per unit):
    # stage 0 = 8 + 40 = 48, stage 1 = 50 ms: 50 / 90
    st0 = st.assign(computing_ms=[8.0, 90.0])
    got = A.advise({"stages": st0, A.CONFIG_KEY: cfg}, {"step_time_s": 0.2}).set_index("rule")
    assert got.loc["stage_imbalance", "predicted_step_ms"] == pytest.approx(200.0 * 50 / 90)
    # three stages, split [1, 2, 3] by hand: the embedding (0.25 units, 10 ms: 40 per unit), two blocks (2 units,
    # 80 ms: 40 per unit), two blocks and the head (2.5 units, 150 ms: 60 per unit). The balanced split cuts 0.25 + 1 |
    # 1 + 1 | 1 + 0.5 (largest 2 units; any other cut has a stage of 2.25 or more): stage 0 = 10 + 40 = 50 ms, stage 1
    # = 40 (a block of the old stage 1) + 60 (one of the old stage 2) = 100 ms, stage 2 = 1.5 x 60 = 90 ms: 100 / 150
    st3 = pd.DataFrame({"stage": [0, 1, 2], "ranks": ["0", "1", "2"], "computing_ms": [10.0, 80.0, 150.0]})
    cfg3 = {**cfg, "parallel": {"pipeline_stages": 3, "pipeline_split": [1, 2, 3]}}
    got = A.advise({"stages": st3, A.CONFIG_KEY: cfg3}, {"step_time_s": 0.2}).set_index("rule")
    assert got.loc["stage_imbalance", "predicted_step_ms"] == pytest.approx(200.0 * 100 / 150)
    # balanced, the slowest stage idles its schedule's ideal share of the window at least: with 4 micro-batches on 2
    # stages (ideal 1/5) and the slowest stage idle 0.1 of its window now (median of 0.05, 0.1, 0.3), its window per
    # unit of busy time grows by (1 - 0.1) / (1 - 0.2) = 1.125: 200 x 60 / 90 x 1.125 = 150 ms
    pl = pd.DataFrame({"stage": [1, 1, 1, 0], "bubble_fraction": [0.05, 0.1, 0.3, 0.7], "ideal_fraction": [0.2] * 4})
    got = A.advise({"stages": st, "pipeline": pl, A.CONFIG_KEY: cfg}, {"step_time_s": 0.2}).set_index("rule")
    assert got.loc["stage_imbalance", "predicted_step_ms"] == pytest.approx(200.0 * 60 / 90 * 1.125)
    # never above the step: idle 0 now against an ideal of 1/2 (1 micro-batch) would say 2/3 x 2 = 4/3 of it
    pl1 = pl.assign(bubble_fraction=0.0, ideal_fraction=0.5)
    got = A.advise({"stages": st, "pipeline": pl1, A.CONFIG_KEY: cfg}, {"step_time_s": 0.2}).set_index("rule")
    assert got.loc["stage_imbalance", "predicted_step_ms"] == pytest.approx(200.0)


def test_twice_the_micro_batches_pays_the_bubble_less_the_dispatch_they_repeat():
    # Measured 2026-11-28 (the calibration's bubble case, quiet): 2 micro-batches instead of 1 saved 2 ms (-41 ... 45)
    # where (1/2 - 1/3) x the window predicted 63.6: each micro-batch dispatches the stage's ops again, and on the
    # CPU half a batch costs nearly what a whole one did. By hand, _pipeline_run (2 balanced stages, 1 micro-batch,
    # window 1850 ms): each stage busy 1000 ms per step of which 900 ms computing: 100 ms of host time inside its
    # spans, paid again by the second micro-batch. Saved: 1850 / 6 - 100 = 208.3 ms, predicted step 2000 - 208.3
    run = _pipeline_run(1850000.0)
    run["pipeline"]["busy_us"] = 1000000.0
    run["stages"] = pd.DataFrame({"stage": [0, 1], "ranks": ["0", "1"], "computing_ms": [900.0, 900.0]})
    out = A.advise(run, {"step_time_s": 2.0}).set_index("id")
    top = out.loc["pipeline_bubble:0"]
    assert top["gain_ms"] == pytest.approx(1850.0 / 6 - 100.0)
    assert top["predicted_step_ms"] == pytest.approx(2000.0 - (1850.0 / 6 - 100.0))
    assert "less the 100 ms of host time per step they dispatch again" in top["basis"]
    # 400 ms of host time per step: twice the micro-batches would cost more than the 308.3 ms they save: no finding
    run["stages"]["computing_ms"] = 600.0
    assert "pipeline_bubble" not in set(A.advise(run, {"step_time_s": 2.0})["rule"])
    # a bubble above the ideal keeps its finding and raw gain (the excess 0.25 x the window) but loses the knob
    from analyzers.analyses.advice import pipeline_bubble

    run["pipeline"]["bubble_fraction"] = 0.75
    row = pipeline_bubble.find(run, {"step_time_s": 2.0})[0]
    assert row["gain_ms"] == pytest.approx(0.25 * 1850.0) and row["try"] is None and row["predicted_step_ms"] is None


def test_the_host_time_and_the_bubble_factor_at_their_edges():
    from analyzers.analyses.advice import pipeline_bubble, stage_imbalance

    # host time 0 (busy = computing, or busy under computing): the saving is the bubble's alone, 1850 / 6
    run = _pipeline_run(1850000.0)
    run["pipeline"]["busy_us"] = 1000000.0
    for comp in (1000.0, 1200.0):
        run["stages"] = pd.DataFrame({"stage": [0, 1], "computing_ms": [comp, comp]})
        assert pipeline_bubble.find(run, {"step_time_s": 2.0})[0]["gain_ms"] == pytest.approx(1850.0 / 6)
    # a stages table without its stage or computing column, or with a computing cell that is not a number: no host
    # time known, the bubble's saving as without it
    for st in (
        pd.DataFrame({"computing_ms": [900.0, 900.0]}),
        pd.DataFrame({"stage": [0, 1]}),
        pd.DataFrame({"stage": [0, 1], "computing_ms": ["n/a", "n/a"]}),
    ):
        assert pipeline_bubble.find(dict(run, stages=st), {"step_time_s": 2.0})[0]["gain_ms"] == pytest.approx(
            1850.0 / 6
        )
    # a saving of exactly 0 (the host time equal to the bubble's drop) offers no knob
    r = pipeline_bubble._per_stage(run["pipeline"]).iloc[0]
    assert pipeline_bubble._micro_batch_try(r, 100.0, pipeline_bubble._micro_batch_saving(r, 0.0)) == (None, None)
    assert pipeline_bubble._micro_batch_try(r, 100.0, 0.0)[0] == {"parallel.micro_batches": 2}

    # the bubble factor (1 - b) / (1 - ideal): 1 when the pipeline table has no stage column, the stage's bubble is
    # unknown, or the ideal is not a fraction below 1 (1.0, 1.5, -0.1); an ideal of 0 (one stage) is (1 - b) / 1
    def pl(**cols):
        return pd.DataFrame({"stage": [1, 1], "bubble_fraction": [0.1, 0.1], "ideal_fraction": [0.2, 0.2], **cols})

    assert stage_imbalance._bubble_factor({"pipeline": pl()}, 1) == pytest.approx(0.9 / 0.8)
    assert stage_imbalance._bubble_factor({}, 1) == 1.0
    assert stage_imbalance._bubble_factor({"pipeline": pl().drop(columns=["stage"])}, 1) == 1.0
    assert stage_imbalance._bubble_factor({"pipeline": pl(bubble_fraction=[None, None])}, 1) == 1.0
    for ideal in (1.0, 1.5, -0.1):
        assert stage_imbalance._bubble_factor({"pipeline": pl(ideal_fraction=[ideal, ideal])}, 1) == 1.0
    assert stage_imbalance._bubble_factor({"pipeline": pl(ideal_fraction=[0.0, 0.0])}, 1) == pytest.approx(0.9)
    # a row whose stage is not a number is not this stage's (the others still count)
    odd = pd.concat([pl(), pd.DataFrame({"stage": ["?"], "bubble_fraction": [0.9], "ideal_fraction": [0.2]})])
    assert stage_imbalance._bubble_factor({"pipeline": odd}, 1) == pytest.approx(0.9 / 0.8)


def test_one_ranks_non_compute_pool_is_unknown_when_every_rank_misses_a_part():
    from analyzers.analyses.advice.budget import time_budget

    # rank 0 with no overlap value, rank 1 with no free time: neither rank's non-compute time is known
    sb = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [1, 1],
            "step_us": [10000.0, 10000.0],
            "computing_us": [5000.0, 5000.0],
            "communication_not_overlapped_us": [2000.0, 3000.0],
            "free_us": [1000.0, None],
            "overlapped_us": [None, 500.0],
        }
    )
    assert time_budget({"step_breakdown": sb}, {})["rank_step"] is None
    sb.loc[0, "overlapped_us"] = 500.0  # rank 0 now known: 2 + 1 + 0.5 ms
    assert time_budget({"step_breakdown": sb}, {})["rank_step"] == pytest.approx(3.5)
