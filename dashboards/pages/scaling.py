"""Scaling page (`/scaling`): throughput and scaling efficiency against world size, one line per group
of the other settings (repeats averaged, error bars = std over repeats), with the ideal (linear) line.
Efficiency = throughput(N) / (throughput(N0) × N / N0), N0 the group's smallest world size."""

from __future__ import annotations

import plotly.graph_objects as go
from dash import dcc, html

from dashboards import data
from dashboards.components import empty, table


def layout(sweep: str | None = None, **_):
    d = data.get()
    df = d.runs_frame()
    if sweep and "sweep_id" in df.columns:
        df = df[df["sweep_id"] == sweep]
    sc = d.scaling(df)
    if sc.empty:
        return html.Div([html.H2("Scaling"), empty("no finished runs with a world size and a throughput"),
                         dcc.Graph(id="scaling-throughput", figure=go.Figure())], id="scaling-page")
    thr, eff = go.Figure(), go.Figure()
    for i, (grp, g) in enumerate(sc.groupby("group", sort=True)):
        color = f"hsl({(i * 67) % 360},60%,45%)"
        thr.add_trace(go.Scatter(x=g["world_size"], y=g["throughput"], mode="lines+markers", name=grp,
                                 line={"color": color},
                                 error_y={"type": "data", "array": [s or 0 for s in g["std"]], "visible": True}))
        thr.add_trace(go.Scatter(x=g["world_size"], y=g["ideal"], mode="lines", name=f"ideal · {grp}",
                                 line={"color": color, "dash": "dot"}, showlegend=len(sc["group"].unique()) < 8))
        eff.add_trace(go.Scatter(x=g["world_size"], y=g["efficiency"], mode="lines+markers", name=grp,
                                 line={"color": color}))
    ws = sorted(sc["world_size"].unique())
    eff.add_trace(go.Scatter(x=ws, y=[1.0] * len(ws), mode="lines", name="ideal", line={"color": "#999", "dash": "dot"}))
    thr.update_layout(title="throughput vs world size (dotted: ideal linear scaling)", xaxis_title="world size",
                      yaxis_title="samples/s", height=460, xaxis={"tickvals": ws})
    eff.update_layout(title="scaling efficiency", xaxis_title="world size", yaxis_title="efficiency",
                      yaxis={"tickformat": ".0%"}, height=420, xaxis={"tickvals": ws})
    shown = sc[["group", "world_size", "throughput", "std", "repeats", "ideal", "efficiency"]]
    return html.Div([
        html.H2("Scaling"),
        html.P("Throughput = sum of samples over ranks / slowest rank's step time, mean over repeats. "
               "Efficiency = throughput / ideal, ideal = smallest world size's throughput scaled linearly.",
               style={"fontSize": "13px", "color": "#555"}),
        dcc.Graph(id="scaling-throughput", figure=thr),
        dcc.Graph(id="scaling-efficiency", figure=eff),
        table(shown, id="scaling-table", page_size=30),
    ], id="scaling-page")
