"""msprof parser on the real fixture sets F (old per-iteration timeline JSON, 2 devices), J and K
(mindstudio_profiler_output, Block Num / Block Dim) and L (one op_summary per --aic-metrics value),
plus header variants, slices and truncated/corrupt copies made in a temp dir.

Expected values are recomputed here from the raw files with the csv/json modules."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

import analyzers
from analyzers.parsers import msprof
from analyzers.parsers.msprof.files import classify
from perfbench.errors import ProfileFormatError
from tests.support import fixture_path

F = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler")
F0 = F + ("PROF_000001_20230818142704322_COJGGGCANRMICFBC",)
F1 = F + ("PROF_000001_20230818142704567_GQFAMHBKGODKJMLA",)
J = (
    "hicann__oam-tools",
    "experiment",
    "task-book",
    "msprof_tool_experience_imaginationhh",
    "perf-data",
    "hdspace-32g-outer-17_59186_20260601142437309_ascend_pt",
    "PROF_000001_20260601142437347_00059186NEKMCJOO",
)
K = (
    "hicann__oam-tools",
    "experiment",
    "task-book",
    "msprof_experience_weixin_63089733",
    "perf-data",
    "20260624_matmul_basic_api_board",
    "mindstudio_profiler_output",
)
L_ROOT = ("vllm-project__vllm-ascend", ".tmp_remote_patch")


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _one(d, prefix):
    hits = sorted(d.glob(prefix + "*"))
    assert len(hits) == 1, hits
    return hits[0]


# ---- set F: old timeline JSON, two devices ----------------------------------------------------------


@pytest.fixture(scope="module")
def f_profile():
    # the folder also holds loose legacy files of other runs; the msprof parser only takes the PROF_* jobs
    return msprof.parse(fixture_path(*F))


def test_f_ranks_from_info_json(f_profile):
    assert sorted(f_profile.ranks["rank"]) == [0, 1]
    assert f_profile.meta.get("npu") == "Ascend910"  # info.json platform_version "1"


def test_f_steps_match_iteration_events(f_profile):
    tl = fixture_path(*F1, "device_1", "timeline")
    ev = json.load(open(tl / "step_trace_1_0_7.json"))
    it = {e["args"]["Iteration ID"]: e for e in ev if e.get("cat") == "Iteration Time"}
    st = f_profile.steps[f_profile.steps["rank"] == 1].set_index("step")
    assert sorted(st.index) == sorted(it)
    for k, e in it.items():
        # step k: from the end of iteration k-1 (its gap to iteration k belongs to step k) to the end of k
        start = it[k - 1]["ts"] + it[k - 1]["dur"] if k - 1 in it else e["ts"]
        assert st.loc[k, "start_us"] == pytest.approx(start, abs=0.01)
        assert st.loc[k, "end_us"] == pytest.approx(e["ts"] + e["dur"], abs=0.01)
    ref = f_profile.reference_breakdown
    r = ref[(ref["rank"] == 1) & (ref["step"] == 3)]
    fpbp = next(e for e in ev if e.get("name") == "FP_BP Time 3")
    assert r["fp_bp_us"].iloc[0] == pytest.approx(fpbp["dur"])


def test_f_ops_from_task_time_per_iteration(f_profile):
    tl = fixture_path(*F0, "device_0", "timeline")
    n = 0
    for it in range(1, 11):
        ev = json.load(open(tl / f"task_time_0_2_{it}.json"))
        n_it = sum(1 for e in ev if e.get("ph") == "X")
        got = f_profile.ops[(f_profile.ops["rank"] == 0) & (f_profile.ops["step"] == it)]
        # plus the iteration's collective from hccl_*.json, as a communication kernel
        hccl = json.load(open(tl / f"hccl_0_2_{it}.json"))
        kern = [e for e in hccl if e.get("ph") == "X" and e.get("tid") == 70000]
        assert len(got[got["category"] != "communication"]) == n_it
        comm = got[got["category"] == "communication"]
        assert list(comm["name"]) == [e["name"] for e in kern]
        assert comm["dur_us"].tolist() == pytest.approx([e["dur"] for e in kern])
        n += n_it + len(kern)
    assert (f_profile.ops["rank"] == 0).sum() == n
    assert set(f_profile.ops["core_type"].dropna()) >= {"AI_CORE", "AI_CPU"}


def test_f_hccl_comm_ops_wait_and_links(f_profile):
    ev = json.load(open(fixture_path(*F0, "device_0", "timeline", "hccl_0_2_4.json")))
    op = next(e for e in ev if e.get("tid") == 70000 and e.get("ph") == "X")
    t0, t1 = op["ts"], op["ts"] + op["dur"]
    inside = [e for e in ev if e.get("ph") == "X" and "args" in e and t0 <= e["ts"] <= t1]
    wait = sum(e["dur"] for e in inside if e["tid"] == 0 and e["args"]["task type"] == "Notify_Wait")
    data = [e for e in inside if e["args"]["task type"] in ("Memcpy", "Reduce_Inline") and e["args"]["size(Byte)"] > 0]
    co = f_profile.comm_ops
    row = co[(co["rank"] == 0) & (co["step"] == 4)]
    assert len(row) == 1
    assert row["op_name"].iloc[0] == op["name"]
    assert row["elapse_ms"].iloc[0] == pytest.approx(op["dur"] / 1000)
    assert row["wait_ms"].iloc[0] == pytest.approx(wait / 1000)
    # payload: bytes sent to other ranks; the on-chip copy (link type ON_CHIP, dst rank invalid) stays
    # on the device and is not part of it
    sent = [e for e in data if e["args"]["link type"] != "ON_CHIP" and e["args"]["dst rank"] != 4294967295]
    assert len(sent) < len(data)
    assert row["size_bytes"].iloc[0] == pytest.approx(sum(e["args"]["size(Byte)"] for e in sent))
    assert row["op_type"].iloc[0] == "allreduce"
    # links: per src->dst and link type, bytes and time of the data tasks
    pcie = [e for e in data if e["args"]["link type"] == "PCIE"]
    lk = f_profile.links
    lr = lk[(lk["rank"] == 0) & (lk["step"] == 4) & (lk["transport"] == "PCIE")]
    assert lr["size_mb"].sum() == pytest.approx(sum(e["args"]["size(Byte)"] for e in pcie) / 1e6)
    assert lr["time_ms"].sum() == pytest.approx(sum(e["dur"] for e in pcie) / 1000)
    assert set(lk["transport"]) >= {"HCCS", "PCIE"}


def test_f_one_prof_through_load_profile():
    p = analyzers.load_profile(fixture_path(*F1))
    assert p.source == "msprof" and list(p.ranks["rank"]) == [1]
    assert len(p.comm_ops) == 10 and p.steps["step"].nunique() == 10


# ---- set J: newest CANN, Block Num, trailing TAB in timestamps ------------------------------------------


def test_j_op_summary_trailing_tab_and_block_num():
    d = fixture_path(*J)
    p = msprof.parse(d)
    src = _one(d / "mindstudio_profiler_output", "op_summary_")
    raw = _csv(src)
    assert "Block Num" in raw[0] and raw[0]["Task Start Time(us)"].endswith("\t")
    assert len(p.ops) == len(raw)
    ops = p.ops.reset_index(drop=True)
    for i in (0, len(raw) // 2, len(raw) - 1):
        assert ops.loc[i, "start_us"] == pytest.approx(float(raw[i]["Task Start Time(us)"].strip()))
        assert ops.loc[i, "dur_us"] == pytest.approx(float(raw[i]["Task Duration(us)"]))
        assert ops.loc[i, "block_dim"] == float(raw[i]["Block Num"])
    assert set(ops["type"]) == {r["OP Type"] for r in raw}
    # unknown extra columns are kept
    assert "aic_mac_ratio" in p.ops.columns and "Input Shapes" in p.ops.columns
    assert ops.loc[0, "Input Shapes"] == raw[0]["Input Shapes"].strip('"')
    # op_statistic goes to meta
    stat = p.meta["rank_meta"]["0"]["op_statistic"]
    assert {s["OP Type"] for s in stat} == {
        r["OP Type"] for r in _csv(_one(d / "mindstudio_profiler_output", "op_statistic_"))
    }


# ---- set K: msprof 25.5, Block Dim, N/A cells, uint64 ids in msprof json ------------------------------


def test_k_block_dim_and_na_cells():
    d = fixture_path(*K)
    p = msprof.parse(d)
    raw = _csv(_one(d, "op_summary_"))
    assert "Block Dim" in raw[0] and "N/A" in raw[0].values()
    assert len(p.ops) == 1
    assert p.ops["block_dim"].iloc[0] == float(raw[0]["Block Dim"])
    assert p.ops["dur_us"].iloc[0] == pytest.approx(float(raw[0]["Task Duration(us)"]))
    assert p.ops["category"].iloc[0] == "compute"


def test_k_msprof_json_alone_gives_ops(tmp_path):
    # without op_summary/task_time the Ascend Hardware tasks of msprof_*.json are the ops; this file
    # carries connection_id 18446744073709551615 (uint64), which the C JSON backend cannot hold
    src = _one(fixture_path(*K), "msprof_")
    out = tmp_path / "mindstudio_profiler_output"
    out.mkdir()
    shutil.copy2(src, out / src.name)
    ev = json.load(open(src))
    hw = {
        e["pid"]
        for e in ev
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "Ascend Hardware"
    }
    n = sum(1 for e in ev if e.get("ph") == "X" and e["pid"] in hw)
    p = msprof.parse(out)
    assert len(p.ops) == n > 0
    assert set(p.ops["core_type"]) >= {"AI_CORE"}


# ---- set L: one op_summary per --aic-metrics value -----------------------------------------------------


def _l_dirs():
    root = fixture_path(*L_ROOT)
    return sorted(p for p in root.rglob("mindstudio_profiler_output") if any(p.glob("op_summary_*.csv")))


def test_l_all_metric_variants_parse():
    dirs = _l_dirs()
    assert len(dirs) == 8
    headers = set()
    for d in dirs:
        src = _one(d, "op_summary_")
        raw = _csv(src)
        headers.add(tuple(raw[0]))
        p = msprof.parse(d)
        assert len(p.ops) == len(raw) == 3
        assert list(p.ops["type"]) == [r["OP Type"] for r in raw]
        assert list(p.ops["block_dim"]) == [float(r["Block Num"]) for r in raw]
        for col in raw[0]:
            if col.startswith(("aic_", "aiv_")):
                assert col in p.ops.columns, (src, col)
    assert len(headers) == 8  # really eight different headers


def test_l_memory_rank_from_info_json_minus_one():
    d = [x for x in _l_dirs() if "PROF_Memory" in str(x)][0].parent
    info = json.load(open(_one(d / "device_0", "info.json.0")))
    assert info["rank_id"] == -1
    p = msprof.parse(d)
    assert list(p.ranks["rank"]) == [0] and p.meta.get("npu") == "Ascend910B"


# ---- header variants and broken copies ---------------------------------------------------------------


def _copy_dir(tmp_path, parts):
    src = fixture_path(*parts)
    dst = tmp_path / "mindstudio_profiler_output"
    shutil.copytree(src, dst)
    return dst


def _rewrite_csv(path, fn):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    rows = fn(rows)
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


def test_without_device_id_column(tmp_path):
    d = _copy_dir(tmp_path, K)
    for f in d.glob("*.csv"):
        _rewrite_csv(f, lambda rows: [r[1:] for r in rows] if rows[0][0] == "Device_id" else rows)
    assert "Device_id" not in open(_one(d, "op_summary_")).readline()
    p = msprof.parse(d)
    assert len(p.ops) == 1 and list(p.ranks["rank"]) == [0]


def test_missing_required_column(tmp_path):
    d = _copy_dir(tmp_path, K)
    f = _one(d, "op_summary_")
    _rewrite_csv(f, lambda rows: [["Task Dur" if c == "Task Duration(us)" else c for c in rows[0]]] + rows[1:])
    with pytest.raises(ProfileFormatError) as ei:
        msprof.parse(d)
    assert f.name in str(ei.value) and "Task Duration(us)" in str(ei.value)


def test_truncated_op_summary(tmp_path):
    d = _copy_dir(tmp_path, J[:-1] + (J[-1], "mindstudio_profiler_output"))
    f = _one(d, "op_summary_")
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ProfileFormatError) as ei:
        msprof.parse(d)
    assert f.name in str(ei.value)


@pytest.mark.parametrize("kind", ["hccl_0_2_5.json", "step_trace_0_2_1.json", "task_time_0_2_2.json"])
def test_truncated_timeline_json(tmp_path, kind):
    dev = tmp_path / "device_0"
    shutil.copytree(fixture_path(*F0, "device_0"), dev)
    f = dev / "timeline" / kind
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * 0.7)])
    with pytest.raises(ProfileFormatError) as ei:
        msprof.parse(dev)
    assert kind in str(ei.value)


def test_event_without_duration(tmp_path):
    dev = tmp_path / "device_0"
    shutil.copytree(fixture_path(*F0, "device_0"), dev)
    f = dev / "timeline" / "hccl_0_2_6.json"
    ev = json.load(open(f))
    k = next(i for i, e in enumerate(ev) if e.get("tid") == 70000 and e.get("ph") == "X")
    del ev[k]["dur"]
    f.write_text(json.dumps(ev))
    with pytest.raises(ProfileFormatError) as ei:
        msprof.parse(dev)
    assert "hccl_0_2_6.json" in str(ei.value) and "ts/dur" in str(ei.value)


def test_corrupt_info_json(tmp_path):
    dev = tmp_path / "device_1"
    shutil.copytree(fixture_path(*F1, "device_1"), dev)
    (dev / "info.json.1").write_text('{"rank_id": 1, "DeviceInfo": [')
    with pytest.raises(ProfileFormatError, match="info.json.1"):
        msprof.parse(dev)


def test_slices_are_concatenated(tmp_path):
    d = _copy_dir(tmp_path, J[:-1] + (J[-1], "mindstudio_profiler_output"))
    f = _one(d, "op_summary_")
    rows = list(csv.reader(open(f, newline="")))
    stem = f.stem
    f.unlink()
    half = len(rows) // 2
    for i, part in enumerate([rows[1:half], rows[half:]]):
        with open(d / f"{stem}_slice_{i}.csv", "w", newline="") as fh:
            csv.writer(fh).writerows([rows[0]] + part)
    p = msprof.parse(d)
    assert len(p.ops) == len(rows) - 1
    assert p.ops["start_us"].is_monotonic_increasing


def test_file_name_classification():
    assert classify("op_summary_20260823165421.csv") == ("op_summary", "_20260823165421", 0)
    assert classify("op_summary_0_1_slice_2.csv") == ("op_summary", "_0_1", 2)
    assert classify("msprof_20260601142439.json")[0] == "msprof"
    assert classify("op_statistic_20260601142441.csv")[0] == "op_statistic"
    assert classify("op_summary.json") is None
    assert classify("kernel_details.csv") is None


def test_detect():
    assert msprof.detect(fixture_path(*F0))
    assert msprof.detect(fixture_path(*K))
    assert msprof.detect(fixture_path(*J))
    assert not msprof.detect(fixture_path(*F))  # a folder of jobs: load_profile walks into it
    assert not msprof.detect(fixture_path("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose"))


def test_nothing_there(tmp_path):
    with pytest.raises(ProfileFormatError, match="no msprof output"):
        msprof.parse(tmp_path)


@pytest.mark.parametrize("unit", ["(us)", ""])
def test_step_trace_csv_built_from_real_iterations(tmp_path, unit):
    # No fixture set ships msprof's step_trace_*.csv; write one in the documented layout (CANN
    # "step_trace (iteration trace)": Iteration ID, FP Start, BP End, Iteration End, Iteration Time(us),
    # FP to BP Time(us), Iteration Refresh(us), Data Aug Bound(us), Model ID) from set F's real
    # iteration events, with and without the unit on the timestamp columns and a TAB after timestamps.
    ev = json.load(open(fixture_path(*F0, "device_0", "timeline", "step_trace_0_2_1.json")))
    its = sorted((e for e in ev if e.get("cat") == "Iteration Time"), key=lambda e: e["args"]["Iteration ID"])
    out = tmp_path / "mindstudio_profiler_output"
    out.mkdir()
    with open(out / "step_trace_20230818142800.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "Device_id",
                "Iteration ID",
                f"FP Start{unit}",
                f"BP End{unit}",
                f"Iteration End{unit}",
                "Iteration Time(us)",
                "FP to BP Time(us)",
                "Iteration Refresh(us)",
                "Data Aug Bound(us)",
                "Model ID",
            ]
        )
        for i, e in enumerate(its):
            a = e["args"]
            w.writerow(
                [
                    0,
                    a["Iteration ID"],
                    f"{a['FP Start']}\t",
                    f"{a['BP End']}\t",
                    f"{a['Iteration End']}\t",
                    e["dur"],
                    a["BP End"] - a["FP Start"],
                    a["Iteration End"] - a["BP End"],
                    "N/A" if i == 0 else 0,
                    2,
                ]
            )
    p = msprof.parse(out)
    assert list(p.steps["step"]) == [e["args"]["Iteration ID"] for e in its]
    assert p.steps["end_us"].tolist() == pytest.approx([e["args"]["Iteration End"] for e in its])
    # CANN: Iteration Time = this Iteration End - the previous one (first: its own span); this export wrote
    # the span without the gap, and the window still runs from the previous Iteration End (abs: timestamps
    # are ~5.6e10 us, a relative tolerance would hide the 15-32 ms gaps)
    ends = [e["args"]["Iteration End"] for e in its]
    assert p.steps["start_us"].tolist() == pytest.approx([ends[0] - its[0]["dur"]] + ends[:-1], abs=0.01)
    assert p.reference_breakdown["step_us"].tolist() == pytest.approx(
        [its[0]["dur"]] + [b - a for a, b in zip(ends, ends[1:])], abs=0.01
    )
    ref = p.reference_breakdown
    assert ref["fp_bp_us"].tolist() == pytest.approx([e["args"]["BP End"] - e["args"]["FP Start"] for e in its])
    assert ref["data_aug_bound_us"].isna().tolist() == [True] + [False] * (len(its) - 1)


def test_op_summary_cut_inside_the_header(tmp_path):
    d = _copy_dir(tmp_path, K)
    f = _one(d, "op_summary_")
    f.write_bytes(f.read_bytes()[:600])
    assert b"\n" not in f.read_bytes()
    with pytest.raises(ProfileFormatError, match=f"{f.name}: file ends inside the header"):
        msprof.parse(d)
