"""Golden test, fixture set H (single-device MindSpore 1.x `profiler/` folders): `run_1/normal_run/profiler`
(322 steps in step_trace_raw_1, an op timeline for the first steps only), `run_2/normal_run/profiler`
(op timeline, no step trace) and the loose legacy files of `profiler/` (step traces of ranks 0 and 10).
Every number `perfbench analyze --json` reports is compared with the profiler's files, read here:

* step_trace_raw_{r}_detail_time.csv: step time = `total` (10 ns ticks); MindSpore's step trace has no
  computing / communication / free split and no host step start: those are null (unknown, never 0);
* output_timeline_data_{r}.txt: one row per op execution (ms), its type from framework_raw_{r}.csv.

Tolerances in tests/support/golden.py (1%)."""

from __future__ import annotations

import csv
import re
import shutil

import pytest

import analyzers
from tests.support import fixture_path
from tests.support.golden import (
    analyze_json,
    check_step,
    close,
    copy_loose_files,
    median_of_slowest,
    reported_steps,
    rows,
)

H = ("mindspore-ai__mindinsight", "tests", "utils", "resource")
UNKNOWN = {
    "computing_us": None,
    "communication_us": None,
    "communication_not_overlapped_us": None,
    "overlapped_us": None,
    "free_us": None,
    "preparing_us": None,
}


def _timeline(d, rank):
    with open(d / f"output_timeline_data_{rank}.txt", newline="") as fh:
        return [{k.strip(): v.strip() for k, v in r.items()} for r in csv.DictReader(fh)]


def _types(d, rank):
    fw = rows(d / f"framework_raw_{rank}.csv")
    name = "full_kernel_name" if "full_kernel_name" in fw[0] else "full_op_name"
    typ = "kernel_type" if "kernel_type" in fw[0] else "op_type"
    return {r[name]: r[typ] for r in fw}


def _kernel_totals(d, rank):
    """type -> [total us, count] from the op timeline (framework type; else the name without -opN)."""
    types, out = _types(d, rank), {}
    for r in _timeline(d, rank):
        t = types.get(r["op_name"]) or re.sub(r"-op\d+.*$", "", r["op_name"].split("/")[-1])
        k = out.setdefault(t, [0.0, 0])
        k[0] += float(r["duration(ms)"]) * 1000
        k[1] += 1
    return out


def test_h_run1_step_times_and_unknown_parts():
    d = fixture_path(*H, "run_1", "normal_run", "profiler")
    doc = analyze_json(d)
    got = reported_steps(doc)
    trace = rows(d / "step_trace_raw_1_detail_time.csv")
    assert set(got) == {(1, int(r["step_num"])) for r in trace}
    starts = [float(r["start_time(ms)"]) * 1000 for r in _timeline(d, 1)]
    with_ops = 0
    for r in trace:
        w0, w1 = int(r["start_point"]) / 100, int(r["end_point"]) / 100
        has_ops = any(w0 <= t < w1 for t in starts)
        with_ops += has_ops
        want = {"step_us": int(r["total"]) / 100}
        if not has_ops:  # item 2: a step without op data is unknown, not 100% free
            want.update(UNKNOWN)
        check_step(got[(1, int(r["step_num"]))], want, f"step {r['step_num']}")
    assert 0 < with_ops < len(trace) // 10
    close(
        doc["summary"]["step_time_s"],
        median_of_slowest({(1, int(r["step_num"])): int(r["total"]) / 100 for r in trace}) / 1e6,
    )
    assert doc["summary"]["preparing_s"] is None
    # the profiler's data wait (iteration_interval) is a small share of the step: no "host is the bottleneck"
    wait = sum(int(r["iteration_interval"]) for r in trace) / sum(int(r["total"]) for r in trace)
    assert wait < 0.01
    assert not [a for a in doc["advice"] if a["rule"] == "free_time"], doc["advice"]


def test_h_run1_kernels_from_the_op_timeline():
    d = fixture_path(*H, "run_1", "normal_run", "profiler")
    doc = analyze_json(d)
    want = _kernel_totals(d, 1)
    assert doc["kernels"]
    for k in doc["kernels"]:
        assert k["total_us"] == pytest.approx(want[k["type"]][0], rel=1e-6), k["type"]
        assert k["count"] == want[k["type"]][1], k["type"]


def test_h_run2_timeline_without_step_trace():
    d = fixture_path(*H, "run_2", "normal_run", "profiler")
    doc = analyze_json(d)
    assert reported_steps(doc) == {}  # no step trace: no step windows, nothing invented
    assert doc["summary"].get("step_time_s") is None and doc["summary"].get("computing_s") is None
    want = _kernel_totals(d, 1)
    assert len(doc["kernels"]) == min(20, len(want))
    for k in doc["kernels"]:
        assert k["total_us"] == pytest.approx(want[k["type"]][0], rel=1e-6), k["type"]
        assert k["count"] == want[k["type"]][1], k["type"]


@pytest.fixture()
def loose_legacy(tmp_path):
    """The loose legacy files of H's `profiler/` folder alone (without the PROF_* jobs of set F beside them)."""
    return copy_loose_files(fixture_path(*H, "profiler"), tmp_path / "profiler")


def test_h_loose_step_traces_give_step_times(loose_legacy):
    doc = analyze_json(loose_legacy)
    got = reported_steps(doc)
    want = {}
    for r in (0, 10):
        for row in rows(loose_legacy / f"step_trace_raw_{r}_detail_time.csv"):
            want[(r, int(row["step_num"]))] = {"step_us": int(row["total"]) / 100, **UNKNOWN}
    assert set(got) == set(want)
    for key, w in want.items():  # item 5: step times known (40.0 ms, 130.5 ms ...), the split unknown
        check_step(got[key], w, f"rank {key[0]} step {key[1]}")
    assert got[(0, 1)]["step_us"] == pytest.approx(40030.47)


def test_h_same_files_same_answer_wherever_they_sit(loose_legacy):
    """Item 5: set I's folder holds byte-identical step_trace_raw_{0,10} files: both folders report them alike."""
    i_dir = fixture_path("mindspore-ai__mindspore_test", "tests", "ut", "data", "profiler_data", "profiler")
    for r in (0, 10):
        assert (i_dir / f"step_trace_raw_{r}_detail_time.csv").read_bytes() == (
            loose_legacy / f"step_trace_raw_{r}_detail_time.csv"
        ).read_bytes()
    a, b = reported_steps(analyze_json(loose_legacy)), reported_steps(analyze_json(i_dir))
    for key in a:
        assert a[key] == b[key], key


def test_h_run1_without_its_op_timeline(tmp_path):
    d = tmp_path / "profiler"
    shutil.copytree(fixture_path(*H, "run_1", "normal_run", "profiler"), d)
    (d / "output_timeline_data_1.txt").unlink()
    doc = analyze_json(d)
    got = reported_steps(doc)
    for r in rows(d / "step_trace_raw_1_detail_time.csv"):
        check_step(got[(1, int(r["step_num"]))], {"step_us": int(r["total"]) / 100, **UNKNOWN}, r["step_num"])
    assert doc["kernels"] == []
    p = analyzers.load_profile(d)
    assert any("output_timeline_data_1.txt" in w for w in p.warnings), p.warnings
