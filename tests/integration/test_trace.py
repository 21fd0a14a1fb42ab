"""`perfbench trace RUN -o FILE`: the merged trace loads back through perfbench's own trace reader
(analyzers/parsers/trace_view.py) with the stored run's events: per rank and category, steps, and one flow chain
per collective instance matched across ranks."""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict

import pandas as pd
import pytest

from analyzers.parsers.trace_view import iter_events, x_events
from perfbench.store import Store
from tests.support import run_perfbench


def expected(store: Store, rid: str) -> tuple[Counter, int]:
    """Slices per (rank, category) and collective instances on >= 2 ranks, straight from the stored tables."""
    ops, comm = store.read_table(rid, "profile_ops"), store.read_table(rid, "comm_ops")
    comm = comm[comm["start_us"].notna()]  # a collective without a start time cannot be placed
    steps = store.read_table(rid, "profile_steps")
    want = Counter()
    if ops is not None:
        for (rank, cat), n in ops[ops["category"] != "communication"].groupby(["rank", "category"]).size().items():
            want[(rank, cat)] = n
    for rank, n in comm.groupby("rank").size().items():
        want[(rank, "collective")] = n
    for rank, n in steps.groupby("rank").size().items():
        want[(rank, "step")] = n
    spans = store.read_table(rid, "spans")  # the workload's own spans, in the profiled steps
    if spans is not None:
        for rank, n in spans.merge(steps[["rank", "step"]]).groupby("rank").size().items():
            want[(rank, "span")] = n
    c = comm.sort_values("start_us").copy()
    c["occ"] = c.groupby(["group", "rank", "step", "op_name"]).cumcount()
    per_instance = c.groupby(["group", "step", "op_name", "occ"])["rank"].nunique()
    return want, int((per_instance >= 2).sum())


def read_back(path) -> tuple[Counter, dict, pd.DataFrame]:
    x = x_events(path).x
    got = Counter()
    cats = [e.get("cat") for e in iter_events(path, phases=("X",))]
    for (pid, cat), n in Counter(zip(x["pid"].astype(int), cats)).items():
        got[(pid, cat)] = n
    flows = defaultdict(list)
    for e in iter_events(path, phases=("s", "t", "f")):
        flows[e["id"]].append(e)
    return got, flows, x.assign(cat=cats, pid=x["pid"].astype(int))


@pytest.mark.parametrize("name", ["run.json", "run.json.gz"])
def test_ascend_import_trace_reads_back_with_the_same_events(imported_store, tmp_path, name):
    out = tmp_path / name
    r = run_perfbench("trace", "analyze", "-o", out, "--results", imported_store, "--json")
    summary = json.loads(r.stdout)
    if name.endswith(".gz"):
        assert out.read_bytes()[:2] == b"\x1f\x8b"
    store = Store(imported_store)
    rid = store.list_runs()[0]["run_id"]
    want, instances = expected(store, rid)
    got, flows, x = read_back(out)
    assert got == want
    assert (
        instances == 4 and summary["collectives_linked"] == instances
    )  # 4 collectives x 2 ranks in communication.json
    assert len(flows) == instances
    coll = x[x["cat"] == "collective"]
    for chain in flows.values():
        assert [e["ph"] for e in chain] == ["s", "f"] and {e["pid"] for e in chain} == {0, 1}
        for e in chain:  # each arrow end sits on its rank's collective slice
            on = coll[(coll["pid"] == e["pid"]) & (coll["ts"] <= e["ts"]) & (coll["ts"] + coll["dur"] >= e["ts"])]
            assert len(on) >= 1
    # two ranks of one host-less import: aligned on collective ends (same end time on both ranks after the shift)
    assert "collective ends" in summary["clock_alignment"]
    ends = coll.assign(end=coll["ts"] + coll["dur"]).groupby(["name", "pid"])["end"].first().unstack()
    assert (ends[0] - ends[1]).median() == pytest.approx(0, abs=0.5)  # float64 resolves 0.25 us at epoch scale
    # the shift is the median end difference in the profiler's own communication.json timings
    comm = store.read_table(rid, "comm_ops").assign(end=lambda d: d["start_us"] + d["elapse_ms"] * 1000)
    raw = comm.groupby(["op_name", "rank"])["end"].first().unstack()
    assert summary["offsets_us"]["1"] == pytest.approx((raw[0] - raw[1]).median(), abs=1e-3)


def test_trace_to_a_buffer_and_no_alignment(imported_store):
    from perfbench.views.trace import write_trace

    buf = io.BytesIO()
    summary = write_trace(Store(imported_store), "analyze", buf, align="none")
    doc = json.loads(buf.getvalue())
    assert summary["offsets_us"] == {} and doc["otherData"]["clock_alignment"].startswith("as recorded")
    assert {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"} == {"rank 0", "rank 1"}
    assert {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"} >= {"steps", "collectives"}


def test_unknown_run_is_one_line_error(imported_store, tmp_path):
    r = run_perfbench("trace", "nope", "-o", tmp_path / "x.json", "--results", imported_store, check=False)
    assert r.returncode == 2 and "no run 'nope'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.msrun
def test_cpu_sweep_run_trace_keeps_the_shared_clock(sweep_store, tmp_path):
    out = tmp_path / "cpu.json"
    summary = json.loads(run_perfbench("trace", "ws2-r0", "-o", out, "--results", sweep_store, "--json").stdout)
    store = Store(sweep_store)
    rid = store.get_run("ws2-r0")["run_id"]
    want, instances = expected(store, rid)
    got, flows, x = read_back(out)
    assert got == want and instances > 0 and len(flows) == instances
    assert all(sorted(e["ph"] for e in chain) == ["f", "s"] for chain in flows.values())
    assert summary["offsets_us"] == {} and "shared clock" in summary["clock_alignment"]
    # times as recorded: each rank's first compute op starts at its profiler timestamp minus the one origin
    ops = store.read_table(rid, "profile_ops")
    for rank in (0, 1):
        first = ops[(ops["rank"] == rank) & (ops["category"] == "compute")]["start_us"].min()
        mine = x[(x["pid"] == rank) & (x["cat"] == "compute")]["ts"].min()
        assert mine == pytest.approx(first - summary["origin_us"], abs=0.01)


G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")


def test_pipeline_import_aligns_each_set_of_ranks_linked_by_collectives(tmp_path):
    """Set G (MindSpore 1.x, 2 pipeline stages x 2 ranks, no host information): each stage's data-parallel
    group is aligned on its collectives' ends; the stages share no collective, so they are two sets."""
    from tests.support import fixture_path

    res = tmp_path / "results"
    run_perfbench("analyze", fixture_path(*G), "--results", res, timeout=300)
    out = tmp_path / "g.json.gz"
    summary = json.loads(run_perfbench("trace", "analyze", "-o", out, "--results", res, "--json").stdout)
    store = Store(res)
    rid = store.list_runs()[0]["run_id"]
    want, instances = expected(store, rid)
    got, flows, _x = read_back(out)
    assert got == want and len(flows) == instances == summary["collectives_linked"]
    assert summary["collectives_without_start"] == store.read_table(rid, "comm_ops")["start_us"].isna().sum() > 0
    assert "ranks 0, 1 on rank 0; ranks 2, 3 on rank 2" in summary["clock_alignment"]
    # the shift of rank 1 (3) is the median end difference to rank 0 (2) over the collectives both ran,
    # from the profiler's own hccl records as stored
    comm = store.read_table(rid, "comm_ops").assign(end=lambda d: d["start_us"] + d["elapse_ms"] * 1000)
    comm["occ"] = comm.sort_values("start_us").groupby(["group", "rank", "step", "op_name"]).cumcount()
    ends = comm.dropna(subset=["end"]).pivot_table(
        index=["group", "step", "op_name", "occ"], columns="rank", values="end", aggfunc="first"
    )
    for ref, other in ((0, 1), (2, 3)):
        both = ends[[ref, other]].dropna()
        assert len(both) > 0
        assert summary["offsets_us"][str(other)] == pytest.approx((both[ref] - both[other]).median(), abs=1e-3)
    assert summary["offsets_us"]["0"] == 0 and summary["offsets_us"]["2"] == 0
