"""Advice on tensor-parallel traffic: "tensor-parallel all-reduce is X% of the step".

`advise_tp(tables, summary, config=None) -> list[dict]` returns advice rows with the usual columns
(`analyzers.schema.ADVICE_COLUMNS`: rule, severity, message, evidence, ranks, stage, and the ranking columns of
the advice contract: id, gain_ms, gain_share, basis, symptom_of, try, predicted_step_ms); the advice ranking
calls it.

Input: `comm_exposure_classes` (per rank, step and traffic class: exposed_us, time_us; analyzers.analyses.comm_exposure)
and the step time (`steps` table: end_us - start_us per rank and step; else `summary["step_time_s"]`).
The share is the mean over ranks and steps of the tensor-parallel collectives' exposed time (time no compute
overlaps) over the step time. Above `TP_SHARE` it is a finding, above `TP_SHARE_HIGH` high severity.
"""

from __future__ import annotations

import json
import math

import pandas as pd

#: exposed tensor-parallel communication above this share of the step is a finding ...
TP_SHARE = 0.2
#: ... and above this, high severity
TP_SHARE_HIGH = 0.4


def _step_ms(tables: dict, summary: dict) -> pd.Series | float | None:
    st = (tables or {}).get("steps")
    if isinstance(st, pd.DataFrame) and len(st) and {"rank", "step", "start_us", "end_us"} <= set(st.columns):
        d = (pd.to_numeric(st["end_us"], errors="coerce") - pd.to_numeric(st["start_us"], errors="coerce")) / 1000.0
        return pd.Series(
            d.to_numpy(), index=pd.MultiIndex.from_arrays([st["rank"].astype(int), st["step"].astype(int)])
        )
    s = (summary or {}).get("step_time_s")
    return float(s) * 1000.0 if isinstance(s, (int, float)) and s > 0 else None


def advise_tp(tables: dict, summary: dict | None = None, config: dict | None = None) -> list[dict]:
    ex = (tables or {}).get("comm_exposure_classes")
    if not isinstance(ex, pd.DataFrame) or ex.empty or "comm_class" not in ex.columns:
        return []
    tp = ex[ex["comm_class"] == "tensor_parallel"]
    if tp.empty:
        return []
    per = tp.groupby([tp["rank"].astype(int), tp["step"].astype(int)])["exposed_us"].sum() / 1000.0  # ms
    step = _step_ms(tables, summary or {})
    if step is None:
        return []
    if isinstance(step, pd.Series):
        step = step.reindex(per.index)
        ok = step.notna() & (step > 0)
        per, step = per[ok], step[ok]
        if per.empty:
            return []
        share = float((per / step).mean())
        step_ms = float(step.mean())
    else:
        share, step_ms = float(per.mean() / step), step
    tp_ms = float(per.mean())
    if not math.isfinite(share) or share <= TP_SHARE:
        return []
    T = int(((config or {}).get("parallel") or {}).get("tensor_parallel") or 0) or None
    lower = {"parallel.tensor_parallel": T // 2} if T and T >= 2 and T % 2 == 0 else None
    ranks = sorted(int(r) for r in per.index.get_level_values(0).unique())
    return [
        {
            "rule": "tensor_parallel_comm",
            "id": "tensor_parallel_comm:run",
            "severity": "high" if share > TP_SHARE_HIGH else "medium",
            "message": (
                f"Tensor-parallel all-reduce is {share:.0%} of the step ({tp_ms:.1f} ms exposed per step"
                + (f", tensor_parallel={T}" if T else "")
                + "): lower parallel.tensor_parallel (more data "
                "parallel instead) or keep each tensor-parallel group within a node (its all-reduces run twice "
                "per transformer block in forward and in backward)."
            ),
            "evidence": (
                f"comm_exposure_classes[comm_class=tensor_parallel]: {tp_ms:.2f} ms exposed per rank and step "
                f"(mean over {len(per)} rank-steps) / step {step_ms:.2f} ms = {share:.2f} (> {TP_SHARE})"
            ),
            "ranks": ranks,
            "stage": None,
            "gain_ms": tp_ms,
            "gain_share": share,
            "basis": "upper bound: all exposed tensor-parallel all-reduce time per step goes with tensor_parallel=1",
            "symptom_of": None,
            "try": json.dumps(lower) if lower else None,
            "predicted_step_ms": None,
        }
    ]
