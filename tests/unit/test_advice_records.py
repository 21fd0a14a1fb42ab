"""The advice rules' records (analyzers/analyses/advice.py `RULES`): docs/advice.md's rule-record table is the one the
records generate, every fold names a finding some rule emits, thresholds name module constants, and the folds form
no cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.analyses import advice as A

DOC = Path(__file__).resolve().parents[2] / "docs" / "advice.md"


def test_docs_rule_records_match_the_records():
    text = DOC.read_text()
    begin, end = "<!-- rule-records:begin -->\n", "<!-- rule-records:end -->"
    assert begin in text and end in text
    block = text[text.index(begin) + len(begin) : text.index(end)]
    assert block == A.rule_records_markdown(), (
        "docs/advice.md's rule records differ from RULES: regenerate them with "
        '`python -c "from analyzers.analyses.advice import rule_records_markdown as m; print(m())"`'
    )


def test_records_are_consistent():
    emitted = [rid for rule in A.RULES for rid in rule.emits]
    assert len(emitted) == len(set(emitted))
    for rule in A.RULES:
        assert set(rule.folds) <= set(rule.emits), rule.run.__name__
        for folds in rule.folds.values():
            assert all(f.cause in emitted for f in folds)
        for name in rule.thresholds:
            assert name.isupper() and hasattr(A, name)
    assert set(A._fold_order(set(emitted))) == set(emitted)


def test_a_fold_cycle_is_refused(monkeypatch):
    monkeypatch.setitem(A.FOLDS, "stage_imbalance", (A.Fold("slow_rank", "test"),))
    with pytest.raises(ValueError, match="cycle"):
        A._fold_order({"stage_imbalance", "slow_rank"})


def test_idle_imbalance_follows_free_time_to_its_root():
    """free_time folded under the stage imbalance (the slowest stage's idle time inside the pipeline window): the free
    rank_imbalance goes with it to the stage imbalance, not under a symptom."""
    rows = [
        {"id": "stage", "rule": "stage_imbalance", "gain_ms": 10.0, "ranks": [2, 3]},
        {"id": "free", "rule": "free_time", "gain_ms": 5.0, "ranks": [2], "in_pipeline": True},
        {"id": "ri", "rule": "rank_imbalance", "gain_ms": 1.0, "ranks": [2, 3], "explains": "idle"},
    ]
    A._link(rows)
    assert {r["id"]: r["symptom_of"] for r in rows} == {"stage": None, "free": "stage", "ri": "stage"}
