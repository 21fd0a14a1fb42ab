"""Tuning page (`/tuning?study=ID`): the answer of a `perfbench tune` search as stored with its study
(perfbench.tune.report.answer): best settings and gain over the default, every trial with its status, each
axis's importance, the optimization history, and why the best beats the default (breakdown and
collective deltas from perfbench.regress.compare). Reads the store only; recomputes nothing."""

from __future__ import annotations

import pandas as pd
from dash import dcc, html

from analyzers.catalogue import format_value, metric
from dashboards import data
from dashboards.components import empty, section, table


def studies() -> list[dict]:
    """Stored searches with an answer, newest first."""
    found = [s for s in data.get().store.list_sweeps() if s.get("kind") == "tune" and s.get("answer")]
    return sorted(found, key=lambda s: s.get("created", 0), reverse=True)


def layout(study: str | None = None, **_):
    found = studies()
    if not found:
        return html.Div(
            [html.H2("Tuning"), empty("no search in this store: run `perfbench tune CONFIG`")], id="tuning-page"
        )
    chosen = next((s for s in found if s["sweep_id"] == study), found[0])
    links = [
        dcc.Link(s["sweep_id"], href=f"/tuning?study={s['sweep_id']}", style={"marginRight": "12px"}) for s in found
    ]
    return html.Div([html.H2("Tuning"), html.Div(links, id="tuning-studies"), body(chosen["answer"])], id="tuning-page")


def body(ans: dict):
    obj = ans["objective"]
    label = metric(obj).label
    trials = ans["trials"]
    keys = [k for k in (trials[0]["settings"] if trials else {}) if k not in ("workload", "repeat")]
    varied = [k for k in keys if len({str(t["settings"].get(k)) for t in trials}) > 1] or keys
    best = ans.get("best")
    if best:
        gain = ans.get("gain")
        head = html.P(
            [
                html.Strong("best: "),
                ", ".join(f"{k}={best['settings'].get(k)}" for k in varied),
                f" → {format_value(obj, best['value'])} {label}",
                f" ({gain * 100:+.1f}% vs the default)" if gain is not None else "",
                " · ",
                dcc.Link("run", href=f"/run/{best['run_id']}"),
            ],
            id="tuning-best",
        )
    else:
        head = html.P("no trial finished", id="tuning-best", style={"color": "#b00"})
    rows = [
        {
            "#": t["number"],
            "status": t["status"],
            **{k: str(t["settings"].get(k)) for k in varied},
            label: t["value"],
            "steps": t["steps"],
            "run": t["run_id"],
        }
        for t in trials
    ]
    w = ans.get("wall_split") or {}
    split = (
        (
            f"search wall time {w.get('wall_s', 0):.0f} s; training steps "
            f"{format_value('pct', w.get('training_share'))} of it (start-up {w.get('startup_s', 0):.0f} s, "
            f"after the steps {w.get('after_s', 0):.0f} s)"
        )
        if w
        else ""
    )
    return html.Div(
        [
            head,
            html.P(split, style={"fontSize": "13px", "color": "#555"}),
            section("Trials", table(pd.DataFrame(rows), id="tuning-trials", page_size=50)),
            section("Optimization history", dcc.Graph(id="tuning-history", figure=history_figure(ans, label))),
            section("Importance of each axis (PED-ANOVA)", importance_view(ans)),
            section(
                "Why the best beats the default", explanation_view(ans.get("explanation")), id="tuning-explanation"
            ),
        ]
    )


def history_figure(ans: dict, label: str) -> dict:
    colors = {"ok": "#2a7", "pruned": "#e90", "failed": "#c33"}
    pts = ans.get("history") or []
    data_ = []
    for status, color in colors.items():
        sel = [p for p in pts if p["status"] == status]
        if not sel:
            continue
        # pruned trials: their last live value (the running median when the pruner stopped them)
        ys = [
            p["value"]
            if p["value"] is not None
            else (list(p["intermediate"].values())[-1] if p["intermediate"] else None)
            for p in sel
        ]
        data_.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": status,
                "x": [p["number"] for p in sel],
                "y": ys,
                "marker": {"color": color, "size": 9},
            }
        )
    data_.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "best so far",
            "line": {"shape": "hv", "color": "#333"},
            "x": [p["number"] for p in pts],
            "y": [p["best"] for p in pts],
        }
    )
    return {
        "data": data_,
        "layout": {"xaxis": {"title": {"text": "trial"}}, "yaxis": {"title": {"text": label}}, "height": 380},
    }


def importance_view(ans: dict):
    imp = ans.get("importance") or {}
    if not imp:
        return empty(f"not computed: {ans.get('importance_note') or 'no trials'}")
    items = sorted(imp.items(), key=lambda kv: kv[1])
    return dcc.Graph(
        id="tuning-importance",
        figure={
            "data": [{"type": "bar", "orientation": "h", "x": [v for _, v in items], "y": [k for k, _ in items]}],
            "layout": {
                "xaxis": {"title": {"text": "importance (share)"}, "tickformat": ".0%"},
                "height": 120 + 30 * len(items),
                "margin": {"l": 140},
            },
        },
    )


def explanation_view(ex: dict | None):
    if not ex:
        return empty("the default is the best, or one of the two runs has no profile")
    parts = [
        html.P(
            [
                "perfbench compare: A = default ",
                dcc.Link(ex["a"], href=f"/run/{ex['a']}"),
                ", B = best ",
                dcc.Link(ex["b"], href=f"/run/{ex['b']}"),
                " · ",
                dcc.Link("full comparison", href=f"/compare?a={ex['a']}&b={ex['b']}"),
            ]
        )
    ]
    if ex.get("breakdown"):
        parts.append(table(pd.DataFrame(ex["breakdown"]), id="tuning-breakdown"))
    if ex.get("collectives"):
        parts.append(table(pd.DataFrame(ex["collectives"]), id="tuning-collectives"))
    if ex.get("settings_diff"):
        parts.append(table(pd.DataFrame(ex["settings_diff"]), id="tuning-settings-diff"))
    return html.Div(parts)
