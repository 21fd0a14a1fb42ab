"""Compare page (`/compare?a=RUN&b=RUN`): two runs side by side with deltas (the same comparison as
`perfbench compare`: per-step throughput/step time with a 95% CI, breakdown, kernels, collectives, settings)."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, callback, dcc, html, no_update

from analyzers.catalogue import METRICS, format_value, unit_label
from dashboards import data
from dashboards.components import empty, section, table
from perfbench.regress.compare import compare_runs, figures
from perfbench.views.compare import change, change_text
from perfbench.errors import UserError


#: which statistic each table shows (the two differ: a mean of the steps vs the catalogue's median)
PER_STEP_NOTE = (
    "median over each metric's steps (the catalogue's aggregate, as `ls`, `show` and the CLI's compare), of the "
    "samples `perfbench check` tests; change: % for ratios, points (pt) for shares; p: Mann-Whitney"
)
RUN_METRICS_NOTE = (
    "the values stored in run.json, aggregated as the metric catalogue says (`perfbench metrics`); the per-step "
    "metrics among them equal the medians above"
)


def _resolve(run_id: str | None) -> str | None:
    """A run id, short id (`ws2-r0`) or unique prefix, as the CLI takes it (Store.get_run), to the full run id;
    left as given when no single run matches (the page then says why)."""
    if not run_id:
        return run_id
    try:
        return data.get().store.get_run(run_id)["run_id"]
    except UserError:
        return run_id


def layout(a: str | None = None, b: str | None = None, **_):
    d = data.get()
    a, b = _resolve(a), _resolve(b)
    ok = [r["run_id"] for r in d.runs() if r.get("status") == "ok"]
    opts = [{"label": r, "value": r} for r in ok]
    return html.Div(
        [
            dcc.Location(id="compare-url", refresh=False),
            html.H2("Compare"),
            html.Div(
                [
                    html.Div(
                        [html.Label("A (reference)"), dcc.Dropdown(id="compare-a", options=opts, value=a)],
                        style={"width": "45%", "display": "inline-block", "marginRight": "4%"},
                    ),
                    html.Div(
                        [html.Label("B"), dcc.Dropdown(id="compare-b", options=opts, value=b)],
                        style={"width": "45%", "display": "inline-block"},
                    ),
                ]
            ),
            html.Div(id="compare-body", children=body(a, b)),
        ],
        id="compare-page",
    )


def body(a, b):
    if not a or not b:
        return empty("pick two runs")
    try:
        cmp = compare_runs(data.get().store, a, b)
    except UserError as exc:
        return html.P(str(exc), id="compare-error", style={"color": "#b00"})
    m = pd.DataFrame(
        [
            {
                "metric": r["metric"],
                "unit": unit_label(r["metric"]) if r["metric"] in METRICS else "",
                f"A {cmp.a['run_id']}": _fmt(r["metric"], r["a"]),
                f"B {cmp.b['run_id']}": _fmt(r["metric"], r["b"]),
                "change": change_text(r["metric"], r),
                "p": "–" if r.get("p_value") is None else f"{r['p_value']:.2g}",
                "steps A/B": f"{r['n_a']}/{r['n_b']}",
            }
            for r in cmp.metrics
        ]
    )
    parts = [
        html.Div(
            [
                html.Div(
                    ["A: ", dcc.Link(cmp.a["run_id"], href=f"/run/{cmp.a['run_id']}", id="compare-link-a")],
                    style={"display": "inline-block", "width": "49%"},
                ),
                html.Div(
                    ["B: ", dcc.Link(cmp.b["run_id"], href=f"/run/{cmp.b['run_id']}", id="compare-link-b")],
                    style={"display": "inline-block", "width": "49%"},
                ),
            ],
            style={"margin": "10px 0"},
        ),
        section(
            "Per-step metrics (median over each metric's steps)",
            html.Div([html.P(PER_STEP_NOTE, className="note"), table(m, id="compare-metrics")]),
        ),
        section(
            "Settings that differ",
            table(pd.DataFrame(cmp.settings_diff).astype(str), id="compare-settings")
            if cmp.settings_diff
            else empty("none"),
        ),
        section(
            "Step breakdown (ms per rank-step)",
            table(pd.DataFrame(cmp.breakdown), id="compare-breakdown") if cmp.breakdown else empty("no breakdown"),
        ),
        section(
            "Kernels: top movers (ms per rank-step)",
            table(pd.DataFrame(cmp.kernels), id="compare-kernels") if cmp.kernels else empty("no kernels"),
        ),
        section(
            "Collectives (per rank-step)",
            table(pd.DataFrame(cmp.collectives), id="compare-collectives")
            if cmp.collectives
            else empty("no collectives"),
        ),
        section(
            "Run metrics (stored, catalogue aggregation)",
            html.Div(
                [
                    html.P(RUN_METRICS_NOTE, className="note"),
                    table(
                        pd.DataFrame(
                            [
                                {
                                    "metric": r["metric"],
                                    "A": _fmt(r["metric"], r["a"]),
                                    "B": _fmt(r["metric"], r["b"]),
                                    "change": change(r["metric"], r["a"], r["b"]),
                                }
                                for r in cmp.summary_metrics
                            ]
                        )
                        if cmp.summary_metrics
                        else None,
                        id="compare-summary",
                        page_size=30,
                    ),
                ]
            ),
        ),
    ]
    parts += [dcc.Graph(figure=f, id=f"compare-fig-{i}") for i, f in enumerate(figures(cmp))]
    return parts


def _fmt(name, v):
    return (
        format_value(name, v) if name in METRICS else ("-" if v is None else f"{v:.4g}" if isinstance(v, float) else v)
    )


@callback(
    Output("compare-a", "value"),
    Output("compare-b", "value"),
    Input("compare-url", "pathname"),
    State("compare-a", "value"),
    State("compare-b", "value"),
    State("ticked-runs", "data"),
)
def _from_ticked(_path, a, b, ticked):
    """Opened without two runs in the URL: take the runs ticked on the Sweeps page."""
    ticked = [t for t in (ticked or []) if t not in (a, b)]
    if (a and b) or not ticked:
        return no_update, no_update
    a = a or (ticked.pop(0) if ticked else None)
    b = b or (ticked.pop(0) if ticked else None)
    return a, b


@callback(
    Output("compare-body", "children"),
    Output("compare-url", "search"),
    Input("compare-a", "value"),
    Input("compare-b", "value"),
    prevent_initial_call=True,
)
def _update(a, b):
    search = "?" + "&".join(f"{k}={v}" for k, v in (("a", a), ("b", b)) if v)
    return body(a, b), search
