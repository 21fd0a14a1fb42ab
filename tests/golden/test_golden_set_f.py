"""Golden test, fixture set F (msprof timeline export `PROF_*/device_N/timeline/*_{dev}_{model}_{iter}.json`
of a 2-device MindSpore job, 10 iterations): every number `perfbench analyze --json` reports is compared
with the profiler's own events, read here with the json module:

* step_trace_*: `Iteration N` events (cat "Iteration Time"): step N spans from the end of iteration N-1
  to the end of iteration N (the gap between iterations is msprof's Data Aug Bound: it belongs to the
  step); the first traced iteration keeps its own event;
* msprof_*: the "Overlap Analysis" process: Computing, Communication, Communication(Not Overlapped)
  threads -> computing, communication, not overlapped; overlapped = communication - not overlapped;
  free = step - computing - not overlapped; no host step start -> preparing null;
* hccl_*: the "Communication Kernel" op (elapse), Notify_Wait on plane 0 (wait), data tasks (size:
  bytes sent to other ranks; an ON_CHIP copy stays on the device), src/dst ranks (group size);
* task_time_*: Ascend Hardware tasks (AI_CORE/AI_CPU compute kernels; NOTIFY_*, MEMCPY_ASYNC,
  REDUCE_ASYNC_V2 are HCCL sub-tasks of the collective, not kernels).

Tolerances in tests/support/golden.py (1%). Damaged copies (files of device 1 removed) are made in tmp_path.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import analyzers
from analyzers.parsers import msprof
from tests.support import fixture_path
from tests.support.golden import (
    REL,
    analyze_json,
    busbw_factor,
    check_step,
    close,
    median_of_slowest,
    reported_steps,
    rows,
)

FOLDER = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler")
INVALID = 4294967295
SUBTASKS = {"NOTIFY_WAIT", "NOTIFY_RECORD", "MEMCPY_ASYNC", "REDUCE_ASYNC_V2"}


def _jobs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith("PROF_"))


def _timeline(job: Path) -> tuple[int, Path]:
    dev = next(d for d in job.iterdir() if d.name.startswith("device_"))
    info = json.load(open(next(p for p in dev.glob("info.json.*") if not p.name.endswith(".done"))))
    return int(info.get("rank_id", dev.name.split("_")[1])), dev / "timeline"


def _files(tl: Path, kind: str) -> dict[int, Path]:
    out = {}
    for p in tl.glob(f"{kind}_*.json"):
        out[int(re.match(r".*_(\d+)\.json$", p.name).group(1))] = p
    return out


def _names(ev, what):
    return {
        e["pid"] if what == "process" else (e["pid"], e["tid"]): e["args"]["name"]
        for e in ev
        if e.get("ph") == "M" and e.get("name") == f"{what}_name"
    }


def expected(root: Path):
    """(steps: (rank, step) -> breakdown, comm: (rank, step) -> collective, kernels: rank -> (compute us, n))."""
    steps, comm, kernels = {}, {}, {}
    for job in _jobs(root):
        rank, tl = _timeline(job)
        its = {}
        for p in _files(tl, "step_trace").values():
            for e in json.load(open(p)):
                if e.get("cat") == "Iteration Time":
                    its[e["args"]["Iteration ID"]] = (e["ts"], e["ts"] + e["dur"])
        overlap = {}
        for it, p in _files(tl, "msprof").items():
            ev = json.load(open(p))
            proc, thr = _names(ev, "process"), _names(ev, "thread")
            sums = overlap.setdefault(it, {})
            for e in ev:
                if e.get("ph") == "X" and proc.get(e["pid"]) == "Overlap Analysis":
                    t = thr[(e["pid"], e["tid"])]
                    sums[t] = sums.get(t, 0.0) + e["dur"]
        for it, (t0, t1) in sorted(its.items()):
            start = its[it - 1][1] if it - 1 in its else t0
            step_us = t1 - start
            o = overlap.get(it)
            want = {"step_us": step_us, "preparing_us": None, "bubble_us": None, "stage_us": None}
            if o:
                c, m, n = o["Computing"], o["Communication"], o["Communication(Not Overlapped)"]
                want.update(
                    computing_us=c,
                    communication_us=m,
                    communication_not_overlapped_us=n,
                    overlapped_us=m - n,
                    free_us=step_us - c - n,
                )
            else:
                want.update(
                    computing_us=None,
                    communication_us=None,
                    communication_not_overlapped_us=None,
                    overlapped_us=None,
                    free_us=None,
                )
            steps[(rank, it)] = want
        for it, p in _files(tl, "hccl").items():
            ev = json.load(open(p))
            thr = _names(ev, "thread")
            op = next(e for e in ev if e.get("ph") == "X" and thr.get((e["pid"], e["tid"])) == "Communication Kernel")
            t0, t1 = op["ts"], op["ts"] + op["dur"]
            tasks = [
                e for e in ev if e.get("ph") == "X" and "task type" in (e.get("args") or {}) and t0 <= e["ts"] <= t1
            ]
            data = [
                e
                for e in tasks
                if e["args"]["task type"] in ("Memcpy", "Reduce_Inline") and e["args"]["size(Byte)"] > 0
            ]
            sent = [e for e in data if e["args"]["link type"] != "ON_CHIP" and e["args"]["dst rank"] != INVALID]
            ends = {e["args"]["src rank"] for e in data} | {
                e["args"]["dst rank"] for e in data if e["args"]["dst rank"] != INVALID
            }
            comm[(rank, it)] = {
                "op_name": op["name"],
                "elapse_ms": op["dur"] / 1000,
                "wait_ms": sum(e["dur"] for e in tasks if e["tid"] == 0 and e["args"]["task type"] == "Notify_Wait")
                / 1000,
                "size_bytes": float(sum(e["args"]["size(Byte)"] for e in sent)),
                "group_size": len(ends),
            }
        for p in _files(tl, "task_time").values():
            for e in json.load(open(p)):
                if e.get("ph") == "X" and (e.get("args") or {}).get("Task Type") in ("AI_CORE", "AI_CPU"):
                    # MindSpore names kernels Scope/.../Type-opN: the type is the last part without -opN
                    typ = re.sub(r"-op\d+.*$", "", e["name"].split("/")[-1])
                    k = kernels.setdefault(typ, [0.0, 0])
                    k[0] += e["dur"]
                    k[1] += 1
    return steps, comm, kernels


@pytest.fixture(scope="module")
def f_copy(tmp_path_factory):
    """The two PROF_* jobs of set F alone (their natural folder also holds other runs' legacy files)."""
    d = tmp_path_factory.mktemp("f") / "prof"
    d.mkdir()
    for job in _jobs(fixture_path(*FOLDER)):
        shutil.copytree(job, d / job.name)
    return d


@pytest.fixture(scope="module")
def f_doc(f_copy):
    return analyze_json(f_copy)


def test_f_every_step_matches_iteration_events_and_overlap_analysis(f_doc, f_copy):
    want, _, _ = expected(f_copy)
    got = reported_steps(f_doc)
    assert set(got) == set(want) and len(want) == 20
    for key, w in want.items():
        check_step(got[key], w, f"rank {key[0]} step {key[1]}")
    # item 9: the gap between iterations (15-32 ms) is in the step and shows as free time
    assert max(got[(0, s)]["free_us"] for s in range(2, 11)) > 15000


def test_f_summary_and_reconciliation(f_doc, f_copy):
    want, _, _ = expected(f_copy)
    close(f_doc["summary"]["step_time_s"], median_of_slowest({k: v["step_us"] for k, v in want.items()}) / 1e6)
    assert f_doc["summary"]["preparing_s"] is None
    # the recomputation from the kernels is checked against the profiler's Overlap Analysis
    rec = [r for r in f_doc["reconciliation"] if r["reference_us"] is not None]
    assert {r["metric"] for r in rec} >= {"computing", "communication", "free"}
    assert max(abs(r["rel_diff"]) for r in rec) < REL
    assert any(a["rule"] == "free_time" for a in f_doc["advice"])


def test_f_every_collective_matches_hccl_files(f_doc, f_copy):
    _, want, _ = expected(f_copy)
    got = {(c["rank"], c["step"]): c for c in f_doc["communication"]}
    assert set(got) == set(want)
    for key, w in want.items():
        c = got[key]
        assert c["op_name"] == w["op_name"]
        close(c["elapse_ms"], w["elapse_ms"], key)
        close(c["wait_ms"], w["wait_ms"], key)
        close(c["size_bytes"], w["size_bytes"], key)  # item 6: no on-chip copy in the payload
        assert c["group_size"] == w["group_size"] == 5, key  # item 6: rank 0 sends to ranks 1-4
        close(c["busbw_gbps"], w["size_bytes"] / 1e9 / (w["elapse_ms"] / 1e3) * busbw_factor("allreduce", 5), key)


def test_f_kernels_count_each_collective_once(f_doc, f_copy):
    _, comm, kernels = expected(f_copy)
    table = f_doc["kernels"]
    types = {k["type"] for k in table}
    assert not types & SUBTASKS, types & SUBTASKS  # item 7: HCCL sub-tasks are not kernels
    compute = [k for k in table if k["category"] == "compute"]
    assert len(compute) >= 10
    for k in compute:  # the reported rows (top 20): per kernel type, time and count of the AI_CORE/AI_CPU tasks
        assert k["total_us"] == pytest.approx(kernels[k["type"]][0], rel=1e-6), k["type"]
        assert k["count"] == kernels[k["type"]][1], k["type"]
    allreduce = [k for k in table if k["category"] == "communication"]
    hccl_us = sum(c["elapse_ms"] * 1000 for c in comm.values())
    assert [k["type"] for k in allreduce] == ["AllReduce"]
    assert allreduce[0]["total_us"] == pytest.approx(hccl_us)
    # share = the type's time / all kernel time (compute kernels + the collectives, each counted once)
    all_us = hccl_us + sum(t for t, _ in kernels.values())
    assert allreduce[0]["share"] == pytest.approx(hccl_us / all_us, rel=0.02)


# ---- item 4: the natural folder holds the two PROF_* jobs and loose legacy files of other runs -------------


def test_f_natural_folder_reads_both_formats_and_says_what_it_skipped():
    d = fixture_path(*FOLDER)
    doc = analyze_json(d)
    got = reported_steps(doc)
    assert {r["rank"] for r in doc["ranks"]} == {0, 1, 10}
    want, _, _ = expected(d)
    for key, w in want.items():  # ranks 0 and 1: the msprof jobs (op data, collectives, Overlap Analysis)
        check_step(got[key], w, f"rank {key[0]} step {key[1]}")
    legacy = rows(d / "step_trace_raw_10_detail_time.csv")  # rank 10: the loose legacy step trace
    for r in legacy:
        check_step(
            got[(10, int(r["step_num"]))],
            {"step_us": int(r["total"]) / 100, "computing_us": None, "free_us": None, "preparing_us": None},
            "rank 10",
        )
    # rank 10's unknown parts do not dilute the known ones: ranks 0 and 1 idle most of the step (item 9)
    assert any(a["rule"] == "free_time" for a in doc["advice"]), doc["advice"]
    p = analyzers.load_profile(d)
    assert any("rank 0" in w and "step_trace_raw_0_detail_time.csv" in w for w in p.warnings), p.warnings


# ---- damaged copies: files of device 1 removed ------------------------------------------------------------------


@pytest.mark.parametrize("kinds", [("task_time", "msprof"), ("step_trace",), ("hccl",)])
def test_f_device_without_some_files(tmp_path, f_copy, kinds):
    d = tmp_path / "prof"
    shutil.copytree(f_copy, d)
    tl = _timeline(_jobs(d)[1])[1]
    assert _timeline(_jobs(d)[1])[0] == 1
    for kind in kinds:
        for p in tl.glob(f"{kind}_*.json"):
            p.unlink()
    doc = analyze_json(d)
    want, comm, _ = expected(d)
    got = reported_steps(doc)
    assert set(analyzers.load_profile(d).ranks["rank"]) == {0, 1}
    assert set(got) == set(want)  # rank 1 without step_trace: no step windows, nothing invented
    for key, w in want.items():
        check_step(got[key], w, f"{kinds} removed: rank {key[0]} step {key[1]}")
    reported = {(c["rank"], c["step"]): c for c in doc["communication"]}
    assert set(reported) == set(comm)
    for key, w in comm.items():
        close(reported[key]["elapse_ms"], w["elapse_ms"], key)
    if "task_time" in kinds:  # item 2: no op data -> computing unknown, not 0
        assert all(got[(1, s)]["computing_us"] is None for s in range(1, 11))
    warnings = msprof.parse(d).warnings
    for kind in kinds:
        assert any("rank 1" in w and f"{kind}_" in w for w in warnings), warnings
