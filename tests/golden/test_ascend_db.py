"""Ascend .db export parser on fixture set C (copied to a temp dir: two fixture DBs are in WAL mode)."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

import analyzers
from analyzers.parsers.ascend.db import parse_db_rank
from perfbench.errors import ProfileFormatError, UserError

C = ("Ascend__msinsight", "test", "data", "pytorch", "db")


@pytest.fixture
def level(fixture_copy):
    def _get(name):
        return fixture_copy(*C, name)

    return _get


@pytest.mark.parametrize("name", ["level0", "level1", "level2"])
def test_set_c_parses_both_ranks(level, name):
    d = level(name)
    p = analyzers.load_profile(d)
    assert sorted(p.ranks["rank"]) == [0, 1]
    con = sqlite3.connect(d / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db")
    n_compute = con.execute("SELECT count(*) FROM COMPUTE_TASK_INFO").fetchone()[0]
    n_comm = con.execute("SELECT count(*) FROM COMMUNICATION_OP").fetchone()[0]
    con.close()
    r0 = p.ops[p.ops["rank"] == 0]
    assert (r0["category"] == "compute").sum() == n_compute
    assert (r0["category"] == "communication").sum() == n_comm
    assert set(p.steps["step"]) == {50}


def test_comm_ops_match_analysis_db(level):
    d = level("level1")
    p = parse_db_rank(d / "rank1_ascend_pt")
    con = sqlite3.connect(d / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    ct = pd.read_sql_query("SELECT * FROM CommAnalyzerTime", con)
    bw = pd.read_sql_query(
        "SELECT DISTINCT hccl_op_name, transport_type, bandwidth, transit_size FROM CommAnalyzerBandwidth", con
    )
    con.close()
    assert len(p.comm_ops) == len(ct)
    for row in ct.itertuples():
        ours = p.comm_ops[p.comm_ops["op_name"] == row.hccl_op_name].iloc[0]
        assert ours["elapse_ms"] == pytest.approx(row.elapse_time)
        assert ours["wait_ms"] == pytest.approx(row.wait_time)
        assert ours["idle_ms"] == pytest.approx(row.idle_time)
        assert ours["group"] == row.group_name
    for row in bw[bw["transit_size"] > 0].itertuples():
        ours = p.comm_bandwidth[
            (p.comm_bandwidth["op_name"] == row.hccl_op_name) & (p.comm_bandwidth["transport"] == row.transport_type)
        ]
        assert ours["bandwidth_gbps"].iloc[0] == pytest.approx(row.bandwidth)
    # payload = COMMUNICATION_OP.count x data type size (FP32 here)
    assert p.comm_ops["size_bytes"].min() > 0


def test_level0_db_has_comm_ops_without_analysis_tables(level):
    p = parse_db_rank(level("level0") / "rank0_ascend_pt")
    assert p.meta["comm_source"].startswith("COMMUNICATION_OP")
    assert len(p.comm_ops) == 4 and p.comm_ops["elapse_ms"].gt(0).all()


def test_parser_never_writes_next_to_the_db(level):
    d = level("level2")
    out = d / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    before = sorted(x.name for x in out.iterdir())
    parse_db_rank(d / "rank0_ascend_pt")
    assert sorted(x.name for x in out.iterdir()) == before


def test_truncated_db_is_a_clear_error(level):
    d = level("level1") / "rank0_ascend_pt"
    db = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    with pytest.raises(UserError) as ei:
        analyzers.load_profile(d, strict=True)
    assert "ascend_pytorch_profiler_0.db" in str(ei.value)
    p = analyzers.load_profile(d)  # the rank keeps what analysis.db gives: the profiler's breakdown, communication
    assert any("ascend_pytorch_profiler_0.db" in w for w in p.warnings)
    assert p.ranks["inputs"].iloc[0] == "analysis.db" and len(p.reference_breakdown) == 1 and len(p.comm_ops) == 4


def test_garbage_db_is_a_clear_error(level):
    d = level("level1") / "rank0_ascend_pt"
    db = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError, match="ascend_pytorch_profiler_0.db.*SQLite"):
        analyzers.load_profile(d, strict=True)


def test_db_missing_task_table(level):
    d = level("level2") / "rank1_ascend_pt"
    db = d / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_1.db"
    con = sqlite3.connect(db)
    con.execute("DROP TABLE TASK")
    con.commit()
    con.close()
    p = parse_db_rank(d)  # kernels unknown, the rest from analysis.db; the warning names db and table
    assert len(p.warnings) == 1 and "ascend_pytorch_profiler_1.db" in p.warnings[0] and "TASK" in p.warnings[0]
    assert len(p.ops) == 0 and len(p.reference_breakdown) == 1
    (d / "ASCEND_PROFILER_OUTPUT" / "analysis.db").unlink()
    with pytest.raises(ProfileFormatError, match="TASK"):  # nothing readable left: an error
        parse_db_rank(d)
