"""A cluster import in summary mode (`analyze --detail summary`, the default above 8 ranks): each rank's
memory_record.csv reduced to its peaks while read, the per-rank detail (operator_memory.csv, npu_module_mem.csv, the
timeline) on demand (`show RUN --rank R`), and damaged heavy files that leave the other ranks' numbers unchanged.

Expected peaks are the hand-read maxima of the profiler's files in tests/integration/test_memory.py (TEXT_PEAKS,
HCCL_PEAK, level1 rank0's 43 live allocations of 572989.5 KB); the summary's peaks must be exactly the full import's."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

import analyzers
from tests.integration.test_memory import HCCL_PEAK, MIB, PT, TEXT_PEAKS
from tests.support import fixture_path, perfbench_in_process


def _tables(path, detail: str, kernels: str = "none"):
    p = analyzers.load_profile(path, read_trace=False, kernels=kernels, detail=detail)
    return p, analyzers.analyze(p)


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_summary_peaks_equal_the_files_maxima_and_the_full_import(level):
    path = fixture_path(*PT, "text", level)
    p, a = _tables(path, "summary")
    assert len(p.memory_records) == 0 and len(p.op_memory) == 0  # no records kept
    mem = a.tables["memory"].set_index("rank")
    for r in (0, 1):
        alloc_mb, res_mb, app_mb = TEXT_PEAKS[(level, r)]
        assert mem.loc[r, "allocator"] == "PTA+GE"
        assert mem.loc[r, "peak_allocated_bytes"] == alloc_mb * MIB
        assert mem.loc[r, "peak_reserved_bytes"] == res_mb * MIB
        assert mem.loc[r, "peak_bytes"] == app_mb * MIB
    # the peaks only: the allocations live at the peak and the module peaks are the rank's detail, read on demand
    assert "memory_timeline" not in a.tables and "memory_live" not in a.tables and "memory_modules" not in a.tables
    assert mem["live_allocations"].isna().all() and mem["live_bytes"].isna().all()  # unknown until asked, not 0
    assert "operator_memory.csv" not in p.ranks["inputs"].iloc[0]  # not read at import
    _, full = _tables(path, "all")
    peaks = [c for c in a.tables["memory"].columns if c not in ("live_allocations", "live_bytes")]
    pd.testing.assert_frame_equal(a.tables["memory"][peaks], full.tables["memory"][peaks], check_exact=True)
    assert a.summary["peak_memory_bytes"] == full.summary["peak_memory_bytes"]
    mods = full.tables["memory_modules"]
    assert mods[(mods["rank"] == 0) & (mods["module"] == "HCCL")]["peak_bytes"].iloc[0] == HCCL_PEAK


def test_show_rank_computes_the_detail_once_and_caches_it(tmp_path):
    res = tmp_path / "results"
    path = str(fixture_path(*PT, "text", "level1"))
    perfbench_in_process("analyze", path, "--results", str(res), "--run-id", "sum1", "--detail", "summary")
    first = perfbench_in_process("show", "sum1", "--results", str(res), "--rank", "0").stdout
    assert "allocations live at the peak: 43" in first  # operator_memory.csv, hand count in test_memory.py
    assert "what holds the peak" in first
    from perfbench.store import Store

    store = Store(res, create=False)
    names = store.table_names("sum1")
    assert "detail_rank0_memory_timeline" in names and "detail_rank0_memory_live" in names
    # the detail (the memory analysis alone, on that rank's files) is the full import's, rank 0's rows
    _, full = _tables(path, "all")
    for t in ("memory_timeline", "memory_live", "memory_attribution"):
        want = full.tables[t][full.tables[t]["rank"] == 0].reset_index(drop=True)
        got = store.read_table("sum1", f"detail_rank0_{t}").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
    again = perfbench_in_process("show", "sum1", "--results", str(res), "--rank", "0").stdout
    assert again == first
    out = perfbench_in_process("show", "sum1", "--results", str(res), "--rank", "5", check=False)
    assert out.returncode != 0 and "no rank 5" in (out.stderr + out.stdout)


def test_a_damaged_cached_detail_is_named_and_computed_again_and_a_damaged_table_is_an_error(tmp_path):
    res = tmp_path / "results"
    path = str(fixture_path(*PT, "text", "level1"))
    perfbench_in_process("analyze", path, "--results", str(res), "--run-id", "sum2", "--detail", "summary")
    first = perfbench_in_process("show", "sum2", "--results", str(res), "--rank", "0").stdout
    live = res / "runs" / "sum2" / "tables" / "detail_rank0_memory_live.parquet"
    good = live.read_bytes()
    for args in ((), ("--json",)):
        live.write_bytes(good[:300])  # truncated: no Parquet footer
        out = perfbench_in_process("show", "sum2", "--results", str(res), "--rank", "0", *args)
        assert "Traceback" not in out.stderr and str(live) in out.stderr and "computed again" in out.stderr
        if not args:
            assert out.stdout == first
        assert live.read_bytes()[-4:] == b"PAR1"  # the cache rewritten whole
    assert perfbench_in_process("show", "sum2", "--results", str(res), "--rank", "0").stdout == first
    # a table the run view reads, damaged: one line naming the file, exit 2, nothing else touched
    steps = res / "runs" / "sum2" / "tables" / "step_metrics.parquet"
    steps.write_bytes(steps.read_bytes()[:100])
    before = sorted((p.name, p.stat().st_size) for p in steps.parent.iterdir())
    out = perfbench_in_process("show", "sum2", "--results", str(res), check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(steps) in out.stderr and "damaged table" in out.stderr
    assert sorted((p.name, p.stat().st_size) for p in steps.parent.iterdir()) == before


@pytest.mark.parametrize(
    "damage",
    [
        ("memory_record.csv", lambda b: b[: len(b) // 2].rsplit(b",", 2)[0]),  # truncated inside a row
        ("operator_memory.csv", lambda b: b[:200] + b"\x00\xff garbage \x07" * 50),  # garbage
        ("kernel_details.csv", lambda b: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40),  # not a CSV at all
    ],
    ids=["truncated-memory-record", "garbage-operator-memory", "garbage-kernel-details"],
)
def test_damaged_heavy_file_names_itself_and_leaves_other_ranks_unchanged(tmp_path, damage):
    name, spoil = damage
    src = fixture_path(*PT, "text", "level1")
    dst = tmp_path / "level1"
    shutil.copytree(src, dst)
    f = dst / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / name
    f.chmod(0o644)
    f.write_bytes(spoil(f.read_bytes()))
    # operator_memory.csv is the rank's detail: a summary import does not read it, the full import names it
    detail = "all" if name == "operator_memory.csv" else "summary"
    _, before = _tables(src, detail, kernels="all")
    p, after = _tables(dst, detail, kernels="all")
    assert any(str(f) in w for w in p.warnings), p.warnings
    for t, key in (("memory", ["rank"]), ("step_breakdown", ["rank", "step"]), ("rank_breakdown", ["rank"])):
        b = before.tables[t][before.tables[t]["rank"] == 0].reset_index(drop=True)
        x = after.tables[t][after.tables[t]["rank"] == 0].reset_index(drop=True)
        # rank 0's numbers do not change (a column may turn float where rank 1 became null)
        pd.testing.assert_frame_equal(b, x, check_exact=True, check_dtype=False)
    assert set(after.tables["step_breakdown"]["rank"]) == {0, 1}  # the damaged rank is still analyzed
