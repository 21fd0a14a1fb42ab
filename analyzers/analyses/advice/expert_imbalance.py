"""Rule `expert_imbalance`: the MoE experts' load is unbalanced (experts table: max/mean or coefficient of
variation). No gain: the tables do not say what an even load would save."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice.common import fmt, num, table
from analyzers.analyses.advice.rule import Rule

ID = "expert_imbalance"

#: expert load: max/mean above this (high above twice this), or coefficient of variation above EXPERT_CV
EXPERT_MAX_MEAN = 1.5
EXPERT_CV = 0.3


def find(tables, summary):
    ex = table(tables, "experts")
    if ex is None:
        return []
    mm = num(ex, "max_mean_ratio").mean()
    cv = num(ex, "cv").mean()
    if not ((pd.notna(mm) and mm > EXPERT_MAX_MEAN) or (pd.notna(cv) and cv > EXPERT_CV)):
        return []
    return [
        {
            "basis": "not estimated: the step time an even expert load would save is not in the tables",
            "severity": "high" if pd.notna(mm) and mm > 2 * EXPERT_MAX_MEAN else "medium",
            "message": (
                f"Expert load is unbalanced (max/mean {fmt(mm)}, CV {fmt(cv)}): raise the auxiliary "
                f"load-balancing loss coefficient or the capacity factor."
            ),
            "evidence": f"experts: mean max_mean_ratio {fmt(mm, 3)}, mean cv {fmt(cv, 3)} over {len(ex)} steps",
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("experts",),
    thresholds={"EXPERT_MAX_MEAN": EXPERT_MAX_MEAN, "EXPERT_CV": EXPERT_CV},
    fires=(
        "mean max/mean load > `EXPERT_MAX_MEAN` (high above twice that) or CV > `EXPERT_CV`; evidence: experts means"
    ),
    gain="null: the tables do not say what an even load would save (basis says why)",
)
