"""Gain formulas corrected by the calibration bench (bench/bench_advice_calibration.py, docs/advice.md
"Calibration"), each against a hand-computed value: the fusion latency fit that load cannot inflate, fp16
compression's cast cost on the CPU, and the knob's own predicted gain in the trials table."""

from __future__ import annotations

import pytest

from analyzers.analyses import advice as A
from tests.unit.test_advice_gains import _small


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
