"""The PyTorch profiler (Kineto) parser on the real traces of ../shared/fixtures/kineto (sets P-T of its README).

Expected values come from the trace files themselves, read here with a small independent `json` scan (the
files are a few MB), never from the parser under test."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

import analyzers
from analyzers.parsers.formats import formats
from analyzers.parsers.load import find_units
from perfbench.errors import ProfileFormatError, UserError
from tests.support import kineto_path
from tests.support.golden import analyze_json

P = "trace_filter"  # CUDA + NCCL, 2 ranks of 128
Q = "nccl_parser_config"  # CUDA + NCCL 2.17.1, rank 0 of 2
R = "ns_resolution_trace"  # V100, 1 rank, fractional us
S = "cpu_only"  # gloo, rank 34 of 300
T = "amd_trace"  # ROCm, no distributedInfo
SETS = (P, Q, R, S, T)


def scan(folder: str) -> list[dict]:
    """Each trace file of a set, json-loaded whole (independent of the streaming reader)."""
    out = []
    for f in sorted(Path(kineto_path(folder)).iterdir()):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        doc["_file"] = f
        out.append(doc)
    return out


def rank_of(doc: dict) -> int:
    return int((doc.get("distributedInfo") or {}).get("rank", 0))


def x_events(doc: dict, cat=None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") in cat)]


@pytest.fixture(scope="module")
def profiles() -> dict:
    return {s: analyzers.load_profile(kineto_path(s)) for s in SETS}


def test_every_set_is_found_as_kineto():
    units = find_units(kineto_path())
    assert sorted(d.name for f, d in units) == sorted(SETS)
    assert {f for f, _ in units} == {"kineto"}
    assert "kineto" in [f.name for f in formats()]


@pytest.mark.parametrize("folder", SETS)
def test_ranks_come_from_distributed_info(profiles, folder):
    p = profiles[folder]
    docs = scan(folder)
    assert sorted(p.ranks["rank"]) == sorted(rank_of(d) for d in docs)
    for d in docs:
        info = d.get("distributedInfo")
        row = p.ranks[p.ranks["rank"] == rank_of(d)].iloc[0]
        if info and "world_size" in info:
            assert int(row["world_size"]) == info["world_size"]
    no_info = [d["_file"] for d in docs if "distributedInfo" not in d]
    for f in no_info:
        assert any(str(f) in w and "rank 0" in w for w in p.warnings)
    assert bool(no_info) == (folder == T)


@pytest.mark.parametrize("folder", SETS)
def test_steps_are_the_profiler_steps(profiles, folder):
    p = profiles[folder]
    for d in scan(folder):
        want = sorted(
            {
                int(m.group(1))
                for e in x_events(d, ("user_annotation",))
                if (m := re.match(r"ProfilerStep#(\d+)", e.get("name", "")))
            }
        )
        got = sorted(p.steps.loc[p.steps["rank"] == rank_of(d), "step"])
        assert got == want and want


@pytest.mark.parametrize("folder", SETS)
def test_every_device_op_and_gloo_collective_is_read(profiles, folder):
    p = profiles[folder]
    for d in scan(folder):
        ops = p.ops[p.ops["rank"] == rank_of(d)]
        device = x_events(d, ("kernel", "gpu_memcpy", "gpu_memset"))
        cats = Counter(e["cat"] for e in device)
        assert (ops["category"] == "memory").sum() == cats["gpu_memcpy"] + cats["gpu_memset"]
        nccl = [e for e in device if e["cat"] == "kernel" and re.match(r"nccl.*Kernel", e["name"])]
        assert (ops["category"] == "communication").sum() == (len(nccl) if device else len(_gloo(d)))
        if device:
            assert (ops["category"] == "compute").sum() == cats["kernel"] - len(nccl)
            assert abs(ops["dur_us"].sum() - sum(e["dur"] for e in device)) < 1e-3 * len(device)


def _gloo(doc):
    return [e for e in x_events(doc, ("user_annotation",)) if e["name"].startswith("gloo:")]


@pytest.mark.parametrize("folder", [P, Q, R, S])
def test_collectives(profiles, folder):
    """One collective per NCCL kernel (sets P, Q), per record_param_comms that launched none (R: a world of
    one rank, NCCL launches nothing) or per gloo annotation (S); T (a single-GPU toy) has none."""
    p = profiles[folder]
    for d in scan(folder):
        co = p.comm_ops[p.comm_ops["rank"] == rank_of(d)]
        nccl = [e for e in x_events(d, ("kernel",)) if re.match(r"nccl.*Kernel", e["name"])]
        rpc = [e for e in x_events(d, ("cpu_op",)) if e["name"] == "record_param_comms"]
        if folder == R:
            want = [e for e in rpc if e["args"].get("Collective name") not in (None, "wait")]
            assert not nccl and len(co) == len(want) == 35
            assert co["elapse_ms"].isna().all()  # the device time of a collective that ran no kernel: unknown
        elif folder == S:
            assert len(co) == len(_gloo(d)) == 10
        else:
            assert len(co) == len(nccl) > 0
            assert (co["elapse_ms"] * 1000).sum() == pytest.approx(sum(e["dur"] for e in nccl), rel=1e-9)
        assert co["op_name"].is_unique


def test_nccl_collective_sizes_from_the_kernel_args(profiles):
    """Set Q: NCCL kernels carry Collective name, In msg nelems and dtype (Float: 4 bytes, Long: 8)."""
    co = profiles[Q].comm_ops.sort_values("start_us")
    nccl = sorted((e for e in x_events(scan(Q)[0], ("kernel",)) if e["name"].startswith("nccl")), key=lambda e: e["ts"])
    assert list(co["op_type"]) == [e["args"]["Collective name"] for e in nccl]
    width = {"Float": 4, "Long": 8}
    assert list(co["size_bytes"]) == [e["args"]["In msg nelems"] * width[e["args"]["dtype"]] for e in nccl]
    assert set(co["group"]) == {"0"} and set(co["group_size"]) == {2}
    assert Counter(co["op_type"]) == {"allreduce": 15, "broadcast": 6}


def test_older_traces_name_collectives_by_the_nccl_annotation(profiles):
    """Set P: the kernels are all ncclKernel_SendRecv; the nccl:* annotation around each launch names the
    collective (all_to_all, all_reduce, _all_gather_base) and its input dims give the size."""
    p = profiles[P]
    for d in scan(P):
        co = p.comm_ops[p.comm_ops["rank"] == rank_of(d)]
        notes = Counter(e["name"] for e in x_events(d, ("user_annotation",)) if e["name"].startswith("nccl:"))
        want = {"alltoall": notes["nccl:all_to_all"], "allreduce": notes["nccl:all_reduce"]}
        want["allgather"] = notes["nccl:_all_gather_base"]
        assert Counter(co["op_type"]) == want
        assert co["size_bytes"].notna().all()


def test_gloo_collectives_and_process_groups(profiles):
    """Set S: ten gloo:all_reduce annotations on two gloo threads, sized by Input Dims x float; ten
    process groups in distributedInfo.pg_config (eleven entries: pg_count says 10)."""
    p = profiles[S]
    d = scan(S)[0]
    gloo = sorted(_gloo(d), key=lambda e: e["ts"])
    co = p.comm_ops.sort_values("start_us")
    assert list(co["size_bytes"]) == [e["args"]["Input Dims"][0][0] * 4 for e in gloo]
    assert set(co["op_type"]) == {"allreduce"}
    groups = p.meta["parallel_groups"]
    assert len(groups) == len(d["distributedInfo"]["pg_config"]) == 11
    assert groups["0"]["ranks"] == list(range(300))


def _at(p, rank: int, start_us: float):
    co = p.comm_ops
    (row,) = co[(co["rank"] == rank) & (co["start_us"] == start_us)].to_dict("records")
    return row


def test_collective_sizes_read_by_hand_from_the_traces(profiles):
    """One collective of each set, its size read by hand from the trace file (event, its ts, the fields): bytes =
    elements x the dtype's width."""
    # Q: the kernel at ts 4458676423385.774 (External id 114): "Collective name" broadcast, "In msg nelems" 53120,
    # "dtype" Float (4 B), "Group size" 2, "Process Group Name" "0"; the one at 4458676425938.828 (External id 172):
    # 53 x Long (8 B)
    q = _at(profiles[Q], 0, 4458676423385.774)
    assert (q["op_type"], q["size_bytes"], q["group"], q["group_size"]) == ("broadcast", 53120 * 4, "0", 2)
    assert _at(profiles[Q], 0, 4458676425938.828)["size_bytes"] == 53 * 8
    # R (no kernel: a world of one rank): record_param_comms at ts 1712195495520871.0 (External id 2099): allreduce,
    # "In msg nelems" 2049000, Float, "Process Group ID" 0 (this older trace has no Process Group Name), "Group size" 1
    r = _at(profiles[R], 0, 1712195495520871.0)
    assert (r["op_type"], r["size_bytes"], r["group"], r["group_size"]) == ("allreduce", 2049000 * 4, "0", 1)
    # ... and its "wait" (External id 174, ts 1712195495505815.0, 0 elements of Byte) moves nothing: no collective
    assert not (profiles[R].comm_ops["start_us"] == 1712195495505815.0).any()
    # P (older: record_param_comms without sizes): rank 0's first nccl:all_reduce annotation (ts 1682725898240982,
    # External id 41957) has "Input Dims" [[19618307]], "Input type" ["float"]: the all-reduce it launched
    p0 = profiles[P].comm_ops
    first = p0[(p0["rank"] == 0) & (p0["op_type"] == "allreduce")].sort_values("start_us").iloc[0]
    assert first["size_bytes"] == 19618307 * 4
    # S (gloo, CPU): gloo:all_reduce at ts 1212075548353.304 (External id 1025), "Input Dims" [[321271]],
    # "Input type" ["float"]; the annotation names no group, and every one of the 11 pg_config groups has pg_size 300
    s = _at(profiles[S], 34, 1212075548353.304)
    assert (s["op_type"], s["size_bytes"], s["group"], s["group_size"]) == ("allreduce", 321271 * 4, "", 300)


def test_a_gloo_collective_without_shapes_has_no_size(tmp_path):
    """A trace recorded without record_shapes (a hand-written one in the shape of PyTorch 2.13's gloo events): the
    gloo:all_reduce annotation has no Input Dims, so its size is unknown (null, never 0); one with an Input type
    of no known width (TensorList) too; the sized one is 1280 x float."""
    ann = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5.0, "dur": 10.0, "args": {}},
        dict(ann, ts=20.0, dur=5.0, args={"External id": 1, "Record function id": 0, "Ev Idx": 0}),
        dict(ann, ts=30.0, dur=5.0, args={"Input Dims": [[[10]]], "Input type": ["TensorList"]}),
        dict(ann, ts=40.0, dur=5.0, args={"Input Dims": [[1280]], "Input type": ["float"]}),
    ]
    info = {"backend": "gloo", "rank": 0, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]}  # fmt: skip
    (tmp_path / "r0.pt.trace.json").write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
    co = analyzers.load_profile(tmp_path).comm_ops.sort_values("start_us")
    assert co["size_bytes"].isna().tolist() == [True, True, False]
    assert co["size_bytes"].iloc[2] == 1280 * 4 and set(co["group"]) == {"0"} and set(co["group_size"]) == {2}


def test_two_files_claiming_one_rank_is_an_error_naming_both(tmp_path):
    src = kineto_path(P, "sampled_rank-0.json.gz")
    (tmp_path / "a.json.gz").symlink_to(src)
    (tmp_path / "b.json.gz").symlink_to(src)
    with pytest.raises(UserError, match=r"rank 0 claimed by two traces.*a\.json\.gz.*b\.json\.gz"):
        analyzers.load_profile(tmp_path)


def test_a_trace_without_profiler_steps_is_one_step_with_a_warning(tmp_path):
    """A hand-written trace (no distributedInfo, no ProfilerStep, one [memory] event), values hand-computed."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.0, "dur": 50.0, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 9,
         "ts": 120.0, "dur": 60.0, "args": {}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 110.0, "s": "t",
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 4096, "Total Allocated": 8192,
                  "Total Reserved": 2097152}},
    ]  # fmt: skip
    (tmp_path / "t.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    p = analyzers.load_profile(tmp_path)
    assert p.steps[["step", "start_us", "end_us"]].values.tolist() == [[0, 100.0, 180.0]]
    assert any("no ProfilerStep" in w for w in p.warnings) and any("rank 0" in w for w in p.warnings)
    assert p.comm_ops["op_type"].tolist() == ["allreduce"]
    mem = p.memory_records
    assert mem[["ts_us", "allocated_bytes", "reserved_bytes", "device"]].values.tolist() == [
        [110.0, 8192, 2097152, "gpu:0"]
    ]
    b = analyzers.analyze(p).tables["step_breakdown"].iloc[0]
    # hand-computed: compute [100,150], comm [120,180]: overlap 30, exposed 30, free 0 in [100,180]
    assert (b["computing_us"], b["overlapped_us"], b["communication_not_overlapped_us"], b["free_us"]) == (
        50.0,
        30.0,
        30.0,
        0.0,
    )


def test_a_truncated_trace_is_a_one_line_error(tmp_path):
    src = gzip.open(kineto_path(S, "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")).read()
    (tmp_path / "rank-34.pt.trace.json").write_bytes(src[: len(src) // 2])
    with pytest.raises(ProfileFormatError, match="truncated or corrupt JSON"):
        analyzers.load_profile(tmp_path, strict=True)


@pytest.mark.parametrize("folder", SETS)
def test_analyze_reports_every_set(folder):
    doc = analyze_json(kineto_path(folder))
    assert doc["ranks"] and all(r["steps"] for r in doc["ranks"])


def test_streaming_and_one_read_agree(monkeypatch):
    """Traces over SMALL_TRACE_BYTES are streamed with ijson: the same Profile as the one-read path (set Q)."""
    from analyzers.parsers.kineto import reader

    whole = analyzers.load_profile(kineto_path(Q))
    monkeypatch.setattr(reader, "SMALL_TRACE_BYTES", 1024)
    streamed = analyzers.load_profile(kineto_path(Q))
    for name in ("ranks", "steps", "ops", "comm_ops"):
        assert getattr(whole, name).equals(getattr(streamed, name)), name
    assert whole.meta["parallel_groups"] == streamed.meta["parallel_groups"]


@pytest.mark.parametrize("path", ["blocks", "ijson"])
def test_every_streamed_path_keeps_what_one_read_keeps(monkeypatch, path):
    """Streamed in blocks cut between events (here 4 KB, so hundreds of cuts, Kineto's own line layout of set Q's
    trace) or, where blocks do not parse, event by event with ijson: the same kept events as one orjson read."""
    from analyzers.parsers.kineto import reader

    (trace,) = (p for p in kineto_path(Q).iterdir() if ".json" in p.name)
    whole = reader.read_trace(trace)
    monkeypatch.setattr(reader, "SMALL_TRACE_BYTES", 1024)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 4096)
    if path == "ijson":
        monkeypatch.setattr(reader, "_read_blocks", lambda _path: None)
    else:
        assert reader._read_blocks(trace) is not None  # cut into blocks, not sent to ijson
    streamed = reader.read_trace(trace)
    for name in ("events", "device_ops", "launches", "steps", "cpu_ops", "param_comms", "gloo", "nccl", "memory"):
        assert getattr(whole, name) == getattr(streamed, name), name
    assert whole.header["distributedInfo"] == streamed.header["distributedInfo"]


@pytest.mark.parametrize("folder", SETS)
def test_typed_events_keep_what_plain_dicts_keep(folder):
    """msgspec's typed events (the reader's path) and orjson's plain dicts (its path for a block whose values do
    not fit the types) keep the same of every set's traces."""
    from analyzers.parsers.kineto import reader

    for trace in sorted(p for p in kineto_path(folder).iterdir() if ".json" in p.name):
        text = gzip.open(trace).read()
        typed, plain = reader._read_small(trace, text), reader._read_small_dicts(trace, text)
        for name in ("events", "device_ops", "launches", "steps", "cpu_ops", "param_comms", "gloo", "nccl", "memory"):
            assert getattr(typed, name) == getattr(plain, name), (trace.name, name)
        assert typed.header == plain.header


def test_args_that_are_not_an_object_are_kept_as_plain_dicts_keep_them(tmp_path):
    """Hand-made events whose `args` is null or an empty list (typed, each such event goes through the plain-dict
    rule): the same kept tuples as orjson's dicts, and the same as without args."""
    from analyzers.parsers.kineto import reader

    events = []
    for args in (None, [], "absent"):
        for cat, name in (("cuda_runtime", "cudaLaunchKernel"), ("kernel", "k"), ("cpu_op", "record_param_comms")):
            ev = {"ph": "X", "cat": cat, "name": name, "ts": 1, "dur": 2, "tid": 7, "args": args}
            events.append({k: v for k, v in ev.items() if v != "absent"})
        events.append({"ph": "i", "name": "[memory]", "ts": 5, "args": args} if args != "absent" else {"ph": "i"})
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    typed, plain = reader._read_small(tmp_path, text), reader._read_small_dicts(tmp_path, text)
    for name in ("events", "device_ops", "launches", "param_comms", "memory"):
        assert getattr(typed, name) == getattr(plain, name), name
    assert typed.device_ops == [("k", "kernel", 1.0, 2.0, 7, None, None, None)] * 3
    assert typed.param_comms == [(7, 1.0, 2.0, {})] * 3 and typed.memory == [(5.0, {})] * 2 and not typed.launches


def test_an_event_off_the_types_is_read_as_a_plain_dict(tmp_path, monkeypatch):
    """A CPU op's `ts` as a string (not Kineto's, but Chrome-trace writers do it) does not fit the typed decode: its
    block is kept from plain dicts, the other blocks typed; the Profile is the one of the original trace (set Q)."""
    from analyzers.parsers.kineto import reader

    (trace,) = (p for p in kineto_path(Q).iterdir() if ".json" in p.name)
    text = gzip.open(trace).read()
    m = re.search(rb'"cat": "cpu_op",[^{}]*?"ts": ([0-9.]+)', text[len(text) // 4 :])  # Kineto writes CPU ops first
    at = len(text) // 4 + m.start(1)
    (tmp_path / "q.pt.trace.json").write_bytes(text[:at] + b'"' + m.group(1) + b'"' + text[at + len(m.group(1)) :])
    monkeypatch.setattr(reader, "SMALL_TRACE_BYTES", 1024)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 64 * 1024)
    assert reader._read_blocks(tmp_path / "q.pt.trace.json") is not None
    whole = analyzers.load_profile(kineto_path(Q))
    plain: list = []
    keep_all = reader._keep_all
    monkeypatch.setattr(reader, "_keep_all", lambda out, events: plain.append(len(events)) or keep_all(out, events))
    monkeypatch.setattr(reader, "_read_streaming", None)  # no fallback to ijson
    odd = analyzers.load_profile(tmp_path)
    assert len(plain) == 1 and 0 < plain[0] < whole.meta["trace_events"] / 2  # one block of plain dicts
    for name in ("steps", "ops", "comm_ops"):
        assert getattr(whole, name).equals(getattr(odd, name)), name


def test_a_truncated_trace_is_a_one_line_error_when_streamed(tmp_path, monkeypatch):
    from analyzers.parsers.kineto import reader

    monkeypatch.setattr(reader, "SMALL_TRACE_BYTES", 1024)
    src = gzip.open(kineto_path(S, "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")).read()
    (tmp_path / "rank-34.pt.trace.json").write_bytes(src[: len(src) // 2])
    with pytest.raises(ProfileFormatError, match=r"truncated or corrupt JSON after \d+ events"):
        analyzers.load_profile(tmp_path, strict=True)


def test_a_damaged_rank_beside_good_ones_is_a_warning(tmp_path):
    """One truncated trace among a folder's ranks: the others are analyzed, the damaged file is named."""
    (tmp_path / "sampled_rank-0.json.gz").symlink_to(kineto_path(P, "sampled_rank-0.json.gz"))
    src = gzip.open(kineto_path(P, "sampled_rank-1.json.gz")).read()
    (tmp_path / "sampled_rank-1.json").write_bytes(src[: len(src) // 2])
    p = analyzers.load_profile(tmp_path)
    assert list(p.ranks["rank"]) == [0]
    assert any("sampled_rank-1.json" in w and "not analyzed" in w for w in p.warnings)
    with pytest.raises(UserError, match="sampled_rank-1.json"):
        analyzers.load_profile(tmp_path, strict=True)
