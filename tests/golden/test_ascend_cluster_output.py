"""Importing msprof-analyze's own cluster output (fixture set E: 8 ranks) as a profile."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import analyzers
from perfbench.errors import ProfileFormatError
from tests.support import fixture_path

E = ("Ascend__msprof-analyze", "test", "resource", "advisor", "cluster_analysis_output")


def test_set_e_cluster_output():
    d = fixture_path(*E)
    p = analyzers.load_profile(d)
    assert p.source == "msprof-analyze-cluster"
    ref = pd.read_csv(d / "cluster_step_trace_time.csv")
    rank_rows = ref[ref["Type"] == "rank"]
    assert sorted(p.ranks["rank"]) == sorted(rank_rows["Index"].astype(int))  # the stage row is not a rank
    a = analyzers.analyze(p)
    sb = a.tables["step_breakdown"].set_index("rank")
    for row in rank_rows.itertuples(index=False):
        assert sb.loc[int(row.Index), "communication_not_overlapped_us"] == pytest.approx(row[4])
        assert sb.loc[int(row.Index), "step_us"] == pytest.approx(row.Stage + row.Bubble)
    raw = json.loads((d / "cluster_communication.json").read_text())
    n = 0
    for g, steps in raw.items():
        for s, ops in steps.items():
            for key, per_rank in ops.items():
                if key.startswith("Total"):
                    continue
                for r, op in per_rank.items():
                    mine = p.comm_ops[(p.comm_ops["op_name"] == key.split("@")[0]) & (p.comm_ops["rank"] == int(r))]
                    assert mine["wait_ms"].iloc[0] == pytest.approx(op["Communication Time Info"]["Wait Time(ms)"])
                    n += 1
    assert n == len(p.comm_ops) > 0
    # the group "(0, 1)" has 2 ranks: busbw factor for broadcast is 1, so busbw == algbw where sizes are known
    assert set(p.comm_ops["group_size"]) == {2}


def test_truncated_cluster_json(tmp_path):
    src = fixture_path(*E)
    for f in src.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    cj = tmp_path / "cluster_communication.json"
    cj.write_bytes(cj.read_bytes()[:300])
    with pytest.raises(ProfileFormatError, match="cluster_communication.json"):
        analyzers.load_profile(tmp_path)


# ---- msprof-analyze's current outputs, generated at test time with the installed msprof-analyze ----------

C1 = ("Ascend__msinsight", "test", "data", "pytorch", "db", "level1")


def _sql(db, sql):
    import sqlite3

    con = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        return pd.read_sql_query(sql, con)
    finally:
        con.close()


@pytest.mark.parametrize(
    "mode,export",
    [
        ("all", "db"),
        ("communication_time_sum", "text"),
        ("communication_matrix_sum", "text"),
        ("cluster_time_summary", "text"),
    ],
)
def test_reads_msprof_analyze_outputs(msprof_cluster, mode, export):
    data, out = msprof_cluster(*C1, mode=mode, export=export)
    p = analyzers.load_profile(out)  # the output folder alone
    assert p.source == "msprof-analyze-cluster" and sorted(p.ranks["rank"]) == [0, 1]
    if mode == "all":
        db = out / "cluster_analysis.db"
        st = _sql(db, "SELECT * FROM ClusterStepTraceTime WHERE type = 'rank'")
        ref = p.reference_breakdown.set_index("rank")
        for row in st.itertuples(index=False):
            assert ref.loc[int(row.index), "computing_us"] == pytest.approx(row.computing)
            assert ref.loc[int(row.index), "free_us"] == pytest.approx(row.free)
        ct = _sql(db, "SELECT * FROM ClusterCommunicationTime WHERE hccl_op_name != 'Total Op Info'")
        m = _sql(db, "SELECT * FROM ClusterCommunicationMatrix")
    elif mode == "communication_time_sum":
        ct = pd.read_csv(out / "CommunicationTimeSum" / "cluster_communication_time.csv")
        ct = ct[ct["hccl_op_name"] != "Total Op Info"]
        m = None
    elif mode == "communication_matrix_sum":
        ct, m = None, pd.read_csv(out / "CommMatrixSum" / "cluster_communication_matrix.csv")
    else:
        f = next((out / "ClusterTimeSummary").glob("cluster_time_summary_*.csv"))
        ts = pd.read_csv(f)
        ref = p.reference_breakdown.set_index("rank")
        for row in ts.to_dict("records"):
            assert ref.loc[int(row["Rank"]), "step_us"] == pytest.approx(row["Step Time(us)"])
            assert ref.loc[int(row["Rank"]), "computing_us"] == pytest.approx(row["Computation(us)"])
            assert ref.loc[int(row["Rank"]), "free_us"] == pytest.approx(row["Free(us)"])
        assert p.meta["reference_source"].startswith("msprof-analyze ClusterTimeSummary")
        ct = m = None
    if ct is not None:
        assert len(p.comm_ops) == len(ct) == 8
        for row in ct.itertuples(index=False):
            mine = p.comm_ops[(p.comm_ops["rank"] == int(row.rank_id)) & (p.comm_ops["op_name"] == row.hccl_op_name)]
            assert mine["elapse_ms"].iloc[0] == pytest.approx(row.elapsed_time)
            assert mine["wait_ms"].iloc[0] == pytest.approx(row.wait_time)
    if m is not None:
        m = m[m["hccl_op_name"] != "Total Op Info"]
        assert len(p.links) == len(m) > 0
        for row in m.itertuples(index=False):
            mine = p.links[
                (p.links["op_name"] == row.hccl_op_name)
                & (p.links["src"] == int(row.src_rank))
                & (p.links["dst"] == int(row.dst_rank))
                & (p.links["transport"] == row.transport_type)
            ]
            assert mine["bandwidth_gbps"].iloc[0] == pytest.approx(row.bandwidth)


def test_ranks_beside_their_cluster_output_are_cross_checked(msprof_cluster):
    """Rank folders plus the cluster_analysis_output msprof-analyze wrote into them: the ranks are analyzed
    (not "rank 0 found twice") and the cluster output is the cross-check, equal on unchanged data."""
    data, out = msprof_cluster(*C1, mode="all")
    p = analyzers.load_profile(data)
    assert p.source == "ascend-db" and sorted(p.ranks["rank"]) == [0, 1] and p.warnings == []
    assert p.meta["cluster_output"]["path"] == str(out)
    a = analyzers.analyze(p)
    cc = a.tables["cluster_check"]
    assert set(cc["kind"]) == {"breakdown", "communication"}
    assert len(cc[cc["kind"] == "communication"]) == 8 * 5
    assert cc["rel_diff"].abs().max() < 1e-9
