"""The run page's charts (dashboards/pages/run.py): the per-rank breakdown of a step, the timeline of one step
across ranks, memory over time and the tokens each expert got. Each is a plotly figure (or its data) built from
the store's aggregate tables; the page draws them after its text has painted."""

from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go

from analyzers.schema import warmup_steps
from dashboards import data


#: the stacked parts add up to the rank's profiled step: overlapped lies within computing, so it is stacked as
#: its own part and computing as the rest of it (computing - overlapped)
PARTS = [
    ("compute_only_ms", "computing (not overlapped)", "#4c78a8"),
    ("overlapped_ms", "overlapped (computing with communication)", "#f58518"),
    ("communication_not_overlapped_ms", "communication (not overlapped)", "#e45756"),
    ("free_ms", "free", "#bab0ac"),
]


SPAN_COLORS = {
    "forward": "#4c78a8",
    "backward": "#72b7b2",
    "allreduce": "#e45756",
    "send": "#f58518",
    "recv": "#eeca3b",
    "optimizer": "#54a24b",
    "dispatch": "#b279a2",
    "combine": "#ff9da6",
    "step": "#bab0ac",
    "compute": "#4c78a8",
    "communication": "#e45756",
}


def breakdown_figure(rid: str, step: int | None) -> go.Figure:
    d = data.get()
    bd = d.breakdown_per_rank(rid, step)
    fig = go.Figure()
    if bd is not None and not bd.empty:
        x = [f"rank {int(r)}" for r in bd["rank"]]
        if "computing_ms" in bd.columns:
            over = bd["overlapped_ms"].fillna(0) if "overlapped_ms" in bd.columns else 0.0
            bd = bd.assign(compute_only_ms=bd["computing_ms"] - over)
        for col, label, color in PARTS:
            if col in bd.columns:
                fig.add_trace(go.Bar(name=label, x=x, y=bd[col].fillna(0).tolist(), marker_color=color))
        title = "ms per profiled step, parts adding up to it" + (
            f" (step {step})" if step is not None else " (median over the profiled steps)"
        )
    else:  # no profile: step time per rank from the workload's own metrics
        ws = d.table(rid, "workload_steps")
        if ws is None or ws.empty:
            fig.update_layout(title="no step breakdown and no per-step metrics in this run", height=380)
            return fig
        if step is not None:
            ws = ws[ws["step"] == step]
        per = ws.groupby("rank")["step_time_s"].mean() * 1000
        fig.add_trace(
            go.Bar(
                name="step (no profile)",
                x=[f"rank {int(r)}" for r in per.index],
                y=per.tolist(),
                marker_color="#bab0ac",
            )
        )
        title = "ms per step (no profiler breakdown in this run)"
    fig.update_layout(barmode="stack", title=title, yaxis_title="ms", height=380, legend={"orientation": "h"})
    return fig


def timeline_figure(rid: str, step: int | None) -> go.Figure:
    d = data.get()
    spans = d.table(rid, "spans")
    if spans is None or spans.empty:  # no workload spans: the profiler's merged compute/communication segments
        spans = d.table(rid, "timeline")
    ws = d.table(rid, "workload_steps")
    fig = go.Figure()
    src = spans if spans is not None and not spans.empty else None
    if src is None and (ws is None or ws.empty):
        fig.update_layout(title="no step timestamps in this run", height=300)
        return fig
    ref = src if src is not None else ws
    steps = sorted(ref["step"].dropna().unique())
    if step is None or step not in steps:
        rec = d.run(rid) or {}
        warm = warmup_steps(rec.get("config"))
        later = [s for s in steps if s >= warm]
        step = (later or steps)[0]
    if src is not None:
        ev = src[src["step"] == step].copy()
        ev["kind"] = ev["kind"].astype(str)
    else:
        ev = ws[ws["step"] == step].copy()
        ev["kind"] = "step"
    t0 = ev["start_ts"].min()
    ev["start_ms"] = (ev["start_ts"] - t0) * 1000
    ev["dur_ms"] = (ev["end_ts"] - ev["start_ts"]) * 1000
    for kind, g in ev.groupby("kind"):
        fig.add_trace(
            go.Bar(
                name=kind,
                base=g["start_ms"].tolist(),
                x=g["dur_ms"].tolist(),
                y=[f"rank {int(r)}" for r in g["rank"]],
                orientation="h",
                marker_color=SPAN_COLORS.get(kind),
                hovertemplate="%{y} " + kind + " start %{base:.1f} ms, %{x:.1f} ms<extra></extra>",
            )
        )
    nr = ev["rank"].nunique()
    fig.update_layout(
        barmode="overlay",
        title=f"step {int(step)} (ms from its first rank's start)",
        xaxis_title="ms",
        height=max(260, 60 * nr + 140),
        yaxis={"autorange": "reversed"},
    )
    return fig


def memory_figure(tl: pd.DataFrame | None, mem: pd.DataFrame) -> go.Figure:
    """Memory over time per rank (ms since the rank's first record), one line per rank and component (framework
    allocator: allocated; APP and the workload's RSS samples: reserved / resident), the peak marked."""
    fig = go.Figure()
    if tl is None or tl.empty:
        return fig
    for (rank, comp), g in tl.groupby(["rank", "component"], sort=True):
        y = g["allocated_bytes"] if g["allocated_bytes"].notna().any() else g["reserved_bytes"]
        t0 = tl.loc[tl["rank"] == rank, "ts_us"].min()
        x = (g["ts_us"] - t0) / 1000.0
        fig.add_trace(go.Scatter(x=x, y=y / 2**20, mode="lines", name=f"rank {rank} {comp}"))
        if y.notna().any():
            i = y.idxmax()
            fig.add_trace(
                go.Scatter(
                    x=[x[i]],
                    y=[y[i] / 2**20],
                    mode="markers+text",
                    text=["peak"],
                    textposition="top center",
                    marker={"size": 10, "symbol": "x"},
                    name=f"rank {rank} {comp} peak",
                    showlegend=False,
                )
            )
    fig.update_layout(
        title="memory per rank over time (peak marked)",
        xaxis_title="ms since the rank's first record",
        yaxis_title="MiB",
        height=360,
    )
    return fig


def expert_load(rid: str) -> list[float] | None:
    """Tokens per expert summed over ranks and steady-state steps (workload_steps.tokens_per_expert)."""
    ws = data.get().table(rid, "workload_steps")
    if ws is None or ws.empty or "tokens_per_expert" not in ws.columns:
        return None
    rec = data.get().run(rid) or {}
    warm = warmup_steps(rec.get("config"))
    total = None
    for v in ws.loc[ws["step"] >= warm, "tokens_per_expert"]:
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                continue
        if v is None or isinstance(v, float):
            continue
        v = [float(x) for x in v]
        if total is None:
            total = v
        elif len(v) == len(total):
            total = [a + b for a, b in zip(total, v)]
    return total
