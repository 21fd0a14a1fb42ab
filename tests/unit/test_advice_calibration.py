"""Gain formulas corrected by the calibration bench (bench/bench_advice_calibration.py, docs/advice.md
"Calibration"), each against a hand-computed value: the fusion latency fit that load cannot inflate, fp16
compression's cast cost on the CPU, and the knob's own predicted gain in the trials table."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzers.analyses import advice as A
from tests.unit.test_advice_gains import _sb, _small


def test_fusion_latency_fit_reads_the_fastest_of_each_kind_so_load_cannot_inflate_it():
    # _small(): 16 all-reduces per rank and step (2 sizes), 2 ranks, 2 steps, 0.05 ms per hop + bytes: 1.5 ms.
    # A loaded machine adds time to some of them (a rank waiting for a core): step 1's all-reduces on rank 1 take
    # 5 ms more, rank 0's first all-reduce of step 0 20 ms more. The fastest of each size is still the unloaded
    # cost, so the gain stays 0.05 ms x 30 hops = 1.5 ms (the mean of the times would give ~40 ms)
    co = _small()
    co.loc[(co["rank"] == 1) & (co["step"] == 1), "transit_ms"] += 5.0
    co.loc[(co["rank"] == 0) & (co["step"] == 0) & (co["op_name"] == "ar0"), "transit_ms"] += 20.0
    co["elapse_ms"] = co["transit_ms"]
    gain, basis = A.fusion_gain(co)
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
    knob, step = A._compression_try(tables, {"step_time_s": 0.2})
    assert knob == {"parallel.grad_compression": "fp16"} and step == pytest.approx(195.0)
    cpu = dict(
        tables, ops_for_checks=pd.DataFrame({"rank": [0, 1], "type": ["Conv2D", "AllReduce"], "core_type": "CPU"})
    )
    _, step = A._compression_try(cpu, {"step_time_s": 0.2})
    assert A.CPU_CAST_NS_PER_BYTE == 1.6 and step == pytest.approx(200.0 - 5.0 + 102.4)
    npu = dict(tables, ops_for_checks=pd.DataFrame({"rank": [0], "type": ["Conv2D"], "core_type": "AI_CORE"}))
    assert A._compression_try(npu, {"step_time_s": 0.2})[1] == pytest.approx(195.0)


def test_the_trials_predicted_gain_is_the_knobs_own():
    from perfbench.run.advise_try import knob_gain

    rec = {"status": "ok", "metrics": {"step_time_s": 0.2}}
    # exposed_communication explains 20 ms but its knob (fp16) is predicted to make the step 297.4 ms: -97.4 ms
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": 297.4}, rec) == pytest.approx(-97.4)
    # a finding without its own prediction: its gain
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": None}, rec) == 20.0
    assert knob_gain({"gain_ms": 20.0, "predicted_step_ms": 150.0}, {"status": "ok", "metrics": {}}) == 20.0
