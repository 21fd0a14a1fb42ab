"""The run page's advice (dashboards/pages/run.py): the verdict box (the top finding of the stored advice) and
the list of every cause with its gain bar, evidence and knob, the symptoms it explains folded under it: the same
ranked list `perfbench show` and `perfbench advise` print (perfbench/views/advice.py)."""

from __future__ import annotations

from dash import html

from dashboards import data
from dashboards.components import empty
from perfbench.views.advice import advice_tree, gain_text, ordered_advice, try_text


def _advice(rid: str) -> list[dict] | None:
    """The stored advice in its ranked order (causes by expected gain, symptoms after their cause; older runs
    without gains: most severe first) - the same list `perfbench show` and `perfbench advise` print."""

    recs = ordered_advice(data.get().table(rid, "advice"))
    return recs or None


def verdict(rid: str, rec: dict):
    """The answer first: the top finding of the stored advice, with its evidence."""
    a = _advice(rid)
    style = {
        "border": "1px solid #ccc",
        "borderLeft": "6px solid #888",
        "padding": "8px 14px",
        "margin": "10px 0 14px",
        "background": "#fafafa",
    }
    if rec.get("status") != "ok":
        return html.Div(
            [html.B("Verdict: "), f"the run did not finish ({rec.get('status')}); see the error above."],
            id="run-verdict",
            style={**style, "borderLeftColor": "#b00"},
        )
    if a is None:
        return html.Div(
            [html.B("Verdict: "), "no finding — none of the advice rules fired for this run."],
            id="run-verdict",
            style={**style, "borderLeftColor": "#54a24b"},
        )
    top = a[0]
    sev = str(top.get("severity") or "")
    color = {"high": "#e45756", "medium": "#f58518"}.get(sev, "#4c78a8")
    more = len(a) - 1
    return html.Div(
        [
            html.Div(
                [html.B("Verdict" + (f" ({sev})" if sev else "") + ": "), html.Span(str(top.get("message", "")))],
                style={"fontSize": "16px"},
            ),
            html.Div(
                gain_text(top) + (f" — basis: {top['basis']}" if top.get("basis") else ""),
                className="gain",
                style={"fontSize": "13px", "marginTop": "4px"},
            )
            if "gain_ms" in top
            else None,
            html.Div(
                ["evidence: ", str(top.get("evidence") or "-")],
                className="evidence",
                style={"fontSize": "13px", "color": "#444", "marginTop": "4px"},
            ),
            html.Div(
                f"{more} more finding{'s' if more != 1 else ''} under “All advice”." if more else "",
                style={"fontSize": "12px", "color": "#777", "marginTop": "4px"},
            ),
        ],
        id="run-verdict",
        style={**style, "borderLeftColor": color},
    )


def advice_list(rid: str):
    """Every cause, largest expected gain first, its gain as a bar (share of the step), its evidence, knob,
    and the symptoms it explains collapsed under it."""

    a = _advice(rid)
    if a is None:
        return empty("no advice")
    tree = advice_tree(a)
    top = max([r.get("gain_ms") or 0.0 for r, _ in tree] + [0.0])

    def bar(r):
        g = r.get("gain_ms")
        width = 0 if g is None or top <= 0 else max(1, round(100 * g / top))
        return html.Div(
            [
                html.Div(
                    style={
                        "width": f"{width}%",
                        "height": "10px",
                        "background": "#e45756"
                        if r.get("severity") == "high"
                        else "#f58518"
                        if r.get("severity") == "medium"
                        else "#4c78a8",
                    }
                ),
            ],
            className="gain-bar",
            title=gain_text(r),
            style={
                "width": "240px",
                "background": "#eee",
                "display": "inline-block",
                "marginRight": "8px",
                "verticalAlign": "middle",
            },
        )

    items = []
    for r, kids in tree:
        items.append(
            html.Li(
                [
                    bar(r),
                    html.B(f"[{r.get('severity')}] "),
                    html.Span(gain_text(r) + ": ", className="gain"),
                    str(r.get("message", "")),
                    html.Div(f"gain basis: {r['basis']}", style={"fontSize": "12px", "color": "#555"})
                    if r.get("basis")
                    else None,
                    html.Div(try_text(r), className="try", style={"fontSize": "12px", "color": "#225"})
                    if r.get("try")
                    else None,
                    html.Div(f"evidence: {r['evidence']}", style={"fontSize": "12px", "color": "#555"})
                    if r.get("evidence")
                    else None,
                    html.Details(
                        [
                            html.Summary(f"{len(kids)} symptom{'s' if len(kids) != 1 else ''} this explains"),
                            html.Ul(
                                [
                                    html.Li(
                                        [
                                            html.B(f"{k['rule']}: "),
                                            str(k.get("message", "")),
                                            html.Div(
                                                f"evidence: {k['evidence']}",
                                                style={"fontSize": "12px", "color": "#555"},
                                            )
                                            if k.get("evidence")
                                            else None,
                                        ]
                                    )
                                    for k in kids
                                ]
                            ),
                        ],
                        className="symptoms",
                    )
                    if kids
                    else None,
                ],
                className="advice-root",
                style={"marginBottom": "8px"},
            )
        )
    return html.Ul(items, id="run-advice")
