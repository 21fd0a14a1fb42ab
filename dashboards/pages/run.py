"""Run page (`/run/<run_id>`): per-rank breakdown of a step (computing / communication not overlapped /
overlapped / free), top kernels, collectives with bytes, time, algbw and busbw, a timeline of one step
across ranks, slow ranks/links and advice, and for MoE the expert load, for pipelines the bubble per stage.
Reads only aggregate tables from the store."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from analyzers.analyses.steadiness import SELF_ESTIMATES, resolved, unsteady_reasons
from analyzers.catalogue import BREAKDOWN_TOTAL, KEY_METRICS, METRICS
from dashboards import data
from dashboards.components import (
    TABLE_STYLE,
    after_paint,
    after_paint_input,
    empty,
    metric_card,
    metric_label,
    metric_text,
    picker,
    section,
    table,
)
from dashboards.pages.run_advice import advice_list, verdict
from dashboards.pages.run_charts import breakdown_figure, expert_load, memory_figure, timeline_figure
from perfbench.views.run_numbers import breakdown_step, input_problem_lines, peak_holders, step_story, traffic_classes
from perfbench.views.trace import write_trace


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
            input_problems(rec, d.store.damaged_tables(rid)),
            verdict(rid, rec),
            unsteady(rec),
            key_numbers(rec.get("metrics") or {}),
            section(
                "Step breakdown per rank",
                html.Div(
                    [
                        html.Label("step "),
                        picker(
                            "run-step",
                            [{"label": "steady-state steps", "value": -1}]
                            + [{"label": str(s), "value": s} for s in steps],
                            -1,
                            260,
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


def input_problems(rec: dict, damaged: list[str] | None = None):
    """Per rank, the inputs it had but could not use and what was recomputed (perfbench.views.run_numbers), then
    the run's stored tables that cannot be read back (Store.damaged_tables: the sections drawn from them are
    empty)."""

    lines = input_problem_lines(rec) + list(damaged or [])
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
    (perfbench.views.run_numbers.step_story)."""

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
