"""One run pipeline. A sweep run whose profiler wrote Ascend output (as MindSpore does on
NPUs) is ingested by the same code path `perfbench analyze` uses: format detection, the Ascend parser,
the registered analyses. Here the run's artifacts/profile holds a copy of real torch_npu output (set B)."""

from __future__ import annotations

import csv
import shutil

import pytest

from perfbench.run.ingest import ingest_run
from perfbench.store import Store
from tests.support import fixture_path

LEVEL1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")


def test_sweep_run_with_ascend_profile_stores_the_ascend_analysis(tmp_path):
    store = Store(tmp_path / "results")
    run_id = "npu-ws2-r0"
    art = store.artifacts_dir(run_id)
    shutil.copytree(fixture_path(*LEVEL1), art / "profile")
    cfg = {"run_id": run_id, "world_size": 2, "train": {"warmup_steps": 0}, "profile": {"enabled": True}}
    metrics, warnings = ingest_run(store, run_id, cfg)
    sb = store.read_table(run_id, "step_breakdown")
    assert sb is not None and sorted(sb["rank"].unique()) == [0, 1]
    assert set(sb["source"]) == {"profiler"}
    for rank in (0, 1):
        path = fixture_path(*LEVEL1, f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv")
        with open(path, newline="") as fh:
            row = next(csv.DictReader(fh))
        got = sb[sb["rank"] == rank].iloc[0]
        assert got["computing_us"] == pytest.approx(float(row["Computing"]), rel=1e-9)
        assert got["free_us"] == pytest.approx(float(row["Free"]), rel=1e-9)
    co = store.read_table(run_id, "comm_ops")
    assert co is not None and co["busbw_gbps"].notna().any()
    assert metrics["ranks"] == 2 and metrics["comm_share"] is not None
    assert metrics["throughput"] is None  # no workload records: unknown, not 0
