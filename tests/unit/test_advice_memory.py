"""Memory advice (analyzers/analyses/advice/memory_near_capacity.py, memory_fragmentation.py): hand-computed
near-capacity picks and fragmentation findings, through the one ranking (`advise`)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analyzers.analyses.advice import CONFIG_KEY, advise
from analyzers.schema import ADVICE_COLUMNS as COLUMNS

GiB = 2**30
CAP = 32 * GiB  # Ascend 910 HBM
CONFIG = {
    "world_size": 8,
    "train": {"optimizer": "adamw", "recompute": False},
    "parallel": {"zero_stage": 0, "pipeline_stages": 1},
}
SUMMARY = {"step_time_s": 1.0, "computing_s": 0.6, "communication_not_overlapped_s": 0.2}


def advise_memory(tables: dict, summary: dict, config: dict) -> pd.DataFrame:
    """The ranked advice of a run whose only table is `memory`: the memory rules' findings alone."""
    return advise({**tables, CONFIG_KEY: config}, summary)


def _mem(**kw):
    row = {
        "rank": 0,
        "peak_bytes": None,
        "capacity_bytes": CAP,
        "params": None,
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
    }
    row.update(kw)
    return {"memory": pd.DataFrame([row])}


def test_near_capacity_picks_zero_when_it_fits_and_is_cheapest():
    # P = 1e9, Adam, 8 ranks: stage 0 states 16e9 B, stage 1 4e9 + 4e9 + 8e9/8 = 9e9 -> saves 7e9 B;
    # its cost: the exposed 200 ms of all-reduce x 8 / (2 x 7) = 114.3 ms, below recompute's 600 / 3 = 200 ms.
    # 30 GiB - 7e9 = 25.21e9 <= 0.85 x 32 GiB = 29.21e9: fits
    adv = advise_memory(_mem(peak_bytes=30 * GiB, params=1_000_000_000), SUMMARY, CONFIG)
    assert list(adv.columns) == COLUMNS and len(adv) == 1
    row = adv.iloc[0]
    assert row["rule"] == "memory_near_capacity" and row["id"] == "memory_near_capacity:0"
    assert json.loads(row["try"]) == {"parallel.zero_stage": 1}
    assert row["gain_ms"] is None or pd.isna(row["gain_ms"])
    assert "6.52 GiB" in row["message"] and "~114 ms" in row["message"] and "(fits)" in row["message"]


def test_near_capacity_falls_to_recompute_when_zero_does_not_fit():
    # P = 2e8: ZeRO-1 saves 3.2e9 - 1.8e9 = 1.4e9 -> 33e9 - 1.4e9 = 31.6e9 > 29.21e9 (does not fit);
    # recompute frees 0.7 x (33e9 - 3.2e9) = 20.86e9 -> 12.14e9: fits, so it is the pick despite costing more
    adv = advise_memory(_mem(peak_bytes=33e9, params=200_000_000), SUMMARY, CONFIG)
    (row,) = adv.to_dict("records")
    assert json.loads(row["try"]) == {"train.recompute": True}
    assert "19.43 GiB" in row["message"] and "~200 ms" in row["message"]


def test_no_finding_below_the_threshold_or_without_capacity():
    assert advise_memory(_mem(peak_bytes=0.8 * CAP, params=1e9), SUMMARY, CONFIG).empty
    assert advise_memory(_mem(peak_bytes=30 * GiB, params=1e9, capacity_bytes=None), SUMMARY, CONFIG).empty
    assert advise_memory({}, SUMMARY, CONFIG).empty


def test_fragmentation_when_reserved_is_far_above_allocated():
    # reserved 2 GiB, allocated 1 GiB: 1 GiB unused > max(30% x 2 GiB, 256 MiB)
    (row,) = advise_memory(_mem(peak_allocated_bytes=1 * GiB, peak_reserved_bytes=2 * GiB), SUMMARY, CONFIG).to_dict(
        "records"
    )
    assert row["rule"] == "memory_fragmentation" and row["try"] is None and "50% of reserved" in row["message"]
    # 1.8 of 2 GiB allocated: 0.2 GiB < 0.6 GiB, no finding
    assert advise_memory(_mem(peak_allocated_bytes=1.8 * GiB, peak_reserved_bytes=2 * GiB), SUMMARY, CONFIG).empty


@pytest.mark.parametrize("zero,recompute", [(2, True)])
def test_no_knob_left_says_so(zero, recompute):
    cfg = {**CONFIG, "train": {"optimizer": "adamw", "recompute": recompute}, "parallel": {"zero_stage": zero}}
    (row,) = advise_memory(_mem(peak_bytes=31 * GiB, params=1e9), SUMMARY, cfg).to_dict("records")
    assert row["try"] is None and "micro_batches" in row["message"]


def test_recompute_cannot_free_the_process_baseline():
    # a CPU rank: 22 GiB peak of a 24 GiB machine, 1e8 parameters, 2 ranks, AdamW, zero_stage 2 already (only
    # recompute is left), 10 GiB of it the process before the model was built (meta baseline_rss_bytes).
    # states at stage 2, D = 2: 4e8 + 2e8 + 4e8 = 1e9; activations = 22 GiB - 10 GiB - 1e9 = 11.885e9;
    # recompute frees 0.7 x that = 8.32e9 B = 7.75 GiB -> 14.25 GiB (without the baseline it would claim 14.75 GiB)
    cfg = {**CONFIG, "world_size": 2, "parallel": {"zero_stage": 2, "pipeline_stages": 1}}
    mem = _mem(peak_bytes=22 * GiB, params=100_000_000, capacity_bytes=24 * GiB, baseline_bytes=10 * GiB)
    row = advise_memory(mem, SUMMARY, cfg).iloc[0]
    assert json.loads(row["try"]) == {"train.recompute": True}
    assert "saving 7.75 GiB -> 14.25 GiB (fits)" in row["message"], row["message"]


def test_recompute_saving_on_resnet50_uses_the_measured_share_it_keeps():
    # the run above as a ResNet-50 run: MindSpore keeps BatchNorm's activations, 12.7 of 16.6 MB per sample
    # (docs/benchmarks.md "Recompute per sample"), so recompute frees 3.9 / 16.6 of the 11.885e9 B of activations
    # = 2.792e9 B = 2.60 GiB -> 19.40 GiB, under 0.85 x 24 = 20.4 GiB (fits); the block-input rule's 0.7 would claim
    # 7.75 GiB
    cfg = {**CONFIG, "workload": "resnet50", "world_size": 2, "parallel": {"zero_stage": 2, "pipeline_stages": 1}}
    mem = _mem(peak_bytes=22 * GiB, params=100_000_000, capacity_bytes=24 * GiB, baseline_bytes=10 * GiB)
    row = advise_memory(mem, SUMMARY, cfg).iloc[0]
    assert json.loads(row["try"]) == {"train.recompute": True}
    assert "saving 2.60 GiB -> 19.40 GiB (fits)" in row["message"], row["message"]
    # a workload without a measurement keeps the block-input rule (0.3 kept)
    row = advise_memory(mem, SUMMARY, dict(cfg, workload="moe")).iloc[0]
    assert "saving 7.75 GiB -> 14.25 GiB (fits)" in row["message"], row["message"]
