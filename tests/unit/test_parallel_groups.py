"""Parallel groups, stages and global ranks on links (analyzers/analyses/parallel_groups.py).

Expected values come from outside the code: msprof-analyze's own `double_hash` and its
cluster_communication_matrix.json on set B level 1 and 2 (run here on temp copies), the files of set G
and set H, and hand-built metadata.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import analyzers
from analyzers.analyses.parallel_groups import global_links, rank_stages, stage_of_rank
from analyzers.groups import double_hash, groups_from_communication_group, groups_from_metadata, groups_from_strategy
from analyzers.schema import Profile
from tests.support import fixture_path

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")
H_STRATEGY = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "parallel_strategy")


def test_double_hash_is_msprof_analyzes():
    from msprof_analyze.cluster_analyse.common_func.utils import double_hash as theirs

    for s in ("10.0.0.1%enp189s0f0_60000_0_1735000000000000", "dp", "", "group_name_0"):
        assert double_hash(s) == theirs(s)


def test_groups_from_metadata_hand_built():
    md = {
        "parallel_group_info": {
            "g_dp0": {"group_name": "dp", "group_rank": 0, "global_ranks": [2, 0]},
            "g_pp0": {"group_name": "pp", "group_rank": 0, "global_ranks": [0, 2]},
            "g_tp0": {"group_name": "tp_group", "group_rank": 1, "global_ranks": [4, 5]},
            "g_x": {"group_name": "default_pg", "global_ranks": [0, 1, 2, 3]},
        }
    }
    g = groups_from_metadata(md)
    # keyed by the hash torch_npu writes into the communication files, by the raw id and by the label
    assert g[str(double_hash("g_dp0"))] == g["g_dp0"] == g["dp"]
    assert g["g_dp0"]["ranks"] == [0, 2] and g["g_dp0"]["kind"] == "dp"
    assert g["g_pp0"]["kind"] == "pp" and g["g_tp0"]["kind"] == "tp" and g["g_x"]["kind"] is None
    assert groups_from_metadata({"ENV_VARIABLES": {}}) == {}  # set B's metadata has no groups


def test_stage_from_pp_groups_and_distributed_args():
    ranks = pd.DataFrame({"rank": [0, 1, 2, 3]})
    md = {
        "parallel_group_info": {
            "a": {"group_name": "pp", "global_ranks": [0, 2]},
            "b": {"group_name": "pp", "global_ranks": [1, 3]},
        }
    }
    p = Profile(source="x", path="x", ranks=ranks, meta={"parallel_groups": groups_from_metadata(md)})
    assert stage_of_rank(p) == ({0: 0, 2: 1, 1: 0, 3: 1}, "pp groups")
    # Megatron sizes only: stage = rank // (world / pp) (msprof-analyze map_rank_pp_stage)
    p = Profile(
        source="x",
        path="x",
        ranks=ranks,
        meta={
            "distributed_args": {
                "world_size": 4,
                "pipeline_model_parallel_size": 2,
                "tensor_model_parallel_size": 1,
                "data_parallel_size": 2,
            }
        },
    )
    assert stage_of_rank(p) == ({0: 0, 1: 0, 2: 1, 3: 1}, "distributed_args")
    p = Profile(source="x", path="x", ranks=ranks)
    st = rank_stages(p)
    assert st["stage"].isna().all() and st["stage_source"].isna().all()  # unknown is null


def test_strategy_stage_devices_set_h():
    files = sorted(fixture_path(*H_STRATEGY).glob("parallel_strategy_*.json"))
    g = groups_from_strategy(files)
    # parallel_strategy_0.json: config.stageDevices = [{"dim": [{"size": "0"}, {"size": "1"}]}] (one stage, devices 0,
    # 1)
    assert g == {
        "stage0": {"ranks": [0, 1], "kind": "stage", "source": "parallel_strategy", "label": "stage0", "stage": 0}
    }


def test_set_g_stages_from_the_pipeline_file_names():
    p = analyzers.load_profile(fixture_path(*G))
    expected = {}
    for f in fixture_path(*G).glob("ascend_cluster_analyse_pipeline-parallel_*_*_*.csv"):
        s, n, r = map(int, re.search(r"_(\d+)_(\d+)_(\d+)\.csv$", f.name).groups())
        expected[r] = r // (n // s)  # S stages over N ranks, contiguous
    st = rank_stages(p)
    assert dict(zip(st["rank"], st["stage"])) == expected == {0: 0, 1: 0, 2: 1, 3: 1}


def test_communication_group_json(tmp_path):
    f = tmp_path / "communication_group.json"
    f.write_text(
        json.dumps(
            {
                "collective": [[0, 1]],
                "p2p": [],
                "comm_group_parallel_info": [
                    {"type": "collective", "rank_set": [0, 2], "group_name": "123", "group_id": "x", "pg_name": "dp"}
                ],
            }
        )
    )
    assert groups_from_communication_group(f)["123"]["ranks"] == [0, 2]
    assert groups_from_communication_group(f)["123"]["kind"] == "dp"


def test_local_ranks_mapped_through_group_list():
    # rank 2's matrix says 0->1 in a group whose global ranks are [2, 3]: that is 2->3
    links = pd.DataFrame(
        {
            "step": [1, 1],
            "op_name": ["send", "send"],
            "group": ["G", "G"],
            "src": [0, 1],
            "dst": [1, 0],
            "transport": ["HCCS"] * 2,
            "size_mb": [1.0, 2.0],
            "time_ms": [1.0, 1.0],
            "bandwidth_gbps": [1.0, 2.0],
            "rank": [2, 3],
        }
    )
    out = global_links(links, {"G": {"ranks": [3, 2], "kind": "pp"}})
    assert out[["src", "dst"]].astype(int).values.tolist() == [[2, 3], [3, 2]]
    assert out[["src_local", "dst_local"]].astype(int).values.tolist() == [[0, 1], [1, 0]]
    # no group list: each rank's own link i-i says local i is that rank; an unmapped end is null
    links2 = pd.DataFrame(
        {
            "step": [1] * 3,
            "op_name": ["ar"] * 3,
            "group": ["H"] * 3,
            "src": [0, 0, 1],
            "dst": [0, 5, 1],
            "transport": ["LOCAL", "HCCS", "LOCAL"],
            "size_mb": [1.0] * 3,
            "time_ms": [1.0] * 3,
            "bandwidth_gbps": [1.0] * 3,
            "rank": [4, 4, 6],
        }
    )
    out2 = global_links(links2, {})
    assert out2["src"].tolist() == [4, 4, 6] and out2["dst"].tolist()[0] == 4 and pd.isna(out2["dst"].iloc[1])


@pytest.fixture(scope="module", params=["level1", "level2"])
def msprof_matrix(request, msprof_cluster):
    _, out = msprof_cluster(*B, request.param, mode="communication_matrix")
    f = out / "cluster_communication_matrix.json"
    assert f.exists(), f"msprof-analyze wrote no {f.name} in {out}"
    return request.param, json.loads(f.read_text()), f.parent


def test_total_op_info_and_global_links_match_msprof_analyze(msprof_matrix):
    level, theirs, _ = msprof_matrix
    p = analyzers.load_profile(fixture_path(*B, level))
    a = analyzers.analyze(p)
    links, totals = a.tables["links"], a.tables["link_totals"]
    n_total = n_ops = 0
    for _, steps in theirs.items():
        for step, ops in steps.items():
            for op, lk in ops.items():
                group = op.split("@")[-1]
                for pair, v in lk.items():
                    src, dst = map(int, pair.split("-"))
                    if op.startswith("Total Op Info"):
                        mine = totals[(totals["group"] == group) & (totals["src"] == src) & (totals["dst"] == dst)]
                        n_total += 1
                    else:
                        name = op.split("@")[0]
                        mine = links[
                            (links["group"] == group)
                            & (links["op_name"] == name)
                            & (links["src"] == src)
                            & (links["dst"] == dst)
                        ]
                        n_ops += 1
                    assert len(mine) == 1, (op, pair)
                    m = mine.iloc[0]
                    assert m["size_mb"] == pytest.approx(v["Transit Size(MB)"], rel=1e-9)
                    assert m["time_ms"] == pytest.approx(v["Transit Time(ms)"], rel=1e-9)
                    assert m["bandwidth_gbps"] == pytest.approx(v["Bandwidth(GB/s)"], abs=1e-4)
    assert n_total >= 4 and n_ops >= 4
    # every link of ours with both ends known is one msprof-analyze reports, and vice versa
    known = links.dropna(subset=["src", "dst"])
    assert len(known) == n_ops
    assert len(totals) == n_total


def test_legacy_reader_keeps_the_strategy_stages(tmp_path):
    """Set H: a legacy step trace next to MindSpore's parallel strategy files -> the stage group in Profile.meta."""
    for f in fixture_path(*H_STRATEGY).iterdir():
        shutil.copy2(f, tmp_path / f.name)
    shutil.copy2(
        fixture_path(
            "mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler", "step_trace_raw_0_detail_time.csv"
        ),
        tmp_path / "step_trace_raw_0_detail_time.csv",
    )
    p = analyzers.load_profile(tmp_path)
    assert p.meta["parallel_groups"]["stage0"]["ranks"] == [0, 1]
    st = rank_stages(p)
    assert st.set_index("rank")["stage"].to_dict() == {0: 0}  # stageId 0 in parallel_strategy_0.json


def _made_up_pp2dp2(tmp_path) -> Path:
    """A made-up PP2 x DP2 job from real set B level1 ranks: ranks 0, 1 and 2, 3 are copies of B's rank 0, 1
    (rank ids rewritten), with torch_npu-style parallel_group_info (dp {0,1}, {2,3}; pp {0,2}, {1,3}) in
    profiler_metadata.json and the communication files' group renamed to the hash of the dp group's id
    (msprof-analyze's double_hash, as torch_npu writes it)."""
    from msprof_analyze.cluster_analyse.common_func.utils import double_hash as theirs

    src = fixture_path(*B, "level1")
    old = "17522688603477080586"
    info = {
        "dp_0": {"group_name": "dp", "global_ranks": [0, 1]},
        "dp_1": {"group_name": "dp", "global_ranks": [2, 3]},
        "pp_0": {"group_name": "pp", "global_ranks": [0, 2]},
        "pp_1": {"group_name": "pp", "global_ranks": [1, 3]},
    }
    root = tmp_path / "pp2dp2"
    for r in range(4):
        s = src / f"rank{r % 2}_ascend_pt"
        d = root / f"rank{r}_ascend_pt"
        shutil.copytree(s, d, ignore=shutil.ignore_patterns("trace_view.json"))
        pi = json.loads((d / f"profiler_info_{r % 2}.json").read_text())
        (d / f"profiler_info_{r % 2}.json").unlink()
        pi["rank_id"] = r
        (d / f"profiler_info_{r}.json").write_text(json.dumps(pi))
        md = json.loads((d / "profiler_metadata.json").read_text())
        md["parallel_group_info"] = {
            k: dict(v, group_rank=v["global_ranks"].index(r)) if r in v["global_ranks"] else v for k, v in info.items()
        }
        (d / "profiler_metadata.json").write_text(json.dumps(md))
        new = str(theirs("dp_0" if r < 2 else "dp_1"))
        for f in ("communication.json", "communication_matrix.json"):
            p = d / "ASCEND_PROFILER_OUTPUT" / f
            p.write_text(p.read_text().replace(old, new))
    return root


def test_made_up_pp2dp2_groups_stages_and_global_links(tmp_path):
    from msprof_analyze.cluster_analyse.common_func.utils import double_hash as theirs

    p = analyzers.load_profile(_made_up_pp2dp2(tmp_path))
    a = analyzers.analyze(p)
    st = a.tables["rank_stages"].set_index("rank")
    assert st["stage"].to_dict() == {0: 0, 1: 0, 2: 1, 3: 1} and set(st["stage_source"]) == {"pp groups"}
    g1 = str(theirs("dp_1"))
    assert p.meta["parallel_groups"][g1]["ranks"] == [2, 3] and p.meta["parallel_groups"][g1]["kind"] == "dp"
    # rank 3 (a copy of B's rank 1) wrote "1-0" in dp group {2, 3}: global 3 -> 2
    lk = a.tables["links"]
    row = lk[(lk["group"] == g1) & (lk["rank"] == 3) & (lk["src_local"] == 1) & (lk["dst_local"] == 0)]
    assert set(row["src"]) == {3} and set(row["dst"]) == {2}
    # the group's Total Op Info: B's allreduce-total links, now between global ranks 2 and 3
    mx = json.loads(
        (
            fixture_path(*B, "level1", "rank1_ascend_pt", "ASCEND_PROFILER_OUTPUT", "communication_matrix.json")
        ).read_text()
    )
    want = mx["step50"]["collective"]["allreduce-total@17522688603477080586"]["1-0"]
    tot = a.tables["link_totals"]
    t = tot[(tot["group"] == g1) & (tot["src"] == 3) & (tot["dst"] == 2)].iloc[0]
    assert t["size_mb"] == pytest.approx(want["Transit Size(MB)"]) and t["time_ms"] == pytest.approx(
        want["Transit Time(ms)"]
    )
    # dp groups equal the stages here: compared once per stage, never across stages
    assert set(a.tables["rank_imbalance"]["group"]) == {"stage 0", "stage 1"}
    assert [s["stage"] for s in a.tables["stages"].to_dict("records")] == [0, 1]


def test_msprof_analyze_cluster_output_links_stay_global(msprof_matrix, tmp_path):
    """Read back msprof-analyze's own output: its matrix is already in global ranks and its
    communication_group.json names the groups' global ranks."""
    level, theirs, out = msprof_matrix
    folder = tmp_path / "cluster_analysis_output"
    shutil.copytree(out, folder)
    groups_doc = json.loads((folder / "communication_group.json").read_text())
    p = analyzers.load_profile(folder)
    a = analyzers.analyze(p)
    for g in groups_doc["comm_group_parallel_info"]:
        assert p.meta["parallel_groups"][g["group_name"]]["ranks"] == sorted(g["rank_set"])
    links = a.tables["links"]
    n = 0
    for _, steps in theirs.items():
        for _, ops in steps.items():
            for op, lk in ops.items():
                if op.startswith("Total Op Info"):
                    continue
                for pair in lk:
                    src, dst = map(int, pair.split("-"))
                    n += len(
                        links[(links["op_name"] == op.split("@")[0]) & (links["src"] == src) & (links["dst"] == dst)]
                    )
    assert n == len(links) > 0 and links["global_ranks"].all()


def test_db_meta_data_groups(tmp_path):
    """torch_npu's db export keeps parallel_group_info / distributed_args as META_DATA rows (what
    msprof-analyze's communication_matrix_sum and pp_chart recipes read)."""
    import sqlite3

    from analyzers.groups import add_db_meta

    con = sqlite3.connect(tmp_path / "p.db")
    con.execute("CREATE TABLE META_DATA (name TEXT, value TEXT)")
    con.executemany(
        "INSERT INTO META_DATA VALUES (?, ?)",
        [
            ("SCHEMA_VERSION", "1.0.0"),
            (
                "parallel_group_info",
                json.dumps({"gid_pp": {"group_name": "pp", "group_rank": 0, "global_ranks": [1, 5]}}),
            ),
            ("distributed_args", json.dumps({"world_size": 8, "pipeline_model_parallel_size": 2})),
        ],
    )
    meta = {"parallel_groups": {}}
    add_db_meta(meta, con)
    assert meta["parallel_groups"][str(double_hash("gid_pp"))]["ranks"] == [1, 5]
    assert meta["distributed_args"]["pipeline_model_parallel_size"] == 2
    p = Profile(source="x", path="x", ranks=pd.DataFrame({"rank": [1, 5]}), meta=meta)
    assert stage_of_rank(p)[0] == {1: 0, 5: 1}
    con.execute("DROP TABLE META_DATA")
    meta2 = {}
    add_db_meta(meta2, con)  # older exports without META_DATA: nothing, no error
    assert meta2 == {"parallel_groups": {}}


def test_slow_rank_rows_name_the_group_kind():
    from analyzers.registry import Context
    from analyzers.analyses.slow_ranks import analysis

    # a 2-rank pp group; rank 1 arrives last in all 6 collectives (waits 0, the other waits 5 ms)
    co = pd.DataFrame(
        {
            "rank": [0, 1] * 6,
            "step": [s for s in range(6) for _ in (0, 1)],
            "op_name": ["send"] * 12,
            "group": ["G"] * 12,
            "wait_ms": [5.0, 0.0] * 6,
            "elapse_ms": [6.0, 1.0] * 6,
        }
    )
    p = Profile(source="x", path="x", meta={"parallel_groups": {"G": {"ranks": [0, 1], "kind": "pp"}}})
    sr = analysis(Context(profile=p, tables={"comm_ops": co})).tables["slow_ranks"]
    row = sr[(sr["scope"] == "group") & sr["slow"]].iloc[0]
    assert (row["rank"], row["group_kind"]) == (1, "pp")
