"""Rule `dropped_tokens`: the expert capacity limit drops routed tokens (experts table). No gain: dropped tokens
cost accuracy, not step time."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice.common import fmt, num, table
from analyzers.analyses.advice.rule import Rule

ID = "dropped_tokens"

#: dropped tokens above this share of routed tokens
DROPPED_FRACTION = 0.01


def find(tables, summary):
    ex = table(tables, "experts")
    if ex is None:
        return []
    dropped = num(ex, "dropped_fraction").mean()
    if not (pd.notna(dropped) and dropped > DROPPED_FRACTION):
        return []
    return [
        {
            "basis": "not estimated: dropped tokens cost accuracy, not step time",
            "severity": "medium",
            "message": f"{dropped:.1%} of routed tokens are dropped by the expert capacity limit: raise "
            "capacity_factor.",
            "evidence": f"experts: mean dropped_fraction {fmt(dropped, 4)} over {len(ex)} steps",
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("experts",),
    thresholds={"DROPPED_FRACTION": DROPPED_FRACTION},
    fires="mean dropped fraction of routed tokens > `DROPPED_FRACTION`; evidence: experts means",
    gain="null: dropped tokens cost accuracy, not step time (basis says why)",
)
