"""Memory per rank: peaks parsed from every format equal the profiler's own files, the allocations
live at the peak, null for ranks without memory data, a damaged memory file names itself and leaves the rest
of the rank analyzed, and the run-level catalogue metrics.

Every expected number below was read by hand from the fixture file named next to it (awk / sqlite3 over the
file, not perfbench): MB in the text export are MiB (x 1048576), KB are KiB (x 1024), the .db is in bytes."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

import analyzers
from analyzers.parsers.cpu.parser import read_memory_record
from analyzers.analyses.memory import capacity_headroom, live_at
from perfbench.errors import ProfileFormatError
from tests.support import fixture_path, perfbench_in_process, run_perfbench

MIB = 1048576
PT = ("Ascend__msinsight", "test", "data", "pytorch")

# text export, memory_record.csv: max "Total Allocated(MB)" / "Total Reserved(MB)" over the PTA+GE rows, max
# "Total Reserved(MB)" over the APP rows (the process on the device), per level and rank
TEXT_PEAKS = {
    # level0 rank0: PTA+GE row at file line 930 (1188.1064453125 MB allocated); reserved 1526.75 on every
    # PTA+GE row; APP line 9 2109.6015625. rank1 has the same values (lines 930 and 9).
    ("level0", 0): (1188.1064453125, 1526.75, 2109.6015625),
    ("level0", 1): (1188.1064453125, 1526.75, 2109.6015625),
    # level1 rank0: PTA+GE lines 905 and 907 at 1261.04296875; APP line 15 2113.73046875
    ("level1", 0): (1261.04296875, 1526.75, 2113.73046875),
    # level1 rank1: PTA+GE line 907 1261.04296875; APP line 15 2113.734375
    ("level1", 1): (1261.04296875, 1526.75, 2113.734375),
    # level2 rank0: line 906 1261.04296875, APP line 9 2113.73046875; rank1: line 913, APP line 15 2113.7265625
    ("level2", 0): (1261.04296875, 1526.75, 2113.73046875),
    ("level2", 1): (1261.04296875, 1526.75, 2113.7265625),
}

# db export, ascend_pytorch_profiler_N.db: SELECT max(totalAllocated), max(totalReserved) FROM MEMORY_RECORD for the
# PTA+GE component (sqlite3 on a temp copy; MEMORY_RECORD rowid of the allocated maximum in the comment). The db
# has no APP rows: the process peak is unknown there (null).
DB_PEAKS = {
    ("level0", 0): (1245819904, 1600913408),  # rowid 904
    ("level0", 1): (1245819904, 1600913408),  # rowid 904
    ("level1", 0): (1263251456, 1600913408),  # rowid 782
    ("level1", 1): (1322295296, 1600913408),  # rowid 882
    ("level2", 0): (1322299392, 1600913408),  # rowid 890
    ("level2", 1): (1322299392, 1600913408),  # rowid 890
}
# npu_module_mem.csv level1 rank0 line 57: HCCL 404.0625 MB; NPU_MODULE_MEM max(totalReserved) for HCCL: 423690240
HCCL_PEAK = 423690240


def _memory(path, full: bool = False):
    """Profile, analysis and memory table; memory needs neither kernels nor trace_view.json (faster) unless `full`."""
    if not full and path in _CACHE:
        return _CACHE[path]
    p = analyzers.load_profile(path) if full else analyzers.load_profile(path, read_trace=False, kernels="none")
    a = analyzers.analyze(p)
    out = p, a, a.tables["memory"].set_index("rank")
    if not full:
        _CACHE[path] = out
    return out


_CACHE: dict = {}


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_text_peaks_equal_the_files_maxima(level):
    _, a, mem = _memory(fixture_path(*PT, "text", level))
    for r in (0, 1):
        alloc_mb, res_mb, app_mb = TEXT_PEAKS[(level, r)]
        assert mem.loc[r, "allocator"] == "PTA+GE"
        assert mem.loc[r, "peak_allocated_bytes"] == alloc_mb * MIB
        assert mem.loc[r, "peak_reserved_bytes"] == res_mb * MIB
        assert mem.loc[r, "peak_process_bytes"] == app_mb * MIB
        assert mem.loc[r, "peak_bytes"] == app_mb * MIB
    assert a.summary["peak_memory_bytes"] == max(TEXT_PEAKS[(level, r)][2] for r in (0, 1)) * MIB
    mods = a.tables["memory_modules"]
    assert mods[(mods["rank"] == 0) & (mods["module"] == "HCCL")]["peak_bytes"].iloc[0] == HCCL_PEAK


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_db_peaks_equal_the_tables_maxima(level):
    _, a, mem = _memory(fixture_path(*PT, "db", level))
    for r in (0, 1):
        alloc, res = DB_PEAKS[(level, r)]
        assert mem.loc[r, "peak_allocated_bytes"] == alloc
        assert mem.loc[r, "peak_reserved_bytes"] == res
        assert mem.loc[r, "peak_process_bytes"] is None or pd.isna(mem.loc[r, "peak_process_bytes"])
    mods = a.tables["memory_modules"]
    assert mods[(mods["rank"] == 1) & (mods["module"] == "HCCL")]["peak_bytes"].iloc[0] == HCCL_PEAK


def test_allocations_live_at_the_peak():
    # level1 rank0: the allocator first reaches its peak at memory_record.csv line 905 (t = 1736408883743396.450 us).
    # operator_memory.csv rows allocated at or before t and released after t (or never): 43 rows, 572989.5 KB
    # (awk over the file); the largest are aten::mm 147456.5 KB (line 67, never released) and
    # cann::trans_TransData_24 50240.0 KB (line 180, released at 1736408883743412.920, the second peak row).
    _, a, mem = _memory(fixture_path(*PT, "text", "level1"))
    assert mem.loc[0, "live_allocations"] == 43
    assert mem.loc[0, "live_bytes"] == 572989.5 * 1024
    live = a.tables["memory_live"]
    live0 = live[live["rank"] == 0]
    assert live0.iloc[0]["name"] == "aten::mm" and live0.iloc[0]["size_bytes"] == 147456.5 * 1024
    assert pd.isna(live0.iloc[0]["release_us"])
    assert (live0["name"] == "cann::trans_TransData_24").sum() == 1
    assert live0[live0["name"] == "cann::trans_TransData_24"]["size_bytes"].iloc[0] == 50240.0 * 1024


def test_live_at_is_inclusive_of_the_allocation_and_exclusive_of_the_release():
    om = pd.DataFrame(
        {
            "rank": 0,
            "name": ["a", "b", "c", "d"],
            "size_bytes": [1.0, 2.0, 4.0, 8.0],
            "alloc_us": [10.0, 5.0, 5.0, 11.0],
            "release_us": [None, 10.0, 12.0, None],
        }
    )
    assert sorted(live_at(om, 10.0)["name"]) == ["a", "c"]


def test_live_at_breaks_size_ties_by_allocation_time_then_name():
    # equal sizes: the earlier allocation first, then the name; never the input order or the sort algorithm's
    om = pd.DataFrame(
        {
            "rank": 0,
            "name": ["z_late", "b_same_time", "big", "a_same_time", "small"],
            "size_bytes": [8.0, 8.0, 16.0, 8.0, 1.0],
            "alloc_us": [7.0, 3.0, 9.0, 3.0, 1.0],
            "release_us": [None] * 5,
        }
    )
    assert list(live_at(om, 10.0)["name"]) == ["big", "a_same_time", "b_same_time", "z_late", "small"]
    assert list(live_at(om.iloc[::-1], 10.0)["name"]) == ["big", "a_same_time", "b_same_time", "z_late", "small"]


def test_attribution_shares_of_the_peak():
    _, a, _ = _memory(fixture_path(*PT, "text", "level1"))
    at = a.tables["memory_attribution"]
    r0 = at[at["rank"] == 0].set_index("part")
    # fragmentation = reserved - allocated at the peak: (1526.75 - 1261.04296875) MB
    assert r0.loc["fragmentation", "bytes"] == (1526.75 - 1261.04296875) * MIB
    assert r0.loc["activations", "bytes"] == 572989.5 * 1024  # the live allocations above (no hcom names)
    # allocated before the window and live at the peak = peak allocated - live window allocations
    assert r0.loc["model_states", "bytes"] == 1261.04296875 * MIB - 572989.5 * 1024
    assert r0.loc["communication_buffers", "bytes"] == HCCL_PEAK
    assert r0["bytes"].sum() == pytest.approx(2113.73046875 * MIB)  # the parts add up to the process peak
    assert r0["share"].sum() == pytest.approx(1.0)


def test_rank_without_memory_files_is_null_not_zero(tmp_path):
    src = fixture_path(*PT, "text", "level1")
    dst = tmp_path / "level1"
    shutil.copytree(src, dst)
    for f in ("memory_record.csv", "operator_memory.csv", "npu_module_mem.csv"):
        (dst / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f).unlink()
    _, a, mem = _memory(dst)
    assert mem.loc[0, "peak_allocated_bytes"] == 1261.04296875 * MIB
    for col in ("peak_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "peak_process_bytes"):
        assert mem.loc[1, col] is None or pd.isna(mem.loc[1, col]), col
    doc = json.loads(perfbench_in_process("analyze", dst, "--json", "--no-store").stdout)
    by = {r["rank"]: r for r in doc["ranks"]}
    assert by[1]["peak_allocated_bytes"] is None and by[1]["live_at_peak"] is None
    assert by[0]["peak_allocated_bytes"] == 1261.04296875 * MIB
    assert {m["rank"] for m in doc["memory"]} == {0, 1}


def test_truncated_memory_record_names_the_file_and_nulls_only_that_ranks_memory(tmp_path):
    src = fixture_path(*PT, "text", "level1")
    dst = tmp_path / "level1"
    shutil.copytree(src, dst)
    f = dst / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2].rsplit(b",", 2)[0])  # cut inside a row
    p, a, mem = _memory(dst)
    warn = [w for w in p.warnings if "memory_record.csv" in w]
    assert warn and str(f) in warn[0] and "truncated" in warn[0] and "memory is unknown" in warn[0]
    assert pd.isna(mem.loc[0, "peak_allocated_bytes"]) and pd.isna(mem.loc[0, "peak_process_bytes"])
    assert mem.loc[1, "peak_allocated_bytes"] == 1261.04296875 * MIB  # the other rank is untouched
    bd = a.tables["step_breakdown"]
    assert set(bd["rank"]) == {0, 1}  # the rest of rank 0 is analyzed
    out = perfbench_in_process("analyze", dst, "--no-store", "--trace", "never", "--kernels", "none")
    assert "memory_record.csv" in out.stderr and out.returncode == 0


def test_corrupt_db_memory_table_is_a_warning(tmp_path):
    import sqlite3

    src = fixture_path(*PT, "db", "level1")
    dst = tmp_path / "level1"
    shutil.copytree(src, dst)
    db = next((dst / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db"))
    con = sqlite3.connect(db)
    con.execute("DROP TABLE MEMORY_RECORD")
    con.execute("CREATE TABLE MEMORY_RECORD (junk INTEGER)")
    con.commit()
    con.close()
    p, a, mem = _memory(dst, full=True)
    assert any(str(db) in w and "memory tables not readable" in w for w in p.warnings)
    assert pd.isna(mem.loc[0, "peak_allocated_bytes"])
    assert mem.loc[1, "peak_allocated_bytes"] == DB_PEAKS[("level1", 1)][0]
    assert len(a.tables["kernels"])  # rank 0's kernels are still read


CPU_RECORD = """Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte),Total Active(Byte)
1795574058967545941,254976,1073741824,254976
1795574058983438635,8488960,1073741824,8488960
1795574059883340538,134144,1073741824,134144
"""


def test_cpu_memory_record(tmp_path):
    # the format MindSpore 2.10's CPU profiler writes with profile_memory=True (first rows of a real
    # FRAMEWORK/cpu_ms_memory_record_0.txt; the middle row is that file's maximum)
    f = tmp_path / "cpu_ms_memory_record_0.txt"
    f.write_text(CPU_RECORD)
    df = read_memory_record(f, 0)
    assert df["allocated_bytes"].max() == 8488960 and df["reserved_bytes"].max() == 1073741824
    assert df["ts_us"].iloc[1] == pytest.approx(1795574058983438.635)
    f.write_text(CPU_RECORD[:-25])
    with pytest.raises(ProfileFormatError, match="truncated"):
        read_memory_record(f, 0)


def test_headroom_sums_ranks_that_share_a_host():
    rows = [
        {"rank": 0, "device": "cpu", "peak_bytes": 2.0, "capacity_bytes": 10.0},
        {"rank": 1, "device": "cpu", "peak_bytes": 3.0, "capacity_bytes": 10.0},
        {"rank": 2, "device": "NPU:0", "peak_bytes": 6.0, "capacity_bytes": 10.0},
    ]
    assert capacity_headroom(rows, {0: "a", 1: "a"}) == pytest.approx(0.4)  # device rank 2: 1 - 6/10
    assert capacity_headroom(rows[:2], {0: "a", 1: "b"}) == pytest.approx(0.7)  # 1 - 3/10
    assert capacity_headroom([{"rank": 0, "device": "cpu", "peak_bytes": 2.0, "capacity_bytes": None}], {}) is None


@pytest.mark.msrun
def test_every_sweep_run_records_its_memory(sweep_store):
    """The session's real sweep (ResNet-50, 1 and 2 ranks): each rank's step records carry the OS's memory
    samples, the meta its peak and the machine's memory, and the run's catalogue metrics follow from them."""
    from perfbench.store import Store

    mem_total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    store = Store(sweep_store, create=False)
    rows = json.loads(run_perfbench("ls", "--results", sweep_store, "--json").stdout)
    for row in rows:
        rid = row["run_id"]
        ws = store.read_table(rid, "workload_steps")
        assert ws["max_rss_bytes"].min() > 100 * MIB and ws["rss_bytes"].min() > 100 * MIB  # MindSpore alone is ~400 MB
        per_rank = ws.assign(p=ws[["max_rss_bytes", "rss_bytes"]].max(axis=1)).groupby("rank")["p"].max()
        assert row["peak_memory_bytes"] == per_rank.max()
        # both ranks run on this machine: they share its memory
        assert row["memory_headroom"] == pytest.approx(1 - per_rank.sum() / mem_total)
        for f in (store.artifacts_dir(rid) / "metrics").glob("rank*.meta.json"):
            meta = json.loads(f.read_text())
            assert meta["machine_memory_bytes"] == mem_total
            assert meta["peak_rss_bytes"] == per_rank[meta["rank"]]
            assert meta["framework_peak_allocated_bytes"] is None  # MindSpore's CPU API returns 0: unknown
            assert 100 * MIB < meta["baseline_rss_bytes"] < meta["peak_rss_bytes"]
    out = run_perfbench("show", rows[0]["run_id"], "--results", sweep_store).stdout
    assert "What holds the peak" in out and "peak mem" in out


def test_run_page_and_show_say_what_holds_the_peak(tmp_path):
    res = tmp_path / "results"
    perfbench_in_process("analyze", str(fixture_path(*PT, "text", "level1")), "--results", str(res), "--run-id", "mem1")
    out = perfbench_in_process("show", "mem1", "--results", str(res)).stdout
    assert "What holds the peak (rank 1, the largest)" in out  # rank 1's APP peak 2113.734375 MB > rank 0's
    assert "fragmentation" in out and "communication_buffers" in out
    from dashboards import data
    from dashboards.pages import run

    data.configure(res)
    mem = data.get().table("mem1", "memory")
    text = str(run.memory_section("mem1", mem))
    assert "What holds the peak (rank 1, the largest)" in text and "run-memory-timeline" in text
    fig = run.memory_figure(data.get().table("mem1", "memory_timeline"), mem)
    peaks = [t for t in fig.data if t.name.endswith("PTA+GE peak")]
    assert len(peaks) == 2 and peaks[0].y[0] == pytest.approx(1261.04296875)  # MiB, memory_record.csv line 905


def test_headroom_against_the_hardware_profiles_device_memory():
    # ascend910.yaml: device_memory_bytes 34359738368 (32 GiB HBM); the largest rank's peak: rank 1's APP
    # 2113.734375 MB (level1 memory_record.csv line 15)
    doc = json.loads(
        perfbench_in_process(
            "analyze",
            fixture_path(*PT, "text", "level1"),
            "--json",
            "--no-store",
            "--hardware",
            "ascend910",
            "--trace",
            "never",
            "--kernels",
            "none",
        ).stdout
    )
    assert doc["summary"]["memory_headroom"] == pytest.approx(1 - 2113.734375 * MIB / 34359738368)
    doc = json.loads(
        perfbench_in_process(
            "analyze",
            fixture_path(*PT, "text", "level1"),
            "--json",
            "--no-store",
            "--trace",
            "never",
            "--kernels",
            "none",
        ).stdout
    )
    assert doc["summary"].get("memory_headroom") is None
