"""Rule `slow_rank`: the rank a group's others wait for (slow_ranks, group scope). Its gain is the others' wait per
step; lateness in a group between unbalanced pipeline stages is the stage imbalance's and folds under it. A rank that
burned more CPU than the others only in the profiled steps (the workload's own step records: its extra CPU time does
not outlast the profiler) is late because of the profiler's own work on it: its gain is 0, and it is no straggler."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice import stage_imbalance
from analyzers.analyses.advice.common import fmt, n_steps, spans_stages, stage_of, table
from analyzers.analyses.advice.rule import CONFIG_KEY, Fold, Rule
from analyzers.schema import warmup_steps

ID = "slow_rank"

#: a slow rank whose CPU time per step above the group's other ranks (workload_steps `cpu_s`, median over steps)
#: in the unprofiled measured steps is below this share of that in the profiled steps is late because of the
#: profiler's own work on it (a profiler artifact), not a straggler of the job
PROFILED_ONLY_SHARE = 0.5


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
        and not r.get("profiler_only")
    }


def cpu_excess_ms(tables, rank: int, others) -> tuple[float, float] | None:
    """(profiled, unprofiled): the rank's CPU time per step above the median of `others` in the same step
    (workload_steps `cpu_s`), the median over the measured (after `train.warmup_steps`) profiled and unprofiled steps,
    in ms; None unless both kinds of step are known."""
    ws = table(tables, "workload_steps", "rank", "step", "cpu_s", "profiled")
    others = sorted({int(o) for o in others} - {int(rank)})
    if ws is None or not others:
        return None
    ws = ws.assign(step=pd.to_numeric(ws["step"], errors="coerce"), cpu=pd.to_numeric(ws["cpu_s"], errors="coerce"))
    ws = ws[ws["step"] >= warmup_steps(tables.get(CONFIG_KEY))].dropna(subset=["step", "cpu"])
    cpu = ws.pivot_table(index="step", columns="rank", values="cpu", aggfunc="median")
    if rank not in cpu.columns or not set(others) & set(cpu.columns):
        return None
    excess = (cpu[rank] - cpu[[o for o in others if o in cpu.columns]].median(axis=1)).dropna() * 1000.0
    profiled = ws.groupby("step")["profiled"].agg(lambda v: bool(v.astype(bool).any())).reindex(excess.index)
    profiled = profiled.fillna(False).astype(bool)
    prof, unprof = excess[profiled], excess[~profiled]
    if prof.empty or unprof.empty:
        return None
    return float(prof.median()), float(unprof.median())


def _profiler_only(row: dict, tables, members) -> None:
    """Mark `row` a profiler artifact (gain 0, `profiler_only`) when its rank burned more CPU than the group's others
    in the profiled steps and less than PROFILED_ONLY_SHARE of that in the unprofiled ones (cpu_excess_ms)."""
    rank = row["ranks"][0]
    ex = cpu_excess_ms(tables, rank, members)
    if ex is None or not (ex[0] > 0 and ex[1] < PROFILED_ONLY_SHARE * ex[0]):
        return
    said = (
        f"rank {rank} burned {fmt(ex[0])} ms more CPU per step than the group's other ranks in the profiled steps "
        f"and {fmt(ex[1])} ms in the unprofiled ones (workload_steps cpu_s, median over the measured steps)"
    )
    row.update(
        profiler_only=True,
        gain_ms=0.0,
        severity="low",
        basis=f"0: {said}: the profiler's own work on it; an unprofiled run does not wait for it (was {row['basis']})",
        message=(
            f"Rank {rank} arrives last in the profiled steps only: it burned {fmt(ex[0])} ms more CPU per step than "
            f"the others while profiled and {fmt(ex[1])} ms otherwise. That is the profiler's own work on this rank, "
            "not a straggler of the job."
        ),
        evidence=f"{row['evidence']}; workload_steps: {said}",
    )


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
        _profiler_only(out[-1], tables, members.get(str(r["group"]), ()))
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
    needs=("slow_ranks", "comm_ops", "rank_stages", "stages", "workload_steps", CONFIG_KEY),
    thresholds={"PROFILED_ONLY_SHARE": PROFILED_ONLY_SHARE},
    folds=(Fold(stage_imbalance.ID, "in a group between stages", lambda r, c: bool(r.get("cross_stage"))),),
    fires="a `slow_ranks` row with scope `group` is slow; evidence: test statistic vs critical value, last arrivals",
    gain=(
        "its summed lateness (ms) / steps (`slow_ranks` row: `total_lateness_ms`, = mean lateness × its collectives; "
        "a rank not last at a collective is 0 ms late there): the others' wait per step. 0 when the rank's CPU time "
        "per step above the group's other ranks (`workload_steps` `cpu_s`, median over the measured steps) is positive "
        "in the profiled steps and below `PROFILED_ONLY_SHARE` of that in the unprofiled ones: the profiler's own "
        "work on it, which an unprofiled run does not wait for (and the idle-time rule does not leave its idle time "
        "out as a straggler's)"
    ),
)
