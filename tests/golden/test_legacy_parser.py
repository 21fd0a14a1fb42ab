"""Legacy MindSpore 1.x `profiler/` parser on the real fixture sets G (4-rank pipeline cluster),
H (single-device runs) and I (MindSpore UT data), plus truncated/corrupt copies made in a temp dir.

Expected values are recomputed here from the raw files with the csv/json modules, never copied from
the parser's own output."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

import analyzers
from analyzers.parsers import legacy
from analyzers.parsers.legacy import parse
from perfbench.errors import ProfileFormatError
from tests.support import fixture_path
from tests.support.golden import copy_loose_files

G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")
H = ("mindspore-ai__mindinsight", "tests", "utils", "resource")
I_ = ("mindspore-ai__mindspore_test", "tests", "ut", "data", "profiler_data", "profiler")


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---- set G: 4 ranks, 2 pipeline stages ----------------------------------------------------------


@pytest.fixture(scope="module")
def g_profile():
    return parse(fixture_path(*G))


def test_g_ranks_and_stages_from_file_names(g_profile):
    p = g_profile
    assert sorted(p.ranks["rank"]) == [0, 1, 2, 3]
    # ascend_cluster_analyse_pipeline-parallel_<stages>_<ranks>_<rank>.csv: 2 stages of 4 ranks
    stage = dict(zip(p.ranks["rank"], p.ranks["stage"]))
    assert stage == {0: 0, 1: 0, 2: 1, 3: 1}
    assert set(p.ranks["world_size"]) == {4}
    assert p.source == "mindspore-legacy"


def test_g_steps_drop_average_row_and_convert_ticks(g_profile):
    raw = _rows(fixture_path(*G, "step_trace_raw_2_detail_time.csv"))
    steps = [r for r in raw if r["step_num"] != "-"]
    assert len(steps) < len(raw)  # the file really has an average row
    got = g_profile.steps[g_profile.steps["rank"] == 2].sort_values("step")
    assert list(got["step"]) == [int(r["step_num"]) for r in steps]
    # 10 ns ticks -> us
    assert got["start_us"].iloc[0] == pytest.approx(int(steps[0]["start_point"]) / 100)
    assert got["end_us"].iloc[-1] == pytest.approx(int(steps[-1]["end_point"]) / 100)


def test_g_hccl_raw_embedded_json_becomes_comm_ops(g_profile):
    raw = _rows(fixture_path(*G, "hccl_raw_0.csv"))
    expect = {}
    for r in raw:
        if r["step_num"] == "-":
            continue
        for name, v in json.loads(r["communication_operator_cost"]).items():
            expect[(int(r["step_num"]), name.split("_", 3)[-1])] = (float(v[1]), float(v[2]))
    co = g_profile.comm_ops
    co0 = co[(co["rank"] == 0) & co["transit_ms"].notna()]
    assert len(co0) == len(expect)
    for (step, name), (cost, wait) in list(expect.items())[:50]:
        row = co0[(co0["step"] == step) & (co0["op_name"] == name)]
        assert len(row) == 1, (step, name)
        assert row["transit_ms"].iloc[0] == pytest.approx(cost)
        assert row["wait_ms"].iloc[0] == pytest.approx(wait)
    assert set(co["op_type"]) >= {"allreduce", "send", "recv"}


def test_g_links_sizes_are_kb_to_mb(g_profile):
    raw = _rows(fixture_path(*G, "hccl_raw_3.csv"))
    first = next(r for r in raw if r["step_num"] == "1")
    ops = json.loads(first["communication_operator_cost"])
    total_kb = sum(v[1] for op in ops.values() for per in op[3].values() for v in per.values())
    lk = g_profile.links
    got = lk[(lk["rank"] == 3) & (lk["step"] == 1)]["size_mb"].sum()
    assert got == pytest.approx(total_kb / 1000.0)


def test_g_pipeline_csv_fills_stage_and_bubble(g_profile):
    raw = _rows(fixture_path(*G, "ascend_cluster_analyse_pipeline-parallel_2_4_1.csv"))
    ref = g_profile.reference_breakdown
    r1 = ref[ref["rank"] == 1].sort_values("step")
    assert r1["stage_us"].iloc[0] == pytest.approx(float(raw[0]["stage_time"]) * 1000)
    assert r1["bubble_us"].iloc[1] == pytest.approx(float(raw[1]["receive_alone_time"]) * 1000)
    assert r1["computing_us"].iloc[2] == pytest.approx(float(raw[2]["computation_time"]) * 1000)


def test_g_through_load_profile():
    p = analyzers.load_profile(fixture_path(*G))
    assert sorted(p.ranks["rank"]) == [0, 1, 2, 3]
    assert len(p.comm_ops) > 0 and p.comm_ops["group_size"].notna().any()


# ---- set H: single-device legacy runs ----------------------------------------------------------------


def test_h_run1_ops_from_timeline_with_types_from_framework():
    d = fixture_path(*H, "run_1", "normal_run", "profiler")
    p = parse(d)
    with open(d / "output_timeline_data_1.txt") as fh:
        n = sum(1 for line in fh if line.strip()) - 1
    assert len(p.ops) == n
    # this run's framework_raw describes another graph: types come from the op names
    fw = {r["full_kernel_name"]: r["kernel_type"] for r in _rows(d / "framework_raw_1.csv")}
    assert not p.ops["name"].isin(fw).any()
    assert (p.ops["type"] == p.ops["name"].map(lambda n: n.split("/")[-1].split("-op")[0])).all()
    # ops fall into the step windows of step_trace_raw (stream_N_parallel_M columns are not comm ops)
    assert p.ops["step"].notna().mean() > 0.95
    assert len(p.comm_ops) == 0
    assert p.steps["step"].nunique() == len(
        [r for r in _rows(d / "step_trace_raw_1_detail_time.csv") if r["step_num"] != "-"]
    )


def test_h_step_trace_column_order_variant():
    # H writes NAME_start_point,NAME_end_point,NAME; G/I write NAME,NAME_start_point,NAME_end_point
    d = fixture_path(*H, "profiler")
    header = open(d / "step_trace_raw_10_detail_time.csv").readline()
    assert header.split(",")[9].endswith("_start_point")
    p = parse(d)
    # ranks 0 and 10 of the loose legacy files, 0 and 1 of the two PROF_* jobs beside them (item 4)
    assert sorted(p.ranks["rank"]) == [0, 1, 10]
    raw = [r for r in _rows(d / "step_trace_raw_10_detail_time.csv") if r["step_num"] != "-"]
    ref = p.reference_breakdown
    got = ref[ref["rank"] == 10].sort_values("step")
    assert list(got["step_us"]) == pytest.approx([int(r["total"]) / 100 for r in raw])


def test_h_run2_timeline_without_step_trace():
    d = fixture_path(*H, "run_2", "normal_run", "profiler")
    p = parse(d)
    assert len(p.ops) > 0 and len(p.steps) == 0
    fw = {r["full_op_name"]: r["op_type"] for r in _rows(d / "framework_raw_1.csv")}
    t = p.ops[p.ops["name"].isin(fw)]
    assert len(t) > 0
    assert (t["type"] == t["name"].map(fw)).all()


# ---- set I: MindSpore UT data -----------------------------------------------------------------------


def test_i_hccl_and_step_trace_merge():
    d = fixture_path(*I_)
    p = parse(d)
    assert 6 in set(p.ranks["rank"])
    co = p.comm_ops[p.comm_ops["rank"] == 6]
    raw = [r for r in _rows(d / "hccl_raw_6.csv") if r["step_num"] != "-"]
    assert len(co) == len(raw) == 2
    st = [r for r in _rows(d / "step_trace_raw_6_detail_time.csv") if r["step_num"] != "-"]
    assert co.sort_values("step")["start_us"].tolist() == pytest.approx(
        [int(r["stream_24_0_AllReduce-op3143_start_point"]) / 100 for r in st]
    )
    # link_info: {"1-0": {"SDMA": [time_ms, size_KB, bw]}}
    li = json.loads(raw[0]["link_info"])["1-0"]["SDMA"]
    bw = p.comm_bandwidth
    sd = bw[(bw["rank"] == 6) & (bw["step"] == 1) & (bw["transport"] == "SDMA")]
    assert sd["size_mb"].sum() == pytest.approx(li[1] / 1000)
    assert sd["bandwidth_gbps"].iloc[0] == pytest.approx(li[1] / 1000 / li[0])


def test_detect():
    assert legacy.detect(fixture_path(*G))
    assert legacy.detect(fixture_path(*I_))
    assert not legacy.detect(fixture_path(*H, "parallel_strategy"))
    assert not legacy.detect(fixture_path("hicann__oam-tools"))


# ---- broken copies ------------------------------------------------------------------------------------


def _copy(tmp_path, *parts):
    src = fixture_path(*parts)
    dst = tmp_path / src.name
    shutil.copy2(src, dst)
    return dst


@pytest.mark.parametrize(
    "name", ["step_trace_raw_0_detail_time.csv", "hccl_raw_0.csv", "ascend_cluster_analyse_pipeline-parallel_2_4_0.csv"]
)
def test_truncated_copy_names_file(tmp_path, name):
    f = _copy(tmp_path, *G, name)
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * 0.6)])
    with pytest.raises(ProfileFormatError) as ei:
        parse(tmp_path)
    assert name in str(ei.value)


def test_missing_required_column_names_file_and_column(tmp_path):
    f = _copy(tmp_path, *I_, "step_trace_raw_6_detail_time.csv")
    lines = f.read_text().splitlines()
    lines[0] = lines[0].replace("end_point,total", "end_point,totl", 1)
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileFormatError) as ei:
        parse(tmp_path)
    assert "step_trace_raw_6_detail_time.csv" in str(ei.value) and "'total'" in str(ei.value)


def test_corrupt_json_cell_in_hccl_raw(tmp_path):
    f = _copy(tmp_path, *I_, "hccl_raw_6.csv")
    text = f.read_text().replace('{""1-0"": {""SDMA"": [4.36566', '{""1-0"": {""SDMA"": [4.36566,,', 1)
    f.write_text(text)
    with pytest.raises(ProfileFormatError) as ei:
        parse(tmp_path)
    assert "hccl_raw_6.csv" in str(ei.value) and "JSON" in str(ei.value)


def test_non_numeric_required_cell(tmp_path):
    f = _copy(tmp_path, *G, "ascend_cluster_analyse_pipeline-parallel_2_4_0.csv")
    lines = f.read_text().splitlines()
    lines[2] = "abc" + lines[2][lines[2].index(",") :]
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileFormatError) as ei:
        parse(tmp_path)
    assert "pipeline-parallel_2_4_0.csv" in str(ei.value) and "computation_time" in str(ei.value)


def test_empty_and_binary_files(tmp_path):
    (tmp_path / "hccl_raw_0.csv").write_bytes(b"")
    with pytest.raises(ProfileFormatError, match="hccl_raw_0.csv.*empty"):
        parse(tmp_path)
    (tmp_path / "hccl_raw_0.csv").write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(ProfileFormatError, match="hccl_raw_0.csv"):
        parse(tmp_path)


def test_no_legacy_files(tmp_path):
    with pytest.raises(ProfileFormatError, match="no legacy MindSpore profiler files"):
        parse(tmp_path)


def test_parent_folder_of_one_run_and_of_several():
    # run_1/ holds one profiler folder two levels down: found
    p = parse(fixture_path(*H, "run_1"))
    assert list(p.ranks["rank"]) == [1]
    # resource/ holds several runs: a clear error instead of mixing them
    with pytest.raises(ProfileFormatError, match="legacy profiler folders below"):
        parse(fixture_path(*H))


def test_parallel_metadata_files_give_stage_and_world(tmp_path):
    # H's parallel_strategy/ (MindSpore profiler_info_0.json: rank_size 2, auto_parallel; stageId per rank)
    # next to step traces of ranks 0 and 1 (copied from set G) in one temp folder
    for r in (0, 1):
        _copy(tmp_path, *G, f"step_trace_raw_{r}_detail_time.csv")
        _copy(tmp_path, *H, "parallel_strategy", f"parallel_strategy_{r}.json")
    _copy(tmp_path, *H, "parallel_strategy", "profiler_info_0.json")
    info = json.load(open(tmp_path / "profiler_info_0.json"))
    strat = {r: json.load(open(tmp_path / f"parallel_strategy_{r}.json"))["config"] for r in (0, 1)}
    p = parse(tmp_path)
    assert set(p.ranks["world_size"]) == {info["rank_size"]}
    assert dict(zip(p.ranks["rank"], p.ranks["stage"])) == {s["rankId"]: s["stageId"] for s in strat.values()}
    assert p.meta["parallel_mode"] == info["parallel_mode"]


def test_file_cut_inside_the_header(tmp_path):
    # step_trace_raw headers of set G are ~10 KB (one triple per op): a cut there leaves no data row
    f = _copy(tmp_path, *G, "step_trace_raw_1_detail_time.csv")
    header_len = len(open(f).readline())
    f.write_bytes(f.read_bytes()[: header_len // 2])
    with pytest.raises(ProfileFormatError, match="step_trace_raw_1_detail_time.csv: file ends inside the header"):
        parse(tmp_path)


def test_file_cut_inside_the_last_value(tmp_path):
    # "...,107.7976\n" cut to "...,107.79": every field is still a number, only the line break is missing
    f = _copy(tmp_path, *G, "ascend_cluster_analyse_pipeline-parallel_2_4_0.csv")
    data = f.read_bytes().rstrip(b"\r\n")
    f.write_bytes(data[:-2])
    with pytest.raises(ProfileFormatError, match="pipeline-parallel_2_4_0.csv: line 7 has no line break"):
        parse(tmp_path)


def test_corrupt_msprof_job_beside_legacy_files_keeps_the_legacy_ranks(tmp_path):
    # a folder with loose legacy files and a PROF_* job whose step trace is cut: the legacy ranks are
    # read and a warning names the damaged file (nothing is lost silently, nothing raises)
    src = fixture_path(*H, "profiler")
    d = copy_loose_files(src, tmp_path / "profiler")
    job = next(p for p in src.iterdir() if p.name.startswith("PROF_"))
    shutil.copytree(job, d / job.name)
    st = sorted((d / job.name).glob("device_*/timeline/step_trace_*.json"))[0]
    st.write_bytes(st.read_bytes()[:200])
    p = parse(d)
    assert sorted(p.ranks["rank"]) == [0, 10]
    assert any(st.name in w for w in p.warnings), p.warnings
