"""Rule `pipeline_bubble`: a pipeline stage idle well above the ideal bubble (S-1)/(M+S-1) of its schedule. Its gain
is the excess times the stage's window; it tries twice the micro-batches."""

from __future__ import annotations

import math

import pandas as pd

from analyzers.analyses.pipeline import ideal_bubble_fraction
from analyzers.analyses.advice import stage_imbalance
from analyzers.analyses.advice.common import fmt, stage_ranks, step_ms, table
from analyzers.analyses.advice.rule import Fold, Rule

ID = "pipeline_bubble"

#: pipeline bubble above the ideal (S-1)/(M+S-1) by more than this (absolute fraction)
BUBBLE_EXCESS = 0.1
#: pipeline bubble fraction above this with the ideal unknown
BUBBLE_FRACTION = 0.3


def _per_stage(pl: pd.DataFrame) -> pd.DataFrame:
    """Per stage: median bubble fraction over steps (the first profiled step often carries compile/warm-up waits),
    the ideal, the number of steps and, where the table has them, the median window, S and M."""
    if {"window_us", "stages", "micro_batches"} <= set(pl.columns):
        return pl.groupby("stage").agg(
            frac=("bubble_fraction", "median"),
            ideal=("ideal_fraction", "mean"),
            n=("bubble_fraction", "size"),
            window=("window_us", "median"),
            S=("stages", "max"),
            M=("micro_batches", "max"),
        )
    return pl.groupby("stage").agg(
        frac=("bubble_fraction", "median"), ideal=("ideal_fraction", "mean"), n=("bubble_fraction", "size")
    )


def _micro_batch_try(r, step: float | None):
    """Twice the micro-batches and the step it predicts (the ideal bubble's drop times the window)."""
    S, M, window = r.get("S", math.nan), r.get("M", math.nan), r.get("window", math.nan)
    if not (pd.notna(S) and pd.notna(M) and S > 1 and pd.notna(window)):
        return None, None
    saved = (ideal_bubble_fraction(int(S), int(M)) - ideal_bubble_fraction(int(S), int(2 * M))) * window / 1000.0
    return {"parallel.micro_batches": int(2 * M)}, (step - saved if step is not None else None)


def find(tables, summary):
    pl = table(tables, "pipeline", "bubble_fraction")
    if pl is None:
        return []
    out = []
    step = step_ms(summary)
    for stage, r in _per_stage(pl).iterrows():
        excess = r["frac"] - r["ideal"] if pd.notna(r["ideal"]) else math.nan
        bad = excess > BUBBLE_EXCESS if pd.notna(excess) else r["frac"] > BUBBLE_FRACTION
        if not bad:
            continue
        ideal_txt = f"ideal {r['ideal']:.0%}" if pd.notna(r["ideal"]) else "ideal unknown"
        window = r.get("window", math.nan)
        gain = float(excess * window / 1000.0) if pd.notna(excess) and pd.notna(window) else None
        knob, pred = _micro_batch_try(r, step)
        out.append(
            {
                "key": str(int(stage)),
                "gain_ms": gain,
                "explains": "exposed",
                "try": knob,
                "predicted_step_ms": pred,
                "basis": (
                    f"the bubble above the ideal (S-1)/(M+S-1) times the stage's window: {excess:.3f} x "
                    f"{window / 1000:.3g} ms (medians over steps)"
                    if gain is not None
                    else "not estimated: the ideal bubble (S, M) or the window is unknown"
                ),
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
    needs=("pipeline", "rank_stages"),
    thresholds={"BUBBLE_EXCESS": BUBBLE_EXCESS, "BUBBLE_FRACTION": BUBBLE_FRACTION},
    folds=(Fold(stage_imbalance.ID, "always"),),
    fires=(
        "a stage's median bubble fraction over steps exceeds the ideal by > `BUBBLE_EXCESS`, or > `BUBBLE_FRACTION` "
        "when the ideal is unknown; evidence: pipeline rows"
    ),
    gain="(median bubble fraction − ideal (S−1)/(M+S−1)) × median window (ms); null when the ideal or the window is "
    "unknown",
    knobs=("parallel.micro_batches",),
    tries='`{"parallel.micro_batches": 2M}`, predicted step = step − (ideal(S, M) − ideal(S, 2M)) × window',
)
