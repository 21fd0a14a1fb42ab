"""Golden test, fixture set I (MindSpore UT profiler data, `profiler_data/profiler/`): step traces of ranks
0, 6 and 10 and hccl_raw_6.csv (one 94.4 MB all-reduce per step), no op timeline. Every number
`perfbench analyze --json` reports is compared with the profiler's files, read here:

* step_trace_raw_{r}_detail_time.csv: step time = `total`; the all-reduce's NAME_start_point (10 ns ticks);
* hccl_raw_6.csv: per step and op [step, cost, wait, {"src-dst": {transport: [time_ms, size_KB, bw]}}]:
  elapse = cost + wait, payload = size sent to another rank (src != dst), group = ranks at the link ends.
No op data: computing, communication, free and preparing are null (unknown, never 0).
Tolerances in tests/support/golden.py (1%). Damaged copies are made in tmp_path."""

from __future__ import annotations

import json
import shutil

import pytest

import analyzers
from tests.support import fixture_path
from tests.support.golden import analyze_json, busbw_factor, check_step, close, median_of_slowest, reported_steps, rows

I_ = ("mindspore-ai__mindspore_test", "tests", "ut", "data", "profiler_data")
UNKNOWN = {
    "computing_us": None,
    "communication_us": None,
    "communication_not_overlapped_us": None,
    "overlapped_us": None,
    "free_us": None,
    "preparing_us": None,
    "bubble_us": None,
}


def _expected_steps(d):
    out = {}
    for r in (0, 6, 10):
        f = d / f"step_trace_raw_{r}_detail_time.csv"
        if f.exists():
            for row in rows(f):
                out[(r, int(row["step_num"]))] = {"step_us": int(row["total"]) / 100, **UNKNOWN}
    return out


def _expected_comm(d):
    out = {}
    f = d / "hccl_raw_6.csv"
    if not f.exists():
        return out
    for row in rows(f):
        for name, (step, cost, wait, links) in json.loads(row["communication_operator_cost"]).items():
            ends = {int(x) for key in links for x in key.split("-")}
            size = sum(
                v[1] * 1000
                for key, per in links.items()
                for v in per.values()
                if key.split("-")[0] != key.split("-")[1]
            )
            out[(6, int(row["step_num"]), name.split("_", 3)[-1])] = {
                "elapse_ms": cost + wait,
                "transit_ms": cost,
                "wait_ms": wait,
                "size_bytes": size,
                "group_size": len(ends),
                "stream_name": name,
            }
    return out


def test_i_every_number_matches_the_profilers_files():
    d = fixture_path(*I_)
    doc = analyze_json(d)
    want = _expected_steps(d / "profiler")
    got = reported_steps(doc)
    assert set(got) == set(want)
    for key, w in want.items():  # item 2: ranks 0 and 10 have no op data: unknown, not 100% free
        check_step(got[key], w, f"rank {key[0]} step {key[1]}")
    close(doc["summary"]["step_time_s"], median_of_slowest({k: v["step_us"] for k, v in want.items()}) / 1e6)
    for k in ("computing_s", "free_s", "preparing_s", "communication_s"):
        assert doc["summary"][k] is None, k
    comm = _expected_comm(d / "profiler")
    trace6 = {int(r["step_num"]): r for r in rows(d / "profiler" / "step_trace_raw_6_detail_time.csv")}
    reported = {(c["rank"], c["step"], c["op_name"]): c for c in doc["communication"]}
    assert set(reported) == set(comm) and len(comm) == 2
    for key, w in comm.items():
        c = reported[key]
        for k in ("elapse_ms", "transit_ms", "wait_ms", "size_bytes"):
            close(c[k], w[k], (key, k))
        # item 6: the links say 2 ranks (1-0 and an on-device 0-0 copy): group of 2, bus bandwidth = algbw
        assert c["group_size"] == w["group_size"] == 2
        algbw = w["size_bytes"] / 1e9 / (w["elapse_ms"] / 1e3)
        close(c["algbw_gbps"], algbw)
        close(c["busbw_gbps"], algbw * busbw_factor("allreduce", 2))
        assert c["start_us"] == pytest.approx(int(trace6[key[1]][w["stream_name"] + "_start_point"]) / 100)
        # per transport: SDMA to rank 1, the 0-0 copy as LOCAL (not part of the payload)
        link = json.loads(rows(d / "profiler" / "hccl_raw_6.csv")[key[1] - 1]["link_info"])
        sdma = link["1-0"]["SDMA"]
        close(c["transit_mb"]["SDMA"], sdma[1] / 1000)
        close(c["bandwidth"]["SDMA"], sdma[1] / 1000 / sdma[0])
        close(c["transit_mb"]["LOCAL"], link["0-0"]["SDMA"][1] / 1000)


@pytest.mark.parametrize("missing", ["hccl_raw_6.csv", "step_trace_raw_6_detail_time.csv"])
def test_i_rank_6_without_one_file(tmp_path, missing):
    d = tmp_path / "profiler"
    shutil.copytree(fixture_path(*I_, "profiler"), d)
    (d / missing).unlink()
    doc = analyze_json(d)
    want = _expected_steps(d)
    got = reported_steps(doc)
    assert set(got) == set(want)  # ranks 0 and 10 unchanged; rank 6 without step trace has no steps
    for key, w in want.items():
        check_step(got[key], w, f"{missing} removed: rank {key[0]} step {key[1]}")
    comm = {(c["rank"], c["step"]): c for c in doc["communication"]}
    assert {k[:2] for k in comm} == {(6, 1), (6, 2)}  # rank 6 keeps the collectives it still has
    if missing == "hccl_raw_6.csv":  # timed by the step trace, size unknown
        trace6 = rows(d / "step_trace_raw_6_detail_time.csv")
        for r in trace6:
            close(comm[(6, int(r["step_num"]))]["elapse_ms"], int(r["stream_24_0_AllReduce-op3143"]) / 1e5)
            assert comm[(6, int(r["step_num"]))]["size_bytes"] is None
    else:
        for key, w in _expected_comm(d).items():
            close(comm[key[:2]]["elapse_ms"], w["elapse_ms"])
    p = analyzers.load_profile(d)
    assert set(p.ranks["rank"]) == {0, 6, 10}
    assert any("rank 6" in w and missing in w for w in p.warnings), p.warnings
