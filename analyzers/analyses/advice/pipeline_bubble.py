"""Rule `pipeline_bubble`: a pipeline stage idle well above the ideal bubble (S-1)/(M+S-1) of its schedule. Its gain
is the excess times the stage's window; it tries twice the micro-batches."""

from __future__ import annotations

import math

import pandas as pd

from analyzers.analyses.pipeline import ideal_bubble_fraction
from analyzers.analyses.advice import stage_imbalance
from analyzers.analyses.advice.common import budget_part, fmt, stage_ranks, step_ms, table, trusted
from analyzers.analyses.advice.rule import Fold, Rule

ID = "pipeline_bubble"

#: pipeline bubble above the ideal (S-1)/(M+S-1) by more than this (absolute fraction)
BUBBLE_EXCESS = 0.1
#: pipeline bubble fraction above this with the ideal unknown
BUBBLE_FRACTION = 0.3
#: the schedule's own ideal bubble (S-1)/(M+S-1) at or above this: too few micro-batches for the stages (M <= 3(S-1));
#: the gain is what twice the micro-batches saves, (ideal(S, M) - ideal(S, 2M)) x window
BUBBLE_IDEAL = 0.25


def _per_stage(pl: pd.DataFrame) -> pd.DataFrame:
    """Per stage: median bubble fraction over steps (the first profiled step often carries compile/warm-up waits),
    the ideal, the number of steps and, where the table has them, the median window, S and M."""
    if {"window_us", "stages", "micro_batches"} <= set(pl.columns):
        busy = {"busy": ("busy_us", "median")} if "busy_us" in pl.columns else {}
        return pl.groupby("stage").agg(
            frac=("bubble_fraction", "median"),
            ideal=("ideal_fraction", "mean"),
            n=("bubble_fraction", "size"),
            window=("window_us", "median"),
            S=("stages", "max"),
            M=("micro_batches", "max"),
            **busy,
        )
    return pl.groupby("stage").agg(
        frac=("bubble_fraction", "median"), ideal=("ideal_fraction", "mean"), n=("bubble_fraction", "size")
    )


def host_ms(r, computing: dict) -> float:
    """ms per step the stage spends inside its forward/backward spans not computing (median busy time - its
    `computing_ms`, stages table): the host's op dispatch, which every micro-batch repeats whatever its size; 0
    when unknown."""
    busy, comp = r.get("busy", math.nan), computing.get(r.name)
    if pd.isna(busy) or comp is None or pd.isna(comp):
        return 0.0
    return max(0.0, float(busy) / 1000.0 - float(comp))


def _micro_batch_saving(r, host: float) -> float | None:
    """ms per step twice the micro-batches saves: (ideal(S, M) - ideal(S, 2M)) x the window, less the host time
    per step the doubled micro-batches dispatch again (`host`, host_ms); None when unknown."""
    S, M, window = r.get("S", math.nan), r.get("M", math.nan), r.get("window", math.nan)
    if not (pd.notna(S) and pd.notna(M) and S > 1 and pd.notna(window)):
        return None
    return (ideal_bubble_fraction(int(S), int(M)) - ideal_bubble_fraction(int(S), int(2 * M))) * window / 1000.0 - host


def _micro_batch_try(r, step: float | None, host: float = 0.0):
    """Twice the micro-batches and the step it predicts (the ideal bubble's drop times the window, less the host time
    they repeat); no knob when that does not pay."""
    saved = _micro_batch_saving(r, host)
    if saved is None or saved <= 0:
        return None, None
    return {"parallel.micro_batches": int(2 * r["M"])}, (step - saved if step is not None else None)


def _pool(tables, stage) -> str:
    """Where a stage's bubble shows: its ranks' idle time (no op runs while it waits, as on the CPU) when that is
    larger than their exposed communication (a receive waiting, as on Ascend), else the exposed communication."""
    sb = trusted(table(tables, "step_breakdown", "rank"))
    ranks = stage_ranks(tables, stage)
    if sb is None or not ranks:
        return "exposed"
    sb = sb[sb["rank"].isin(ranks)]
    idle, exposed = budget_part(sb, "free_us"), budget_part(sb, "communication_not_overlapped_us")
    return "idle" if (idle or 0.0) > (exposed or 0.0) else "exposed"


def find(tables, summary):
    pl = table(tables, "pipeline", "bubble_fraction")
    if pl is None:
        return []
    out = []
    step = step_ms(summary)
    st = table(tables, "stages", "stage", "computing_ms")
    computing = {} if st is None else dict(zip(st["stage"], pd.to_numeric(st["computing_ms"], errors="coerce")))
    for stage, r in _per_stage(pl).iterrows():
        excess = r["frac"] - r["ideal"] if pd.notna(r["ideal"]) else math.nan
        bad = excess > BUBBLE_EXCESS if pd.notna(excess) else r["frac"] > BUBBLE_FRACTION
        host = host_ms(r, computing)
        knob, pred = _micro_batch_try(r, step, host)
        # the schedule itself idles the stage: too few micro-batches (a bubble at its ideal is still a bubble)
        too_few = not bad and pd.notna(r["ideal"]) and r["ideal"] >= BUBBLE_IDEAL and knob is not None
        if not (bad or too_few):
            continue
        ideal_txt = f"ideal {r['ideal']:.0%}" if pd.notna(r["ideal"]) else "ideal unknown"
        window = r.get("window", math.nan)
        gain = float(excess * window / 1000.0) if pd.notna(excess) and pd.notna(window) else None
        basis = (
            f"the bubble above the ideal (S-1)/(M+S-1) times the stage's window: {excess:.3f} x "
            f"{window / 1000:.3g} ms (medians over steps)"
            if gain is not None
            else "not estimated: the ideal bubble (S, M) or the window is unknown"
        )
        if too_few:
            gain = _micro_batch_saving(r, host)
            basis = (
                f"the ideal bubble {r['ideal']:.3f} at or above {BUBBLE_IDEAL}: what twice the micro-batches "
                f"saves, (ideal(S, M) - ideal(S, 2M)) x the stage's window {window / 1000:.3g} ms (median over steps)"
                + (f", less the {host:.3g} ms of host time per step they dispatch again" if host else "")
            )
        out.append(
            {
                "key": str(int(stage)),
                "gain_ms": gain,
                "explains": _pool(tables, stage) if too_few else "exposed",
                "too_few": too_few,
                "try": knob,
                "predicted_step_ms": pred,
                "basis": basis,
                "stage": int(stage),
                "ranks": stage_ranks(tables, stage),
                "severity": "medium",
                "message": (
                    f"Pipeline stage {stage} is idle {r['frac']:.0%} of the pipeline window ({ideal_txt}): "
                    f"more micro-batches, balance layers across stages, or an interleaved/1F1B schedule."
                ),
                "evidence": f"pipeline[stage={stage}]: median bubble_fraction {fmt(r['frac'], 3)} over "
                f"{int(r['n'])} steps",
            }
        )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("pipeline", "rank_stages", "step_breakdown", "stages"),
    thresholds={"BUBBLE_EXCESS": BUBBLE_EXCESS, "BUBBLE_FRACTION": BUBBLE_FRACTION, "BUBBLE_IDEAL": BUBBLE_IDEAL},
    folds=(
        # a bubble above the schedule's ideal is what the slowest stage makes the others wait; the ideal bubble of
        # too few micro-batches is there with balanced stages too: a cause of its own
        Fold(stage_imbalance.ID, "a bubble above the ideal", lambda r, c: not r.get("too_few")),
        Fold(ID, "else under the stage with the largest (one pipeline)"),
    ),
    fires=(
        "a stage's median bubble fraction over steps exceeds the ideal by > `BUBBLE_EXCESS`, or > `BUBBLE_FRACTION` "
        "when the ideal is unknown; or the ideal (S−1)/(M+S−1) itself is ≥ `BUBBLE_IDEAL` (too few micro-batches: "
        "M ≤ 3(S−1)); evidence: pipeline rows"
    ),
    gain="(median bubble fraction − ideal (S−1)/(M+S−1)) × median window (ms); with too few micro-batches (the ideal "
    "≥ `BUBBLE_IDEAL`, the excess under `BUBBLE_EXCESS`) what twice the micro-batches saves, (ideal(S, M) − "
    "ideal(S, 2M)) × window − the stage's host time per step inside its spans (median busy − `computing_ms`: the op "
    "dispatch each micro-batch repeats; no finding when that leaves nothing); null when the ideal or the window is "
    "unknown",
    knobs=("parallel.micro_batches",),
    tries='`{"parallel.micro_batches": 2M}`, predicted step = step − ((ideal(S, M) − ideal(S, 2M)) × window − the '
    "stage's host time per step); no knob when that is not positive",
)
