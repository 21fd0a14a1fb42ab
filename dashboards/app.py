"""The perfbench dashboard: a Dash multi-page app over the results store (read-only).

    perfbench dashboard --results DIR [--port 8050] [--host 127.0.0.1]

Pages (one module each in dashboards/pages/): Sweeps `/`, Run `/run/<run_id>`, Scaling `/scaling`,
Compare `/compare?a=RUN&b=RUN`, Tuning `/tuning?study=ID`. Every page is addressed by its URL, so a link can be shared.

Adding a page = one module in dashboards/pages/ with a `layout(**query)` function and one line in PAGES.
"""

from __future__ import annotations

import importlib
import os
from urllib.parse import urlsplit

import dash
import flask
from dash import Dash, Input, Output, clientside_callback, dcc, html
from dash._pages import _parse_query_string, _path_to_page
from dash.dash import _ID_CONTENT, _ID_DUMMY, _ID_LOCATION, _ID_STORE

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


def _page_container(app: Dash):
    """`dash.page_container` with the page the browser is opening already in it (no round trip before the
    first paint). The renderer fetches the layout from the page itself, so the request's Referer is that
    page's URL; the location component gets the same URL, so it does not ask the router again. A
    clientside check (below) re-routes if the Referer was missing or not the page's URL after all."""
    url = flask.request.referrer if flask.has_request_context() else None
    content, loc, title = None, {}, app.title
    if url and urlsplit(url).netloc == flask.request.host:
        u = urlsplit(url)
        search = f"?{u.query}" if u.query else ""
        page, variables = _path_to_page(app.strip_relative_path(u.path))
        if page:
            layout = page["layout"]
            content = layout(**{**(variables or {}), **_parse_query_string(search)}) if callable(layout) else layout
            title = page["title"](**(variables or {})) if callable(page["title"]) else page["title"]
        else:  # what Dash's router shows for an unknown path
            content = html.H1("404 - Page not found")
        loc = {"pathname": u.path, "search": search, "hash": "", "href": url}
    return html.Div(
        [
            dcc.Location(id=_ID_LOCATION, refresh="callback-nav", **loc),
            html.Div(content, id=_ID_CONTENT, disable_n_clicks=True),
            dcc.Store(id=_ID_STORE, data={"title": title} if loc else None),
            dcc.Store(id="_pages_rendered", data=(loc["pathname"] + loc["search"]) if loc else None),
            html.Div(id=_ID_DUMMY, disable_n_clicks=True),
        ]
    )


# the page rendered with the layout is not the one in the address bar (no or another Referer): ask the router
clientside_callback(
    """function(rendered) {
        var here = window.location.pathname + window.location.search;
        if (rendered === here) { throw window.dash_clientside.PreventUpdate; }
        return [window.location.pathname, window.location.search];
    }""",
    Output(_ID_LOCATION, "pathname", allow_duplicate=True),
    Output(_ID_LOCATION, "search", allow_duplicate=True),
    Input("_pages_rendered", "data"),
    prevent_initial_call="initial_duplicate",
)


def create_app(results: str | os.PathLike) -> Dash:
    data.configure(results)
    # plotly.js is served by this server (dash's own copy, never a CDN) and fetched only when a page first
    # draws a graph; pages create their graphs in callbacks, after their text and tables have painted
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder="",
        suppress_callback_exceptions=True,
        title="perfbench",
        update_title=None,
        serve_locally=True,
    )
    nav = []
    for order, (module, name, path, in_nav) in enumerate(PAGES):
        mod = importlib.import_module(f"dashboards.pages.{module}")
        where = {"path_template": path} if "<" in path else {"path": path}
        dash.register_page(
            module, name=name, title=f"perfbench · {name.lower()}", layout=mod.layout, order=order, **where
        )
        if in_nav:
            nav.append(dcc.Link(name, href=path, style={"marginRight": "16px"}, id=f"nav-{module}"))
    app.layout = lambda: html.Div(
        [
            # run ids ticked on the Sweeps page (kept for the browser tab's session): Compare opens with them
            dcc.Store(id="ticked-runs", storage_type="session", data=[]),
            html.Header(
                [
                    html.Strong("perfbench", style={"marginRight": "24px", "fontSize": "18px"}),
                    *nav,
                    html.Span(
                        f"results: {data.get().store.root}",
                        style={"float": "right", "color": "#777", "fontSize": "12px"},
                    ),
                ],
                style={"padding": "10px 16px", "borderBottom": "1px solid #ddd", "fontFamily": "sans-serif"},
            ),
            html.Main(_page_container(app), style={"padding": "8px 16px", "fontFamily": "sans-serif"}),
        ]
    )
    return app


def serve(results: str | os.PathLike, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    app = create_app(results)
    app.run(host=host, port=port, debug=debug, dev_tools_ui=debug, dev_tools_props_check=debug)
