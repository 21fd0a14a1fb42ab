"""Run page (`/run/<run_id>`): per-rank breakdown of a step (computing / communication not overlapped /
overlapped / free), top kernels, collectives with bytes, time, algbw and busbw, a timeline of one step
across ranks, slow ranks/links and advice, and for MoE the expert load, for pipelines the bubble per stage.
Reads only aggregate tables from the store."""

from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from analyzers.analyses.steadiness import SELF_ESTIMATES, resolved, unsteady_reasons
from analyzers.catalogue import BREAKDOWN_TOTAL, KEY_METRICS, METRICS
from analyzers.schema import warmup_steps
from dashboards import data
from dashboards.components import (
    TABLE_STYLE,
    after_paint,
    after_paint_input,
    empty,
    metric_card,
    metric_label,
    metric_text,
    section,
    table,
)
from perfbench.views.run_report import (
    advice_tree,
    breakdown_step,
    gain_text,
    input_problem_lines,
    ordered_advice,
    peak_holders,
    step_story,
    traffic_classes,
    try_text,
)
from perfbench.views.trace import write_trace

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


def layout(run_id: str | None = None, **_):
    d = data.get()
    rec = d.run(run_id) if run_id else None
    if rec is None:
        return html.Div(
            [html.H2("Run"), empty(f"no run {run_id!r} in {d.store.root}"), dcc.Link("back to sweeps", href="/")],
            id="run-page",
        )
    rid = rec["run_id"]
    steps = _steps(rid)
    return html.Div(
        [
            dcc.Store(id="run-id", data=rid),
            html.H2(["Run ", html.Code(rid)]),
            html.P(
                [
                    f"status: {rec.get('status')}",
                    f" · sweep: {rec.get('sweep_id')}" if rec.get("sweep_id") else "",
                    f" · source: {rec.get('source')}",
                    " · ",
                    dcc.Link("compare with…", href=f"/compare?a={rid}"),
                    *_trace_download(rid),
                ]
            ),
            html.Pre(
                rec["error"],
                style={"background": "#fee", "whiteSpace": "pre-wrap", "maxHeight": "200px", "overflow": "auto"},
            )
            if rec.get("error")
            else None,
            settings_line(rec.get("settings") or {}),
            input_problems(rec),
            verdict(rid, rec),
            unsteady(rec),
            key_numbers(rec.get("metrics") or {}),
            section(
                "Step breakdown per rank",
                html.Div(
                    [
                        html.Label("step "),
                        dcc.Dropdown(
                            id="run-step",
                            options=[{"label": "steady-state steps", "value": -1}]
                            + [{"label": str(s), "value": s} for s in steps],
                            value=-1,
                            clearable=False,
                            style={"width": "260px", "display": "inline-block", "verticalAlign": "middle"},
                        ),
                    ]
                ),
                # the charts are made by a callback once the verdict and numbers have painted and the browser
                # is idle (plotly.js is fetched and evaluated only then)
                after_paint("run", "#run-verdict"),
                html.Div(id="run-charts", children=html.P("drawing the charts…", style={"color": "#777"})),
            ),
            section(
                "Slow ranks and links", slow_table(rid, "slow_ranks", "ranks"), slow_table(rid, "slow_links", "links")
            ),
            section("Top kernels", kernels_table(rid)),
            section("Collectives", collectives_table(rid)),
            section("All advice", advice_list(rid)),
            *_optional_sections(rid),
        ],
        id="run-page",
    )


def _trace_download(rid: str) -> list:
    """A button that downloads the run's merged, clock-aligned trace (perfbench.views.trace; opens in Perfetto)."""
    return [
        " · ",
        html.Button(
            "download merged trace (.json.gz)",
            id="run-trace-button",
            n_clicks=0,
            title="one Chrome-trace / Perfetto file: a process per rank, compute and "
            "collective tracks, step markers, flow arrows per collective; open it in "
            "ui.perfetto.dev or chrome://tracing (`perfbench trace RUN -o FILE`)",
            style={"marginLeft": "4px"},
        ),
        dcc.Download(id="run-trace-download"),
    ]


def settings_line(settings: dict):
    """The run's settings as readable `key value` chips (not a JSON line)."""
    chips = [
        html.Span(
            [html.Span(k.replace("_", " ") + " ", style={"color": "#666"}), html.B(str(v))],
            style={"marginRight": "14px", "whiteSpace": "nowrap"},
        )
        for k, v in settings.items()
        if v is not None
    ]
    return html.Div(chips, id="run-settings", style={"fontSize": "13px", "margin": "4px 0 10px"})


def _advice(rid: str) -> list[dict] | None:
    """The stored advice in its ranked order (causes by expected gain, symptoms after their cause; older runs
    without gains: most severe first) - the same list `perfbench show` and `perfbench advise` print."""

    recs = ordered_advice(data.get().table(rid, "advice"))
    return recs or None


def _gain(r: dict) -> str:

    return gain_text(r)


def verdict(rid: str, rec: dict):
    """The answer first: the top finding of the stored advice, with its evidence."""
    a = _advice(rid)
    style = {
        "border": "1px solid #ccc",
        "borderLeft": "6px solid #888",
        "padding": "8px 14px",
        "margin": "10px 0 14px",
        "background": "#fafafa",
    }
    if rec.get("status") != "ok":
        return html.Div(
            [html.B("Verdict: "), f"the run did not finish ({rec.get('status')}); see the error above."],
            id="run-verdict",
            style={**style, "borderLeftColor": "#b00"},
        )
    if a is None:
        return html.Div(
            [html.B("Verdict: "), "no finding — none of the advice rules fired for this run."],
            id="run-verdict",
            style={**style, "borderLeftColor": "#54a24b"},
        )
    top = a[0]
    sev = str(top.get("severity") or "")
    color = {"high": "#e45756", "medium": "#f58518"}.get(sev, "#4c78a8")
    more = len(a) - 1
    return html.Div(
        [
            html.Div(
                [html.B("Verdict" + (f" ({sev})" if sev else "") + ": "), html.Span(str(top.get("message", "")))],
                style={"fontSize": "16px"},
            ),
            html.Div(
                _gain(top) + (f" — basis: {top['basis']}" if top.get("basis") else ""),
                className="gain",
                style={"fontSize": "13px", "marginTop": "4px"},
            )
            if "gain_ms" in top
            else None,
            html.Div(
                ["evidence: ", str(top.get("evidence") or "-")],
                className="evidence",
                style={"fontSize": "13px", "color": "#444", "marginTop": "4px"},
            ),
            html.Div(
                f"{more} more finding{'s' if more != 1 else ''} under “All advice”." if more else "",
                style={"fontSize": "12px", "color": "#777", "marginTop": "4px"},
            ),
        ],
        id="run-verdict",
        style={**style, "borderLeftColor": color},
    )


def unsteady(rec: dict):
    """Why the run is not steady enough to compare (analyzers/analyses/steadiness.py: the ⚠ of `ls`), or None."""
    why = unsteady_reasons(rec.get("metrics") or {})
    if not why:
        return None
    return html.Div(
        [html.B("⚠ Not steady enough to compare: "), "; ".join(why), " (measure it again before comparing it)"],
        id="run-unsteady",
        style={"background": "#fff4d6", "padding": "4px 10px", "margin": "6px 0", "fontSize": "13px"},
    )


def input_problems(rec: dict):
    """Per rank, the inputs it had but could not use and what was recomputed (perfbench.views.run_report)."""

    lines = input_problem_lines(rec)
    if not lines:
        return None
    return html.Div(
        [html.B("Missing or damaged inputs: "), html.Ul([html.Li(line) for line in lines])],
        id="run-input-problems",
        style={"background": "#fff4d6", "padding": "6px 10px", "margin": "6px 0"},
    )


def key_numbers(metrics: dict):
    """The catalogue's key metrics as cards (label, value with unit, definition as tooltip); the rest folded.
    The profiled step the breakdown splits stands beside the step time, with the profiler's cost between them
    (perfbench.views.run_report.step_story)."""

    metrics = dict(metrics)
    if metrics.get(BREAKDOWN_TOTAL) is None and breakdown_step(metrics) is not None:
        metrics[BREAKDOWN_TOTAL] = breakdown_step(metrics)
    lead = [*KEY_METRICS[:2], BREAKDOWN_TOTAL, *KEY_METRICS[2:]]
    key = [m for m in lead if metrics.get(m) is not None]
    story = step_story(metrics)
    rest = [m for m in metrics if m not in key and m in METRICS and metrics.get(m) is not None]
    unknown = [m for m in metrics if m not in METRICS]
    ends = {f"{m}_{e}" for m in SELF_ESTIMATES for e in ("low", "high")}
    rest = [m for m in rest if m not in ends]

    def text(m):  # a run's estimate of its own cost: with its interval, never a bare negative cost
        if m in SELF_ESTIMATES:
            return resolved(metrics[m], metrics.get(f"{m}_low"), metrics.get(f"{m}_high"))
        return metric_text(m, metrics[m])

    rows = pd.DataFrame(
        [{"metric": metric_label(m), "value": text(m), "definition": METRICS[m].definition} for m in rest]
    )
    return html.Div(
        [
            html.Div([metric_card(m, metrics[m], id=f"run-metric-{m}") for m in key], id="run-key-numbers"),
            html.P(story, id="run-step-story", style={"fontSize": "13px", "color": "#444"}) if story else None,
            html.Details(
                [
                    html.Summary(f"all {len(rest)} other metrics"),
                    table(
                        rows,
                        id="run-metrics-table",
                        page_size=40,
                        formatted=False,
                        style_cell={**TABLE_STYLE["style_cell"], "whiteSpace": "normal", "maxWidth": "700px"},
                    ),
                    html.P(f"not in the catalogue: {', '.join(unknown)}") if unknown else None,
                ],
                style={"fontSize": "13px"},
            )
            if rest
            else None,
        ],
        style={"margin": "6px 0 14px"},
    )


def slow_table(rid: str, name: str, what: str):
    """Flagged rows first, and how many were tested (a table of hundreds of unflagged rows says nothing)."""
    df = data.get().table(rid, name)
    if df is None or df.empty:
        return empty(f"no {name.replace('_', ' ')} table (one rank, or no collectives to test)")
    flagged = df["slow"].fillna(False).astype(bool) if "slow" in df.columns else pd.Series(False, index=df.index)
    n, k = len(df), int(flagged.sum())
    df = pd.concat([df[flagged], df[~flagged]])
    ranks = f" ({df['rank'].nunique()} ranks)" if what == "ranks" and "rank" in df.columns else ""
    head = (
        f"{k} of {n} tests flagged a slow {what[:-1]}{ranks}"
        if k
        else f"none of {n} tests flagged a slow {what[:-1]}{ranks}"
    )
    return html.Div(
        [
            html.P(head, id=f"run-{name}-count", style={"fontWeight": "bold" if k else "normal"}),
            table(
                df,
                id=f"run-{name}",
                page_size=10,
                style_data_conditional=[{"if": {"filter_query": "{slow} = yes"}, "backgroundColor": "#fde2e1"}],
            ),
        ]
    )


def _steps(rid) -> list[int]:
    d = data.get()
    for name in ("step_breakdown", "workload_steps"):
        t = d.table(rid, name)
        if t is not None and not t.empty and "step" in t.columns:
            return sorted(int(s) for s in t["step"].dropna().unique())
    return []


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


def kernels_table(rid: str):
    k = data.get().table(rid, "kernels")
    if k is None or k.empty:
        return empty("no kernels table (run without a profile?)")
    tcol = next((c for c in ("total_us", "total_time_us", "time_us", "dur_us") if c in k.columns), None)
    df = k.sort_values(tcol, ascending=False) if tcol else k
    df = df.head(50).copy()
    for c in [c for c in df.columns if c.endswith("_us")]:  # µs -> ms, as every other time on the page
        df[c[:-3] + "_ms"] = pd.to_numeric(df.pop(c), errors="coerce") / 1000.0
    df = df[[c for c in df.columns if not c.endswith("_ms")] + [c for c in df.columns if c.endswith("_ms")]]
    return table(df, id="run-kernels", page_size=15)


def collectives_table(rid: str):
    c = data.get().table(rid, "comm_ops")
    if c is None or c.empty:
        return empty("no collectives recorded")
    key = [k for k in ("comm_class", "op_type", "op_name") if k in c.columns]
    if "comm_class" in key:
        c = c.assign(comm_class=c["comm_class"].astype(object).where(c["comm_class"].notna(), "unclassified"))
    g = c.groupby(key)
    df = pd.DataFrame({"count": g.size()})
    if "size_bytes" in c.columns:
        df["bytes"] = g["size_bytes"].mean()
    if "elapse_ms" in c.columns:
        df["time_ms"] = g["elapse_ms"].mean()
    for bw in ("algbw_gbps", "busbw_gbps"):
        if bw in c.columns:
            df[bw] = g[bw].mean()
    df = df.reset_index().sort_values("time_ms" if "time_ms" in df.columns else "count", ascending=False)

    d = data.get()
    tc = traffic_classes(d.table(rid, "comm_classes"), d.table(rid, "comm_exposure_classes"))
    by_class = []
    if tc is not None:
        if "exposed_us" in tc.columns:
            tc["exposed_ms"] = pd.to_numeric(tc.pop("exposed_us"), errors="coerce") / 1000.0
        by_class = [
            html.P(
                "by traffic class (data-parallel gradient, tensor-parallel, pipeline p2p, expert dispatch; "
                "per rank and step, mean; exposed = not overlapped by compute)",
                style={"fontSize": "12px", "color": "#555"},
            ),
            table(tc, id="run-comm-classes"),
        ]
    return html.Div(
        by_class
        + [
            html.P(
                "per collective: mean over ranks and steps; algbw = bytes / time, busbw = algbw × "
                "the collective's bus factor (allreduce 2(n−1)/n)",
                style={"fontSize": "12px", "color": "#555"},
            ),
            table(df, id="run-collectives"),
        ]
    )


def advice_list(rid: str):
    """Every cause, largest expected gain first, its gain as a bar (share of the step), its evidence, knob,
    and the symptoms it explains collapsed under it."""

    a = _advice(rid)
    if a is None:
        return empty("no advice")
    tree = advice_tree(a)
    top = max([r.get("gain_ms") or 0.0 for r, _ in tree] + [0.0])

    def bar(r):
        g = r.get("gain_ms")
        width = 0 if g is None or top <= 0 else max(1, round(100 * g / top))
        return html.Div(
            [
                html.Div(
                    style={
                        "width": f"{width}%",
                        "height": "10px",
                        "background": "#e45756"
                        if r.get("severity") == "high"
                        else "#f58518"
                        if r.get("severity") == "medium"
                        else "#4c78a8",
                    }
                ),
            ],
            className="gain-bar",
            title=_gain(r),
            style={
                "width": "240px",
                "background": "#eee",
                "display": "inline-block",
                "marginRight": "8px",
                "verticalAlign": "middle",
            },
        )

    items = []
    for r, kids in tree:
        items.append(
            html.Li(
                [
                    bar(r),
                    html.B(f"[{r.get('severity')}] "),
                    html.Span(_gain(r) + ": ", className="gain"),
                    str(r.get("message", "")),
                    html.Div(f"gain basis: {r['basis']}", style={"fontSize": "12px", "color": "#555"})
                    if r.get("basis")
                    else None,
                    html.Div(try_text(r), className="try", style={"fontSize": "12px", "color": "#225"})
                    if r.get("try")
                    else None,
                    html.Div(f"evidence: {r['evidence']}", style={"fontSize": "12px", "color": "#555"})
                    if r.get("evidence")
                    else None,
                    html.Details(
                        [
                            html.Summary(f"{len(kids)} symptom{'s' if len(kids) != 1 else ''} this explains"),
                            html.Ul(
                                [
                                    html.Li(
                                        [
                                            html.B(f"{k['rule']}: "),
                                            str(k.get("message", "")),
                                            html.Div(
                                                f"evidence: {k['evidence']}",
                                                style={"fontSize": "12px", "color": "#555"},
                                            )
                                            if k.get("evidence")
                                            else None,
                                        ]
                                    )
                                    for k in kids
                                ]
                            ),
                        ],
                        className="symptoms",
                    )
                    if kids
                    else None,
                ],
                className="advice-root",
                style={"marginBottom": "8px"},
            )
        )
    return html.Ul(items, id="run-advice")


def _optional_sections(rid: str) -> list:
    d = data.get()
    out = []
    ex = d.table(rid, "experts")
    load = expert_load(rid)
    if load is not None or (ex is not None and not ex.empty):
        fig = None
        if load is not None:
            mean = sum(load) / len(load)
            fig = {
                "data": [
                    {"type": "bar", "x": [str(i) for i in range(len(load))], "y": load, "name": "tokens"},
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "x": [str(i) for i in range(len(load))],
                        "y": [mean] * len(load),
                        "name": "mean (balanced)",
                        "line": {"dash": "dot"},
                    },
                ],
                "layout": {
                    "title": {"text": "tokens routed to each expert (steady-state steps, all ranks)"},
                    "xaxis": {"title": {"text": "expert"}},
                    "height": 340,
                },
            }
        out.append(
            section(
                "Expert load",
                dcc.Graph(id="run-experts", figure=fig) if fig else None,
                table(ex, id="run-experts-table") if ex is not None and not ex.empty else None,
            )
        )
    mem = d.table(rid, "memory")
    if mem is not None and not mem.empty:
        out.append(memory_section(rid, mem))
    pp = d.table(rid, "pipeline")
    if pp is not None and not pp.empty:
        fig = go.Figure()
        scol = next((c for c in ("stage",) if c in pp.columns), None)
        bcol = next((c for c in ("bubble_fraction", "bubble_us", "bubble_ms", "bubble_s") if c in pp.columns), None)
        if scol and bcol:
            agg = pp.groupby(scol)[bcol].mean()
            fig.add_trace(go.Bar(x=[f"stage {s}" for s in agg.index], y=agg.tolist(), name=bcol))
            fig.update_layout(title=f"pipeline bubble per stage ({bcol})", height=320)
        out.append(
            section(
                "Pipeline bubble per stage",
                dcc.Graph(id="run-pipeline", figure=fig) if fig.data else None,
                table(pp, id="run-pipeline-table"),
            )
        )
    return out


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


def memory_section(rid: str, mem: pd.DataFrame):
    """What holds the peak (the largest rank's parts, bytes and share), per-rank peaks and the timeline."""

    d = data.get()
    rank, parts = peak_holders(d.table(rid, "memory_attribution"), mem)
    fig = memory_figure(d.table(rid, "memory_timeline"), mem)
    cols = [
        c
        for c in (
            "rank",
            "peak_bytes",
            "peak_source",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "peak_process_bytes",
            "peak_rss_bytes",
            "live_bytes",
            "capacity_bytes",
        )
        if c in mem.columns
    ]
    return section(
        "Memory",
        html.H4(f"What holds the peak (rank {rank}, the largest)") if rank is not None else None,
        table(parts[["part", "bytes", "share", "source"]], id="run-memory-attribution")
        if rank is not None and len(parts)
        else None,
        table(mem[cols], id="run-memory-table"),
        dcc.Graph(id="run-memory-timeline", figure=fig) if fig.data else None,
    )


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


@callback(
    Output("run-charts", "children"),
    Input("run-step", "value"),
    after_paint_input("run"),
    State("run-id", "data"),
    prevent_initial_call=True,
)
def _charts(step, _painted, rid):
    s = None if step in (None, -1) else int(step)
    bd, tl = breakdown_figure(rid, s), timeline_figure(rid, s)
    if not bd.data and not tl.data:  # nothing to draw: say so, without empty axes (and without plotly.js)
        return empty(bd.layout.title.text or "no step data in this run")
    return [
        dcc.Graph(id="run-breakdown", figure=bd),
        html.H3("Timeline of one step across ranks"),
        dcc.Graph(id="run-timeline", figure=tl),
    ]


@callback(
    Output("run-trace-download", "data"),
    Input("run-trace-button", "n_clicks"),
    State("run-id", "data"),
    prevent_initial_call=True,
)
def _download_trace(_n, rid):

    def write(buf):
        write_trace(data.get().store, rid, buf, compress=True)

    return dcc.send_bytes(write, f"{rid}.trace.json.gz")
