"""Ascend text-export parser on the real fixture sets B (torch_npu levels 0/1/2), J (multi-step) and E
(kernel_details header variants), plus corrupt/truncated copies made in a temp dir."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

import analyzers
from analyzers.parsers.ascend.text import parse_text_rank, read_kernel_details
from perfbench.errors import UserError
from tests.support import fixture_path

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
E = ("Ascend__msprof-analyze", "test")


def b_rank(level: str, r: int):
    return fixture_path(*B, level, f"rank{r}_ascend_pt")


def j_dir():
    base = fixture_path("hicann__oam-tools")
    hits = [p for p in base.rglob("*_ascend_pt") if p.is_dir()]
    assert hits, "set J missing"
    return hits[0]


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_set_b_all_levels_parse_two_ranks(level):
    p = analyzers.load_profile(fixture_path(*B, level))
    assert sorted(p.ranks["rank"]) == [0, 1]
    raw = pd.read_csv(b_rank(level, 0) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert (p.ops["rank"] == 0).sum() == len(raw)
    assert set(p.steps["step"]) == {50}
    # HCCL kernels become communication ops even at level0 where Type/Accelerator Core are N/A
    comm = p.ops[(p.ops["rank"] == 0) & (p.ops["category"] == "communication")]
    assert len(comm) == raw["Name"].str.startswith("hcom_").sum() > 0


def test_level0_has_no_communication_json_but_comm_ops_from_kernels():
    p = parse_text_rank(b_rank("level0", 0))
    assert not (b_rank("level0", 0) / "ASCEND_PROFILER_OUTPUT" / "communication.json").exists()
    assert p.meta["comm_source"].startswith("kernel_details")
    assert len(p.comm_ops) == 4 and p.comm_ops["transit_ms"].isna().all()
    raw = pd.read_csv(b_rank("level0", 0) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    hc = raw[raw["Name"].str.startswith("hcom_")]
    assert np.allclose(sorted(p.comm_ops["elapse_ms"]), sorted(hc["Duration(us)"] / 1000))
    assert len(p.comm_bandwidth) == 0 and len(p.links) == 0


@pytest.mark.parametrize("level,r", [("level1", 0), ("level1", 1), ("level2", 0), ("level2", 1)])
def test_comm_ops_and_bandwidth_match_communication_json(level, r):
    p = parse_text_rank(b_rank(level, r))
    raw = json.loads((b_rank(level, r) / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    n = 0
    for step_key, kinds in raw.items():
        for kind, ops in kinds.items():
            for key, op in ops.items():
                if key == "Total Op Info":
                    continue
                name, group = key.split("@")
                row = p.comm_ops[(p.comm_ops["op_name"] == name) & (p.comm_ops["group"] == group)]
                assert len(row) == 1, key
                t = op["Communication Time Info"]
                for col, k in [
                    ("elapse_ms", "Elapse Time(ms)"),
                    ("transit_ms", "Transit Time(ms)"),
                    ("wait_ms", "Wait Time(ms)"),
                    ("synchronization_ms", "Synchronization Time(ms)"),
                    ("idle_ms", "Idle Time(ms)"),
                ]:
                    assert row[col].iloc[0] == pytest.approx(t[k], rel=1e-9, abs=1e-12)
                for tr, b in op["Communication Bandwidth Info"].items():
                    bw = p.comm_bandwidth[(p.comm_bandwidth["op_name"] == name) & (p.comm_bandwidth["transport"] == tr)]
                    if b["Transit Size(MB)"] == 0 and b["Transit Time(ms)"] == 0:
                        assert len(bw) == 0
                    else:
                        assert bw["bandwidth_gbps"].iloc[0] == pytest.approx(b["Bandwidth(GB/s)"])
                        assert bw["size_mb"].iloc[0] == pytest.approx(b["Transit Size(MB)"])
                n += 1
    assert n == len(p.comm_ops) > 0


def test_collective_sizes_from_trace_view():
    p = parse_text_rank(b_rank("level1", 0))
    # hcom_allReduce__586_0_1: count 4097000 FP32 in the HCCL trace event args
    row = p.comm_ops[p.comm_ops["op_name"] == "hcom_allReduce__586_0_1"]
    assert row["size_bytes"].iloc[0] == 4097000 * 4


def test_matrix_links():
    p = parse_text_rank(b_rank("level1", 0))
    raw = json.loads((b_rank("level1", 0) / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").read_text())
    n = sum(
        len(links)
        for kinds in raw.values()
        for ops in kinds.values()
        for k, links in ops.items()
        if k != "Total Op Info"
    )
    assert len(p.links) == n
    l01 = p.links[(p.links["op_name"] == "allreduce-top1") & (p.links["src"] == 0) & (p.links["dst"] == 1)]
    assert l01["transport"].iloc[0] == "HCCS" and l01["bandwidth_gbps"].iloc[0] == pytest.approx(17.5452)


def test_set_j_multi_step_single_rank_with_device_id_column():
    p = analyzers.load_profile(j_dir())
    assert list(p.ranks["rank"]) == [0]
    ref = pd.read_csv(j_dir() / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    assert sorted(p.steps["step"]) == sorted(ref["Step"]) and len(ref) == 5
    assert p.ranks["device"].iloc[0] == "0"


@pytest.mark.parametrize(
    "rel,rows",
    [
        ("ut/advisor/advisor_backend/compute_advice/kernel_details.csv", 591),
        ("ut/advisor/compute_advice/data/kernel_details.csv", None),
        ("resource/test.csv", None),
    ],
)
def test_kernel_details_header_variants(rel, rows):
    path = fixture_path(*E, *rel.split("/"))
    raw = pd.read_csv(path)
    k = read_kernel_details(path)
    assert len(k) == len(raw) and (rows is None or len(k) == rows)
    assert k["start_us"].notna().all() and k["dur_us"].notna().all()
    assert np.allclose(k["dur_us"].to_numpy(), raw["Duration(us)"].astype(float).to_numpy())
    # start times with a trailing TAB (inside quotes in one file) are numbers, at epoch scale
    assert (k["start_us"] > 1.6e15).all()
    # unknown extra columns are kept under their own header
    extras = [c for c in raw.columns if c.startswith(("aic_", "aiv_"))]
    assert all(c in k.columns for c in extras)


def test_kernel_details_hccl_rows_in_variant():
    k = read_kernel_details(
        fixture_path(*E, "ut", "advisor", "advisor_backend", "compute_advice", "kernel_details.csv")
    )
    raw = pd.read_csv(fixture_path(*E, "ut", "advisor", "advisor_backend", "compute_advice", "kernel_details.csv"))
    assert (k["category"] == "communication").sum() == (raw["Accelerator Core"] == "HCCL").sum() > 0


# ---- bad input: clear errors naming the file, never a traceback --------------------------------


def _copy_rank(tmp_path, level="level1", r=0):
    dst = tmp_path / f"rank{r}_ascend_pt"
    shutil.copytree(b_rank(level, r), dst)
    return dst


def test_missing_required_column_names_file_and_column(tmp_path):
    d = _copy_rank(tmp_path)
    kd = d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    df = pd.read_csv(kd, dtype=str)
    df.drop(columns=["Duration(us)"]).to_csv(kd, index=False)
    with pytest.raises(UserError) as ei:
        analyzers.load_profile(d, strict=True)
    assert "kernel_details.csv" in str(ei.value) and "Duration(us)" in str(ei.value)
    p = analyzers.load_profile(d)  # without strict: the rank keeps its step trace and communication
    assert any("kernel_details.csv" in w and "Duration(us)" in w for w in p.warnings)
    assert "kernel_details.csv" not in p.ranks["inputs"].iloc[0] and "step_trace_time.csv" in p.ranks["inputs"].iloc[0]


def test_truncated_kernel_details(tmp_path):
    d = _copy_rank(tmp_path)
    kd = d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    data = kd.read_bytes()
    kd.write_bytes(data[: len(data) // 2])  # cut mid-row
    with pytest.raises(UserError) as ei:
        analyzers.load_profile(d, strict=True)
    assert "kernel_details.csv" in str(ei.value)


@pytest.mark.parametrize("name", ["communication.json", "communication_matrix.json", "trace_view.json"])
def test_truncated_json_files(tmp_path, name):
    d = _copy_rank(tmp_path)
    f = d / "ASCEND_PROFILER_OUTPUT" / name
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * 0.7)])
    with pytest.raises(UserError) as ei:
        analyzers.load_profile(d, strict=True)
    assert name in str(ei.value)
    assert "truncated" in str(ei.value) or "corrupt" in str(ei.value)
    p = analyzers.load_profile(d)
    assert len(p.warnings) == 1 and name in p.warnings[0] and name not in p.ranks["inputs"].iloc[0]


def test_wrong_json_shape(tmp_path):
    d = _copy_rank(tmp_path)
    (d / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text("[1, 2, 3]")
    with pytest.raises(UserError, match="communication.json"):
        analyzers.load_profile(d, strict=True)


def test_empty_and_non_numeric_step_trace(tmp_path):
    d = _copy_rank(tmp_path)
    st = d / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_text("")
    with pytest.raises(UserError, match="step_trace_time.csv.*empty"):
        analyzers.load_profile(d, strict=True)
    st.write_text("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free\n50,abc,1,1,1,1\n")
    with pytest.raises(UserError, match="step_trace_time.csv.*Computing.*not a number"):
        analyzers.load_profile(d, strict=True)


def test_no_profile_found(tmp_path):
    from perfbench.errors import UserError

    with pytest.raises(UserError, match="no profiler output found"):
        analyzers.load_profile(tmp_path)


def test_duplicate_ranks_are_a_clear_error():
    from perfbench.errors import UserError

    with pytest.raises(UserError, match="rank 0 found twice"):
        analyzers.load_profile(fixture_path(*B))


def test_parallel_and_serial_loading_agree():
    a = analyzers.load_profile(fixture_path(*B, "level2"), workers=1)
    b = analyzers.load_profile(fixture_path(*B, "level2"), workers=2)
    for name in ("ranks", "steps", "ops", "comm_ops", "comm_bandwidth", "links"):
        x = getattr(a, name).sort_values(list(getattr(a, name).columns[:3])).reset_index(drop=True)
        y = getattr(b, name).sort_values(list(getattr(b, name).columns[:3])).reset_index(drop=True)
        pd.testing.assert_frame_equal(x, y, check_dtype=False)


def test_register_format_claims_folders_first(tmp_path):
    from analyzers.parsers import formats as F
    from analyzers.parsers import load as L
    from analyzers.schema import Profile

    (tmp_path / "a" / "marker").mkdir(parents=True)
    calls = []

    def parse(d, **kw):
        calls.append(d)
        return Profile(source="marker", path=str(d), ranks=pd.DataFrame({"rank": [7]}))

    saved = list(F.formats())
    try:
        F.register(F.Format("marker", lambda d: (d / "marker").is_dir(), parse), before="ascend-db")
        assert L.find_units(tmp_path) == [("marker", tmp_path / "a")]
        p = L.load_profile(tmp_path, workers=1)
        assert list(p.ranks["rank"]) == [7] and calls == [tmp_path / "a"]
    finally:
        F.REGISTERED[:] = saved


def test_large_cluster_reads_kernels_of_a_sample(tmp_path):
    """kernels="auto": above 2 ranks, the first and the last have their kernels read (the cross-check);
    the others are read from their step trace and communication files only, and say so in `inputs`."""
    import json

    src = fixture_path(*B, "level1")
    for r in range(6):
        d = tmp_path / "c" / f"rank{r}_ascend_pt"
        shutil.copytree(src / f"rank{r % 2}_ascend_pt", d, ignore=shutil.ignore_patterns("profiler_info_*.json"))
        info = json.loads((src / f"rank{r % 2}_ascend_pt" / f"profiler_info_{r % 2}.json").read_text())
        info["rank_id"] = r
        (d / f"profiler_info_{r}.json").write_text(json.dumps(info))
    p = analyzers.load_profile(tmp_path / "c")
    assert p.warnings == [] and len(p.ranks) == 6
    full = {int(r) for r, i in zip(p.ranks["rank"], p.ranks["inputs"]) if "kernel_details.csv" in i}
    assert full == {0, 5}
    assert set(p.ops["rank"].unique()) == full
    assert sorted(p.reference_breakdown["rank"]) == list(range(6)) and len(p.comm_ops) == 6 * 4
    everything = analyzers.load_profile(tmp_path / "c", kernels="all")
    assert set(everything.ops["rank"].unique()) == set(range(6))
