"""The docs generated from the rule records: docs/advice.md's rule records and gains tables and docs/analyzers.md's
table of when each rule fires with its thresholds (tests/unit/test_advice_records.py fails when the docs differ).

    python -m analyzers.analyses.advice           # prints the three blocks, each between its markers
    python -m analyzers.analyses.advice --write   # rewrites them in docs/advice.md and docs/analyzers.md
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzers.analyses.advice.rule import Rule

#: (file under docs/, marker name) of each generated block
BLOCKS = (("advice.md", "rule-records"), ("advice.md", "rule-gains"), ("analyzers.md", "rule-thresholds"))


def _thresholds(rule: Rule) -> str:
    return ", ".join(f"`{n}` = {v!r}" for n, v in rule.thresholds.items()) or "–"


def records_markdown(rules: Sequence[Rule]) -> str:
    """One row per rule: its module, the tables it reads, its thresholds and the causes it folds under."""
    lines = [
        "| finding | module | needs | thresholds | folds under (first that holds) |",
        "|---|---|---|---|---|",
    ]
    for rule in rules:
        folds = "; ".join(f"`{f.cause}` ({f.doc})" for f in rule.folds) or "–"
        needs = ", ".join(f"`{t}`" for t in rule.needs)
        lines.append(f"| `{rule.id}` | `{rule.id}.py` | {needs} | {_thresholds(rule)} | {folds} |")
    return "\n".join(lines) + "\n"


def gains_markdown(rules: Sequence[Rule]) -> str:
    """One row per rule: its gain formula, the findings that fold under it, its knob and what it tries."""
    lines = ["| rule | gain_ms | folds under it (symptoms) | try |", "|---|---|---|---|"]
    for rule in rules:
        symptoms = "; ".join(
            f"`{o.id}` ({f.doc})" for o in rules for f in o.folds if f.cause == rule.id and o is not rule
        )
        if any(f.cause == rule.id for f in rule.folds):
            symptoms = "; ".join(filter(None, [symptoms, "its own other roots, under the largest"]))
        lines.append(f"| `{rule.id}` | {rule.gain} | {symptoms or '–'} | {rule.tries} |")
    return "\n".join(lines) + "\n"


def thresholds_markdown(rules: Sequence[Rule]) -> str:
    """docs/analyzers.md: when each rule fires (and the severity label a finding keeps when its gain is unknown)."""
    lines = ["| rule | fires when | thresholds |", "|---|---|---|"]
    for rule in rules:
        lines.append(f"| `{rule.id}` | {rule.fires} | {_thresholds(rule)} |")
    return "\n".join(lines) + "\n"


def generated(rules: Sequence[Rule]) -> dict[tuple[str, str], str]:
    """(docs file, marker) -> the text between `<!-- marker:begin -->` and `<!-- marker:end -->`."""
    text = {"rule-records": records_markdown, "rule-gains": gains_markdown, "rule-thresholds": thresholds_markdown}
    return {(doc, name): text[name](rules) for doc, name in BLOCKS}


def block(text: str, name: str) -> str | None:
    """The text between a generated block's markers in a doc, None when the markers are missing."""
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        return None
    return text[text.index(begin) + len(begin) : text.index(end)]
