"""The store: atomic writes (a failure mid-write never corrupts what was there), lookups, resets."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from perfbench.errors import UserError
from perfbench.store import Store, flatten_runs


def rec(run_id, status="ok", **kw):
    return {
        "run_id": run_id,
        "sweep_id": "s",
        "status": status,
        "settings": {"world_size": 1},
        "metrics": {"throughput": 1.0},
        **kw,
    }


def test_failed_write_keeps_the_previous_record_and_leaves_no_temp_files(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.write_run(rec("a", status="running"))
    before = (store.run_dir("a") / "run.json").read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        store.write_run(rec("a", status="ok"))
    with pytest.raises(OSError):
        store.write_table("a", "steps", pd.DataFrame({"x": [1, 2]}))
    monkeypatch.undo()
    assert (store.run_dir("a") / "run.json").read_bytes() == before
    assert store.read_run("a")["status"] == "running"
    leftovers = [p.name for p in store.run_dir("a").rglob("*") if p.name.startswith(".")]
    assert leftovers == []
    assert store.read_table("a", "steps") is None


def test_tables_round_trip_including_list_columns(tmp_path):
    store = Store(tmp_path)
    store.write_run(rec("a"))
    df = pd.DataFrame({"rank": [0, 1], "tokens_per_expert": [[1, 2], [3, 4]], "loss": [0.5, 0.25]})
    store.write_table("a", "workload_steps", df)
    back = store.read_table("a", "workload_steps")
    assert back["rank"].tolist() == [0, 1] and back["loss"].tolist() == [0.5, 0.25]
    assert back["tokens_per_expert"].tolist() == ["[1, 2]", "[3, 4]"]  # lists are kept as JSON text
    assert store.table_names("a") == ["workload_steps"]


def test_lookup_by_prefix_and_clear_errors(tmp_path):
    store = Store(tmp_path)
    for rid in ("sweep-ws1-r0", "sweep-ws2-r0", "other-ws1-r0"):
        store.write_run(rec(rid))
    assert store.get_run("other")["run_id"] == "other-ws1-r0"
    assert store.get_run("sweep-ws2-r0")["run_id"] == "sweep-ws2-r0"
    with pytest.raises(UserError, match="ambiguous"):
        store.get_run("sweep-ws")
    with pytest.raises(UserError, match="no run 'zzz'"):
        store.get_run("zzz")
    with pytest.raises(UserError, match="no results"):
        Store(tmp_path / "missing", create=False)


def test_unfinished_run_folders_without_record_are_ignored_and_reset_removes_them(tmp_path):
    store = Store(tmp_path)
    store.write_run(rec("done"))
    (store.run_dir("half") / "artifacts").mkdir(parents=True)  # a run killed before its first record
    assert [r["run_id"] for r in store.list_runs()] == ["done"]
    store.reset_run("half")
    assert not store.run_dir("half").exists()
    assert [r["run_id"] for r in store.list_runs()] == ["done"]


def test_flatten_runs(tmp_path):
    df = flatten_runs([rec("a"), rec("b", status="failed", error="boom")])
    assert df["settings.world_size"].tolist() == [1, 1]
    assert df["status"].tolist() == ["ok", "failed"]
