"""Cross-rank imbalance per parallel group (analyzers/analyses/imbalance.py) and its advice.

Expected values: the real msprof-analyze advisor's slow-rank finding on set B text/level0 (run here on a
temp copy), the profiler's step_trace_time.csv of each rank (set B) and msprof-analyze's
cluster_step_trace_time.csv (set E), read at test time; hand-built breakdowns for groups and stages.
"""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

import analyzers
from analyzers.analyses.imbalance import RATIO_THRESHOLD, rank_imbalance
from tests.support import fixture_path
from tests.msprof_cache import run_msprof

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
E = ("Ascend__msprof-analyze", "test", "resource", "advisor", "cluster_analysis_output")
COLS = {"computing": "Computing", "communication": "Communication(Not Overlapped)", "free": "Free"}


def _spreads(df: pd.DataFrame) -> dict:
    """msprof-analyze's slow-rank numbers from per-rank step trace rows: spread (ms) and spread / mean total."""
    total = (df["Computing"] + df["Communication(Not Overlapped)"] + df["Free"]).mean()
    return {k: ((df[c].max() - df[c].min()) / 1000.0, (df[c].max() - df[c].min()) / total) for k, c in COLS.items()}


def _b_rows(level: str) -> pd.DataFrame:
    return pd.concat(
        [
            pd.read_csv(f)
            for f in sorted(fixture_path(*B, level).glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"))
        ],
        ignore_index=True,
    )


def _advice(path):
    a = analyzers.analyze(analyzers.load_profile(path))
    adv = a.tables["advice"]
    return a, adv[adv["rule"] == "rank_imbalance"]


def test_b_level0_matches_msprof_analyze_advisor(tmp_path):
    try:  # the real advisor on a temp copy (its output kept between sessions: tests/msprof_cache.py)
        proc = run_msprof(
            fixture_path(*B, "level0"),
            ["advisor", "all", "-d", "{data}", "-l", "en", "-o", "{work}/out"],
            tmp_path / "advisor",
            timeout=600,
        )
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    text = " ".join(re.sub(r"[|+\-]{2,}|\|", " ", proc.stdout).split())
    theirs = {
        m.group(1).lower(): float(m.group(2))
        for m in re.finditer(r"max difference of (Computing|Communication|Free) time has reached ([\d.]+)ms", text)
    }
    assert theirs == {"communication": pytest.approx(16.899, abs=1e-3)}, proc.stdout[-3000:]
    a, adv = _advice(fixture_path(*B, "level0"))
    assert list(adv["evidence"].str.extract(r"dimension=(\w+)")[0]) == list(theirs)
    assert f"{theirs['communication']:.3f} ms" in adv.iloc[0]["evidence"]
    # and the same number straight from the profiler's step_trace_time.csv files
    spread, ratio = _spreads(_b_rows("level0"))["communication"]
    ri = a.tables["rank_imbalance"].set_index("dimension")
    assert ri.loc["communication", "spread_ms"] == pytest.approx(spread, rel=1e-9)
    assert ri.loc["communication", "ratio"] == pytest.approx(ratio, rel=1e-9) and ratio > RATIO_THRESHOLD
    assert adv.iloc[0]["ranks"] == [0, 1]


def test_b_level1_below_the_threshold_says_nothing():
    spreads = _spreads(_b_rows("level1"))
    assert all(r <= RATIO_THRESHOLD for _, r in spreads.values())  # 5.6 ms of 134 ms = 0.042
    _, adv = _advice(fixture_path(*B, "level1"))
    assert adv.empty


def test_set_e_cluster_output_communication_and_free(tmp_path):
    src = fixture_path(*E)
    data = tmp_path / "e" / "cluster_analysis_output"
    shutil.copytree(src, data)
    df = pd.read_csv(src / "cluster_step_trace_time.csv")
    df = df[df["Type"] == "rank"]
    exp = _spreads(df)
    a, adv = _advice(data.parent)
    flagged = {m: (s, r) for m, (s, r) in exp.items() if r > RATIO_THRESHOLD}
    assert set(flagged) == {"communication", "free"}
    assert flagged["communication"][0] == pytest.approx(622.989, abs=1e-3)  # the 623 ms
    assert flagged["free"][0] == pytest.approx(595.773, abs=1e-3)  # and 596 ms
    got = {re.search(r"dimension=(\w+)", e).group(1): e for e in adv["evidence"]}
    assert set(got) == set(flagged)
    for m, (s, _) in flagged.items():
        assert f"= {s:.3f} ms" in got[m]
    # the rank with the least exposed communication (others wait for it) is also the one idling most
    idx = df.set_index("Index")
    assert str(idx["Communication(Not Overlapped)"].astype(float).idxmin()) in adv.iloc[0]["message"]


def test_groups_and_stages_are_compared_separately():
    # stage 0 = ranks 0, 1 (40 ms compute), stage 1 = ranks 2, 3 (68 / 80 ms): the stage difference is not a
    # slow rank, rank 3 against rank 2 (12 ms of 100) is
    sb = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "step": [1] * 4,
            "step_us": [100e3] * 4,
            "computing_us": [40e3, 40e3, 68e3, 80e3],
            "communication_not_overlapped_us": [50e3, 50e3, 20e3, 10e3],
            "free_us": [10e3, 10e3, 12e3, 10e3],
        }
    )
    rs = pd.DataFrame({"rank": [0, 1, 2, 3], "stage": pd.array([0, 0, 1, 1], dtype="Int64")})
    ri = rank_imbalance(sb, {}, rs)
    hit = ri[ri["flagged"]]
    assert set(hit["group"]) == {"stage 1"}
    comp = hit[hit["dimension"] == "computing"].iloc[0]
    assert (comp["max_rank"], comp["min_rank"], comp["spread_ms"]) == (3, 2, pytest.approx(12.0))
    # a dp group from the profiler metadata is compared on its own; pp groups span stages and are not
    groups = {
        "g1": {"ranks": [0, 2], "kind": "pp", "label": "pp"},
        "g2": {"ranks": [1, 3], "kind": "dp", "label": "dp"},
    }
    ri = rank_imbalance(sb, groups, None)
    assert set(ri["group"]) == {"dp", "all"}
    # inconsistent ranks are left out
    sb["consistent"] = pd.array([True, True, True, False], dtype="boolean")
    ri = rank_imbalance(sb, {}, rs)
    assert set(ri["group"]) == {"stage 0"} and set(ri["excluded_ranks"]) == {"3"}


def test_free_time_advice_names_the_idle_ranks():
    from analyzers.analyses.advice.free_time import FREE_SHARE

    rows = _b_rows("level0")
    rows["rank"] = range(len(rows))  # files read in rank order
    total = rows["Computing"] + rows["Communication(Not Overlapped)"] + rows["Free"]
    want = sorted(rows.loc[rows["Free"] / total > FREE_SHARE, "rank"].tolist())
    adv = analyzers.analyze(analyzers.load_profile(fixture_path(*B, "level0"))).tables["advice"]
    assert want == [0, 1]
    # rank 1 is the rank the others wait for (slow_rank): its own idle time is why it is late and folds under that
    # finding, so free time names the other idle ranks only
    (straggler,) = adv[adv["rule"] == "slow_rank"].iloc[0]["ranks"]
    assert straggler == 1
    assert adv[adv["rule"] == "free_time"].iloc[0]["ranks"] == [r for r in want if r != straggler] == [0]


def test_a_null_time_in_a_flagged_row_is_said_unknown_not_nan():
    # a flagged communication row whose fastest rank's time is null (a rank with no exposed-communication value):
    # the advice prints the known numbers and says "unknown" for the null ones, and its gain stays the spread
    from analyzers.analyses.advice import rank_imbalance as rule

    ri = pd.DataFrame(
        {
            "group": ["all"],
            "kind": ["all"],
            "dimension": ["communication"],
            "max_rank": [1],
            "min_rank": [0],
            "max_ms": [30.0],
            "min_ms": [float("nan")],
            "spread_ms": [12.5],
            "mean_total_ms": [50.0],
            "ratio": [0.25],
            "flagged": [True],
        }
    )
    (row,) = rule.find({"rank_imbalance": ri}, {})
    assert row["gain_ms"] == 12.5
    assert "rank 1 spends 30.000 ms per step in exposed communication and rank 0 only unknown ms" in row["message"]
    assert "rank 1 30.000 ms - rank 0 unknown ms = 12.500 ms / mean step total 50.000 ms = 0.250" in row["evidence"]
    assert "nan" not in row["message"] + row["evidence"] + row["basis"]
