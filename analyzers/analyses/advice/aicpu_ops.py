"""Rule `aicpu_ops`: AI_CPU kernels longer than AICPU_MIN_TASK_US (msprof-analyze AicpuChecker). No gain: the AI Core
kernel that would replace them is not in the profile."""

from __future__ import annotations

import math

from analyzers.analyses.advice.common import num, table
from analyzers.analyses.advice.rule import Rule

ID = "aicpu_ops"

#: msprof-analyze AicpuChecker._MIN_TASK_DURATION: an AI_CPU task longer than this (us) is worth replacing
AICPU_MIN_TASK_US = 20.0
#: long AI_CPU kernels above this share of the compute time: high severity
AICPU_SHARE_HIGH = 0.05


def _share_text(share: float) -> str:
    """The long kernels' share of compute time, said unknown when the run has no compute time to divide by."""
    return "share of compute time unknown: no compute kernels" if math.isnan(share) else f"{share:.1%} of compute time"


def find(tables, summary):
    k = table(tables, "ops_for_checks", "core_type")
    if k is None:
        return []
    ai = k[k["core_type"].astype(str).str.upper().isin(["AI_CPU", "AICPU"])]
    long = ai[num(ai, "dur_us") > AICPU_MIN_TASK_US]
    if long.empty:
        return []
    comp = k[k["category"].astype(str) == "compute"] if "category" in k.columns else k
    share = long["dur_us"].sum() / comp["dur_us"].sum() if comp["dur_us"].sum() > 0 else math.nan
    types = long.groupby(long["type"].astype(str))["dur_us"].sum().sort_values(ascending=False).head(5)
    return [
        {
            "basis": "not estimated: the AI Core kernel that would replace them is not in the profile",
            "severity": "high" if share > AICPU_SHARE_HIGH else "medium",
            "ranks": sorted(int(x) for x in long["rank"].unique()),
            "stage": None,
            "message": (
                f"{len(long)} AI_CPU kernels run longer than {AICPU_MIN_TASK_US:.0f} us "
                f"({long['dur_us'].sum() / 1000:.2f} ms, "
                f"{_share_text(share)}), led by {', '.join(types.index)}: AI_CPU ops are slow and "
                f"serialize with the AI Core; change the data type (e.g. int64/double -> int32/float) or the "
                f"code so an AI Core kernel is used."
            ),
            "evidence": (
                f"ops[core_type=AI_CPU, dur_us > {AICPU_MIN_TASK_US}]: {len(long)} of {len(ai)} AI_CPU ops; "
                + "; ".join(f"{t} {v / 1000:.3f} ms" for t, v in types.items())
            ),
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("ops_for_checks",),
    thresholds={"AICPU_MIN_TASK_US": AICPU_MIN_TASK_US, "AICPU_SHARE_HIGH": AICPU_SHARE_HIGH},
    fires=(
        "AI_CPU kernels longer than `AICPU_MIN_TASK_US` us (msprof-analyze `AicpuChecker._MIN_TASK_DURATION`; high "
        "above `AICPU_SHARE_HIGH` of compute time); evidence: count, time per op type"
    ),
    gain="null: the AI Core kernel that would replace them is not in the profile (basis says why)",
)
