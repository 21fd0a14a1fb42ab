"""One run, one story: the breakdown's parts add up to the step they are shares of (hand-computed from the
profiler's own step_trace_time.csv), a damaged rank is named and fails --strict, impossible what-ifs are refused,
and every command's default output fits COLUMNS."""

from __future__ import annotations

import csv
import json
import shutil

import pandas as pd
import pytest

from tests.support import fixture_path, run_perfbench

LEVEL1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")


def _step_trace_rows(rank_dir: str) -> dict:
    path = fixture_path(*LEVEL1, rank_dir) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with open(path, newline="") as f:
        return next(csv.DictReader(f))


def test_parts_add_up_to_the_profiled_step_on_an_imported_fixture(imported_store, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    m = json.loads(run_perfbench("show", "analyze-level1", "--results", imported_store, "--json").stdout)["metrics"]
    # by hand from the profiler's files: one step per rank; Computing + Communication(Not Overlapped) + Free = Stage
    r0, r1 = _step_trace_rows("rank0_ascend_pt"), _step_trace_rows("rank1_ascend_pt")
    hand_step_ms = (float(r0["Stage"]) + float(r1["Stage"])) / 2 / 1000  # mean over ranks, us -> ms
    parts_ms = 1000 * (m["computing_s"] + m["communication_not_overlapped_s"] + m["free_s"])
    assert parts_ms == pytest.approx(hand_step_ms, rel=0.01)
    assert 1000 * m["breakdown_step_s"] == pytest.approx(hand_step_ms, rel=0.01)
    out = run_perfbench("show", "analyze-level1", "--results", imported_store).stdout
    shares = [
        float(line.split("(")[1].split("%")[0])
        for line in out.splitlines()
        if "of profiled step" in line and ("compute ms" in line or "exposed comm ms" in line or "free ms" in line)
    ]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100, abs=1.0)


def test_a_rank_with_a_header_only_step_trace_is_named_and_fails_strict(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    copy = tmp_path / "level1"
    shutil.copytree(fixture_path(*LEVEL1), copy)
    st = copy / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_text(st.read_text().splitlines()[0] + "\n")
    res = tmp_path / "res"
    r = run_perfbench("analyze", copy, "--results", res)
    assert "rank 0: step_trace_time.csv empty" in r.stdout
    assert "recomputed from the kernels on rank 0" in r.stdout
    doc = json.loads(run_perfbench("analyze", copy, "--no-store", "--json").stdout)
    r0 = next(x for x in doc["ranks"] if x["rank"] == 0)
    assert r0["input_problems"][0]["file"] == "step_trace_time.csv" and r0["breakdown_source"] == "recomputed"
    assert "step_trace_time.csv" not in r0["inputs"]
    strict = run_perfbench("analyze", copy, "--no-store", "--strict", check=False)
    assert strict.returncode != 0 and "step_trace_time.csv" in strict.stderr
    assert len(strict.stderr.strip().splitlines()) == 1 and "Traceback" not in strict.stderr
    shown = run_perfbench("show", "analyze-level1", "--results", res).stdout
    assert "Missing or damaged input: rank 0: step_trace_time.csv empty" in shown


def test_commands_fit_the_terminal(imported_store, monkeypatch, tmp_path):
    res = tmp_path / "res"
    shutil.copytree(imported_store, res)  # (the session's store stays as it is)
    run_perfbench("analyze", fixture_path(*LEVEL1[:-1], "level2"), "--results", res, "--run-id", "imp-level2")
    for cols in (120, 80):
        monkeypatch.setenv("COLUMNS", str(cols))
        for cmd in (
            ["ls"],
            ["ls", "--sweeps"],
            ["show", "analyze-level1"],
            ["compare", "analyze-level1", "imp-level2"],
            ["predict", "--from", "analyze-level1", "--set", "world_size=2,4"],
        ):
            out = run_perfbench(*cmd, "--results", res).stdout
            widest = max(len(line) for line in out.splitlines())
            assert widest <= cols, (cmd, cols, widest)
            if cmd[0] == "compare":
                assert out.splitlines()[1].startswith("Verdict: B is")


def test_impossible_what_if_settings_are_refused(imported_store):
    for key, v in (("world_size", "0"), ("batch_size", "-1"), ("compute_scale", "0")):
        r = run_perfbench(
            "predict", "--from", "analyze-level1", "--set", f"{key}={v}", "--results", imported_store, check=False
        )
        err = r.stderr.strip()
        assert r.returncode == 2 and "\n" not in err and f"--set {key}={v}" in err and "Traceback" not in err


def test_per_rank_parts_add_up_to_the_ranks_step_when_their_medians_do_not():
    """A gloo-like rank whose free time and exposed communication trade places from step to step: the medians
    of its parts (10 + 1 + 1 ms) do not add up to its median step window (16 ms); the rank's step is their sum."""
    from analyzers.analyses.breakdown import rank_breakdown

    rows = [  # rank, step, computing, communication not overlapped, free, step window (ms)
        (0, 3, 10, 6, 0, 16),
        (0, 4, 10, 0, 6, 16),
        (0, 5, 11, 1, 1, 13),
        (1, 3, 8, 2, 2, 12),
        (1, 4, 8, 2, 2, 12),
        (1, 5, 8, 2, 2, 12),
        (0, 1, 50, 0, 0, 50),  # warm-up: left out
    ]
    sb = pd.DataFrame(
        [
            {"rank": r, "step": s, "computing_us": c * 1e3, "communication_not_overlapped_us": n * 1e3}
            | {"free_us": f * 1e3, "step_us": w * 1e3, "overlapped_us": 0.0, "communication_us": n * 1e3}
            for r, s, c, n, f, w in rows
        ]
    )
    rb = rank_breakdown(sb, warmup=3).set_index("rank")
    assert rb.loc[0, "step_us"] == pytest.approx(12e3) and rb.loc[0, "window_us"] == pytest.approx(16e3)
    assert rb.loc[1, "step_us"] == pytest.approx(12e3) and rb.loc[1, "window_us"] == pytest.approx(12e3)
    for r in (0, 1):
        parts = rb.loc[r, ["computing_us", "communication_not_overlapped_us", "free_us"]].sum()
        assert parts == pytest.approx(rb.loc[r, "step_us"], rel=1e-9)
    # a rank with an unknown part keeps its window as its step
    sb.loc[sb["rank"] == 1, "free_us"] = float("nan")
    rb = rank_breakdown(sb, warmup=3).set_index("rank")
    assert rb.loc[1, "step_us"] == pytest.approx(12e3) and pd.isna(rb.loc[1, "free_us"])


def test_shows_per_rank_parts_add_up_to_each_ranks_step(imported_store, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    doc = json.loads(run_perfbench("show", "analyze-level1", "--results", imported_store, "--json").stdout)
    rows = doc["tables"]["rank_breakdown"]
    assert len(rows) == 2
    for r in rows:
        parts = r["computing_us"] + r["communication_not_overlapped_us"] + r["free_us"]
        assert parts == pytest.approx(r["step_us"], rel=0.01)
    out = run_perfbench("show", "analyze-level1", "--results", imported_store).stdout
    seen = 0
    for line in out.splitlines():  # the per-rank rows: "0 | step | compute (x%) | exposed (y%) | overlapped | free"
        cells = line.replace("\u2502", " ").split()
        if cells[:1] in (["0"], ["1"]) and line.count("%)") == 4:
            shares = [float(c.strip("(%)")) for c in cells if c.endswith("%)")]
            assert shares[0] + shares[1] + shares[3] == pytest.approx(100, abs=1.0), line  # overlapped: in compute
            seen += 1
    assert seen == 2


def _rec(run_id, ws, threads, tp, key="k"):
    return {
        "run_id": f"s-{run_id}",
        "sweep_id": "s",
        "status": "ok",
        "config_key": key,
        "settings": {"workload": "resnet50", "world_size": ws},
        "env": {"threads_per_rank": threads},
        "metrics": {"throughput": tp},
    }


def test_scaling_says_how_many_threads_each_rank_had_and_marks_unlike_baselines():
    from perfbench.views.results import render_table, summarize

    like = summarize([_rec("ws1-r0", 1, 1, 80.0), _rec("ws2-r0", 2, 1, 120.0)])
    assert [r["threads_per_rank"] for r in like] == [1, 1]
    assert like[1]["scaling_efficiency"] == pytest.approx(120 / (2 * 80)) and like[1]["scaling_not_comparable"] is None
    t = render_table(like, width=200)
    assert "scaling: 1 thread per rank in every run" in t.caption and "≠" not in t.caption
    # the 1-rank baseline had both cores (2 threads), the 2-rank run's ranks one each: marked and named
    unlike = summarize([_rec("ws1-r0", 1, 2, 80.0), _rec("ws2-r0", 2, 1, 120.0)])
    why = unlike[1]["scaling_not_comparable"]
    assert why == "its ranks had 1 thread(s) each, the 1-rank baseline 2"
    t = render_table(unlike, width=200)
    assert "scaling: threads per rank ws1-r0 2, ws2-r0 1" in t.caption and f"ws2-r0: {why}" in t.caption
    # records that do not say: unknown, not 0
    unknown = summarize([_rec("ws1-r0", 1, None, 80.0), _rec("ws2-r0", 2, None, 120.0)])
    assert unknown[1]["threads_per_rank"] is None and unknown[1]["scaling_not_comparable"] is None
    assert "threads per rank unknown" in render_table(unknown, width=200).caption
