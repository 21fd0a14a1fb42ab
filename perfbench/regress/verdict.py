"""One rule that folds the verdicts of a check into one, and the exit code of that verdict.

Used by `check --baseline` (metrics into a group, groups into the check), `check --ab` (metrics into the job) and
`check --history` (configurations x metrics into the history's verdict, and that with the baseline's):

* regression, if any verdict is a regression;
* else `empty` (undecided, or no-history for the history gate) when nothing was compared;
* else undecided, if any verdict is undecided;
* else improvement, if any is an improvement;
* else unchanged (skipped metrics change nothing).

Exit codes: 1 regression, 2 could not decide (undecided, no-history), 0 otherwise.
"""

from __future__ import annotations

from typing import Callable, Iterable

VERDICTS = ("regression", "improvement", "unchanged", "undecided", "skipped")
#: the verdicts of something that was compared (the history gate's other verdicts: skipped, no-history)
DECIDED = ("regression", "improvement", "unchanged")
EXIT_CODES = {"regression": 1, "undecided": 2, "no-history": 2}


def fold(verdicts: Iterable[str], *, empty: str = "unchanged") -> str:
    """The one verdict of several (see the module's rule); `empty` when there are none."""
    vs = list(verdicts)
    if "regression" in vs:
        return "regression"
    if not vs:
        return empty
    if "undecided" in vs:
        return "undecided"
    return "improvement" if "improvement" in vs else "unchanged"


def decide(significant: bool, worse: float, limit: float) -> str:
    """One metric's verdict from its test and its effect `worse` (> 0 = worse, in the metric's own terms: a
    ratio - 1 or points): regression when significant and worse by more than `limit`, improvement when significant
    and better by more than `limit`, else unchanged."""
    if significant and worse > limit:
        return "regression"
    if significant and worse < -limit:
        return "improvement"
    return "unchanged"


def reason(verdict: str, not_significant: str | None, within_limit: str | None, changed: Callable[[], str]) -> str:
    """The line that says why a metric got its verdict: for unchanged, what kept it so (the test not significant,
    the change within the limit: the texts given for those that hold, None for the others, joined by '; '); else
    the significant change, `changed()`."""
    if verdict != "unchanged":
        return changed()
    return "; ".join(t for t in (not_significant, within_limit) if t is not None)


def exit_code(verdict: str) -> int:
    """1 for a regression, 2 when the check could not decide, else 0."""
    return EXIT_CODES.get(verdict, 0)
