"""The time a step has to give, per kind (the pools the engine draws root gains from; docs/advice.md "Each stretch
of time explained once")."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice.common import budget_part, num, stage_of, step_ms, table, trusted


def _within_stage_spread(tables) -> float | None:
    """The larger of the largest within-stage computing spread (rank_imbalance rows whose two ranks share a stage,
    or whose stages are unknown) and the ranks' median step-time spread (workload_steps), or None."""
    within = []
    ri = table(tables, "rank_imbalance", "dimension", "spread_ms", "max_rank", "min_rank")
    if ri is not None:
        stages = stage_of(tables)
        for _, r in ri[ri["dimension"] == "computing"].iterrows():
            a, b = stages.get(int(r["max_rank"])), stages.get(int(r["min_rank"]))
            if (a is None or b is None or a == b) and pd.notna(r["spread_ms"]):
                within.append(float(r["spread_ms"]))
    ws = table(tables, "workload_steps", "rank", "step_time_s")
    if ws is not None and ws["rank"].nunique() > 1:
        per = ws.groupby("rank")["step_time_s"].median()
        within.append(float(per.max() - per.median()) * 1000.0)
    return max(within) if within else None


def _rank_step(sb: pd.DataFrame | None) -> float | None:
    """ms per step: the largest rank's communication not overlapped + free + overlapped time, each its median over
    steps (null when a part is unknown)."""
    parts = ("communication_not_overlapped_us", "free_us", "overlapped_us")
    if sb is None or "rank" not in sb.columns or any(c not in sb.columns for c in parts):
        return None
    med = pd.DataFrame({"rank": sb["rank"], **{c: num(sb, c) for c in parts}}).groupby("rank").median()
    per = med.sum(axis=1, min_count=len(parts)).dropna()
    return float(per.max()) / 1000.0 if len(per) else None


def time_budget(tables, summary) -> dict:
    """The time a step has to give, per kind, in ms per step (null = unknown): `exposed` communication (the
    collectives' wait for a core included: fusion removes it with the collectives, small_packets) and `idle` (free)
    time of the most exposed / most idle rank (step_breakdown medians over steps), `overlapped`: the communication
    overlapped with compute (the same way; only a finding that names it in `also_explains` draws on it: collectives
    whose threads take the host cores the compute needs, small_packets on the CPU), `imbalance` = the stages'
    computing spread (max - min, stages table) + the largest within-group computing spread (rank_imbalance, groups
    whose ranks share a stage) or the ranks' median step-time spread (workload steps), whichever is larger; and
    `step` (summary step_time_s); `rank_step`: the largest, over ranks, of one rank's exposed + idle + overlapped
    time (medians over steps): a fix can take no more off a step than one rank spends not computing (the most
    exposed and the most idle rank may be two ranks). Root gains are drawn from these pools."""
    sb = trusted(table(tables, "step_breakdown"))
    out = {
        "exposed": budget_part(sb, "communication_not_overlapped_us"),
        "idle": budget_part(sb, "free_us"),
        "overlapped": budget_part(sb, "overlapped_us"),
        "imbalance": None,
        "step": step_ms(summary),
        "rank_step": _rank_step(sb),
    }
    imb = []
    st = table(tables, "stages", "computing_ms")
    if st is not None:
        c = num(st, "computing_ms").dropna()
        c = c[c > 0]
        if len(c) >= 2:
            imb.append(float(c.max() - c.min()))
    within = _within_stage_spread(tables)
    if within is not None:
        imb.append(within)
    if imb:
        out["imbalance"] = float(sum(imb))
    return out
