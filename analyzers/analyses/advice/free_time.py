"""Rule `free_time`: idle time (no op running) on the host's account.

The idle time of a straggler (a rank the others wait for, slow_ranks) is why it is late: with other ranks idle too,
only those count (the host work every rank pays); with the straggler alone idle, the finding names it and folds
under it. With imbalanced pipeline stages only the slowest stage's ranks count: the others' idle time is the wait
for that stage (the stage imbalance cause and its pipeline bubble symptom), and host work removed there would not
shorten the step; where the pipeline window is known (pipeline table), the slowest stage's idle time inside it is
the host cost of its own layers and its wait at the pipeline's fill and drain, which move with the layer split: only
the idle time outside the window is the host's, and a finding without it folds under the stage imbalance."""

from __future__ import annotations

import math

import pandas as pd

from analyzers.analyses.advice import pipeline_bubble, slow_rank, stage_imbalance
from analyzers.analyses.advice.common import breakdown_share, budget_part, num, stage_ranks, table
from analyzers.analyses.advice.rule import CONFIG_KEY, Fold, Rule

ID = "free_time"

#: free (idle, no op running) time above this share of the step: host/data-loading bound
FREE_SHARE = 0.1


def pipeline_window_us(tables, stage) -> pd.Series | None:
    """One stage's pipeline window (us) per step (pipeline table; every stage's median with `stage` None), None when
    unknown."""
    pl = table(tables, "pipeline", "stage", "window_us", "step")
    if pl is None:
        return None
    if stage is not None:
        pl = pl[pd.to_numeric(pl["stage"], errors="coerce") == stage]
    w = pd.Series(num(pl, "window_us").to_numpy(), index=pd.to_numeric(pl["step"], errors="coerce")).dropna()
    w = w[w > 0]
    return w.groupby(level=0).median() if len(w) else None


def idle_outside(sb: pd.DataFrame, window: pd.Series) -> pd.Series:
    """Per step_breakdown row, the idle time outside the pipeline window of its step: step_us - window_us, at least
    0 and at most free_us; a step the pipeline table lacks compares with the median window."""
    step = pd.to_numeric(sb["step"], errors="coerce") if "step" in sb.columns else pd.Series(math.nan, index=sb.index)
    w = step.map(window).fillna(float(window.median()))
    return (num(sb, "step_us") - w).clip(lower=0.0).clip(upper=num(sb, "free_us"))


def _scope(tables, sb: pd.DataFrame, share: float):
    """The breakdown rows whose idle time is the host's: (rows, their free share, what was left out, the slowest
    stage's pipeline window or None, the bottleneck stage or None)."""
    on = ""
    late = slow_rank.stragglers(tables)
    rest = sb[~sb["rank"].isin(late)]
    if late and len(rest) and num(rest, "step_us").sum() > 0:
        rest_share = float(num(rest, "free_us").sum() / num(rest, "step_us").sum())
        if rest_share > FREE_SHARE:  # idle elsewhere too: the host work of every rank, the straggler's own left out
            sb, share = rest, rest_share
            on = (
                f" other than the straggler{'s' if len(late) > 1 else ''} {', '.join(map(str, sorted(late)))}: its "
                f"idle time is why it is late ({slow_rank.ID})"
            )
    bottleneck = stage_imbalance.bottleneck_stage(tables)
    window = None
    if bottleneck is not None:
        ranks = stage_ranks(tables, bottleneck[0])
        if ranks and sb["rank"].isin(ranks).any():
            sb = sb[sb["rank"].isin(ranks)]
            share = float(num(sb, "free_us").sum() / num(sb, "step_us").sum())
            on = f" of the slowest pipeline stage {bottleneck[0]}; the other stages' idle time waits for it"
            window = pipeline_window_us(tables, bottleneck[0])
    elif not late:  # balanced stages: the idle time inside the pipeline window is its bubble (pipeline_bubble)
        window = pipeline_window_us(tables, None)
    return sb, share, on, window, bottleneck


def _row(sb: pd.DataFrame, share: float, on: str) -> dict:
    per = sb.groupby("rank")[["free_us", "step_us"]].sum()
    per = per[per["step_us"] > 0]
    idle = sorted(int(r) for r in per.index[per["free_us"] / per["step_us"] > FREE_SHARE])
    return {
        "key": "all",
        "severity": "medium",
        "gain_ms": budget_part(sb, "free_us"),
        "explains": "idle",
        "basis": "the idle time per step no op runs in (step_breakdown free_us, median per rank, the most idle rank"
        + (f"; ranks{on}" if on else "")
        + ")",
        "ranks": idle,
        "message": (
            f"{share:.0%} of step time nothing runs on the device (> {FREE_SHARE:.0%}): the host is the "
            f"bottleneck (data loading, Python overhead, op dispatch); try graph mode, data prefetch, more workers."
        ),
        "evidence": (
            f"step_breakdown: sum free_us {num(sb, 'free_us').sum():.0f} / sum step_us {num(sb, 'step_us').sum():.0f}"
        ),
    }


def _outside(sb: pd.DataFrame, window: pd.Series) -> tuple[pd.DataFrame, pd.Series, float]:
    """(per rank: median free_us and step_us; per rank: median idle time outside the pipeline window; that idle
    time's share of the ranks' steps)."""
    med = sb.groupby("rank")[["free_us", "step_us"]].median()
    outside = idle_outside(sb, window).groupby(sb["rank"]).median().reindex(med.index)
    return med, outside, float(outside.sum() / med["step_us"].sum()) if med["step_us"].sum() > 0 else 0.0


def _windowed(row: dict, sb: pd.DataFrame, share: float, window: pd.Series, stage: int | None) -> dict:
    """The finding with the pipeline window known (of the slowest stage, or with `stage` None, balanced stages, of
    every stage): the idle time outside it, or (none worth a finding) the idle time inside it, which folds under
    the stage imbalance, else under the pipeline bubble."""
    med, outside, out_share = _outside(sb, window)
    where = "pipeline" if stage is None else f"pipeline[stage={stage}]"
    evidence = (
        f"{row['evidence']}; {where}: median window_us {window.median():.0f}, idle outside it per rank (median "
        "over steps of step_us - window_us, at most free_us): "
        + ", ".join(f"rank {int(k)} {v:.0f} us" for k, v in outside.items())
    )
    if out_share > FREE_SHARE:
        if stage is None:
            basis = (
                "the idle time per step outside the pipeline window (median over steps of step_us - window_us, the "
                f"most idle rank): the idle time inside the window is the pipeline's bubble ({pipeline_bubble.ID})"
            )
            said: dict = {}  # the row's own message stands
        else:
            basis = (
                f"the idle time per step outside the pipeline window on the slowest stage {stage}'s ranks "
                "(median over steps of step_us - window_us, the most idle rank): the idle time inside the window "
                f"is the stage's own host cost and its fill/drain wait ({stage_imbalance.ID})"
            )
            said = {
                "message": f"{out_share:.0%} of step time nothing runs on the device outside the pipeline's "
                f"forward/backward window (> {FREE_SHARE:.0%}): the host is the bottleneck between steps (data "
                "loading, Python overhead, optimizer dispatch); try data prefetch, more workers, graph mode."
            }
        return dict(
            row,
            gain_ms=float(outside.max()) / 1000.0,
            ranks=sorted(int(k) for k in outside.index[outside / med["step_us"] > FREE_SHARE]),
            basis=basis,
            **said,
            evidence=evidence,
        )
    inside = (
        f"{share:.0%} of step time nothing runs on the device, inside the pipeline window: the pipeline's fill "
        f"and drain (its bubble; see {pipeline_bubble.ID}) and the host cost of the stages' own ops."
        if stage is None
        else f"{share:.0%} of step time nothing runs on the device on the slowest pipeline stage "
        f"{stage}, inside the pipeline window: the host cost of its own layers (op dispatch) and its "
        f"wait at the pipeline's fill and drain. Both move with the layer split (see {stage_imbalance.ID})."
    )
    return dict(row, in_pipeline=True, message=inside, evidence=evidence)


def find(tables, summary):
    r = breakdown_share(tables, "free_us")
    if r is None:
        return []
    share, sb = r
    sb, share, on, window, bottleneck = _scope(tables, sb, share)
    if share <= FREE_SHARE:
        return []
    row = _row(sb, share, on)
    if window is None:
        return [row]
    return [_windowed(row, sb, share, window, bottleneck[0] if bottleneck is not None else None)]


RULE = Rule(
    id=ID,
    find=find,
    needs=(
        "step_breakdown",
        "slow_ranks",
        "comm_ops",
        "stages",
        "rank_stages",
        "pipeline",
        "workload_steps",
        CONFIG_KEY,
    ),
    thresholds={"FREE_SHARE": FREE_SHARE},
    folds=(
        Fold(
            stage_imbalance.ID,
            "the slowest stage's, inside the pipeline window",
            lambda r, c: bool(r.get("in_pipeline")),
        ),
        Fold(
            pipeline_bubble.ID,
            "balanced stages, inside the pipeline window",
            lambda r, c: bool(r.get("in_pipeline")),
        ),
        Fold(
            slow_rank.ID,
            "the idle ranks are the straggler",
            lambda r, c: bool(r.get("ranks")) and set(r["ranks"]) <= set(c["ranks"]),
        ),
    ),
    fires="Σ free / Σ step > `FREE_SHARE` (host or data-loading bound); evidence: step_breakdown sums",
    gain=(
        "the most idle rank's `free_us` per step. With a straggler (`slow_ranks`, not one between unbalanced stages) "
        "and other ranks idle > `FREE_SHARE` too, only those others count (the host work every rank pays; the "
        "straggler's own idle time is why it is late); with the straggler alone idle, the finding names it and folds "
        "under it. With imbalanced pipeline stages (the stage imbalance test) only the slowest stage's ranks count, "
        "and so does the share test: the other stages' idle time is their wait for that stage (the pipeline bubble, "
        "under the stage imbalance), and host work removed there would not shorten the step. Where that stage's "
        "pipeline window is known (`pipeline` table, median `window_us`), its idle time inside the window is the host "
        "cost of its own layers and its wait at the pipeline's fill and drain, which move with the layer split: the "
        "gain is the idle time **outside** the window (median `step_us` − window, at most `free_us`) when that is > "
        "`FREE_SHARE` of the step, else the finding folds under the stage imbalance (a machine's load stretches the "
        "window with the stage's work, so it does not turn the split into a host problem). With balanced stages (no "
        "straggler) and the window known, the same over every rank: the idle time inside the window is the "
        "pipeline's bubble, and a finding without idle time outside it folds under the pipeline bubble"
    ),
)
