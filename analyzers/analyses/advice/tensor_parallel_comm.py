"""Rule `tensor_parallel_comm`: "tensor-parallel all-reduce is X% of the step".

Input: `comm_exposure_classes` (per rank, step and traffic class: exposed_us, time_us; analyzers.analyses.comm_exposure)
and the step time (`steps` table: end_us - start_us per rank and step; else `summary["step_time_s"]`), and the run
config's `parallel.tensor_parallel` for the knob. The share is the mean over ranks and steps of the tensor-parallel
collectives' exposed time (time no compute overlaps) over the step time. Above `TP_SHARE` it is a finding, above
`TP_SHARE_HIGH` high severity. Its gain is that exposed time; it tries half the tensor-parallel size.
"""

from __future__ import annotations

import math

import pandas as pd

from analyzers.analyses.advice.rule import CONFIG_KEY, Rule

ID = "tensor_parallel_comm"

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


def _share(tables: dict, summary: dict):
    """(mean share of the step, mean step ms, exposed ms per rank and step) of the tensor-parallel collectives, or
    None when there are none or the step time is unknown."""
    ex = (tables or {}).get("comm_exposure_classes")
    if not isinstance(ex, pd.DataFrame) or ex.empty or "comm_class" not in ex.columns:
        return None
    tp = ex[ex["comm_class"] == "tensor_parallel"]
    if tp.empty:
        return None
    per = tp.groupby([tp["rank"].astype(int), tp["step"].astype(int)])["exposed_us"].sum() / 1000.0  # ms
    step = _step_ms(tables, summary or {})
    if step is None:
        return None
    if isinstance(step, pd.Series):
        step = step.reindex(per.index)
        ok = step.notna() & (step > 0)
        per, step = per[ok], step[ok]
        if per.empty:
            return None
        return float((per / step).mean()), float(step.mean()), per
    return float(per.mean() / step), step, per


def find(tables, summary):
    got = _share(tables, summary)
    if got is None:
        return []
    share, step_ms, per = got
    tp_ms = float(per.mean())
    if not math.isfinite(share) or share <= TP_SHARE:
        return []
    cfg = tables.get(CONFIG_KEY) or {}
    T = int((cfg.get("parallel") or {}).get("tensor_parallel") or 0) or None
    lower = {"parallel.tensor_parallel": T // 2} if T and T >= 2 and T % 2 == 0 else None
    B = (cfg.get("train") or {}).get("batch_size")
    if lower and isinstance(B, int) and B >= 2 and B % 2 == 0:
        # half the tensor-parallel size doubles the data-parallel replicas; `batch_size` is per replica, so half of
        # it keeps the global batch (the step's work): otherwise the fix's step carries twice the samples
        lower["train.batch_size"] = B // 2
    ranks = sorted(int(r) for r in per.index.get_level_values(0).unique())
    return [
        {
            "key": "run",
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
            "explains": "exposed",
            "basis": "upper bound: all exposed tensor-parallel all-reduce time per step goes with tensor_parallel=1",
            "try": lower,
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("comm_exposure_classes", "steps", CONFIG_KEY),
    thresholds={"TP_SHARE": TP_SHARE, "TP_SHARE_HIGH": TP_SHARE_HIGH},
    fires=(
        "the tensor-parallel collectives' exposed time (`comm_exposure_classes`) is > `TP_SHARE` of the step, mean "
        "over ranks and steps (high above `TP_SHARE_HIGH`); evidence: exposed ms per rank and step / step ms"
    ),
    gain="the tensor-parallel collectives' exposed time per step, mean over ranks and steps (an upper bound)",
    knobs=("parallel.tensor_parallel", "train.batch_size"),
    tries=(
        '`{"parallel.tensor_parallel": T/2, "train.batch_size": B/2}` (T even; the batch halved where it is even: '
        "twice the data-parallel replicas keep the global batch, so the fix's step does the same work), predicted "
        "step = step − gain"
    ),
)
