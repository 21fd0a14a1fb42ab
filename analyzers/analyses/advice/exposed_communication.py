"""Rule `exposed_communication`: communication not hidden behind compute above EXPOSED_COMM_SHARE of the step. The
message names what it is (the faster stages waiting for a bottleneck stage, pipeline send/receive, or gradient
collectives); its gain is the exposed time itself; the collective kind tries fp16 gradient compression."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.analyses.collectives import factor
from analyzers.analyses.advice import slow_rank, stage_imbalance
from analyzers.analyses.advice.common import (
    breakdown_share,
    budget_part,
    exposure_split,
    is_p2p,
    load_excess,
    on_cpu,
    n_steps,
    num,
    step_ms,
    table,
    transfer_ms,
    trusted,
)
from analyzers.analyses.advice.rule import CONFIG_KEY, LOAD_EXCESS_KEY, Fold, Rule

ID = "exposed_communication"

#: not-overlapped communication above this share of the step (high above twice this)
EXPOSED_COMM_SHARE = 0.2
#: exposed communication counts as "pipeline waiting" when at least this share of it is p2p (send/receive)
P2P_MAJORITY = 0.5
#: exposed communication folds under a straggler only when the straggler's gain explains at least this share of it
FOLD_SHARE = 0.5
#: CPU time of casting one fp32 gradient byte to fp16 and back (MindSpore CPU Cast, 1-4 M-element tensors, CPU
#: time: 1.6 ns; docs/advice.md "Calibration"): what fp16 compression adds per step where the casts run on the host
CPU_CAST_NS_PER_BYTE = 1.6


def _ranks(per: pd.DataFrame, col: str) -> pd.DataFrame:
    """The ranks carrying at least half of the largest rank's `col`, largest first."""
    top = per.sort_values(col, ascending=False)
    return top[top[col] >= 0.5 * top[col].iloc[0]]


def _waiting_on_bottleneck(tables, per: pd.DataFrame, share: float) -> dict | None:
    """With a bottleneck stage, the faster stages' ranks carrying more than their share of the exposed time."""
    bottleneck = stage_imbalance.bottleneck_stage(tables)
    if bottleneck is None:
        return None
    stage, ratio = bottleneck
    waiting = per[per["stage"].notna() & (per["stage"] != stage)].sort_values("exposed_us", ascending=False)
    # waiting shows as the faster stages carrying more than their share of the exposed communication
    if not (len(waiting) and waiting["exposed_us"].sum() / per["exposed_us"].sum() > len(waiting) / len(per)):
        return None
    wp2p = waiting["exposed_p2p_us"].sum() / waiting["exposed_us"].sum() if waiting["exposed_us"].sum() > 0 else 0
    return {
        "kind": "pipeline",
        "ranks": [int(x) for x in waiting.index],
        "stage": None,
        "message": (
            f"{share:.0%} of step time is exposed communication, most of it on the ranks of the "
            f"faster stages (ranks {', '.join(map(str, waiting.index))}: "
            f"{waiting['exposed_us'].mean() / 1000:.3g} ms per step, {wp2p:.0%} pipeline "
            f"send/receive) while stage {stage} computes {ratio:.1f}x more: they wait for stage "
            f"{stage}. Fix the stage imbalance first (see {stage_imbalance.ID}); overlapping gradient "
            f"all-reduce would not remove this wait."
        ),
    }


def _pipeline(per: pd.DataFrame, share: float, p2p: float) -> dict:
    """Mostly pipeline send/receive: the stages wait for each other."""
    worst = _ranks(per, "exposed_p2p_us")
    stages = sorted({int(s) for s in worst["stage"] if s is not None and pd.notna(s)})
    where = (
        f"stage {stages[0]} (ranks {', '.join(map(str, worst.index))})"
        if len(stages) == 1
        else f"ranks {', '.join(map(str, worst.index))}"
    )
    return {
        "kind": "pipeline",
        "ranks": [int(x) for x in worst.index],
        "stage": stages[0] if len(stages) == 1 else None,
        "message": (
            f"{share:.0%} of step time is exposed communication and {p2p:.0%} of it is pipeline "
            f"send/receive waiting, mostly on {where}: the stages wait for each other, not for "
            f"gradients. Balance the work across stages (see {stage_imbalance.ID}) or use more "
            f"micro-batches; overlapping gradient all-reduce would not help."
        ),
    }


def _collective(tables, per: pd.DataFrame, share: float, p2p: float) -> dict:
    """Mostly collectives; where the profiler counts send/batchSendRecv with them, it says the split is rough."""
    worst = _ranks(per, "exposed_collective_us")
    ex = table(tables, "comm_exposure")
    rough = (
        sorted(int(r) for r in ex.loc[ex["source"] == "profiler (receive only)", "rank"].unique())
        if ex is not None and "source" in ex.columns
        else []
    )
    row = {"kind": "collective", "ranks": [int(x) for x in worst.index], "stage": None}
    if rough:
        row["message"] = (
            f"{share:.0%} of step time is communication not hidden behind compute (> "
            f"{EXPOSED_COMM_SHARE:.0%}), at least {p2p:.0%} of it pipeline receives; on ranks "
            f"{', '.join(map(str, rough))} the profiler counts send / batchSendRecv with the "
            f"collectives, so how much is gradient all-reduce is not known without the kernels: "
            f"check comm_types before overlapping or bucketing gradients."
        )
    else:
        row["message"] = (
            f"{share:.0%} of step time is communication not hidden behind compute (> "
            f"{EXPOSED_COMM_SHARE:.0%}), {1 - p2p:.0%} of it in collectives (most on ranks "
            f"{', '.join(map(str, worst.index))}): overlap gradient all-reduce with backward, "
            f"fuse/bucket gradients, compress gradients, or use fewer, larger collectives."
        )
    return row


def _rows(tables) -> list[dict]:
    r = breakdown_share(tables, "communication_not_overlapped_us")
    if r is None:
        return []
    share, sb = r
    if share <= EXPOSED_COMM_SHARE:
        return []
    p2p, per = exposure_split(tables, sb)
    base = (
        f"step_breakdown: sum communication_not_overlapped_us {num(sb, 'communication_not_overlapped_us').sum():.0f}"
        f" / sum step_us {num(sb, 'step_us').sum():.0f}"
    )
    sev = "high" if share > 2 * EXPOSED_COMM_SHARE else "medium"
    if p2p is None:
        return [
            {
                "kind": "collective",
                "severity": sev,
                "ranks": [],
                "stage": None,
                "message": (
                    f"{share:.0%} of step time is communication not hidden behind compute (> "
                    f"{EXPOSED_COMM_SHARE:.0%}); which ops it is (pipeline send/receive or gradient "
                    f"collectives) is unknown: see comm_types."
                ),
                "evidence": base,
            }
        ]
    split = (
        f"comm_exposure (median per rank over steps, summed over ranks): pipeline p2p "
        f"{per['exposed_p2p_us'].sum() / 1000:.2f} ms, collectives {per['exposed_collective_us'].sum() / 1000:.2f} "
        f"ms ({p2p:.0%} p2p)"
    )
    row = _waiting_on_bottleneck(tables, per, share)
    if row is None:
        row = _pipeline(per, share, p2p) if p2p >= P2P_MAJORITY else _collective(tables, per, share, p2p)
    return [{"severity": sev, **row, "evidence": f"{base}; {split}"}]


def compression_try(tables, summary):
    """fp16 gradients halve the bytes term of the gradient collectives (perfbench.predict.comm): the
    predicted step is the step minus half of the bytes time per step (fitted bandwidth), capped by the
    exposed communication, plus, where the casts run on the CPU, their cost (CPU_CAST_NS_PER_BYTE x the fp32
    gradient bytes a rank exchanges per step). Null prediction when the fit or the step is unknown."""
    co = table(tables, "comm_ops")
    step = step_ms(summary)
    knob = {"parallel.grad_compression": "fp16"}
    if co is None or step is None or "step" not in co.columns:
        return knob, None
    df = co[~is_p2p(co["op_type"])] if "op_type" in co.columns else co
    t = transfer_ms(df)
    n = (
        pd.to_numeric(df["group_size"], errors="coerce")
        if "group_size" in df.columns
        else pd.Series(math.nan, index=df.index)
    )
    n = n.fillna(co["rank"].nunique())
    f = np.array([factor(str(o).lower(), int(k)) for o, k in zip(df["op_type"], n)])
    size = num(df, "size_bytes").to_numpy(float)
    ok = np.isfinite(size) & np.isfinite(t.to_numpy(float)) & (f > 0)
    if ok.sum() < 2:
        return knob, None
    xb = f[ok] * size[ok]
    y = t.to_numpy(float)[ok]
    inv_bw = float(np.dot(xb, y) / np.dot(xb, xb)) if np.dot(xb, xb) > 0 else 0.0
    if not inv_bw > 0:
        return knob, None
    ranks = max(int(df["rank"].nunique()), 1)
    bytes_ms = float(inv_bw * xb.sum()) / n_steps(tables) / ranks
    exposed = budget_part(trusted(table(tables, "step_breakdown")), "communication_not_overlapped_us")
    saved = 0.5 * bytes_ms if exposed is None else min(0.5 * bytes_ms, exposed)
    if on_cpu(tables):
        saved -= CPU_CAST_NS_PER_BYTE * float(size[ok].sum()) / n_steps(tables) / ranks / 1e6
    return knob, step - saved


def _mindspore_script(tables) -> bool:
    """The run is the user's own MindSpore script: its data parallel has no gradient compression to switch on
    (perfbench.run.script refuses the knob before running), so there is nothing to try."""
    cfg = tables.get(CONFIG_KEY) or {}
    return cfg.get("workload") == "script" and (cfg.get("script") or {}).get("framework") == "mindspore"


def _tensor_parallel(tables) -> bool:
    """The run is tensor parallel (parallel.tensor_parallel > 1): its gradients cannot be compressed
    (workloads/parallel/rules.py refuses grad_compression there), so there is nothing to try."""
    T = ((tables.get(CONFIG_KEY) or {}).get("parallel") or {}).get("tensor_parallel")
    return isinstance(T, int) and T > 1


def find(tables, summary):
    """Exposed communication; its gain is the exposed time itself (what hiding it would save), less the time its
    collectives waited for a core (load_excess), which neither hiding nor shrinking them removes."""
    rows = _rows(tables)
    if not rows:
        return []
    gain = budget_part(trusted(table(tables, "step_breakdown")), "communication_not_overlapped_us")
    excess = load_excess(tables)
    note = ""
    if gain is not None and excess is None:  # not known: nothing left out, so the exposed time is an upper bound
        note = "; an upper bound: the time its collectives waited for a core (load) is unknown"
    elif gain is not None and excess > 0:
        note = f"; less {min(excess, gain):.3g} ms its collectives took beyond the fastest of their kind (load)"
        gain = max(0.0, gain - excess)
    for row in rows:
        row.update(
            key="all",
            gain_ms=gain,
            explains="exposed",
            generic=True,
            basis="the exposed communication per step (step_breakdown communication_not_overlapped_us, "
            "median per rank, the most exposed rank)" + note,
        )
        if row.get("kind") == "collective" and not _mindspore_script(tables) and not _tensor_parallel(tables):
            row["try"], row["predicted_step_ms"] = compression_try(tables, summary)
    return rows


def _straggler_explains_it(r: dict, c: dict) -> bool:
    return c.get("gain_ms") is not None and r.get("gain_ms") is not None and c["gain_ms"] >= FOLD_SHARE * r["gain_ms"]


RULE = Rule(
    id=ID,
    find=find,
    needs=(
        "step_breakdown",
        "comm_exposure",
        "rank_stages",
        "stages",
        "comm_ops",
        "ops_for_checks",
        LOAD_EXCESS_KEY,
        CONFIG_KEY,
    ),
    thresholds={
        "EXPOSED_COMM_SHARE": EXPOSED_COMM_SHARE,
        "P2P_MAJORITY": P2P_MAJORITY,
        "FOLD_SHARE": FOLD_SHARE,
        "CPU_CAST_NS_PER_BYTE": CPU_CAST_NS_PER_BYTE,
    },
    folds=(
        Fold(stage_imbalance.ID, "pipeline kind", lambda r, c: r.get("kind") == "pipeline"),
        Fold(slow_rank.ID, "the straggler's gain >= FOLD_SHARE of it", _straggler_explains_it),
    ),
    fires=(
        "Σ communication_not_overlapped / Σ step > `EXPOSED_COMM_SHARE` (high above twice that). The message names "
        "the cause from `comm_exposure` (median per rank over steps): with a bottleneck stage, the faster stages "
        "wait for it; ≥ `P2P_MAJORITY` p2p → pipeline waiting (balance stages, more micro-batches); else gradient "
        "collectives (overlap, bucket, compress); evidence: step_breakdown sums, p2p/collective split"
    ),
    gain=(
        "the most exposed rank's `communication_not_overlapped` per step (`step_breakdown`), less the time its "
        "collectives took beyond the fastest of their kind and group size at their size or larger (per rank and "
        "step the wall time they covered beyond those floors: collectives that ran at once on several threads, "
        "gloo's, waited together and count once; median; only where the operators ran on the host CPU: on a loaded "
        "machine their wait for a core, which neither hiding nor compressing them removes) — only what "
        "no specific cause already explains (see accounting)"
    ),
    knobs=("parallel.grad_compression",),
    tries=(
        "collective kind (not a MindSpore script, which has no compression to switch on): "
        '`{"parallel.grad_compression": "fp16"}`, predicted step = step − ½ × the bytes term per '
        "step (fitted bandwidth, `factor × bytes / bandwidth`), at most the exposed time; where the operators run "
        "on the CPU (the MindSpore CPU profile), plus the two casts of the fp32 gradient bytes a rank exchanges per "
        "step at `CPU_CAST_NS_PER_BYTE`"
    ),
)
