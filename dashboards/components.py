"""Small building blocks shared by the dashboard pages: tables, empty states, metric cards and the one
way a value is printed (names, units, formats and tooltips all come from analyzers/catalogue.py)."""

from __future__ import annotations

import math

import pandas as pd
from dash import Input, Output, MATCH, clientside_callback, dash_table, dcc, html

from analyzers.catalogue import METRICS, format_value, unit_label

TABLE_STYLE = dict(
    style_table={"overflowX": "auto"},
    style_cell={
        "fontFamily": "sans-serif",
        "fontSize": "13px",
        "padding": "3px 8px",
        "textAlign": "left",
        "maxWidth": "420px",
        "overflow": "hidden",
        "textOverflow": "ellipsis",
    },
    style_header={"fontWeight": "bold", "backgroundColor": "#f3f3f3"},
)

#: how a table column that is not a catalogue metric is printed, by its name's suffix (fmt of format_value)
COLUMN_FORMATS = (
    ("_ms", "num"),
    ("_us", "num"),
    ("_gbps", "gbps"),
    ("bytes", "bytes"),
    ("share", "pct"),
    ("ratio", "num"),
    ("count", "int"),
)


def num(v, digits: int = 4):
    if v is None:
        return None
    if isinstance(v, float):
        if math.isnan(v):
            return None
        return float(f"{v:.{digits}g}")
    return v


def metric_label(name: str) -> str:
    """A metric's heading with its unit, e.g. 'step ms', 'comm share %'."""
    m = METRICS.get(name)
    if m is None:
        return name
    unit = unit_label(name)
    return m.label if not unit or unit in m.label.split() else f"{m.label} {unit}"


def metric_text(name: str, v) -> str:
    """A metric's value with its unit, as every page prints it ('-' when unknown)."""
    s = format_value(name, v)
    unit = unit_label(name) if name in METRICS else ""
    if s == "-" or not unit or unit == "%":
        return s
    return f"{s} {unit}"


def definition(name: str) -> str:
    m = METRICS.get(name)
    return f"{name}: {m.definition}" if m else name


def metric_card(name: str, v, id: str | None = None):
    """Label over value; the catalogue's definition is the tooltip."""
    props = {"id": id} if id else {}
    m = METRICS.get(name)
    return html.Div(
        [
            html.Div(
                m.label if m else name,
                className="metric-label",
                style={"fontSize": "11px", "color": "#666", "borderBottom": "1px dotted #aaa"},
            ),
            html.Div(metric_text(name, v), className="metric-value", style={"fontSize": "18px"}),
        ],
        title=definition(name),
        className="metric-card",
        **props,
        style={"display": "inline-block", "marginRight": "26px", "marginBottom": "8px", "cursor": "help"},
    )


def column_fmt(col: str) -> str | None:
    """The catalogue fmt of a table column: the metric's own, else by the column's suffix, else None."""
    name = col[8:] if col.startswith("metrics.") else col
    if name in METRICS:
        return METRICS[name].fmt
    for suffix, fmt in COLUMN_FORMATS:
        if col.endswith(suffix):
            return fmt
    return None


def cell_text(col: str, v):
    """One cell as text: catalogue metrics formatted, other numbers by their column's unit suffix."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    name = col[8:] if col.startswith("metrics.") else col
    if name in METRICS:
        return format_value(name, v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        fmt = column_fmt(col)
        return format_value(fmt or "num", v)
    if isinstance(v, (list, tuple, dict)):
        return str(v)
    return v


def frame_text(df: pd.DataFrame) -> list[dict]:
    """Rows of a frame with every cell printed by `cell_text` (for display-only tables)."""
    cols = list(df.columns)
    return [{c: cell_text(c, v) for c, v in zip(cols, row)} for row in df.itertuples(index=False, name=None)]


def frame_records(df: pd.DataFrame, digits: int = 4) -> list[dict]:
    out = []
    for row in df.to_dict("records"):
        out.append(
            {
                k: (
                    num(v, digits)
                    if isinstance(v, float)
                    else (v if isinstance(v, (int, str, bool)) or v is None else str(v))
                )
                for k, v in row.items()
            }
        )
    return out


def heading(col: str) -> str:
    """A column heading: the catalogue's label and unit for metrics, the bare name for settings."""
    name = col[8:] if col.startswith("metrics.") else col[9:] if col.startswith("settings.") else col
    return metric_label(name) if name in METRICS else name.replace("_", " ")


def table(df: pd.DataFrame | None, id: str, page_size: int = 15, formatted: bool = True, **kw):
    """A display table: values formatted (catalogue), headings with units, definitions as header tooltips."""
    if df is None or df.empty:
        return empty(f"no data ({id})")
    tips = {
        c: definition(c[8:] if c.startswith("metrics.") else c)
        for c in df.columns
        if (c[8:] if c.startswith("metrics.") else c) in METRICS
    }
    return dash_table.DataTable(
        id=id,
        data=frame_text(df) if formatted else frame_records(df),
        columns=[{"name": heading(c), "id": c} for c in df.columns],
        tooltip_header=tips or None,
        page_action="native" if len(df) > page_size else "none",
        page_size=page_size,
        **{**TABLE_STYLE, **kw},
    )


def picker(id: str, options: list, value, width: int):
    """An inline, non-clearable dropdown of `width` pixels (the pages' choosers of a sweep, metric, axis or
    step)."""
    style = {"width": f"{width}px", "display": "inline-block", "verticalAlign": "middle"}
    return dcc.Dropdown(id=id, options=options, value=value, clearable=False, style=style)


def empty(text: str):
    return html.P(text, className="empty", style={"color": "#777", "fontStyle": "italic"})


def section(title: str, *children, id: str | None = None):
    props = {"id": id} if id else {}
    return html.Section([html.H3(title), *children], style={"marginBottom": "24px"}, **props)


# ---- charts after the first paint ------------------------------------------------------------------------
# A page's text and tables paint first; its charts (plotly.js: 4.8 MB of script, ~0.5-2 s to evaluate on this
# machine, and WebGL for parallel coordinates) are requested only once the browser has painted the page's
# first content and is idle, so neither the download nor the evaluation can delay the first paint.
clientside_callback(
    """function(selector) {
        return new Promise(function (resolve) {
            var t0 = Date.now();
            var idle = window.requestIdleCallback || function (f) { setTimeout(f, 50); };
            function check() {
                if (document.querySelector(selector) || Date.now() - t0 > 10000) {
                    // the frame that paints it, then an idle moment
                    requestAnimationFrame(function () { setTimeout(function () {
                        idle(function () { resolve(Date.now()); }, {timeout: 1000}); }, 0); });
                } else {
                    requestAnimationFrame(check);
                }
            }
            check();
        });
    }""",
    Output({"type": "after-paint", "page": MATCH}, "data"),
    Input({"type": "after-paint-selector", "page": MATCH}, "data"),
)


def after_paint(page: str, selector: str):
    """Stores for one page: `after_paint_input(page)` fires once `selector` has painted and the browser is idle."""
    return html.Div(
        [
            dcc.Store(id={"type": "after-paint-selector", "page": page}, data=selector),
            dcc.Store(id={"type": "after-paint", "page": page}),
        ],
        style={"display": "none"},
    )


def after_paint_input(page: str) -> Input:
    return Input({"type": "after-paint", "page": page}, "data")
