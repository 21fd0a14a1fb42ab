"""`perfbench analyze PATH [--json] [--out DIR]` end to end on real fixtures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from perfbench.cli import main
from perfbench.store import Store
from tests.support import fixture_path

B1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")


def test_json_document_and_store_record(tmp_path, capsys):
    res = tmp_path / "res"
    out = tmp_path / "out"
    rc = main(["analyze", str(fixture_path(*B1)), "--json", "--results", str(res), "--out", str(out)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    # required keys of the --json contract
    assert {"ranks", "communication", "slow_ranks", "advice"} <= set(doc)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    st = doc["ranks"][0]["steps"][0]
    assert st["step"] == 50
    for k in ("computing_us", "communication_not_overlapped_us", "overlapped_us", "free_us"):
        assert isinstance(st[k], float) and st[k] >= 0
    ref = pd.read_csv(fixture_path(*B1, "rank0_ascend_pt", "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv"))
    assert st["computing_us"] == pytest.approx(float(ref["Computing"].iloc[0]), abs=3)
    c = doc["communication"]
    assert len(c) == 8
    for k in (
        "rank",
        "step",
        "op_name",
        "group",
        "elapse_ms",
        "transit_ms",
        "wait_ms",
        "synchronization_ms",
        "idle_ms",
    ):
        assert all(k in x for x in c)
    first = next(x for x in c if x["rank"] == 0 and x["op_name"] == "hcom_allReduce__586_0_1")
    assert first["bandwidth"]["HCCS"] == pytest.approx(15.7676)
    # algbw = size / elapse; busbw = algbw * 2(n-1)/n for allreduce in an 8-rank group
    assert first["algbw_gbps"] == pytest.approx(4097000 * 4 / 1e9 / (first["elapse_ms"] / 1e3))
    assert first["busbw_gbps"] == pytest.approx(first["algbw_gbps"] * 2 * 7 / 8)
    assert (out / "analysis.json").exists() and (out / "step_breakdown.csv").exists()

    store = Store(res)
    runs = store.list_runs()
    assert len(runs) == 1
    rec = runs[0]
    assert rec["source"] == "analyze" and rec["status"] == "ok"
    assert rec["settings"]["workload"] == "ascend-import" and rec["settings"]["world_size"] == 2
    assert rec["metrics"]["computing_s"] == pytest.approx(doc["summary"]["computing_s"])
    assert rec["metrics"]["step_time_s"] > 0 and 0 < rec["metrics"]["comm_share"] < 1
    sb = store.read_table(rec["run_id"], "step_breakdown")
    assert len(sb) == 2 and store.read_table(rec["run_id"], "comm_ops") is not None


def test_human_output(tmp_path, capsys):
    rc = main(["analyze", str(fixture_path(*B1)), "--results", str(tmp_path / "r")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "step breakdown per rank" in out and "allreduce" in out and "stored as run" in out


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "perfbench", *args], capture_output=True, text=True, timeout=300)


def test_bad_inputs_are_clear_errors_without_traceback(tmp_path):
    p = _run_cli("analyze", str(tmp_path / "missing"), "--no-store")
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    p = _run_cli("analyze", str(tmp_path), "--no-store")
    assert p.returncode == 2 and "no profiler output found" in p.stderr and "Traceback" not in p.stderr
    d = tmp_path / "rank0_ascend_pt"
    shutil.copytree(fixture_path(*B1, "rank0_ascend_pt"), d)
    cj = d / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    cj.write_bytes(cj.read_bytes()[:500])
    p = _run_cli("analyze", str(d), "--no-store")  # one damaged file: the rank is analyzed without it, warned
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "warning" in p.stderr and "communication.json" in p.stderr and "truncated" in p.stderr
    p = _run_cli("analyze", str(d), "--no-store", "--strict")
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "communication.json" in p.stderr and "truncated" in p.stderr


def test_db_export_via_cli(tmp_path, fixture_copy, capsys):
    d = fixture_copy("Ascend__msinsight", "test", "data", "pytorch", "db", "level2")
    assert main(["analyze", str(d), "--json", "--no-store"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["format"] == "ascend-db" and len(doc["ranks"]) == 2 and len(doc["communication"]) == 8
