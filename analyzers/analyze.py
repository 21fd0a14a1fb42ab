"""Facade: every analysis over one Profile -> `Analysis(tables, summary)`.

Tables: step_breakdown, kernels, top_kernels, comm_ops (with algbw_gbps/busbw_gbps/wait_ratio), comm_rank_totals,
comm_bandwidth, links, slow_ranks, slow_links, advice; and where data allows reconciliation (computed
breakdown vs the profiler's own), comm_types, pipeline, experts.

Summary (the run record's `metrics`), all means over (rank, step) rows of step_breakdown unless noted:
step_time_s (workload step time when `workload_steps` is given, else the profiled step window),
computing_s, communication_s, communication_not_overlapped_s, overlapped_s, free_s, preparing_s,
comm_share (= mean communication_us / step_us, as in perfbench.compare), kernel_utilization
(sum computing / sum step), collectives_per_step (per rank), comm_bytes_per_step (payload per rank and
step), comm_wait_ratio (mean), throughput (workload: sum samples / max step time, mean over steps),
bubble_fraction, expert_load_cv, ranks, steps, reconciliation_max_rel_diff.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.breakdown import breakdown_from_reference, reconcile, step_breakdown
from analyzers.collectives import comm_op_stats, per_type_summary, rank_totals
from analyzers.kernels import kernel_table, kernel_utilization, top_kernels
from analyzers.schema import Profile


@dataclass
class Analysis:
    tables: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def _mean(df: pd.DataFrame, col: str, scale: float = 1.0):
    if df is None or not len(df) or col not in df.columns:
        return None
    v = pd.to_numeric(df[col], errors="coerce").dropna()
    return float(v.mean() * scale) if len(v) else None


def _empty(cols):
    return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})


def analyze(profile: Profile, workload_steps: pd.DataFrame | None = None, spans: pd.DataFrame | None = None,
            config: dict | None = None) -> Analysis:
    t: dict[str, pd.DataFrame | None] = {}
    has_ref = profile.reference_breakdown is not None and len(profile.reference_breakdown)
    if (profile.ops is None or not len(profile.ops)) and has_ref:
        sb = breakdown_from_reference(profile.reference_breakdown)  # nothing to recompute it from
        t["reconciliation"] = None
    else:
        sb = step_breakdown(profile.ops, profile.steps)
        t["reconciliation"] = reconcile(sb, profile.reference_breakdown)
    t["step_breakdown"] = sb
    t["kernels"] = kernel_table(profile.ops)
    t["top_kernels"] = top_kernels(profile.ops)
    co = comm_op_stats(profile.comm_ops)
    t["comm_ops"] = co
    t["comm_types"] = per_type_summary(co) if len(co) else None
    t["comm_rank_totals"] = rank_totals(co, profile.comm_bandwidth) if len(co) else None
    t["comm_bandwidth"] = profile.comm_bandwidth
    t["links"] = profile.links

    try:
        from analyzers.slow_ranks import find_slow_links, find_slow_ranks

        t["slow_ranks"] = find_slow_ranks(co)
        t["slow_links"] = find_slow_links(profile.links, profile.comm_bandwidth)
    except ImportError:  # analyzers.slow_ranks not installed in this checkout
        t["slow_ranks"] = _empty(["group", "rank", "slow"])
        t["slow_links"] = _empty(["group", "src", "dst", "slow"])

    try:
        from analyzers.pipeline import mean_bubble_fraction, pipeline_bubbles

        t["pipeline"] = pipeline_bubbles(profile, spans, config)
        bubble = mean_bubble_fraction(t["pipeline"])
    except ImportError:
        t["pipeline"], bubble = None, None
    try:
        from analyzers.experts import expert_load, mean_expert_cv

        warm = int(((config or {}).get("train") or {}).get("warmup_steps") or 0)
        t["experts"] = (expert_load(workload_steps, warmup_steps=warm)
                        if workload_steps is not None and len(workload_steps) else None)
        cv = mean_expert_cv(t["experts"])
    except ImportError:
        t["experts"], cv = None, None

    summary = _summary(profile, sb, co, workload_steps, t["reconciliation"])
    summary["bubble_fraction"] = bubble
    summary["expert_load_cv"] = cv
    try:
        from analyzers.advice import advise

        t["advice"] = advise(dict(t, workload_steps=workload_steps), summary)
    except ImportError:
        t["advice"] = _empty(["rule", "severity", "message", "evidence"])
    return Analysis(tables=t, summary=summary)


def _summary(profile: Profile, sb: pd.DataFrame, co: pd.DataFrame, ws, rec) -> dict:
    s: dict = {}
    s["ranks"] = int(profile.ranks["rank"].nunique()) if len(profile.ranks) else int(sb["rank"].nunique()) if len(sb) else 0
    s["steps"] = int(sb["step"].nunique()) if len(sb) else 0
    s["step_time_s"] = _mean(sb, "step_us", 1e-6)
    for m in ("computing", "communication", "communication_not_overlapped", "overlapped", "free", "preparing"):
        s[f"{m}_s"] = _mean(sb, f"{m}_us", 1e-6)
    if len(sb):
        share = (sb["communication_us"] / sb["step_us"].where(sb["step_us"] > 0)).dropna()
        s["comm_share"] = float(share.mean()) if len(share) else None
    else:
        s["comm_share"] = None
    s["kernel_utilization"] = kernel_utilization(sb)
    if len(co):
        per = co.groupby(["rank", "step"], dropna=False)
        s["collectives_per_step"] = float(per.size().mean())
        sz = co["size_bytes"].astype(float)
        s["comm_bytes_per_step"] = float(per["size_bytes"].sum(min_count=1).mean()) if sz.notna().any() else None
        s["comm_wait_ratio"] = _mean(co, "wait_ratio")
    else:
        s["collectives_per_step"] = 0.0 if len(sb) else None
        s["comm_bytes_per_step"] = None
        s["comm_wait_ratio"] = None
    s["throughput"] = None
    if ws is not None and len(ws) and {"step", "samples", "step_time_s"} <= set(ws.columns):
        g = ws.groupby("step").agg(samples=("samples", "sum"), t=("step_time_s", "max"))
        g = g[g["t"] > 0]
        if len(g):
            s["throughput"] = float((g["samples"] / g["t"]).mean())
            s["step_time_s"] = float(g["t"].mean())
    if rec is not None and len(rec):
        s["reconciliation_max_rel_diff"] = float(rec["rel_diff"].abs().max())
    for k, v in list(s.items()):
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            s[k] = None
        elif isinstance(v, np.generic):
            s[k] = v.item()
    return s
