"""Rule `stage_imbalance`: the slowest pipeline stage (by compute) when it computes STAGE_IMBALANCE_RATIO x the least
one. Its gain is the slowest stage's compute above the stages' mean; a hand-given split has the balanced one to try."""

from __future__ import annotations

import pandas as pd

from analyzers.analyses.advice.common import exposure_split, num, step_ms, table, trusted
from analyzers.analyses.advice.rule import CONFIG_KEY, Rule
from workloads.parallel.layout_math import layer_costs, stage_bounds

ID = "stage_imbalance"

#: pipeline stages: max/min of the stages' computing time above this names the slowest stage the bottleneck
#: (perfbench's choice: 20 % more compute on one stage idles every other stage that long per micro-batch)
STAGE_IMBALANCE_RATIO = 1.2
#: ... above this it is high severity
STAGE_IMBALANCE_HIGH = 1.5


def _computing(tables):
    """The stages with a known, positive computing_ms (stages table), None when fewer than two."""
    st = table(tables, "stages", "computing_ms")
    if st is None:
        return None
    st = st.dropna(subset=["computing_ms"])
    st = st[st["computing_ms"] > 0]
    return st if len(st) >= 2 else None


def bottleneck_stage(tables):
    """(slowest stage, its computing / the least stage's) when above STAGE_IMBALANCE_RATIO, else None."""
    st = _computing(tables)
    if st is None:
        return None
    ratio = st["computing_ms"].max() / st["computing_ms"].min()
    return (int(st.loc[st["computing_ms"].idxmax(), "stage"]), float(ratio)) if ratio > STAGE_IMBALANCE_RATIO else None


def _wait_text(tables, lo) -> str:
    """What the least-computing stage spends waiting for the slowest (exposed communication), or ''."""
    sb = trusted(table(tables, "step_breakdown"))
    if sb is None:
        return ""
    _, per = exposure_split(tables, sb)
    if per is None:
        return ""
    low = per[per["stage"] == lo["stage"]]
    if not (len(low) and low["exposed_us"].mean() > 0):
        return ""
    return (
        f" Stage {int(lo['stage'])} spends {low['exposed_us'].mean() / 1000:.3g} ms per step "
        f"(median) in exposed communication ({low['exposed_p2p_us'].sum() / low['exposed_us'].sum():.0%} "
        f"pipeline send/receive), waiting for it."
    )


def _balanced_split_step(tables, summary, ranks: list[int], scale: float) -> float | None:
    """The step with the layers rebalanced: everything on the slowest stage's critical path moves with its
    layers (its compute, the host work of its layers, its idle time, its waits at the other stages' transfers,
    which the faster stages stop causing once they carry their share), except its exposed collective
    (data-parallel) communication; that part shrinks by `scale` (_split_scale: the balanced split's slowest stage
    compute / the slowest stage's now). Null without a step."""
    step = step_ms(summary)
    if step is None:
        return None
    fixed = 0.0
    sb = trusted(table(tables, "step_breakdown"))
    if sb is not None:
        _, per = exposure_split(tables, sb)
        if per is not None:
            mine = per[per.index.isin(ranks)]["exposed_collective_us"]
            fixed = min(step, max(0.0, float(mine.median()) / 1000.0)) if len(mine) else 0.0
    return fixed + (step - fixed) * scale


def _split_scale(st, cfg: dict) -> float:
    """The balanced split's slowest stage compute / the slowest stage's now. The workload cuts its stages by the
    layers' estimated costs (workloads.parallel.layout_math: MACs for ResNet), and layers of one cost do not take one
    time (a CPU runs early high-resolution convolutions slower per MAC): each layer's time is its cost x its present
    stage's measured compute per unit of cost, summed over the stages of the split the workload takes without
    `pipeline_split`. The stages' mean / the slowest when the workload's layer costs or a stage's compute are
    unknown."""
    hi = float(st["computing_ms"].max())
    mean = float(st["computing_ms"].mean()) / hi
    split, costs = (cfg.get("parallel") or {}).get("pipeline_split"), layer_costs(cfg)
    if not split or costs is None:
        return mean
    try:
        now, balanced = stage_bounds(costs, len(split), split), stage_bounds(costs, len(split), None)
    except ValueError:
        return mean
    comp = {int(s): float(c) for s, c in zip(st["stage"], st["computing_ms"])}
    if set(comp) != set(range(len(split))):
        return mean
    units = [sum(costs[lo:hi_]) for lo, hi_ in now]
    if min(units) <= 0:
        return mean
    # each layer's time per unit of cost: its present stage's
    rate = [comp[s] / units[s] for s, (lo, hi_) in enumerate(now) for _ in range(lo, hi_)]
    return max(sum(c * r for c, r in zip(costs[lo:hi_], rate[lo:hi_])) for lo, hi_ in balanced) / hi


def _bubble_factor(tables, stage: int) -> float:
    """The slowest stage's window after the split, per unit of its busy time, against now: (1 - its median bubble
    fraction now) / (1 - its schedule's ideal bubble (S-1)/(M+S-1)). Unbalanced, the faster stages keep it fed and it
    idles little of its window; balanced, every stage idles at least the ideal share of it (the fill and the
    drain). Measured 2026-11-28 (ResNet, 2 stages, 4 micro-batches, split [2, 16] against the cost-balanced 7 | 11):
    stage 1 busy 365 ms of a 434 ms window (bubble 0.16), balanced 245 ms of 336 (0.27). 1 when the pipeline table
    is missing."""
    pl = table(tables, "pipeline", "stage", "bubble_fraction", "ideal_fraction")
    if pl is None:
        return 1.0
    mine = pl[pd.to_numeric(pl["stage"], errors="coerce") == stage]
    b, ideal = num(mine, "bubble_fraction").median(), num(mine, "ideal_fraction").median()
    if pd.isna(b) or pd.isna(ideal) or not 0 <= ideal < 1:
        return 1.0
    return max(1.0 - float(b), 0.0) / (1.0 - float(ideal))


def find(tables, summary):
    st = _computing(tables)
    if st is None:
        return []
    hi, lo = st.loc[st["computing_ms"].idxmax()], st.loc[st["computing_ms"].idxmin()]
    ratio = hi["computing_ms"] / lo["computing_ms"]
    if ratio <= STAGE_IMBALANCE_RATIO:
        return []
    wait = _wait_text(tables, lo)
    ranks = [int(x) for x in str(hi["ranks"]).split(",") if x != ""]
    mean = float(st["computing_ms"].mean())
    # a split the user fixed by hand (parallel.pipeline_split) has a knob to try: the cost-balanced split
    cfg = tables.get(CONFIG_KEY) or {}
    split = (cfg.get("parallel") or {}).get("pipeline_split")
    s, s_lo = int(hi["stage"]), int(lo["stage"])
    return [
        {
            "try": {"parallel.pipeline_split": None} if split else None,
            "predicted_step_ms": _balanced_split_step(
                tables, summary, ranks, min(1.0, _split_scale(st, cfg) * _bubble_factor(tables, s))
            )
            if split
            else None,
            "key": str(s),
            "gain_ms": float(hi["computing_ms"]) - mean,
            "explains": "imbalance",
            "basis": (
                f"the slowest stage's compute above the stages' mean, off the critical path when the layers are "
                f"rebalanced: {hi['computing_ms']:.3g} - {mean:.3g} ms per step"
            ),
            "severity": "high" if ratio > STAGE_IMBALANCE_HIGH else "medium",
            "ranks": ranks,
            "stage": s,
            "message": (
                f"Pipeline stage {s} is the bottleneck: stage {s} computes "
                f"{ratio:.1f}x more than stage {s_lo} ({hi['computing_ms']:.3g} vs "
                f"{lo['computing_ms']:.3g} ms per step).{wait} Move layers off stage {s} (rebalance "
                f"the layer split{f', now {list(split)} by parallel.pipeline_split' if split else ''}) or use more "
                f"micro-batches."
            ),
            "evidence": (
                f"stages[stage={s}, ranks {hi['ranks']}]: computing_ms {hi['computing_ms']:.3f}; "
                f"stages[stage={s_lo}, ranks {lo['ranks']}]: computing_ms {lo['computing_ms']:.3f}; "
                f"ratio {ratio:.3f} > {STAGE_IMBALANCE_RATIO}"
            ),
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("stages", "rank_stages", "step_breakdown", "comm_exposure", "pipeline", CONFIG_KEY),
    thresholds={"STAGE_IMBALANCE_RATIO": STAGE_IMBALANCE_RATIO, "STAGE_IMBALANCE_HIGH": STAGE_IMBALANCE_HIGH},
    fires=(
        "the most-computing pipeline stage computes > `STAGE_IMBALANCE_RATIO` × the least (high above "
        '`STAGE_IMBALANCE_HIGH`): "stage S is the bottleneck ... move layers off it or use more micro-batches", with '
        "the faster stage's exposed communication and its p2p share; evidence: stages rows"
    ),
    gain=(
        "slowest stage's `computing_ms` − mean over stages of `computing_ms` (`stages` table): what leaves the "
        "critical path when the layers are rebalanced evenly"
    ),
    knobs=("parallel.pipeline_split",),
    tries=(
        'with a split given by hand (`parallel.pipeline_split`): `{"parallel.pipeline_split": null}`, the '
        "cost-balanced split; predicted step = the slowest stage's exposed collective communication (median per "
        "step) + the rest of the step × the balanced split's slowest stage compute / the slowest stage's now (its "
        "compute, the host work of its layers and its waits at the other stages' transfers all move with the split), "
        "each layer's time its estimated cost (the workload's layer costs, by which it cuts the stages) × its present "
        "stage's `computing_ms` per unit of cost (the stages' mean `computing_ms` / the slowest's when the costs are "
        "unknown), × (1 − the slowest stage's median bubble fraction) / (1 − its ideal bubble (S−1)/(M+S−1)): "
        "balanced, it idles the ideal share of its window at least (at most the step; the gain, what the finding "
        "explains of the imbalance, stays the compute above the mean)"
    ),
)
