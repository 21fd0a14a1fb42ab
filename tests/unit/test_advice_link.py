"""Causes before symptoms, as a decision table: `advice.link` (engine.link over the rules' folds) sets each finding's
`symptom_of` from the rules written in docs/advice.md (the gains table's "folds under it" column). Each case lists
findings by hand and the root each one folds under, derived from those rules, not from running the code."""

from __future__ import annotations

import pytest

from analyzers.analyses.advice import link as _link
from analyzers.analyses.advice.exposed_communication import FOLD_SHARE


def _f(id_, rule, gain=None, **kw):
    return {
        "id": id_,
        "rule": rule,
        "gain_ms": gain,
        "ranks": kw.pop("ranks", []),
        "explains": kw.pop("explains", None),
        **kw,
    }


def _links(rows):
    _link(rows)
    return {r["id"]: r["symptom_of"] for r in rows}


def test_stage_straggler_and_idle_on_the_straggler():
    rows = [
        _f("stage:a", "stage_imbalance", None),  # no gain counts as 0: the other stage finding is the root
        _f("stage:b", "stage_imbalance", 0.5),
        _f("slow:3", "slow_rank", 20.0, ranks=[3]),
        _f("slow:1", "slow_rank", 5.0, ranks=[1]),
        _f("free", "free_time", 8.0, ranks=[3]),  # idle time on the straggler itself: why it is late
        _f("ri:cross", "rank_imbalance", 4.0, explains="exposed", cross_stage=True),
        _f("ri:exp", "rank_imbalance", 4.0, explains="exposed"),
        _f("ri:idle", "rank_imbalance", 4.0, explains="idle"),
        _f("bubble", "pipeline_bubble", 3.0),
        _f("wait", "wait_ratio", 2.0),
        _f("spread:3", "step_time_spread", 1.0, ranks=[3]),
        _f("spread:1", "step_time_spread", 1.0, ranks=[1]),
        _f("exp:pipe", "exposed_communication", 9.0, kind="pipeline"),
        _f("exp:at", "exposed_communication", 20.0 / FOLD_SHARE, kind="collective"),  # straggler gain = half: folds
        _f("exp:big", "exposed_communication", 20.0 / FOLD_SHARE + 1.0, kind="collective"),  # a bit more: its own
    ]
    assert _links(rows) == {
        "stage:a": None,
        "stage:b": None,
        "slow:3": None,
        "slow:1": None,
        "free": "slow:3",
        "ri:cross": "stage:b",
        "ri:exp": "slow:3",
        "ri:idle": "slow:3",
        "bubble": "stage:b",
        "wait": "slow:3",
        "spread:3": "slow:3",
        "spread:1": "stage:b",
        "exp:pipe": "stage:b",
        "exp:at": "slow:3",
        "exp:big": None,
    }


def test_idle_elsewhere_is_its_own_cause():
    rows = [
        _f("slow:3", "slow_rank", 20.0, ranks=[3]),
        _f("free", "free_time", 8.0, ranks=[2, 3]),  # not all of it on the straggler
        _f("ri:idle", "rank_imbalance", 4.0, explains="idle"),
        _f("ri:cross", "rank_imbalance", 4.0, explains="exposed", cross_stage=True),  # no stage finding
        _f("exp:pipe", "exposed_communication", 9.0, kind="pipeline"),  # no stage finding: the straggler check
    ]
    assert _links(rows) == {"slow:3": None, "free": None, "ri:idle": "free", "ri:cross": "slow:3", "exp:pipe": "slow:3"}


def test_free_time_without_ranks_is_not_on_the_straggler():
    rows = [_f("slow:3", "slow_rank", 20.0, ranks=[3]), _f("free", "free_time", 8.0, ranks=[])]
    assert _links(rows) == {"slow:3": None, "free": None}


def test_no_straggler_stage_takes_the_waits():
    rows = [
        _f("stage", "stage_imbalance", 10.0),
        _f("ri:exp", "rank_imbalance", 4.0, explains="exposed"),
        _f("ri:idle", "rank_imbalance", 4.0, explains="idle"),
        _f("free", "free_time", 5.0, ranks=[0]),
        _f("wait", "wait_ratio", 2.0),
        _f("spread", "step_time_spread", 1.0, ranks=[0]),
        _f("exp", "exposed_communication", 9.0, kind="collective"),
    ]
    assert _links(rows) == {
        "stage": None,
        "ri:exp": "stage",
        "ri:idle": "free",
        "free": None,
        "wait": "stage",
        "spread": "stage",
        "exp": None,
    }


@pytest.mark.parametrize("slow_gain,exp_gain", [(None, 10.0), (20.0, None)])
def test_unknown_gains_do_not_fold_exposed_communication(slow_gain, exp_gain):
    rows = [
        _f("slow", "slow_rank", slow_gain, ranks=[1]),
        _f("exp", "exposed_communication", exp_gain, kind="collective"),
    ]
    assert _links(rows) == {"slow": None, "exp": None}


def test_waits_without_a_cause_fold_under_exposed_communication():
    rows = [
        _f("w0", "wait_ratio", 3.0),
        _f("w1", "wait_ratio", 7.0),
        _f("exp", "exposed_communication", 9.0, kind="collective"),
    ]
    assert _links(rows) == {"w0": "exp", "w1": "exp", "exp": None}


def test_waits_alone_fold_under_the_largest():
    rows = [_f("w0", "wait_ratio", 3.0), _f("w1", "wait_ratio", 7.0), _f("w2", "wait_ratio", None)]
    assert _links(rows) == {"w0": "w1", "w1": None, "w2": "w1"}
    assert _links([_f("w0", "wait_ratio", 3.0)]) == {"w0": None}  # one wait is its own root


def test_a_folded_exposed_communication_does_not_take_the_waits():
    rows = [
        _f("stage", "stage_imbalance", 10.0),
        _f("exp:pipe", "exposed_communication", 9.0, kind="pipeline"),  # folded under the stage
        _f("w0", "wait_ratio", 3.0),
    ]
    assert _links(rows) == {"stage": None, "exp:pipe": "stage", "w0": "stage"}


def test_a_gain_exactly_its_pool_is_not_cut():
    from analyzers.analyses.advice.engine import account as _account

    rows = [{"id": "a", "rule": "free_time", "gain_ms": 5.0, "symptom_of": None, "explains": "idle", "basis": "b"}]
    _account(rows, {"idle": 5.0, "step": 100.0})
    assert rows[0]["gain_ms"] == 5.0 and rows[0]["basis"] == "b"  # nothing cut: the basis is unchanged
    rows = [{"id": "a", "rule": "free_time", "gain_ms": 6.0, "symptom_of": None, "explains": "idle", "basis": "b"}]
    _account(rows, {"idle": 5.0, "step": 100.0})
    assert (
        rows[0]["gain_ms"] == 5.0
        and rows[0]["basis"] == "b; cut to the idle time no larger finding explains (5 ms of 6)"
    )


def test_order_puts_a_zero_gain_after_a_positive_one_and_unknown_last():
    from analyzers.analyses.advice.engine import order as _order

    rows = [
        {"id": "none", "gain_ms": None, "symptom_of": None},
        {"id": "zero", "gain_ms": 0.0, "symptom_of": None},
        {"id": "half", "gain_ms": 0.5, "symptom_of": None},
        {"id": "s0", "gain_ms": 0.0, "symptom_of": "half"},
        {"id": "s1", "gain_ms": 0.25, "symptom_of": "half"},
    ]
    assert [r["id"] for r in _order(rows)] == ["half", "s1", "s0", "zero", "none"]


def test_severity_without_a_share_is_the_rules_own_or_medium():
    from analyzers.analyses.advice.engine import severity as _severity

    assert _severity({"gain_share": None}) == "medium"
    assert _severity({"gain_share": None, "severity": "high"}) == "high"


def test_a_fold_cycle_is_refused():
    from analyzers.analyses.advice import FOLDS, Fold
    from analyzers.analyses.advice.engine import fold_order

    folds = dict(FOLDS, stage_imbalance=(Fold("slow_rank", "test"),))
    with pytest.raises(ValueError, match="cycle"):
        fold_order({"stage_imbalance", "slow_rank"}, folds)


def test_a_gain_exactly_the_step_is_not_cut_and_the_step_pool_is_drawn_once():
    from analyzers.analyses.advice.engine import account as _account

    # a root whose pool is not in the budget, gain exactly the 100 ms step: nothing cut
    rows = [{"id": "a", "rule": "r", "gain_ms": 100.0, "symptom_of": None, "explains": "other", "basis": "b"}]
    _account(rows, {"step": 100.0})
    assert rows[0]["gain_ms"] == 100.0 and rows[0]["basis"] == "b"
    # two roots drawing on the step itself: 60 ms of 100, then the 40 ms left (the first is not taken twice)
    rows = [
        {"id": "a", "rule": "r", "gain_ms": 60.0, "symptom_of": None, "explains": "step", "basis": "a"},
        {"id": "b", "rule": "r", "gain_ms": 50.0, "symptom_of": None, "explains": "step", "basis": "b"},
    ]
    _account(rows, {"step": 100.0})
    assert [r["gain_ms"] for r in rows] == [60.0, 40.0]
    assert rows[1]["basis"] == "b; cut to the step time no larger finding explains (40 ms of 50)"


def test_the_roots_take_no_more_than_one_rank_spends_not_computing():
    from analyzers.analyses.advice.engine import account as _account

    # rank 0: 60 ms exposed + 10 ms free = 70 ms not computing; rank 1: 40 + 25 = 65. The most exposed (60) and the
    # most idle (25) are two ranks: the pools alone would let the roots claim 85 ms of a step whose ranks each spend
    # at most 70 ms not computing.
    rows = [
        {"id": "a", "rule": "r", "gain_ms": 50.0, "symptom_of": None, "explains": "exposed", "basis": "a"},
        {
            "id": "b",
            "rule": "r",
            "gain_ms": 25.0,
            "symptom_of": None,
            "explains": "idle",
            "basis": "b",
            "generic": True,
        },
        {
            "id": "c",
            "rule": "r",
            "gain_ms": 20.0,
            "symptom_of": None,
            "explains": "exposed",
            "basis": "c",
            "generic": True,
        },
    ]
    _account(rows, {"exposed": 60.0, "idle": 25.0, "rank_step": 70.0, "step": 100.0})
    # a (specific) 50 ms: 20 left of the 70; b (generic, larger) 25 -> 20; c: 10 left of exposed, then 0 of the 70
    assert [r["gain_ms"] for r in rows] == [50.0, 20.0, 0.0]
    assert rows[1]["basis"] == "b; cut to the non-compute time no larger finding explains (20 ms of 25)"
    assert rows[2]["basis"] == "c; cut to the non-compute time no larger finding explains (0 ms of 20)"


def test_fold_order_names_the_cycle_and_takes_rules_without_folds():
    from analyzers.analyses.advice import Fold
    from analyzers.analyses.advice.engine import fold_order, link

    folds = {"a": (Fold("b", "x"),), "b": (Fold("a", "y"),)}
    with pytest.raises(ValueError) as e:
        fold_order({"a", "b"}, folds)
    assert str(e.value) == "advice rules fold under each other in a cycle: a -> b -> a"
    # rule "a" declares no folds at all: it comes first, "b" folds under it
    assert fold_order({"a", "b"}, {"b": (Fold("a", "always"),)}) == ["a", "b"]
    rows = [{"id": "a:all", "rule": "a", "gain_ms": 2.0}, {"id": "b:all", "rule": "b", "gain_ms": 1.0}]
    link(rows, {"b": (Fold("a", "always"),)})
    assert [r["symptom_of"] for r in rows] == [None, "a:all"]
