"""Rule `slow_rank`: the rank a group's others wait for (slow_ranks, group scope). Its gain is the others' wait per
step; lateness in a group between unbalanced pipeline stages is the stage imbalance's and folds under it."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice import stage_imbalance
from analyzers.analyses.advice.common import fmt, n_steps, spans_stages, stage_of, table
from analyzers.analyses.advice.rule import Fold, Rule

ID = "slow_rank"


def group_members(tables) -> dict[str, set[int]]:
    """Communication group name -> the ranks that took part in its collectives (comm_ops)."""
    co = table(tables, "comm_ops", "group", "rank")
    if co is None:
        return {}
    df = pd.DataFrame({"group": co["group"].astype(str), "rank": pd.to_numeric(co["rank"], errors="coerce")}).dropna()
    return {str(g): {int(x) for x in v} for g, v in df.groupby("group")["rank"].unique().items()}


def stragglers(tables) -> set[int]:
    """Ranks a group's others wait for (slow_ranks, group scope), leaving out ranks late only in a group between
    pipeline stages while the stages are unbalanced (that lateness is the stage imbalance's)."""
    return {
        int(r["ranks"][0])
        for r in find(tables, {})
        if not (r["cross_stage"] and stage_imbalance.bottleneck_stage(tables) is not None)
    }


def _row(r, steps, cross: bool) -> dict:
    # the others' wait for it: its summed lateness (mean over its collectives x their count; a rank that is not
    # last at a collective is 0 ms late there) per step
    late, n = float(r["mean_lateness_ms"]), float(r["n_ops"])
    total = float(r["total_lateness_ms"]) if pd.notna(r.get("total_lateness_ms")) else late * n
    gain = total / steps if steps and pd.notna(total) else None
    return {
        "key": f"{r['group']}:{int(r['rank'])}",
        "ranks": [int(r["rank"])],
        "gain_ms": gain,
        "explains": "exposed",
        "cross_stage": cross,
        "basis": (
            f"straggler lateness x collectives it delays: {fmt(total)} ms late in all (mean {fmt(late)} ms "
            f"over {n:.0f} collectives) / {steps} steps"
            if gain is not None
            else "not estimated: the number of profiled steps is unknown"
        ),
        "severity": "high",
        "message": (
            f"Rank {r['rank']} is the rank the others wait for in "
            f"{(str(r['group_kind']) + ' ') if pd.notna(r.get('group_kind', None)) else ''}group "
            f"'{r['group']}' "
            f"(mean {fmt(r['mean_lateness_ms'])} ms late per collective). Check its input "
            f"pipeline, host load, and compute imbalance."
        ),
        "evidence": (
            f"slow_ranks[group={r['group']}, rank={r['rank']}]: {r['test']} statistic "
            f"{fmt(r['statistic'], 3)} > {fmt(r['critical'], 3)}, last in "
            f"{r['last_arrivals']}/{r['n_ops']} ops"
        ),
    }


def find(tables, summary):
    sr = table(tables, "slow_ranks", "slow")
    if sr is None:
        return []
    hit = sr[sr["slow"].astype(bool) & (sr.get("scope", "group") == "group")]
    steps = n_steps(tables)
    stages, members = stage_of(tables), group_members(tables)
    bottleneck = stage_imbalance.bottleneck_stage(tables)
    out = []
    for _, r in hit.iterrows():
        # a group between pipeline stages (a pp group, or one whose ranks sit on different stages) has a "slow rank"
        # whenever the stages are unbalanced: the rank of the slower stage arrives last at every transfer
        cross = str(r.get("group_kind")) == "pp" or spans_stages(members.get(str(r["group"]), ()), stages)
        out.append(_row(r, steps, cross))
        if cross and bottleneck is not None:
            at = f" (stage {stages[int(r['rank'])]})" if int(r["rank"]) in stages else ""
            named = f"in group '{r['group']}' " if str(r["group"] or "") else ""  # gloo's p2p names no group
            out[-1]["message"] = (
                f"Rank {r['rank']}{at} arrives last {named}between pipeline stages (mean "
                f"{fmt(r['mean_lateness_ms'])} ms late per transfer) while stage {bottleneck[0]} computes "
                f"{bottleneck[1]:.1f}x the least stage: the other stage waits for the slower one. This is the "
                f"pipeline split, not a slow rank: rebalance the layers across stages (see {stage_imbalance.ID})."
            )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("slow_ranks", "comm_ops", "rank_stages", "stages"),
    folds=(Fold(stage_imbalance.ID, "in a group between stages", lambda r, c: bool(r.get("cross_stage"))),),
    fires="a `slow_ranks` row with scope `group` is slow; evidence: test statistic vs critical value, last arrivals",
    gain=(
        "its summed lateness (ms) / steps (`slow_ranks` row: `total_lateness_ms`, = mean lateness × its collectives; "
        "a rank not last at a collective is 0 ms late there): the others' wait per step"
    ),
)
