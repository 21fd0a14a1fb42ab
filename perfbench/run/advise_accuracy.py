"""Each advice rule's measured accuracy, from the stored `advise --try` trials (`<results>/advice/trials.jsonl`).

A trial counts when it is `ok`, its predicted gain is > 0 and its measured gain is known: its ratio is measured /
predicted gain. Per rule: the number of such trials, the smallest and largest ratio, and their median.
`perfbench advise` prints it next to each finding's gain ("this rule's gains measured 0.8-1.1x on 6 trials") and
`--json` carries it as each row's `accuracy` (null for a rule never tried)."""

from __future__ import annotations

import math
import statistics


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else f


def rule_accuracy(trials) -> dict[str, dict]:
    """{rule: {trials, low, high, median}} over the usable trials (a pandas DataFrame or a list of dicts with the
    trials table's columns: rule, status, predicted_gain_ms, measured_gain_ms)."""
    rows = trials.to_dict("records") if hasattr(trials, "to_dict") else list(trials or [])
    ratios: dict[str, list[float]] = {}
    for r in rows:
        rule = r.get("rule")
        pred, meas = _num(r.get("predicted_gain_ms")), _num(r.get("measured_gain_ms"))
        if not isinstance(rule, str) or r.get("status") != "ok" or pred is None or pred <= 0 or meas is None:
            continue
        ratios.setdefault(rule, []).append(meas / pred)
    return {
        rule: {"trials": len(v), "low": min(v), "high": max(v), "median": statistics.median(v)}
        for rule, v in sorted(ratios.items())
    }


def accuracy_text(acc: dict | None) -> str | None:
    """ "this rule's gains measured 0.8-1.1x on 6 trials" (one trial: "measured 0.9x on 1 trial"); None without."""
    if not acc:
        return None
    n = acc["trials"]
    low, high = f"{acc['low']:.1f}", f"{acc['high']:.1f}"
    span = f"{low}x" if low == high else f"{low}-{high}x"
    return f"this rule's gains measured {span} on {n} trial{'s' if n != 1 else ''}"


def with_accuracy(advice: list[dict], trials) -> list[dict]:
    """The advice rows (ordered_advice's dicts) each with `accuracy`: its rule's entry of rule_accuracy plus
    `text`, or None when the rule has no usable trial."""
    acc = rule_accuracy(trials)
    out = []
    for row in advice:
        a = acc.get(row.get("rule"))
        out.append(dict(row, accuracy=None if a is None else dict(a, text=accuracy_text(a))))
    return out
