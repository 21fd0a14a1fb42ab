"""search.constraints {peak_memory_gb: X}: parsing, the infeasible verdict on a measured peak, and the skip of a
point the memory model (fitted on the study's finished trials) predicts not to fit. No msrun: the trials are
stored records whose numbers are written by hand."""

from __future__ import annotations

import json

import pytest

from perfbench.errors import ConfigError
from perfbench.store import Store
from perfbench.tune.search import constraint_values
from perfbench.tune.memory import predicted_over_limit
from perfbench.tune.spec import SearchSpec, parse_search


class _Cfg:
    ranges: dict = {}
    workload = "resnet50"


def test_memory_limit_parses_as_mapping_or_list_item():
    spec = parse_search({"constraints": {"peak_memory_gb": 2}}, _Cfg())
    assert spec.memory_limit_bytes() == 2e9
    spec = parse_search({"constraints": ["loss_decreases", {"peak_memory_gb": 3}, {"peak_memory_gb": 1.5}]}, _Cfg())
    assert spec.memory_limit_bytes() == 1.5e9  # the tightest
    assert SearchSpec().memory_limit_bytes() is None
    with pytest.raises(ConfigError, match="search.constraints"):
        parse_search({"constraints": {"peak_memory_gb": 0}}, _Cfg())


def test_a_measured_peak_above_the_limit_is_infeasible():
    spec = parse_search({"constraints": {"peak_memory_gb": 2}}, _Cfg())
    assert constraint_values(spec, {"peak_memory_bytes": 2.5e9}) == [pytest.approx(0.5)]  # > 0: broken
    assert constraint_values(spec, {"peak_memory_bytes": 1.5e9}) == [pytest.approx(-0.5)]  # <= 0: holds
    assert constraint_values(spec, {"peak_memory_bytes": None}) == [1.0]  # unknown counts as broken


MODEL = {"image_size": 32, "num_classes": 10, "width": 64, "layers": [3, 4, 6, 3]}
P = 25_000_000


def _config(zero, recompute=False, batch=8):
    return {
        "workload": "resnet50",
        "world_size": 2,
        "model": MODEL,
        "train": {"batch_size": batch, "optimizer": "adamw", "recompute": recompute},
        "parallel": {"zero_stage": zero, "comm_fusion": "all", "pipeline_stages": 1, "micro_batches": 1},
    }


def _store_trial(store, rid, cfg, peak):
    store.write_run(
        {
            "run_id": rid,
            "sweep_id": "study",
            "source": "tune",
            "status": "ok",
            "config": cfg,
            "settings": {},
            "timings": {},
            "metrics": {"peak_memory_bytes": peak},
        }
    )
    d = store.artifacts_dir(rid) / "metrics"
    d.mkdir(parents=True, exist_ok=True)
    for r in (0, 1):
        (d / f"rank{r}.meta.json").write_text(json.dumps({"rank": r, "params": P, "baseline_rss_bytes": 400e6}))


def test_a_point_predicted_above_the_limit_is_not_run(tmp_path):
    store = Store(tmp_path / "res")
    # trial 0 measured: baseline 400e6 + states 16 x 25e6 = 400e6 + buffers (all: 2 x 100e6 = 200e6)
    # + activations 8 x 5e6 = 40e6  -> 1040e6
    _store_trial(store, "t0", _config(0), 1040e6)
    # stage 1 by hand: 400e6 + (100e6 + 100e6 + 100e6) + 200e6 + 40e6 = 940e6 (the broadcast is in place)
    assert predicted_over_limit(store, "study", _config(1), 1.0e9) is None  # fits under 1 GB
    got = predicted_over_limit(store, "study", _config(1), 0.9e9)
    assert got["peak_bytes"] == pytest.approx(940e6) and "above search.constraints peak_memory_gb 0.9" in got["reason"]
    # batch 16 doubles the activations: 1080e6
    assert predicted_over_limit(store, "study", _config(0, batch=16), 1.07e9)["peak_bytes"] == pytest.approx(1080e6)
    # no finished trial with recompute: unknown, so it runs
    assert predicted_over_limit(store, "study", _config(0, recompute=True), 1.0e9) is None
    # another model: unknown parameter count, so it runs
    other = dict(_config(0), model=dict(MODEL, width=128))
    assert predicted_over_limit(store, "study", other, 1.0e9) is None
