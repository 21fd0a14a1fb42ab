"""Sweeps page (`/`): every run with its swept settings and key metrics in a grid served page by page
(filter and sort run on the server: dashboards/grid.py), and a view across settings (heatmap of a metric
over two swept settings, parallel coordinates) that follows the grid's filter. Ticked runs go to the
Compare page (its nav link and the "compare" link open with them). `?sweep=ID` preselects a sweep."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, callback, dash_table, dcc, html

from analyzers.catalogue import METRICS, format_value
from dashboards import data, grid
from dashboards.components import (
    TABLE_STYLE,
    after_paint,
    after_paint_input,
    definition,
    empty,
    heading,
    metric_label,
    picker,
)

PAGE_SIZE = 25


def _axes(df: pd.DataFrame) -> tuple[list[str], str | None, str | None]:
    """Settings to offer, and the default x and y: two DIFFERENT swept settings (repeat only as a last resort)."""
    settings = [c for c in df.columns if c.startswith("settings.")]
    swept = [c for c in settings if c != "settings.repeat" and df[c].astype(str).nunique() > 1]
    rest = [c for c in settings if c not in swept]
    order = swept + [c for c in rest if c == "settings.repeat"] + [c for c in rest if c != "settings.repeat"]
    x0 = "settings.world_size" if "settings.world_size" in swept else (order[0] if order else None)
    y0 = next((c for c in order if c != x0), None)
    return settings, x0, y0


def _metric_options(df: pd.DataFrame) -> list[dict]:
    return [{"label": metric_label(c[8:]), "value": c[8:]} for c in df.columns if c.startswith("metrics.")]


def _runs_grid(rows: list, columns: list, pages: int, tips: dict):
    """The runs grid: paged, sorted and filtered on the server, rows ticked to compare."""
    return dash_table.DataTable(
        id="runs-grid",
        data=rows,
        columns=columns,
        page_action="custom",
        page_current=0,
        page_size=PAGE_SIZE,
        page_count=pages,
        sort_action="custom",
        sort_mode="multi",
        sort_by=[],
        filter_action="custom",
        filter_query="",
        row_selectable="multi",
        selected_rows=[],
        tooltip_header=tips,
        tooltip_delay=300,
        markdown_options={"link_target": "_self"},
        css=[{"selector": ".dash-cell-value p, .dash-cell p", "rule": "margin: 0"}],
        # the long text cells are cut short (the whole text is in the run's page); the key columns then fit
        style_cell_conditional=[
            {"if": {"column_id": "run_id"}, "maxWidth": "240px"},
            {"if": {"column_id": "steady"}, "maxWidth": "90px"},
            {"if": {"column_id": "finding"}, "maxWidth": "210px"},
        ],
        **TABLE_STYLE,
    )


def layout(sweep: str | None = None, **_):
    d = data.get()
    if d.runs_frame().empty:
        return html.Div(
            [
                html.H2("Sweeps"),
                empty(f"no runs in {d.store.root} yet — run `perfbench sweep CONFIG` or `perfbench analyze PATH`"),
            ],
            id="sweeps-page",
        )
    rows, pages, shown, total, _ = grid.query(sweep, "", [], 0, PAGE_SIZE)
    df = grid.frame(sweep)
    settings, x0, y0 = _axes(df)
    metric_opts = _metric_options(df)
    metric0 = "throughput" if "metrics.throughput" in df.columns else (metric_opts[0]["value"] if metric_opts else None)
    columns = [{"name": "", "id": "open", "presentation": "markdown"}] + [
        {"name": heading(c), "id": c, "type": "text" if c in grid.ID_COLUMNS + grid.FLAG_COLUMNS else "numeric"}
        for c in df.columns
    ]
    tips = {c: definition(c[8:]) for c in df.columns if c.startswith("metrics.") and c[8:] in METRICS}
    sweep_opts = [{"label": "all sweeps", "value": ""}] + [{"label": s, "value": s} for s in d.sweeps()]
    return html.Div(
        [
            html.H2("Sweeps"),
            html.Div(
                [
                    html.Label("sweep "),
                    picker("sweeps-sweep", sweep_opts, sweep or "", 420),
                    html.Span(f"{shown} of {total} runs shown", id="sweeps-count", style={"marginLeft": "16px"}),
                    dcc.Link(
                        "compare ticked runs (tick two)",
                        id="sweeps-compare-link",
                        href="/compare",
                        style={"marginLeft": "16px"},
                    ),
                ]
            ),
            html.P(
                "Filter with the row under the headers in the units shown (`>150` on step ms, `<5` on a %, "
                "`ok`); sort by clicking a header; tick runs to compare them. Hover a heading for its definition.",
                style={"color": "#555", "fontSize": "13px"},
            ),
            _runs_grid(rows, columns, pages, tips),
            html.H3("Across settings"),
            html.Div(
                [
                    html.Label("metric "),
                    picker("sweeps-metric", metric_opts, metric0, 260),
                    html.Label(" x ", style={"marginLeft": "12px"}),
                    picker("sweeps-x", [{"label": c[9:], "value": c} for c in settings], x0, 220),
                    html.Label(" y ", style={"marginLeft": "12px"}),
                    picker("sweeps-y", [{"label": c[9:], "value": c} for c in settings], y0, 220),
                ]
            ),
            # the graphs are created by a callback once the grid has painted and the browser is idle: plotly.js
            # (the biggest script of the app) is fetched and evaluated only then, so the grid never waits for it
            after_paint("sweeps", "#runs-grid td"),
            html.Div(id="sweeps-views", children=html.P("drawing the views…", style={"color": "#777"})),
        ],
        id="sweeps-page",
    )


@callback(
    Output("runs-grid", "data"),
    Output("runs-grid", "page_count"),
    Output("runs-grid", "selected_rows"),
    Output("sweeps-count", "children"),
    Input("sweeps-sweep", "value"),
    Input("runs-grid", "page_current"),
    Input("runs-grid", "page_size"),
    Input("runs-grid", "sort_by"),
    Input("runs-grid", "filter_query"),
    State("ticked-runs", "data"),
    prevent_initial_call=True,
)
def _page(sweep, page, page_size, sort_by, filter_query, ticked):
    try:
        rows, pages, shown, total, _ = grid.query(
            sweep or None, filter_query, sort_by, page or 0, page_size or PAGE_SIZE
        )
        note = f"{shown} of {total} runs shown"
    except ValueError as exc:
        rows, pages, note = [], 1, str(exc)
    ticked = set(ticked or [])
    return rows, pages, [i for i, r in enumerate(rows) if r["id"] in ticked], note


@callback(
    Output("ticked-runs", "data"),
    Input("runs-grid", "selected_row_ids"),
    State("runs-grid", "data"),
    State("ticked-runs", "data"),
    prevent_initial_call=True,
)
def _tick(selected_ids, rows, ticked):
    """Ticks survive paging, filtering and leaving the page: the page's ids are replaced by its ticked ones."""
    on_page = {r["id"] for r in rows or []}
    kept = [r for r in (ticked or []) if r not in on_page]
    return kept + [r for r in (selected_ids or []) if r not in kept]


@callback(
    Output("sweeps-compare-link", "href"), Output("sweeps-compare-link", "children"), Input("ticked-runs", "data")
)
def _compare_link(ticked):
    ids = list(ticked or [])
    if len(ids) >= 2:
        more = f" (+{len(ids) - 2} more ticked)" if len(ids) > 2 else ""
        return f"/compare?a={ids[0]}&b={ids[1]}", f"compare {ids[0]} ↔ {ids[1]}{more}"
    return "/compare", f"compare ticked runs ({len(ids)} ticked; tick two)"


def _num_or_codes(s: pd.Series) -> tuple[pd.Series, list | None]:
    n = pd.to_numeric(s, errors="coerce")
    if n.notna().all():
        return n, None
    cats = sorted(s.astype(str).unique())
    return s.astype(str).map({c: i for i, c in enumerate(cats)}), cats


@callback(
    Output("sweeps-views", "children"),
    Input("sweeps-sweep", "value"),
    Input("runs-grid", "filter_query"),
    Input("sweeps-metric", "value"),
    Input("sweeps-x", "value"),
    Input("sweeps-y", "value"),
    after_paint_input("sweeps"),
    prevent_initial_call=True,
)
def _views_graphs(sweep, filter_query, metric, x, y, _painted):
    try:
        df = grid.apply_filter(grid.frame(sweep or None), filter_query)
    except ValueError:
        df = grid.frame(sweep or None)
    heat, par = views(df, metric, x, y)
    return [
        dcc.Graph(id="sweeps-heatmap", figure=heat, style={"width": "48%", "display": "inline-block"}),
        dcc.Graph(id="sweeps-parcoords", figure=par, style={"width": "52%", "display": "inline-block"}),
    ]


def _sorted_labels(labels) -> list:
    try:
        return sorted(labels, key=lambda v: float(v))
    except ValueError:  # categorical labels keep their text order
        return sorted(labels)


def views(df: pd.DataFrame, metric: str | None, x: str | None, y: str | None):
    """Heatmap of the metric's mean over x × y and parallel coordinates, values in the units the grid shows.
    Figures as plain dicts (plotly's graph_objects validation is slow with hundreds of runs)."""
    col = f"metrics.{metric}"
    label = metric_label(metric) if metric else "metric"
    if df.empty or col not in df.columns or x not in df.columns or (y is not None and y not in df.columns):
        blank = {"data": [], "layout": {"title": {"text": f"no {label} in the shown runs"}, "height": 420}}
        return blank, blank
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    shown = grid.shown_number(col, df[col])
    xs = df[x].astype(str)
    ys = df[y].astype(str) if y else pd.Series("all", index=df.index)
    mean_raw = pd.to_numeric(df[col], errors="coerce").groupby([ys, xs]).mean().unstack()
    pv = shown.groupby([ys, xs]).mean().unstack()
    pv = pv.reindex(index=_sorted_labels(pv.index), columns=_sorted_labels(pv.columns))
    mean_raw = mean_raw.reindex(index=pv.index, columns=pv.columns)
    z = [[None if pd.isna(v) else float(v) for v in row] for row in pv.to_numpy()]
    text = [[format_value(metric, v) for v in row] for row in mean_raw.to_numpy()]
    xl, yl = x[9:], (y[9:] if y else "")
    heat = {
        "data": [
            {
                "type": "heatmap",
                "z": z,
                "x": [str(c) for c in pv.columns],
                "y": [str(i) for i in pv.index],
                "text": text,
                "texttemplate": "%{text}",
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": label}},
                "hovertemplate": f"{xl}=%{{x}}<br>{yl}=%{{y}}<br>{label}: %{{text}}<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": f"mean {label} over {xl} × {yl}"},
            "height": 420,
            "xaxis": {"title": {"text": xl}, "type": "category"},
            "yaxis": {"title": {"text": yl}, "type": "category"},
        },
    }
    dims = []
    for c in [c for c in df.columns if c.startswith("settings.")]:
        if c == "settings.repeat" or df[c].astype(str).nunique() <= 1:
            continue
        vals, cats = _num_or_codes(df[c])
        dim = {"label": c[9:], "values": vals.tolist()}
        if cats is not None:
            dim.update(tickvals=list(range(len(cats))), ticktext=cats)
        dims.append(dim)
    par = {"data": [], "layout": {"title": {"text": "settings → " + label}, "height": 420}}
    if shown.notna().any():
        dims.append({"label": label, "values": shown.tolist()})
        par["data"] = [
            {
                "type": "parcoords",
                "dimensions": dims,
                "line": {"color": shown.fillna(0).tolist(), "colorscale": "Viridis", "showscale": False},
            }
        ]
    return heat, par
