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


def _line(x: list, y: list, name: str, line: dict, mode: str = "lines+markers", **extra) -> dict:
    """One scatter trace as a plain dict (plotly's graph_objects validation costs ~10 ms per trace, too much with
    many groups)."""
    return {"type": "scatter", "x": x, "y": y, "mode": mode, "name": name, "line": line, **extra}


def _measured_traces(sc) -> tuple[list[dict], list[dict]]:
    """(throughput traces, efficiency traces) of the runs: per group, its measured line (error bars = std over
    repeats) and its ideal linear line."""
    thr_data, eff_data = [], []
    groups = sorted(sc["group"].unique())
    for i, grp in enumerate(groups):
        g = sc[sc["group"] == grp]
        color = {"color": f"hsl({(i * 67) % 360},60%,45%)"}
        x = g["world_size"].tolist()
        errors = {"type": "data", "array": [s or 0 for s in g["std"]], "visible": True}
        thr_data.append(_line(x, g["throughput"].tolist(), grp, color, error_y=errors))
        ideal = _line(x, g["ideal"].tolist(), f"ideal · {grp}", {**color, "dash": "dot"}, "lines")
        thr_data.append({**ideal, "showlegend": len(groups) < 8})
        eff_data.append(_line(x, g["efficiency"].tolist(), grp, color))
    return thr_data, eff_data


def _predicted_traces(pred) -> tuple[list[dict], list[dict]]:
    """(throughput traces, efficiency traces) of `perfbench predict`'s curve: its uncertainty band and dashed
    line."""
    if pred.empty:
        return [], []
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
    dashed, cross = {"color": "#333", "dash": "dash"}, {"symbol": "x"}
    thr = _line(x, pred["throughput"].tolist(), "predicted", dashed, marker=cross)
    eff = _line(x, pred["scaling_efficiency"].tolist(), "predicted", dashed, marker=cross)
    return [band, thr], [eff]


def _figure(traces: list[dict], title: str, ws: list, yaxis: dict, height: int) -> dict:
    xaxis = {"title": {"text": "world size"}, "tickvals": ws, "type": "log" if max(ws) > 8 else "linear"}
    return {"data": traces, "layout": {"title": {"text": title}, "xaxis": xaxis, "yaxis": yaxis, "height": height}}


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
    thr_data, eff_data = _measured_traces(sc)
    pred, caption = data.get().predicted_scaling(sweep or None)
    pred_thr, pred_eff = _predicted_traces(pred)
    thr_data += pred_thr
    eff_data += pred_eff
    ws = sorted(set(sc["world_size"].unique().tolist()) | set(pred["world_size"].tolist() if not pred.empty else []))
    eff_data.append(_line(ws, [1.0] * len(ws), "ideal", {"color": "#999", "dash": "dot"}, "lines"))
    thr_title = "throughput vs world size (dotted: ideal linear scaling)"
    thr = _figure(thr_data, thr_title, ws, {"title": {"text": METRICS["throughput"].unit}}, 460)
    eff = _figure(eff_data, "scaling efficiency", ws, {"title": {"text": "efficiency"}, "tickformat": ".0%"}, 420)
    return [
        dcc.Graph(id="scaling-throughput", figure=thr),
        html.P(caption, id="scaling-predicted", style={"fontSize": "13px", "color": "#555"}),
        dcc.Graph(id="scaling-efficiency", figure=eff),
    ]
