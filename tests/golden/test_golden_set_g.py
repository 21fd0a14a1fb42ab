"""Golden test, fixture set G (MindSpore 1.x `profiler/` files of a 4-rank job, 2 pipeline stages):
every number `perfbench analyze --json` reports is compared with the profiler's own files, read here:

* step_trace_raw_{r}_detail_time.csv: step time = `total` (10 ns ticks);
* ascend_cluster_analyse_pipeline-parallel_2_4_{r}.csv: row k = step k (the last row is MindSpore's mean
  over steps): computation_time, communication_alone_time, stage_time, receive_alone_time (ms). MindSpore
  writes no communication total, overlap, free or host step start: those are null;
* hccl_raw_{r}.csv: per step and op [step, cost, wait, {"src-dst": {transport: [time_ms, size_KB, bw]}}].

Tolerances in tests/support/golden.py (1%). Damaged copies (a file of rank 2 removed) are made in tmp_path.
"""

from __future__ import annotations

import json
import shutil

import pytest

import analyzers
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

G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")
RANKS = (0, 1, 2, 3)


def _expected_steps(d, ranks=RANKS, without=()):
    """(rank, step) -> breakdown from the profiler's files in folder d (files named in `without` are gone)."""
    out = {}
    for r in ranks:
        st = d / f"step_trace_raw_{r}_detail_time.csv"
        pp = d / f"ascend_cluster_analyse_pipeline-parallel_2_4_{r}.csv"
        trace = rows(st) if st.exists() else []
        pipe = rows(pp)[:-1] if pp.exists() else []  # last row: MindSpore's mean over steps
        steps = [int(t["step_num"]) for t in trace] or list(range(1, len(pipe) + 1))
        for k, step in enumerate(steps):
            p = pipe[k] if k < len(pipe) else None
            want = {
                "step_us": int(trace[k]["total"]) / 100
                if trace
                else (float(p["stage_time"]) + float(p["receive_alone_time"])) * 1000,
                "computing_us": float(p["computation_time"]) * 1000 if p else None,
                "communication_not_overlapped_us": float(p["communication_alone_time"]) * 1000 if p else None,
                "stage_us": float(p["stage_time"]) * 1000 if p else None,
                "bubble_us": float(p["receive_alone_time"]) * 1000 if p else None,
                "communication_us": None,
                "overlapped_us": None,
                "free_us": None,
                "preparing_us": None,
            }
            out[(r, step)] = want
    return out


def _expected_comm(d, ranks=RANKS):
    """(rank, step, op) -> per-op numbers of hccl_raw_{r}.csv."""
    out = {}
    for r in ranks:
        f = d / f"hccl_raw_{r}.csv"
        if not f.exists():
            continue
        for row in rows(f):
            for name, (step, cost, wait, links) in json.loads(row["communication_operator_cost"]).items():
                ends = {int(x) for key in links for x in key.split("-")}
                size = sum(
                    v[1] * 1000
                    for key, per in links.items()
                    for v in per.values()
                    if key.split("-")[0] != key.split("-")[1]
                )
                op = name.split("_", 3)[-1]  # stream_36_0_AllReduce-op4542 -> AllReduce-op4542
                p2p = op.startswith(("Send-", "Receive-"))
                out[(r, int(row["step_num"]), op)] = {
                    "elapse_ms": cost + wait,
                    "transit_ms": cost,
                    "wait_ms": wait,
                    "size_bytes": size,
                    "group_size": 2 if p2p else (len(ends) or None),
                }
    return out


@pytest.fixture(scope="module")
def g_doc():
    return analyze_json(fixture_path(*G))


def test_g_every_step_number_matches_the_profilers_files(g_doc):
    d = fixture_path(*G)
    want = _expected_steps(d)
    got = reported_steps(g_doc)
    assert set(got) == set(want)
    for key, w in want.items():
        check_step(got[key], w, f"rank {key[0]} step {key[1]}")
    # item 2: computing is the profiler's 13.8-124 ms, never 0
    assert min(s["computing_us"] for s in got.values()) > 13000


def test_g_summary_from_the_profilers_numbers(g_doc):
    want = _expected_steps(fixture_path(*G))
    s = g_doc["summary"]
    close(s["step_time_s"], median_of_slowest({k: v["step_us"] for k, v in want.items()}) / 1e6, "step_time_s")
    assert s["preparing_s"] is None and s["free_s"] is None and s["communication_s"] is None
    assert s["ranks"] == 4 and g_doc["source"]["ranks"] == 4


def test_g_every_collective_matches_hccl_raw(g_doc):
    want = _expected_comm(fixture_path(*G))
    got = {(c["rank"], c["step"], c["op_name"]): c for c in g_doc["communication"]}
    assert set(want) <= set(got)
    for key, w in want.items():
        c = got[key]
        for k in ("elapse_ms", "transit_ms", "wait_ms"):
            assert c[k] == pytest.approx(w[k], rel=REL, abs=1e-9), (key, k)
        if w["group_size"]:  # point to point: 2; a collective: the ranks at either end of its links
            assert c["group_size"] == w["group_size"], key
        if w["size_bytes"]:
            close(c["size_bytes"], w["size_bytes"], key)
            close(
                c["busbw_gbps"],
                w["size_bytes"] / 1e9 / (w["elapse_ms"] / 1e3) * busbw_factor(c["op_type"], w["group_size"]),
                key,
            )


def test_g_collectives_only_in_the_step_trace_keep_its_timing(g_doc):
    """Ranks 2/3 have hccl_raw rows for 2 steps only: the other steps' collectives come from the step
    trace's NAME/NAME_start_point/NAME_end_point columns, with no size (unknown, not 0)."""
    d = fixture_path(*G)
    trace = rows(d / "step_trace_raw_2_detail_time.csv")
    hccl_steps = {int(r["step_num"]) for r in rows(d / "hccl_raw_2.csv")}
    got = {(c["step"], c["op_name"]): c for c in g_doc["communication"] if c["rank"] == 2}
    cols = [c for c in trace[0] if c.endswith("_start_point") and "-op" in c]
    name = cols[0][: -len("_start_point")]  # e.g. stream_48_0_Receive-op663
    for t in trace:
        step = int(t["step_num"])
        if step in hccl_steps:
            continue
        c = got[(step, name.split("_", 3)[-1])]
        assert c["elapse_ms"] == pytest.approx(int(t[name]) / 1e5, rel=REL)
        assert c["size_bytes"] is None


def test_g_stage_of_each_rank_from_the_cluster_file_names():
    # ascend_cluster_analyse_pipeline-parallel_{stages}_{ranks}_{rank}.csv: 2 stages over 4 ranks
    p = analyzers.load_profile(fixture_path(*G))
    assert dict(zip(p.ranks["rank"], p.ranks["stage"])) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert set(p.ops["rank"]) == set()  # no op timeline in G: nothing invented from step-trace columns


# ---- damaged copies: one file of rank 2 removed ----------------------------------------------------------


@pytest.mark.parametrize(
    "missing",
    ["hccl_raw_2.csv", "step_trace_raw_2_detail_time.csv", "ascend_cluster_analyse_pipeline-parallel_2_4_2.csv"],
)
def test_g_rank_without_one_file(tmp_path, missing):
    d = tmp_path / "cluster_propose"
    shutil.copytree(fixture_path(*G), d)
    (d / missing).unlink()
    doc = analyze_json(d)
    got = reported_steps(doc)
    want = _expected_steps(d)
    # every rank is still there; the others are exactly as the profiler says, rank 2 reports what it has
    assert {r["rank"] for r in doc["ranks"]} == set(RANKS)
    assert set(got) == set(want)
    for key, w in want.items():
        check_step(got[key], w, f"{missing} removed: rank {key[0]} step {key[1]}")
    comm = _expected_comm(d)
    reported = {(c["rank"], c["step"], c["op_name"]): c for c in doc["communication"]}
    for key, w in comm.items():
        assert reported[key]["elapse_ms"] == pytest.approx(w["elapse_ms"], rel=REL, abs=1e-9)
    p = analyzers.load_profile(d)
    assert any(missing.replace("pipeline-parallel_2_4_2", "*_2") in w or missing in w for w in p.warnings), p.warnings
    assert dict(zip(p.ranks["rank"], p.ranks["stage"]))[2] == 1
