"""History page (`/history?metric=throughput`): a metric's series per configuration, one point per run of
every checked (`check --history`) or baselined sweep, labelled with its commit or label, and the change
points E-Divisive found (perfbench.regress.history.series_with_change_points, the same data as `perfbench history`)."""

from __future__ import annotations

import time

import plotly.graph_objects as go
from dash import dcc, html

from analyzers.catalogue import METRICS, metric
from dashboards import data
from dashboards.components import empty, section
from perfbench.regress.history import series_with_change_points


def layout(metric_name: str | None = None, **query):
    name = query.get("metric") or metric_name or "throughput"
    if name not in METRICS:
        return html.Div([html.H2("History"), html.P(f"unknown metric {name!r}", id="history-error")], id="history-page")
    found = series_with_change_points(data.get().store, name)
    links = [
        dcc.Link(m, href=f"/history?metric={m}", style={"marginRight": "12px"})
        for m in ("throughput", "step_time_s", "step_cpu_s", "comm_share", "communication_not_overlapped_s")
    ]
    if not found:
        return html.Div(
            [
                html.H2("History"),
                html.Div(links),
                empty(
                    "no history yet: `perfbench check --history`, `perfbench baseline save` or "
                    "`perfbench history --add SWEEP` record points"
                ),
            ],
            id="history-page",
        )
    return html.Div(
        [html.H2(f"History · {metric(name).label}"), html.Div(links, id="history-metrics")]
        + [
            section(
                s["key"],
                dcc.Graph(figure=figure(s, name), id=f"history-fig-{i}"),
                html.Ul(
                    [
                        html.Li(
                            f"change at {c['began_at']} ({c['run_id']}): {c['before']:.4g} → "
                            f"{c['after']:.4g} ({(c['ratio'] - 1) * 100:+.1f}%), confidence "
                            f"{c['confidence']:.2f}"
                        )
                        for c in s["change_points"]
                    ],
                    id=f"history-changes-{i}",
                ),
            )
            for i, s in enumerate(found)
        ],
        id="history-page",
    )


def figure(s: dict, name: str) -> go.Figure:
    # the gate values (perfbench.regress.history.gate_value), the values the change points were found in
    pts = [dict(p, value=p["gate"]) for p in s["points"] if p.get("gate") is not None]
    x = list(range(len(pts)))
    hover = [
        f"{p['ref']}<br>{p['run_id']}<br>{time.strftime('%Y-%m-%d %H:%M', time.localtime(p['time']))}" for p in pts
    ]
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=[p["value"] for p in pts],
            mode="lines+markers",
            name=name,
            text=hover,
            hovertemplate="%{text}<br>gate value %{y:.4g}<extra></extra>",
        )
    )
    cuts = [0] + [c["index"] for c in s["change_points"]] + [len(pts)]
    for a, b in zip(cuts, cuts[1:]):  # each segment's median as a step line
        seg = sorted(p["value"] for p in pts[a:b])
        med = seg[len(seg) // 2] if len(seg) % 2 else (seg[len(seg) // 2 - 1] + seg[len(seg) // 2]) / 2
        fig.add_trace(
            go.Scatter(
                x=[a - 0.4, b - 0.6],
                y=[med, med],
                mode="lines",
                showlegend=False,
                line={"dash": "dot", "color": "#888"},
                hoverinfo="skip",
            )
        )
    for c in s["change_points"]:
        fig.add_vline(
            x=c["index"] - 0.5,
            line={"color": "#c00", "dash": "dash"},
            annotation_text=f"{c['began_at']} {(c['ratio'] - 1) * 100:+.0f}%",
        )
    fig.update_layout(
        height=320,
        margin={"t": 30, "b": 40},
        yaxis_title=f"{name} ({metric(name).unit}), 10% fastest steps",
        xaxis={"tickvals": x, "ticktext": [p["ref"] for p in pts], "title": "run (oldest first)"},
    )
    return fig
