"""End to end: a real sweep of ResNet-50 through msrun on 1 and 2 ranks, profiled, analyzed and stored."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from perfbench.store import Store
from tests.support import perfbench_in_process, run_perfbench

pytestmark = pytest.mark.msrun


def ls_json(results) -> list[dict]:
    """`perfbench ls --json` in this process (the data the tests read; test_show_and_ls_tables runs `ls` and
    `show` as real processes)."""
    return json.loads(perfbench_in_process("ls", "--results", results, "--json").stdout)


def test_every_run_finished_with_the_documented_fields(sweep_store):
    rows = ls_json(sweep_store)
    assert len(rows) == 4  # world sizes 1, 2 x 2 repeats
    for r in rows:
        assert r["status"] == "ok", r
        for key in (
            "run_id",
            "status",
            "settings",
            "throughput",
            "step_time_s",
            "comm_share",
            "kernel_utilization",
            "scaling_efficiency",
        ):
            assert key in r
        assert r["settings"]["workload"] == "resnet50"
        assert r["settings"]["world_size"] in (1, 2)
        assert r["throughput"] > 0 and r["step_time_s"] > 0
        assert 0 < r["kernel_utilization"] <= 1
        assert r["scaling_efficiency"] is not None and r["scaling_efficiency"] > 0


def test_communication_only_with_two_ranks(sweep_store):
    rows = ls_json(sweep_store)
    store = Store(sweep_store, create=False)
    for r in rows:
        bd = store.read_table(r["run_id"], "step_breakdown")
        assert bd is not None and len(bd), r["run_id"]
        ws = r["settings"]["world_size"]
        assert sorted(bd["rank"].unique()) == list(range(ws))
        comm = store.read_table(r["run_id"], "comm_ops")
        if ws == 1:
            assert r["comm_share"] == 0
            assert bd["communication_us"].sum() == 0
            assert comm is None or comm.empty
        else:
            assert r["comm_share"] > 0
            assert (bd.groupby("rank")["communication_us"].sum() > 0).all()
            assert comm is not None and set(comm["rank"]) == {0, 1}
            assert set(comm["op_type"]) == {"allreduce"}
            # the default (no fusion) all-reduces every parameter tensor: ResNet-50 has 161 of them
            per_step = comm.groupby(["rank", "step"]).size()
            assert (per_step == 161).all(), per_step.to_dict()
            # bytes per step of the all-reduces = the model's fp32 parameter bytes
            meta = json.loads((store.run_dir(r["run_id"]) / "artifacts" / "metrics" / "rank0.meta.json").read_text())
            first = comm[(comm["rank"] == 0) & (comm["step"] == comm["step"].min())]
            assert first["size_bytes"].sum() == pytest.approx(4 * meta["params"], rel=1e-6)


def test_scaling_efficiency_is_throughput_ratio(sweep_store):
    rows = ls_json(sweep_store)
    one = sorted(r["throughput"] for r in rows if r["settings"]["world_size"] == 1)
    base = (one[0] + one[1]) / 2  # median of the two repeats
    for r in rows:
        n = r["settings"]["world_size"]
        assert r["scaling_efficiency"] == pytest.approx(r["throughput"] / (n * base), rel=1e-9)


def test_per_step_records_and_artifacts(sweep_store):
    store = Store(sweep_store, create=False)
    for rec in store.list_runs():
        ws = rec["settings"]["world_size"]
        steps = store.read_table(rec["run_id"], "workload_steps")
        assert isinstance(steps, pd.DataFrame)
        assert steps.groupby("rank").size().to_dict() == {r: 9 for r in range(ws)}
        assert steps["profiled"].sum() == 3 * ws  # the window right after warm-up
        assert set(steps.loc[steps["profiled"], "step"]) == {2, 3, 4}
        art = store.run_dir(rec["run_id"]) / "artifacts"
        assert (art / "logs" / "scheduler.log").exists()
        assert len(list((art / "profile").glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"))) == ws
        assert rec["env"]["mindspore"] and rec["env"]["threads_per_rank"] >= 1
        assert rec["timings"]["wall_s"] > 0


def test_show_and_ls_tables(sweep_store):
    out = run_perfbench("ls", "--results", sweep_store).stdout
    assert "ws2-r1" in out and "scaling" in out
    rid = ls_json(sweep_store)[-1]["run_id"]
    shown = run_perfbench("show", rid, "--results", sweep_store).stdout
    assert "Per-rank step breakdown" in shown and "AllReduce" in shown and "Verdict" in shown
    doc = json.loads(run_perfbench("show", rid, "--results", sweep_store, "--json").stdout)
    assert doc["run_id"] == rid and doc["tables"]["step_breakdown"]
    missing = run_perfbench("show", "no-such-run", "--results", sweep_store, check=False)
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr and "Traceback" not in missing.stderr


def test_later_runs_of_a_sweep_start_with_msrun_imported_ahead(sweep_store):
    """The spare (perfbench.run.reaper --warm) takes over from the second run: its scheduler starts right after the
    launch instead of after msrun's own `import mindspore` (1.5-2.6 CPU-s), and the phases are recorded."""
    from perfbench.startup import phases

    store = Store(sweep_store)
    runs = sorted(store.list_runs(), key=lambda r: r["timings"]["started"])
    warm = [bool(r["launch"]["startup"].get("warm")) for r in runs]
    assert warm[0] is False and all(warm[1:])
    for r in runs:
        p = phases(r, store.artifacts_dir(r["run_id"]) / "metrics")
        assert p["total"] is not None and p["total"] > 0
        assert p["import_mindspore"] > 0 and p["init"] > 0
        if r["launch"]["startup"].get("warm"):
            assert p["msrun_import"] < 1.0  # the scheduler is spawned at once
