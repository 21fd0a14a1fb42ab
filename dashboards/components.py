"""Small building blocks shared by the dashboard pages (tables, empty states, number formatting)."""

from __future__ import annotations

import math

import pandas as pd
from dash import dash_table, html

TABLE_STYLE = dict(
    style_table={"overflowX": "auto"},
    style_cell={"fontFamily": "sans-serif", "fontSize": "13px", "padding": "3px 8px", "textAlign": "left",
                "maxWidth": "420px", "overflow": "hidden", "textOverflow": "ellipsis"},
    style_header={"fontWeight": "bold", "backgroundColor": "#f3f3f3"},
)


def num(v, digits: int = 4):
    if v is None:
        return None
    if isinstance(v, float):
        if math.isnan(v):
            return None
        return float(f"{v:.{digits}g}")
    return v


def frame_records(df: pd.DataFrame, digits: int = 4) -> list[dict]:
    out = []
    for row in df.to_dict("records"):
        out.append({k: (num(v, digits) if isinstance(v, float) else (v if isinstance(v, (int, str, bool)) or v is None
                                                                      else str(v))) for k, v in row.items()})
    return out


def table(df: pd.DataFrame | None, id: str, page_size: int = 15, **kw):
    if df is None or df.empty:
        return empty(f"no data ({id})")
    return dash_table.DataTable(
        id=id, data=frame_records(df), columns=[{"name": c, "id": c} for c in df.columns],
        sort_action="native", page_size=page_size, **{**TABLE_STYLE, **kw})


def empty(text: str):
    return html.P(text, className="empty", style={"color": "#777", "fontStyle": "italic"})


def section(title: str, *children, id: str | None = None):
    props = {"id": id} if id else {}
    return html.Section([html.H3(title), *children], style={"marginBottom": "24px"}, **props)
