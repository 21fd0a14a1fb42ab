"""Importing msprof-analyze's own cluster output (fixture set E: 8 ranks) as a profile."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import analyzers
from perfbench.errors import ProfileFormatError
from tests.conftest import fixture_path

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
