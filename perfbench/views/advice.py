"""The ranked advice as `show`, `advise` and the dashboard list it: the stored advice table in its ranked order
(causes by gain, each cause's symptoms under it), its gain and "try" lines, and the terminal list."""

from __future__ import annotations

import json

import pandas as pd
from rich.markup import escape
from rich.padding import Padding

from analyzers.catalogue import format_value
from perfbench.views.run_numbers import missing

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def ordered_advice(advice: pd.DataFrame | None) -> list[dict]:
    """The advice table as records in its ranked order (analyzers.analyses.advice: roots by gain, each root's
    symptoms after it). Runs stored before gains existed have no `symptom_of`: most severe first, all roots."""
    if advice is None or advice.empty:
        return []

    def plain(v):
        if hasattr(v, "tolist"):  # a list column read back from parquet is a numpy array
            return v.tolist()
        return None if missing(v) else v

    recs = [{k: plain(v) for k, v in r.items()} for r in advice.to_dict("records")]
    for r in recs:  # the store keeps a list column as its JSON text
        if isinstance(r.get("ranks"), str) and r["ranks"].startswith("["):
            r["ranks"] = json.loads(r["ranks"])
    if "symptom_of" in advice.columns:
        return recs
    return [
        dict(r, symptom_of=None, gain_ms=None, gain_share=None)
        for r in sorted(recs, key=lambda r: SEVERITY_ORDER.get(str(r.get("severity")), 9))
    ]


def advice_tree(recs: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(root, its symptoms) in rank order."""
    roots = [(r, []) for r in recs if not r.get("symptom_of")]
    by_id = {r.get("id"): kids for r, kids in roots}
    for r in recs:
        if r.get("symptom_of") and r["symptom_of"] in by_id:
            by_id[r["symptom_of"]].append(r)
    return roots


def gain_text(rec: dict) -> str:
    """'saves ~12.3 ms/step (7% of the step)' or 'gain unknown'."""
    g = rec.get("gain_ms")
    if g is None:
        return "gain unknown"
    share = rec.get("gain_share")
    return f"saves ~{g:.3g} ms/step" + (f" ({format_value('pct', share)} of the step)" if share is not None else "")


def try_text(rec: dict) -> str:
    t = rec.get("try")
    if not t:
        return ""
    knobs = ", ".join(f"{k}={v}" for k, v in json.loads(t).items())
    pred = rec.get("predicted_step_ms")
    return f"try {knobs}" + (f" (predicted step {pred:.4g} ms)" if pred is not None else "")


def print_advice(
    console, recs: list[dict], show_all: bool = False, max_roots: int = 5, skip_first: bool = False
) -> None:
    """The ranked advice: each root with its gain, basis, knob and evidence, its symptoms indented under it;
    at most `max_roots` roots unless show_all."""
    tree = advice_tree(recs)
    shown = tree if show_all else tree[:max_roots]
    for i, (root, kids) in enumerate(shown):
        if skip_first and i == 0:
            continue
        acc = (root.get("accuracy") or {}).get("text")  # perfbench advise: the rule's measured accuracy
        head = f"{i + 1}. [{root.get('severity')}] {gain_text(root)}{f' ({acc})' if acc else ''}: {root['message']}"
        console.print(Padding(escape(head), (0, 0, 0, 2), expand=False), highlight=False)
        extra = [f"gain basis: {root['basis']}"] if root.get("basis") else []
        extra += [try_text(root)] if root.get("try") else []
        extra += [f"evidence: {root['evidence']}"] if root.get("evidence") else []
        for line in extra:
            console.print(Padding(f"[dim]{escape(line)}[/dim]", (0, 0, 0, 5), expand=False), highlight=False)
        for k in kids:
            console.print(
                Padding(
                    escape(f"- symptom ({k['rule']}, explained by the cause above): {k['message']}"),
                    (0, 0, 0, 5),
                    expand=False,
                ),
                highlight=False,
            )
    if len(tree) > len(shown):
        console.print(f"  [dim]{len(tree) - len(shown)} more finding(s) with smaller gains: --all shows them[/dim]")
