"""Rule `wait_ratio`: a rank that spends much of its collective time waiting for peers (comm_ops). Its gain is its
wait per step; it is a symptom of a straggler, a stage imbalance, or else part of the exposed communication."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice import exposed_communication, slow_rank, stage_imbalance
from analyzers.analyses.advice.common import fmt, is_p2p, num, table
from analyzers.analyses.advice.rule import Fold, Rule

ID = "wait_ratio"

#: wait / (wait + transit) of a rank's collectives above this: ranks wait for each other
WAIT_RATIO = 0.2
#: ... above this it is high severity (if the wait is also >= WAIT_STEP_SHARE_HIGH of the step time)
WAIT_RATIO_HIGH = 0.5
#: waits shorter than this per step (ms) are not worth a finding, whatever the ratio
WAIT_MIN_MS_PER_STEP = 1.0
#: share of the step time the wait must reach for high severity (when the step time is known)
WAIT_STEP_SHARE_HIGH = 0.05


def _per_rank(co: pd.DataFrame) -> pd.DataFrame | None:
    """Per rank: summed wait and transit, their ratio and the wait per step (send/recv left out), or None."""
    df = pd.DataFrame({"rank": co["rank"], "wait": num(co, "wait_ms"), "transit": num(co, "transit_ms")})
    if "op_type" in co.columns:
        # pipeline send/recv waits are the pipeline bubble (rule pipeline_bubble), not peers being late
        df = df[~is_p2p(co["op_type"])]
    df = df.dropna()
    if df.empty:
        return None
    if "step" in co.columns:
        df["step"] = co.loc[df.index, "step"]
        nsteps = df.groupby("rank")["step"].nunique().clip(lower=1)
    else:
        nsteps = df.groupby("rank")["wait"].size().clip(upper=1)
    per = df.groupby("rank")[["wait", "transit"]].sum()
    per["ratio"] = per["wait"] / (per["wait"] + per["transit"])
    per["wait_per_step"] = per["wait"] / nsteps
    return per


def find(tables, summary):
    co = table(tables, "comm_ops", "rank")
    if co is None:
        return []
    per = _per_rank(co)
    if per is None:
        return []
    step_ms = summary.get("step_time_s") * 1000.0 if isinstance(summary.get("step_time_s"), (int, float)) else None
    out = []
    hit = per[(per["ratio"] > WAIT_RATIO) & (per["wait_per_step"] >= WAIT_MIN_MS_PER_STEP)]
    for rank, r in hit.sort_values("ratio", ascending=False).iterrows():
        big = step_ms is None or r["wait_per_step"] >= WAIT_STEP_SHARE_HIGH * step_ms
        out.append(
            {
                "key": str(int(rank)),
                "ranks": [int(rank)],
                "gain_ms": float(r["wait_per_step"]),
                "explains": "exposed",
                "generic": True,
                "basis": f"rank {rank}'s collective wait per step: comm_ops wait_ms {fmt(r['wait'])} ms / steps",
                "severity": "high" if r["ratio"] > WAIT_RATIO_HIGH and big else "medium",
                "message": (
                    f"Rank {rank} spends {r['ratio']:.0%} of its collective time waiting for peers "
                    f"(> {WAIT_RATIO:.0%}): look for a slow rank, load imbalance or unsynchronized start."
                ),
                "evidence": (
                    f"comm_ops[rank={rank}, op_type not send/recv]: wait {fmt(r['wait'])} ms / (wait+transit) "
                    f"{fmt(r['wait'] + r['transit'])} ms = {fmt(r['ratio'])}; {fmt(r['wait_per_step'])} ms wait "
                    "per step"
                ),
            }
        )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("comm_ops",),
    thresholds={
        "WAIT_RATIO": WAIT_RATIO,
        "WAIT_RATIO_HIGH": WAIT_RATIO_HIGH,
        "WAIT_MIN_MS_PER_STEP": WAIT_MIN_MS_PER_STEP,
        "WAIT_STEP_SHARE_HIGH": WAIT_STEP_SHARE_HIGH,
    },
    folds=(
        Fold(slow_rank.ID, "always"),
        Fold(stage_imbalance.ID, "no straggler"),
        Fold(exposed_communication.ID, "no straggler or stage: part of that exposed time"),
        Fold(ID, "else the largest wait"),
    ),
    fires=(
        "a rank's Σwait / Σ(wait + transit) over its collectives (send/recv excluded: that is the bubble) > "
        "`WAIT_RATIO` and ≥ `WAIT_MIN_MS_PER_STEP` ms wait per step; high if > `WAIT_RATIO_HIGH` and ≥ "
        "`WAIT_STEP_SHARE_HIGH` of the step time; evidence: comm_ops sums for the rank"
    ),
    gain="the rank's Σ `wait_ms` / steps",
)
