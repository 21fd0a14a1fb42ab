"""Sweeps page (`/`): every run with its settings and key metrics in a sortable, filterable grid, and a
view across settings (parallel coordinates, heatmap of a metric over two settings) that follows the grid's
filter. Select two rows to open them on the Compare page. `?sweep=ID` preselects a sweep."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, callback, dash_table, dcc, html

from dashboards import data
from dashboards.components import TABLE_STYLE, empty, frame_records

METRIC_CHOICES = ["throughput", "step_time_s", "comm_share", "communication_not_overlapped_s", "computing_s"]


def _columns(df: pd.DataFrame) -> list[str]:
    settings = [c for c in df.columns if c.startswith("settings.")]
    metrics = [f"metrics.{m}" for m in data.KEY_METRICS if f"metrics.{m}" in df.columns
               and df[f"metrics.{m}"].notna().any()]
    return ["run_id", "sweep_id", "status", "source"] + settings + metrics


def _grid_frame(sweep: str | None) -> pd.DataFrame:
    df = data.get().runs_frame()
    if sweep and "sweep_id" in df.columns:
        df = df[df["sweep_id"] == sweep]
    cols = [c for c in _columns(df) if c in df.columns]
    out = df[cols].copy()
    for c in out.columns:  # settings can be lists/dicts; the grid shows them as text
        if out[c].dtype == object:
            out[c] = out[c].map(lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else str(v))
    if "run_id" in out.columns:
        out.insert(0, "open", out["run_id"].map(lambda r: f"[open](/run/{r})"))
    return out


def layout(sweep: str | None = None, **_):
    d = data.get()
    df = _grid_frame(sweep)
    if d.runs_frame().empty:
        return html.Div([html.H2("Sweeps"), empty(f"no runs in {d.store.root} yet — run `perfbench sweep CONFIG` "
                                                   "or `perfbench analyze PATH`")], id="sweeps-page")
    settings = [c for c in df.columns if c.startswith("settings.")]
    varying = [c for c in settings if df[c].astype(str).nunique() > 1] or settings
    x0 = "settings.world_size" if "settings.world_size" in varying else (varying[0] if varying else None)
    y0 = next((c for c in varying if c != x0 and c != "settings.repeat"), x0)
    columns = [{"name": c.replace("settings.", "").replace("metrics.", ""), "id": c,
                "presentation": "markdown" if c == "open" else "input",
                "type": "numeric" if pd.api.types.is_numeric_dtype(df[c]) else "text"} for c in df.columns]
    return html.Div([
        html.H2("Sweeps"),
        html.Div([
            html.Label("sweep "),
            dcc.Dropdown(id="sweeps-sweep", options=[{"label": "all sweeps", "value": ""}] +
                         [{"label": s, "value": s} for s in d.sweeps()], value=sweep or "", clearable=False,
                         style={"width": "420px", "display": "inline-block", "verticalAlign": "middle"}),
            html.Span(id="sweeps-count", style={"marginLeft": "16px"}),
            html.A("compare selected", id="sweeps-compare-link", href="/compare", style={"marginLeft": "16px"}),
        ]),
        html.P("Filter with the row under the headers (e.g. `>100`, `ok`, `2`); sort by clicking a header; "
               "tick two rows to compare them.", style={"color": "#555", "fontSize": "13px"}),
        dash_table.DataTable(
            id="runs-grid", data=frame_records(df), columns=columns, sort_action="native", filter_action="native",
            sort_mode="multi", row_selectable="multi", page_action="native", page_size=25,
            markdown_options={"link_target": "_self"}, **TABLE_STYLE),
        html.H3("Across settings"),
        html.Div([
            html.Label("metric "),
            dcc.Dropdown(id="sweeps-metric", options=METRIC_CHOICES, value="throughput", clearable=False,
                         style={"width": "260px", "display": "inline-block", "verticalAlign": "middle"}),
            html.Label(" x ", style={"marginLeft": "12px"}),
            dcc.Dropdown(id="sweeps-x", options=settings, value=x0, clearable=False,
                         style={"width": "260px", "display": "inline-block", "verticalAlign": "middle"}),
            html.Label(" y ", style={"marginLeft": "12px"}),
            dcc.Dropdown(id="sweeps-y", options=settings, value=y0, clearable=False,
                         style={"width": "260px", "display": "inline-block", "verticalAlign": "middle"}),
        ]),
        # the graphs are created by the callback below, i.e. after the grid has rendered, so the grid's first
        # paint does not wait for plotly.js (the biggest script of the page) to load and parse
        html.Div(id="sweeps-views"),
    ], id="sweeps-page")


@callback(Output("runs-grid", "data"), Output("runs-grid", "selected_rows"), Input("sweeps-sweep", "value"),
          prevent_initial_call=True)
def _pick_sweep(sweep):
    return frame_records(_grid_frame(sweep or None)), []


@callback(Output("sweeps-count", "children"), Input("runs-grid", "derived_virtual_data"), Input("runs-grid", "data"))
def _count(view, all_rows):
    shown = len(view) if view is not None else len(all_rows or [])
    return f"{shown} of {len(all_rows or [])} runs shown"


@callback(Output("sweeps-compare-link", "href"), Output("sweeps-compare-link", "children"),
          Input("runs-grid", "derived_virtual_selected_rows"), Input("runs-grid", "derived_virtual_data"))
def _compare_link(selected, view):
    ids = [view[i]["run_id"] for i in (selected or []) if view and i < len(view)]
    if len(ids) >= 2:
        return f"/compare?a={ids[0]}&b={ids[1]}", f"compare {ids[0]} ↔ {ids[1]}"
    return "/compare", "compare selected (tick two rows)"


def _num_or_codes(s: pd.Series) -> tuple[pd.Series, list | None]:
    n = pd.to_numeric(s, errors="coerce")
    if n.notna().all():
        return n, None
    cats = sorted(s.astype(str).unique())
    return s.astype(str).map({c: i for i, c in enumerate(cats)}), cats


@callback(Output("sweeps-views", "children"), Input("runs-grid", "derived_virtual_data"),
          Input("sweeps-metric", "value"), Input("sweeps-x", "value"), Input("sweeps-y", "value"))
def _views_graphs(rows, metric, x, y):
    heat, par = _views(rows, metric, x, y)
    return [dcc.Graph(id="sweeps-heatmap", figure=heat, style={"width": "48%", "display": "inline-block"}),
            dcc.Graph(id="sweeps-parcoords", figure=par, style={"width": "52%", "display": "inline-block"})]


def _views(rows, metric, x, y):
    """Figures as plain dicts (plotly's graph_objects validation is the slow part with hundreds of runs)."""
    df = pd.DataFrame(rows or [])
    col = f"metrics.{metric}"
    if df.empty or col not in df.columns or x not in df.columns or y not in df.columns:
        blank = {"data": [], "layout": {"title": {"text": f"no {metric} in the shown runs"}, "height": 420}}
        return blank, blank
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    df = df.assign(**{col: pd.to_numeric(df[col], errors="coerce")})
    pv = df.groupby([df[y].astype(str), df[x].astype(str)])[col].mean().unstack()
    for axis in (0, 1):
        try:
            pv = pv.reindex(sorted(pv.axes[axis], key=lambda v: float(v)), axis=axis)
        except ValueError:  # categorical labels keep their text order
            pass
    z = [[None if pd.isna(v) else float(v) for v in row] for row in pv.to_numpy()]
    heat = {"data": [{"type": "heatmap", "z": z, "x": [str(c) for c in pv.columns], "y": [str(i) for i in pv.index],
                      "colorscale": "Viridis", "colorbar": {"title": {"text": metric}},
                      "hovertemplate": f"{x[9:]}=%{{x}}<br>{y[9:]}=%{{y}}<br>{metric}=%{{z:.4g}}<extra></extra>"}],
            "layout": {"title": {"text": f"mean {metric} over {x[9:]} × {y[9:]}"}, "height": 420,
                       "xaxis": {"title": {"text": x[9:]}, "type": "category"},
                       "yaxis": {"title": {"text": y[9:]}, "type": "category"}}}
    dims = []
    for c in [c for c in df.columns if c.startswith("settings.")]:
        if c == "settings.repeat" or df[c].astype(str).nunique() <= 1:
            continue
        vals, cats = _num_or_codes(df[c])
        dim = {"label": c[9:], "values": vals.tolist()}
        if cats is not None:
            dim.update(tickvals=list(range(len(cats))), ticktext=cats)
        dims.append(dim)
    par = {"data": [], "layout": {"title": {"text": "settings → " + metric}, "height": 420}}
    if df[col].notna().any():
        dims.append({"label": metric, "values": df[col].tolist()})
        par["data"] = [{"type": "parcoords", "dimensions": dims,
                        "line": {"color": df[col].fillna(0).tolist(), "colorscale": "Viridis", "showscale": False}}]
    return heat, par
