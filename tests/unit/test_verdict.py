"""The one verdict fold of `check` (baseline groups, --ab metrics, --history) and its exit codes, by hand."""

from __future__ import annotations

import pytest

from perfbench.regress.verdict import decide, exit_code, fold, reason


@pytest.mark.parametrize(
    "verdicts, empty, expected",
    [
        (["unchanged", "regression", "undecided"], "unchanged", "regression"),  # a regression outranks everything
        (["improvement", "undecided"], "unchanged", "undecided"),  # could not decide outranks an improvement
        (["unchanged", "improvement", "skipped"], "unchanged", "improvement"),
        (["unchanged", "skipped"], "unchanged", "unchanged"),
        (["skipped"], "unchanged", "unchanged"),  # a skipped metric changes nothing
        ([], "unchanged", "unchanged"),
        ([], "undecided", "undecided"),  # nothing compared: the caller's word for it
        ([], "no-history", "no-history"),
        (["improvement"], "no-history", "improvement"),
        (("unchanged", "regression"), "unchanged", "regression"),  # any iterable, read once (made an iterator below)
    ],
)
def test_fold(verdicts, empty, expected):
    if isinstance(verdicts, tuple):  # a fresh iterator per run: a parameter iterator is spent after one run (mutmut)
        verdicts = iter(verdicts)
    assert fold(verdicts, empty=empty) == expected


def test_fold_default_for_nothing_is_unchanged():
    assert fold([]) == "unchanged"


@pytest.mark.parametrize(
    "verdict, code",
    [("regression", 1), ("undecided", 2), ("no-history", 2), ("unchanged", 0), ("improvement", 0), ("skipped", 0)],
)
def test_exit_code(verdict, code):
    assert exit_code(verdict) == code


@pytest.mark.parametrize(
    "significant, worse, limit, expected",
    [
        (True, 0.06, 0.05, "regression"),
        (True, 0.05, 0.05, "unchanged"),  # exactly at the limit is not past it
        (True, -0.05, 0.05, "unchanged"),
        (True, -0.06, 0.05, "improvement"),
        (False, 0.50, 0.05, "unchanged"),  # large but not significant
        (False, -0.50, 0.05, "unchanged"),
        (True, 0.0, 0.0, "unchanged"),
        (True, 1e-9, 0.0, "regression"),
    ],
)
def test_decide(significant, worse, limit, expected):
    assert decide(significant, worse, limit) == expected


def test_reason_names_what_kept_a_metric_unchanged_else_the_change():
    def changed() -> str:
        raise AssertionError("not asked for an unchanged verdict")

    assert reason("unchanged", "p=0.2 ≥ 0.05", "|change| ≤ 5.0%", changed) == "p=0.2 ≥ 0.05; |change| ≤ 5.0%"
    assert reason("unchanged", None, "|change| ≤ 5.0%", changed) == "|change| ≤ 5.0%"
    assert reason("unchanged", "no test", None, changed) == "no test"
    assert reason("regression", None, None, lambda: "p=0.01 < 0.05, worse by 9.0% > 5.0%") == (
        "p=0.01 < 0.05, worse by 9.0% > 5.0%"
    )
