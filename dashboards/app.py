"""The perfbench dashboard: a Dash multi-page app over the results store (read-only).

    perfbench dashboard --results DIR [--port 8050] [--host 127.0.0.1]

Pages (one module each in dashboards/pages/): Sweeps `/`, Run `/run/<run_id>`, Scaling `/scaling`,
Compare `/compare?a=RUN&b=RUN`, Tuning `/tuning?study=ID`. Every page is addressed by its URL, so a link can be shared.

Adding a page = one module in dashboards/pages/ with a `layout(**query)` function and one line in PAGES.
"""

from __future__ import annotations

import importlib
import os

import dash
from dash import Dash, dcc, html

from dashboards import data

#: (module in dashboards/pages, name, path or path template, shown in the nav bar)
PAGES = [
    ("sweeps", "Sweeps", "/", True),
    ("run", "Run", "/run/<run_id>", False),
    ("scaling", "Scaling", "/scaling", True),
    ("compare", "Compare", "/compare", True),
    ("tuning", "Tuning", "/tuning", True),
    ("history", "History", "/history", True),
]


def create_app(results: str | os.PathLike) -> Dash:
    data.configure(results)
    # plotly.js is served by this server (dash's own copy, never a CDN) and fetched only when a page first
    # draws a graph; pages create their graphs in callbacks, after their text and tables have painted
    app = Dash(__name__, use_pages=True, pages_folder="", suppress_callback_exceptions=True,
               title="perfbench", update_title=None, serve_locally=True)
    nav = []
    for order, (module, name, path, in_nav) in enumerate(PAGES):
        mod = importlib.import_module(f"dashboards.pages.{module}")
        where = {"path_template": path} if "<" in path else {"path": path}
        dash.register_page(module, name=name, title=f"perfbench · {name.lower()}", layout=mod.layout, order=order,
                           **where)
        if in_nav:
            nav.append(dcc.Link(name, href=path, style={"marginRight": "16px"}, id=f"nav-{module}"))
    app.layout = html.Div([
        # run ids ticked on the Sweeps page (kept for the browser tab's session): Compare opens with them
        dcc.Store(id="ticked-runs", storage_type="session", data=[]),
        html.Header([
            html.Strong("perfbench", style={"marginRight": "24px", "fontSize": "18px"}),
            *nav,
            html.Span(f"results: {data.get().store.root}", style={"float": "right", "color": "#777", "fontSize": "12px"}),
        ], style={"padding": "10px 16px", "borderBottom": "1px solid #ddd", "fontFamily": "sans-serif"}),
        html.Main(dash.page_container, style={"padding": "8px 16px", "fontFamily": "sans-serif"}),
    ])
    return app


def serve(results: str | os.PathLike, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    app = create_app(results)
    app.run(host=host, port=port, debug=debug, dev_tools_ui=debug, dev_tools_props_check=debug)
