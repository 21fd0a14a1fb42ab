"""Rule `rank_imbalance`: msprof-analyze's slow-rank rule per parallel group (the `rank_imbalance` table,
analyzers.analyses.imbalance): the spread between a group's slowest and fastest rank in computing, exposed
communication or free time. Between ranks of different pipeline stages it is the stage imbalance's symptom."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice import free_time, slow_rank, stage_imbalance
from analyzers.analyses.advice.common import spans_stages, stage_of, table
from analyzers.analyses.advice.rule import Fold, Rule
from analyzers.analyses.imbalance import RATIO_THRESHOLD

ID = "rank_imbalance"

#: cross-rank imbalance above this ratio (spread / mean step total) is high severity
IMBALANCE_HIGH = 0.2
#: msprof-analyze's slow-rank rule flags a group above this ratio (the table's `flagged`; quoted in the evidence)
IMBALANCE_FLAGGED = RATIO_THRESHOLD

_TEXT = {
    "computing": (
        "Rank {max_rank} computes {spread} ms more per step than rank {min_rank} in {group} ({max} vs {min} "
        "ms): the other ranks of the group wait for it. Check its data shard / sequence lengths, device "
        "frequency and host interference."
    ),
    "communication": (
        "In {group}, rank {max_rank} spends {max} ms per step in exposed communication and rank "
        "{min_rank} only {min} ms (spread {spread} ms): the ranks wait for a late rank, most likely "
        "rank {min_rank} (it waits least). Look at what delays it (compute, host, data)."
    ),
    "free": (
        "In {group}, rank {max_rank} idles {max} ms per step and rank {min_rank} {min} ms (spread {spread} ms): "
        "host-side delay on rank {max_rank} (data loading, op dispatch, Python, other processes)."
    ),
}
#: the time each dimension's spread is drawn from (accounting)
_EXPLAINS = {"computing": "imbalance", "communication": "exposed", "free": "idle"}


def _ms(x) -> str:
    """A time in ms with 3 decimals, or "unknown" (a null in the table is not a number to print)."""
    return f"{float(x):.3f}" if pd.notna(x) else "unknown"


def _row(r, group: str, stage) -> dict:
    return {
        "key": f"{r['group']}:{r['dimension']}",
        "gain_ms": float(r["spread_ms"]) if pd.notna(r["spread_ms"]) else None,
        "explains": _EXPLAINS[r["dimension"]],
        "generic": r["dimension"] != "computing",
        "basis": (
            f"the spread between the slowest and the fastest rank of the group, which the others wait "
            f"for each step: {_ms(r['max_ms'])} - {_ms(r['min_ms'])} ms"
        ),
        "severity": "high" if r["ratio"] > IMBALANCE_HIGH else "medium",
        "ranks": [int(r["max_rank"]), int(r["min_rank"])],
        "stage": stage,
        "message": _TEXT[r["dimension"]].format(
            group=group,
            max_rank=int(r["max_rank"]),
            min_rank=int(r["min_rank"]),
            spread=_ms(r["spread_ms"]),
            max=_ms(r["max_ms"]),
            min=_ms(r["min_ms"]),
        ),
        "evidence": (
            f"rank_imbalance[group={r['group']}, dimension={r['dimension']}]: rank {int(r['max_rank'])} "
            f"{_ms(r['max_ms'])} ms - rank {int(r['min_rank'])} {_ms(r['min_ms'])} ms = {_ms(r['spread_ms'])} ms "
            f"/ mean step total {_ms(r['mean_total_ms'])} ms = {_ms(r['ratio'])} > {IMBALANCE_FLAGGED} "
            f"(msprof-analyze slow-rank rule)"
        ),
    }


def find(tables, summary):
    ri = table(tables, "rank_imbalance", "flagged")
    if ri is None:
        return []
    out = []
    stages = stage_of(tables)
    for _, r in ri[ri["flagged"].astype(bool)].iterrows():
        group = "all ranks" if r["group"] == "all" else f"group {r['group']}"
        stage = int(str(r["group"]).split()[-1]) if r["kind"] == "stage" else None
        hi_s, lo_s = stages.get(int(r["max_rank"])), stages.get(int(r["min_rank"]))
        cross = spans_stages([r["max_rank"], r["min_rank"]], stages)
        row = _row(r, group, stage)
        row["cross_stage"] = cross
        if cross:  # ranks of different pipeline stages do different work by design: not a data-shard problem
            row["message"] = (
                f"In {group}, rank {int(r['max_rank'])} (stage {hi_s}) and rank {int(r['min_rank'])} "
                f"(stage {lo_s}) differ by {_ms(r['spread_ms'])} ms per step in {r['dimension']} time: "
                f"they sit on different pipeline stages, so this is the pipeline split, not a slow "
                f"rank. Rebalance the layers across stages (see {stage_imbalance.ID})."
            )
        out.append(row)
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("rank_imbalance", "rank_stages"),
    thresholds={"IMBALANCE_HIGH": IMBALANCE_HIGH, "IMBALANCE_FLAGGED": IMBALANCE_FLAGGED},
    folds=(
        Fold(stage_imbalance.ID, "between ranks of different stages", lambda r, c: bool(r.get("cross_stage"))),
        Fold(slow_rank.ID, "communication", lambda r, c: r.get("explains") == "exposed"),
        Fold(stage_imbalance.ID, "communication, no straggler", lambda r, c: r.get("explains") == "exposed"),
        Fold(
            slow_rank.ID,
            "free, its most idle rank the straggler",
            lambda r, c: r.get("explains") == "idle" and bool(r["ranks"]) and r["ranks"][0] in c["ranks"],
        ),
        Fold(free_time.ID, "free: under that finding's root", lambda r, c: r.get("explains") == "idle", True),
    ),
    fires=(
        "a flagged `rank_imbalance` row (msprof-analyze's slow-rank rule per group: spread / mean step total > "
        "`IMBALANCE_FLAGGED`; high above `IMBALANCE_HIGH`); names the rank with the most compute / least exposed "
        "communication / most free time; evidence: spread, mean total, ratio"
    ),
    gain="`spread_ms` (max − min of the group's ranks)",
)
