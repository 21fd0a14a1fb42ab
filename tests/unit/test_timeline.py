"""The compact step timeline merges same-kind neighbours and keeps the longest op's name."""

import pandas as pd

from analyzers.analyses.timeline import step_timeline


def test_merges_neighbours_of_one_kind_and_splits_at_kind_changes():
    ops = pd.DataFrame(
        {
            "rank": [0, 0, 0, 0, 0, 1],
            "step": [5, 5, 5, 5, 6, 5],
            "name": ["a", "b", "AllReduce-op0", "c", "d", "a"],
            "category": ["compute", "compute", "communication", "compute", "compute", "compute"],
            "start_us": [0.0, 12.0, 30.0, 80.0, 1000.0, 3.0],
            "dur_us": [10.0, 15.0, 40.0, 5.0, 1.0, 4.0],
        }
    )
    steps = pd.DataFrame(
        {"rank": [0, 0, 1], "step": [5, 6, 5], "start_us": [0.0, 1000.0, 0.0], "end_us": [100.0, 1100.0, 100.0]}
    )
    t = step_timeline(ops, steps, max_steps=1, merge_gap_us=5.0, merge_gap_frac=0.0)
    r0 = t[t["rank"] == 0]
    assert r0["kind"].tolist() == ["compute", "communication", "compute"]
    first = r0.iloc[0]
    assert first["ops"] == 2 and first["top_op"] == "b"
    assert (first["start_ts"], first["end_ts"]) == (0.0, 27e-6)
    assert set(t["step"]) == {5}  # max_steps=1: only the first step
    assert len(t[t["rank"] == 1]) == 1


def test_empty_inputs_give_an_empty_table():
    assert step_timeline(pd.DataFrame(), pd.DataFrame()).empty
