"""Rule `step_time_spread`: a rank whose median workload step time is well above the ranks' median
(workload_steps). Its gain is that excess; it folds under its own rank's straggler, else a stage imbalance."""

from __future__ import annotations

from analyzers.analyses.advice import slow_rank, stage_imbalance
from analyzers.analyses.advice.common import table
from analyzers.analyses.advice.rule import Fold, Rule

ID = "step_time_spread"

#: step time of one rank more than this much above the median rank (workload steps)
STEP_TIME_SPREAD = 0.1


def find(tables, summary):
    ws = table(tables, "workload_steps", "rank", "step_time_s")
    if ws is None or ws["rank"].nunique() < 2:
        return []
    per = ws.groupby("rank")["step_time_s"].median()
    med = per.median()
    if not med > 0:
        return []
    out = []
    for rank, v in per.items():
        if v > (1 + STEP_TIME_SPREAD) * med:
            out.append(
                {
                    "key": str(int(rank)),
                    "gain_ms": (v - med) * 1000.0,
                    "explains": "imbalance",
                    "generic": True,
                    "basis": f"rank {rank}'s median step time above the ranks' median: ({v:.4f} - {med:.4f}) s",
                    "ranks": [int(rank)],
                    "severity": "medium",
                    "message": f"Rank {rank}'s median step time {v:.4f} s is {v / med - 1:.0%} above the ranks' "
                    f"median {med:.4f} s.",
                    "evidence": f"workload_steps[rank={rank}]: median step_time_s {v:.4f}",
                }
            )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("workload_steps",),
    thresholds={"STEP_TIME_SPREAD": STEP_TIME_SPREAD},
    folds=(
        Fold(slow_rank.ID, "its own rank", lambda r, c: r["ranks"] == c["ranks"]),
        Fold(stage_imbalance.ID, "else"),
    ),
    fires="a rank's median workload step time > (1 + `STEP_TIME_SPREAD`) × the ranks' median; evidence: workload_steps",
    gain="(the rank's median step time − the ranks' median) × 1000",
)
