"""The perfbench dashboard: a Dash multi-page app over the results store (read-only).

    perfbench dashboard --results DIR [--port 8050] [--host 127.0.0.1]

Pages (one module each in dashboards/pages/): Sweeps `/`, Run `/run/<run_id>`, Scaling `/scaling`,
Compare `/compare?a=RUN&b=RUN`, Tuning `/tuning?study=ID`. Every page is addressed by its URL, so a link can be shared.
"""

from __future__ import annotations

import os

import dash
from dash import Dash, dcc, html

from dashboards import data

NAV = [("Sweeps", "/"), ("Scaling", "/scaling"), ("Compare", "/compare"), ("Tuning", "/tuning")]


def create_app(results: str | os.PathLike) -> Dash:
    data.configure(results)
    app = Dash(__name__, use_pages=True, pages_folder="", suppress_callback_exceptions=True,
               title="perfbench", update_title=None)
    from dashboards.pages import compare, run, scaling, sweeps, tuning

    dash.register_page("sweeps", path="/", name="Sweeps", title="perfbench · sweeps", layout=sweeps.layout, order=0)
    dash.register_page("run", path_template="/run/<run_id>", name="Run", title="perfbench · run", layout=run.layout,
                       order=1)
    dash.register_page("scaling", path="/scaling", name="Scaling", title="perfbench · scaling", layout=scaling.layout,
                       order=2)
    dash.register_page("compare", path="/compare", name="Compare", title="perfbench · compare", layout=compare.layout,
                       order=3)
    dash.register_page("tuning", path="/tuning", name="Tuning", title="perfbench · tuning", layout=tuning.layout,
                       order=4)
    app.layout = html.Div([
        html.Header([
            html.Strong("perfbench", style={"marginRight": "24px", "fontSize": "18px"}),
            *[dcc.Link(name, href=href, style={"marginRight": "16px"}, id=f"nav-{name.lower()}") for name, href in NAV],
            html.Span(f"results: {data.get().store.root}", style={"float": "right", "color": "#777", "fontSize": "12px"}),
        ], style={"padding": "10px 16px", "borderBottom": "1px solid #ddd", "fontFamily": "sans-serif"}),
        html.Main(dash.page_container, style={"padding": "8px 16px", "fontFamily": "sans-serif"}),
    ])
    return app


def serve(results: str | os.PathLike, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    app = create_app(results)
    app.run(host=host, port=port, debug=debug, dev_tools_ui=debug, dev_tools_props_check=debug)
