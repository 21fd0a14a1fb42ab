"""perfbench/startup.py: a run's start-up timeline as consecutive phases, from hand-written timestamps."""

from __future__ import annotations

import json
import os
import time

import pytest

from perfbench.startup import phases, process_started


def write(d, name, obj):
    (d / name).write_text(json.dumps(obj) if not isinstance(obj, str) else obj)


def test_phases_follow_the_rank_everyone_waited_for(tmp_path):
    m = tmp_path / "metrics"
    m.mkdir()
    t = 1000.0
    record = {
        "timings": {"started": t - 1},
        "launch": {
            "startup": {"launched": t, "msrun": t + 0.5, "scheduler": t + 3.0, "workers": {"0": t + 3.1, "1": t + 3.2}}
        },
    }
    # rank 0 compiles in 5 s and waits 4 s at the barrier; rank 1 compiles in 9 s: rank 1 is the critical path
    write(
        m,
        "rank0.meta.json",
        {
            "rank": 0,
            "compile_s": 5.0,
            "compile_barrier_wait_s": 4.0,
            "startup": {"process": t + 3.1, "entry": t + 3.3, "imported": t + 6.0, "init": t + 16.0, "built": t + 26.1},
        },
    )
    write(
        m,
        "rank1.meta.json",
        {
            "rank": 1,
            "compile_s": 9.0,
            "compile_barrier_wait_s": 0.0,
            "startup": {"process": t + 3.2, "entry": t + 3.5, "imported": t + 7.0, "init": t + 16.0, "built": t + 26.0},
        },
    )
    write(m, "rank0.steps.jsonl", json.dumps({"rank": 0, "step": 0, "start_ts": t + 26.2, "step_time_s": 1.5}) + "\n")
    write(m, "rank1.steps.jsonl", json.dumps({"rank": 1, "step": 0, "start_ts": t + 26.3, "step_time_s": 1.0}) + "\n")
    p = phases(record, m)
    assert p["critical_rank"] == 1
    expected = {
        "msrun_start": 0.5,
        "msrun_import": 2.5,
        "spawn": 0.2,
        "python_start": 0.3,
        "import_mindspore": 3.5,
        "init": 9.0,
        "build": 1.0,
        "compile": 9.0,
        "barrier": 0.1,
        "to_first_step": 0.2,
        "total": 26.3,
        "first_step_s": 1.5,
    }
    for k, v in expected.items():
        assert p[k] == pytest.approx(v, abs=1e-6), k
    # consecutive: the phases add up to launch -> first step
    parts = [
        "msrun_start",
        "msrun_import",
        "spawn",
        "python_start",
        "import_mindspore",
        "init",
        "build",
        "compile",
        "barrier",
        "to_first_step",
    ]
    assert sum(p[k] for k in parts) == pytest.approx(p["total"])


def test_missing_timestamps_give_none_not_an_error(tmp_path):
    m = tmp_path / "metrics"
    m.mkdir()
    p = phases({"timings": {"started": 5.0}}, m)
    assert p["total"] is None and p["init"] is None and p["first_step_s"] is None


def test_process_start_time_is_on_the_time_time_clock():
    import psutil

    started = process_started(os.getpid())
    assert started is not None and started <= time.time()
    # psutil's create_time uses the boot time in whole seconds: the same instant within that rounding
    assert abs(started - psutil.Process().create_time()) < 1.5
    assert process_started(2**22 + 12345) is None  # no such process
