"""Scaling page (`/scaling`): throughput and scaling efficiency against world size, one line per group
of the other settings (repeats averaged, error bars = std over repeats), with the ideal (linear) line, and
`perfbench predict`'s curve calibrated on the sweep (dashed, with its uncertainty band) over world sizes
that were never run.
Efficiency is the runs' own `scaling_efficiency` (analyzers/catalogue.py has its definition); the table
paints first, the charts are drawn by a callback once it has painted."""

from __future__ import annotations

from dash import Output, State, callback, dcc, html

from analyzers.catalogue import METRICS
from dashboards import data
from dashboards.components import after_paint, after_paint_input, empty, table


def _frame(sweep):
    d = data.get()
    df = d.runs_frame()
    if sweep and "sweep_id" in df.columns:
        df = df[df["sweep_id"] == sweep]
    return d.scaling(df)


def layout(sweep: str | None = None, **_):
    sc = _frame(sweep)
    if sc.empty:
        return html.Div(
            [html.H2("Scaling"), empty("no finished runs with a world size and a throughput")], id="scaling-page"
        )
    shown = sc[["group", "world_size", "throughput", "std", "repeats", "ideal", "efficiency"]].rename(
        columns={
            "throughput": "throughput",
            "std": "throughput_std",
            "ideal": "ideal_throughput",
            "efficiency": "scaling_efficiency",
        }
    )
    return html.Div(
        [
            dcc.Store(id="scaling-sweep", data=sweep or ""),
            html.H2("Scaling"),
            html.P(
                [
                    html.B("throughput: "),
                    METRICS["throughput"].definition,
                    "; mean over repeats.",
                    html.Br(),
                    html.B("scaling efficiency: "),
                    METRICS["scaling_efficiency"].definition,
                    "; mean over repeats. Ideal = N × throughput(1).",
                ],
                style={"fontSize": "13px", "color": "#555"},
            ),
            table(shown, id="scaling-table", page_size=30),
            after_paint("scaling", "#scaling-table td"),  # the charts (plotly.js) come once the table has painted
            html.Div(id="scaling-charts"),
        ],
        id="scaling-page",
    )


@callback(
    Output("scaling-charts", "children"),
    after_paint_input("scaling"),
    State("scaling-sweep", "data"),
    prevent_initial_call=True,
)
def _charts(_painted, sweep):
    sc = _frame(sweep or None)
    if sc.empty:
        return []
    # figures as plain dicts: plotly's graph_objects validation costs ~10 ms per trace, too much with many groups
    thr_data, eff_data = [], []
    groups = sorted(sc["group"].unique())
    for i, grp in enumerate(groups):
        g = sc[sc["group"] == grp]
        color = f"hsl({(i * 67) % 360},60%,45%)"
        x = g["world_size"].tolist()
        thr_data.append(
            {
                "type": "scatter",
                "x": x,
                "y": g["throughput"].tolist(),
                "mode": "lines+markers",
                "name": grp,
                "line": {"color": color},
                "error_y": {"type": "data", "array": [s or 0 for s in g["std"]], "visible": True},
            }
        )
        thr_data.append(
            {
                "type": "scatter",
                "x": x,
                "y": g["ideal"].tolist(),
                "mode": "lines",
                "name": f"ideal · {grp}",
                "line": {"color": color, "dash": "dot"},
                "showlegend": len(groups) < 8,
            }
        )
        eff_data.append(
            {
                "type": "scatter",
                "x": x,
                "y": g["efficiency"].tolist(),
                "mode": "lines+markers",
                "name": grp,
                "line": {"color": color},
            }
        )
    pred, caption = data.get().predicted_scaling(sweep or None)
    if not pred.empty:
        x = pred["world_size"].tolist()
        band = {
            "type": "scatter",
            "x": x + x[::-1],
            "y": pred["high"].tolist() + pred["low"].tolist()[::-1],
            "fill": "toself",
            "fillcolor": "rgba(120,120,120,0.18)",
            "mode": "lines",
            "line": {"width": 0},
            "hoverinfo": "skip",
            "name": "predicted interval",
        }
        thr_data += [
            band,
            {
                "type": "scatter",
                "x": x,
                "y": pred["throughput"].tolist(),
                "mode": "lines+markers",
                "name": "predicted",
                "line": {"color": "#333", "dash": "dash"},
                "marker": {"symbol": "x"},
            },
        ]
        eff_data.append(
            {
                "type": "scatter",
                "x": x,
                "y": pred["scaling_efficiency"].tolist(),
                "mode": "lines+markers",
                "name": "predicted",
                "line": {"color": "#333", "dash": "dash"},
                "marker": {"symbol": "x"},
            }
        )
    ws = sorted(set(sc["world_size"].unique().tolist()) | set(pred["world_size"].tolist() if not pred.empty else []))
    eff_data.append(
        {
            "type": "scatter",
            "x": ws,
            "y": [1.0] * len(ws),
            "mode": "lines",
            "name": "ideal",
            "line": {"color": "#999", "dash": "dot"},
        }
    )
    thr = {
        "data": thr_data,
        "layout": {
            "title": {"text": "throughput vs world size (dotted: ideal linear scaling)"},
            "xaxis": {"title": {"text": "world size"}, "tickvals": ws, "type": "log" if max(ws) > 8 else "linear"},
            "yaxis": {"title": {"text": METRICS["throughput"].unit}},
            "height": 460,
        },
    }
    eff = {
        "data": eff_data,
        "layout": {
            "title": {"text": "scaling efficiency"},
            "xaxis": {"title": {"text": "world size"}, "tickvals": ws, "type": "log" if max(ws) > 8 else "linear"},
            "yaxis": {"title": {"text": "efficiency"}, "tickformat": ".0%"},
            "height": 420,
        },
    }
    return [
        dcc.Graph(id="scaling-throughput", figure=thr),
        html.P(caption, id="scaling-predicted", style={"fontSize": "13px", "color": "#555"}),
        dcc.Graph(id="scaling-efficiency", figure=eff),
    ]
