"""What `perfbench report RUN|SWEEP -o FILE` writes: one self-contained HTML file to hand a colleague.

The file needs no server and no network: plotly.js is inlined once (in the head), each chart is a plotly figure
drawn from it, every style is inline. Its numbers are those `perfbench show` prints (perfbench/views/run_report.py:
the verdict, the ranked advice with gains, the key numbers, the per-rank breakdown) and those `perfbench ls`
prints for a sweep (perfbench/views/results.py). A part whose data the run lacks says "no data"; it is never
drawn as 0.
"""

from __future__ import annotations

import html
import json
import math
import time
from typing import Any

import pandas as pd

from analyzers.analyses.steadiness import unsteady_reasons
from analyzers.catalogue import KEY_METRICS, METRICS as CATALOGUE
from perfbench.records import short_id
from perfbench.views.results import fmt, summarize, swept_keys
from perfbench.views.advice import advice_tree, gain_text, ordered_advice, try_text
from perfbench.views.run_numbers import input_problem_lines, key_numbers, step_story

#: the breakdown parts that add up to a rank's step (catalogue ADDING_PARTS, per rank): column, label, colour
BREAKDOWN_BARS = (
    ("computing_us", "compute", "#4C78A8"),
    ("communication_not_overlapped_us", "exposed comm", "#E45756"),
    ("free_us", "free", "#BAB0AC"),
)
#: the id of the one <script> holding plotly.js (tests strip it to check the rest of the page)
PLOTLY_SCRIPT_ID = "plotly-js"
NO_DATA = "no data"
#: up to this many ranks the communication matrix is also listed link by link under its heat map
MATRIX_TABLE_RANKS = 16

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.sub{color:#666;margin-top:0}.verdict{font-size:1.15em;font-weight:600;background:#f4f7fb;border-left:4px solid #4C78A8;
padding:10px 14px}.warn{background:#fff8e1;border-left:4px solid #f0a500;padding:8px 12px;margin:6px 0}
.nodata{color:#888;font-style:italic}table{border-collapse:collapse;margin:8px 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}td.num{text-align:right;
font-variant-numeric:tabular-nums}th{background:#f6f6f6}.dim{color:#666;font-size:.9em}
ol.advice li{margin-bottom:8px}ul.symptoms{margin:4px 0}
"""


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def no_data(what: str) -> str:
    return f'<p class="nodata">{esc(what)}: {NO_DATA}</p>'


def html_table(heads: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    """A plain HTML table; cells are text (already formatted), `numeric`: the column indexes aligned right."""
    numeric = numeric or set()
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in heads), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>")
        out += [f"<td{' class=num' if i in numeric else ''}>{esc(c)}</td>" for i, c in enumerate(r)]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def ms(us: Any) -> str:
    """A time in µs as ms with 3 decimals ("-" when unknown)."""
    return "-" if _missing(us) else f"{float(us) / 1000:.3f}"


class Charts:
    """The plotly figures of one page: each as a div and its script, plotly.js itself once in the head."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig) -> str:
        self.count += 1
        fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 40, "b": 50})
        return fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            include_mathjax=False,
            div_id=f"chart-{self.count}",
            config={"displaylogo": False, "responsive": True},
        )


def page(title: str, subtitle: str, body: list[str]) -> str:
    from plotly.offline import get_plotlyjs

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title><style>{_CSS}</style>"
        f'<script type="text/javascript" id="{PLOTLY_SCRIPT_ID}">{get_plotlyjs()}</script>'
        f"</head><body><h1>{esc(title)}</h1><p class=sub>{esc(subtitle)}</p>"
        + "\n".join(body)
        + f"<p class=dim>written by perfbench report, {stamp}; every number also in `perfbench show --json`</p>"
        "</body></html>"
    )


# ---- one run ----------------------------------------------------------------------------------------------------


def verdict_html(rec: dict, advice: list[dict]) -> str:
    """The verdict line (the top advice and its gain, as `perfbench show` says it)."""
    if advice:
        first = advice[0]
        extra = gain_text(first) + (f"; {try_text(first)}" if first.get("try") else "")
        return f"<p class=verdict>{esc(first['message'])}<br><span class=dim>{esc(extra)}</span></p>"
    if rec.get("status") == "ok":
        return (
            "<p class=verdict>no advice rule fired: nothing stands out in this run's breakdown, collectives or "
            "ranks</p>"
        )
    return f"<p class=verdict>the run did not finish: {esc(rec.get('error') or rec.get('status'))}</p>"


def advice_html(advice: list[dict]) -> str:
    """The ranked advice, largest expected gain first, symptoms under their cause."""
    if not advice:
        return no_data("advice")
    items = []
    for root, kids in advice_tree(advice):
        lines = [f"<b>[{esc(root.get('severity'))}] {esc(gain_text(root))}</b>: {esc(root['message'])}"]
        if root.get("basis"):
            lines.append(f"<span class=dim>gain basis: {esc(root['basis'])}</span>")
        if root.get("try"):
            lines.append(f"<span class=dim>{esc(try_text(root))}</span>")
        if root.get("evidence"):
            lines.append(f"<span class=dim>evidence: {esc(root['evidence'])}</span>")
        if kids:
            lines.append(
                "<ul class=symptoms>"
                + "".join(f"<li>symptom ({esc(k['rule'])}): {esc(k['message'])}</li>" for k in kids)
                + "</ul>"
            )
        items.append("<li>" + "<br>".join(lines) + "</li>")
    return "<ol class=advice>" + "".join(items) + "</ol>"


def breakdown_html(bd: pd.DataFrame | None, charts: Charts) -> str:
    """Per rank: compute / exposed comm / free stacked to the rank's step (ms), and the same numbers as a table."""
    need = ["rank", "step_us", *(c for c, _, _ in BREAKDOWN_BARS)]
    if bd is None or bd.empty or any(c not in bd.columns for c in need):
        return no_data("per-rank step breakdown")
    import plotly.graph_objects as go

    bd = bd.sort_values("rank")
    ranks = [f"rank {int(r)}" for r in bd["rank"]]
    fig = go.Figure()
    for col, label, colour in BREAKDOWN_BARS:
        vals = [None if _missing(v) else float(v) / 1000 for v in bd[col]]
        fig.add_bar(x=ranks, y=vals, name=label, marker_color=colour, hovertemplate="%{x}: %{y:.3f} ms")
    fig.add_scatter(
        x=ranks,
        y=[None if _missing(v) else float(v) / 1000 for v in bd["step_us"]],
        mode="markers",
        name="step",
        marker={"symbol": "line-ew-open", "size": 28, "color": "#222"},
        hovertemplate="%{x}: step %{y:.3f} ms",
    )
    fig.update_layout(
        barmode="stack", height=380, yaxis_title="ms per step (median over profiled steps)", title="Step breakdown"
    )
    sources = {"profiler": "profiler's own step trace", "recomputed": "recomputed from the kernels"}
    has_source = "source" in bd.columns and bd["source"].notna().any()
    rows = []
    for r in bd.to_dict("records"):
        row = [int(r["rank"]), ms(r["step_us"]), *(ms(r[c]) for c, _, _ in BREAKDOWN_BARS)]
        if has_source:
            row.append("-" if _missing(r["source"]) else sources.get(str(r["source"]), str(r["source"])))
        rows.append(row)
    gaps = [
        r for r in bd.to_dict("records") if any(_missing(r[c]) for c, _, _ in BREAKDOWN_BARS) or _missing(r["step_us"])
    ]
    note = (
        f"<p class=nodata>ranks {', '.join(str(int(r['rank'])) for r in gaps)}: part of the breakdown: {NO_DATA}</p>"
        if gaps
        else ""
    )
    table = html_table(
        ["rank", "step ms", *(f"{label} ms" for _, label, _ in BREAKDOWN_BARS), *(["from"] if has_source else [])],
        rows,
        numeric={0, 1, 2, 3, 4},
    )
    return (
        charts.div(fig)
        + note
        + table
        + "<p class=dim>compute + exposed comm + free = the rank's profiled step (median over its profiled steps).</p>"
    )


def comm_matrix_html(tables: dict[str, pd.DataFrame], charts: Charts) -> str:
    """Rank x rank bandwidth (GB/s = summed MB / summed ms over the stored link totals), with the link types."""
    links = tables.get("link_totals")
    if links is None or links.empty:
        links = tables.get("links")
    need = ("src", "dst", "size_mb", "time_ms")
    if links is None or links.empty or any(c not in links.columns for c in need):
        return no_data("communication matrix (the run's profiles have no per-link table)")
    import plotly.graph_objects as go

    df = links.assign(
        src=pd.to_numeric(links["src"], errors="coerce"), dst=pd.to_numeric(links["dst"], errors="coerce")
    ).dropna(subset=["src", "dst"])
    if df.empty:
        return no_data("communication matrix (no link names its ranks)")
    transport = df["transport"].astype(str) if "transport" in df else pd.Series("?", index=df.index)
    g = df.assign(transport=transport).groupby(["src", "dst"])
    agg = g.agg(size_mb=("size_mb", "sum"), time_ms=("time_ms", "sum"))
    agg["gbps"] = agg["size_mb"] / agg["time_ms"].where(agg["time_ms"] > 0)
    agg["kind"] = g["transport"].agg(lambda s: "/".join(sorted(set(s))))
    ranks = sorted(set(agg.index.get_level_values(0)) | set(agg.index.get_level_values(1)))
    z, text = [], []
    for s in ranks:
        zr, tr = [], []
        for d in ranks:
            if (s, d) in agg.index and not _missing(agg.loc[(s, d), "gbps"]):
                v = float(agg.loc[(s, d), "gbps"])
                zr.append(round(v, 2))
                tr.append(f"{v:.1f} GB/s<br>{agg.loc[(s, d), 'kind']}")
            else:
                zr.append(None)
                tr.append(NO_DATA)
        z.append(zr)
        text.append(tr)
    labels = [str(int(r)) for r in ranks]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            text=text,
            texttemplate="%{text}" if len(ranks) <= MATRIX_TABLE_RANKS else None,
            colorscale="Blues",
            colorbar={"title": "GB/s"},
            hovertemplate="src %{y} -> dst %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(320, 60 * len(ranks) + 120),
        xaxis_title="destination rank",
        yaxis_title="source rank",
        yaxis_autorange="reversed",
        xaxis_type="category",
        yaxis_type="category",
        title="Communication matrix (bandwidth by link, with its type)",
    )
    note = "<p class=dim>bandwidth = bytes over time summed over the profiled steps' links.</p>"
    if len(ranks) > MATRIX_TABLE_RANKS:
        return charts.div(fig) + note
    rows = [
        [
            int(s),
            int(d),
            r["kind"],
            f"{r['size_mb']:.3f}",
            f"{r['time_ms']:.3f}",
            "-" if _missing(r["gbps"]) else f"{r['gbps']:.2f}",
        ]
        for (s, d), r in agg.iterrows()
    ]
    return charts.div(fig) + note + html_table(["src", "dst", "link type", "MB", "ms", "GB/s"], rows, numeric={3, 4, 5})


#: the timeline's colours, by segment kind (analyzers/analyses/timeline.py)
TIMELINE_KINDS = (("compute", "#4C78A8"), ("communication", "#E45756"))
#: the most ranks the timeline draws (the merged trace has them all)
TIMELINE_RANKS = 32


def timeline_html(tl: pd.DataFrame | None, charts: Charts) -> str:
    """One profiled step across ranks (the first stored step): compute and communication segments per rank on one
    time axis (ms from the step's first segment, each rank's profile clock), gaps are free time."""
    need = ("rank", "step", "kind", "start_ts", "end_ts")
    if tl is None or tl.empty or any(c not in tl.columns for c in need):
        return no_data("multi-rank timeline")
    import plotly.graph_objects as go

    step = sorted(tl["step"].dropna().unique())[0]
    one = tl[tl["step"] == step]
    t0 = float(one["start_ts"].min())
    ranks = sorted(int(r) for r in one["rank"].unique())
    shown_note = ""
    if len(ranks) > TIMELINE_RANKS:
        shown_note = (
            f"<p class=dim>the first {TIMELINE_RANKS} of {len(ranks)} ranks; every rank: "
            "perfbench trace RUN -o FILE (Perfetto)</p>"
        )
        ranks = ranks[:TIMELINE_RANKS]
        one = one[one["rank"].isin(ranks)]
    fig = go.Figure()
    for kind, colour in TIMELINE_KINDS:
        seg = one[one["kind"] == kind]
        if seg.empty:
            continue
        top = seg["top_op"].astype(str) if "top_op" in seg.columns else pd.Series("", index=seg.index)
        n_ops = seg["ops"] if "ops" in seg.columns else pd.Series(1, index=seg.index)
        fig.add_bar(
            orientation="h",
            y=[f"rank {int(r)}" for r in seg["rank"]],
            base=list((seg["start_ts"] - t0) * 1000),
            x=list((seg["end_ts"] - seg["start_ts"]) * 1000),
            name=kind,
            marker_color=colour,
            customdata=list(zip(top.str.rsplit("/", n=1).str[-1], n_ops)),
            hovertemplate="%{y}: %{base:.3f} ms + %{x:.3f} ms<br>%{customdata[1]} ops, longest %{customdata[0]}"
            "<extra>" + kind + "</extra>",
        )
    fig.update_layout(
        barmode="overlay",
        height=max(240, 50 * len(ranks) + 140),
        xaxis_title=f"ms from the start of step {int(step)}",
        yaxis={"categoryorder": "array", "categoryarray": [f"rank {r}" for r in reversed(ranks)]},
        title=f"Step {int(step)} across ranks (compute and communication; gaps are free time)",
    )
    return charts.div(fig) + shown_note


def memory_html(mem: pd.DataFrame | None, charts: Charts) -> str:
    if mem is None or mem.empty or "peak_bytes" not in mem.columns:
        return no_data("memory per rank")
    import plotly.graph_objects as go

    mem = mem.sort_values("rank")
    peaks = pd.to_numeric(mem["peak_bytes"], errors="coerce")
    if peaks.isna().all():
        return no_data("memory per rank (no rank's files record a peak)")
    known = mem[peaks.notna()]
    fig = go.Figure(
        go.Bar(
            x=[f"rank {int(r)}" for r in known["rank"]],
            y=[float(v) / 2**30 for v in pd.to_numeric(known["peak_bytes"])],
            marker_color="#72B7B2",
            hovertemplate="%{x}: %{y:.3f} GiB<extra></extra>",
        )
    )
    fig.update_layout(height=320, yaxis_title="peak memory (GiB)", title="Memory per rank (peak)")
    missing = [int(r) for r in mem.loc[peaks.isna(), "rank"]]
    note = f"<p class=nodata>ranks {', '.join(map(str, missing))}: peak memory: {NO_DATA}</p>" if missing else ""
    src = ""
    if "peak_source" in mem.columns and mem["peak_source"].notna().any():
        src = f"<p class=dim>peak: {esc(', '.join(sorted(set(mem['peak_source'].dropna().astype(str)))))}</p>"
    return charts.div(fig) + note + src


def kernels_html(kern: pd.DataFrame | None) -> str:
    if kern is None or kern.empty or "name" not in kern.columns:
        return no_data("top kernels")
    rows = []
    for r in kern.to_dict("records"):
        rows.append(
            [
                str(r["name"]).rsplit("/", 1)[-1],
                "-" if _missing(r.get("type")) else r.get("type"),
                "-" if _missing(r.get("count")) else int(r["count"]),
                ms(r.get("total_us")),
                ms(r.get("mean_us")),
            ]
        )
    return html_table(["kernel", "type", "calls", "total ms", "mean ms"], rows, numeric={2, 3, 4})


def run_sections(rec: dict, row: dict, tables: dict[str, pd.DataFrame], charts: Charts, heading: str = "") -> list[str]:
    """The sections of one run: verdict, warnings, key numbers, advice, breakdown, matrix, memory, kernels."""
    h = heading
    out = [verdict_html(rec, ordered_advice(tables.get("advice")))]
    for line in input_problem_lines(rec):
        out.append(f"<p class=warn>Missing or damaged input: {esc(line)}</p>")
    why = unsteady_reasons(rec.get("metrics") or {})
    if why:
        out.append(f"<p class=warn>Not steady enough to compare: {esc('; '.join(why))}</p>")
    numbers = key_numbers(rec, row)
    out.append(f"<h2>{h}Key numbers</h2>")
    if numbers:
        out.append(html_table(["metric", "value", "over", "definition"], [list(n) for n in numbers], numeric={1}))
        story = step_story(dict(rec.get("metrics") or {}))
        if story:
            out.append(f"<p class=dim>{esc(story)}</p>")
    else:
        out.append(no_data("key numbers"))
    out.append(f"<h2>{h}Advice, largest expected gain first</h2>")
    out.append(advice_html(ordered_advice(tables.get("advice"))))
    out.append(f"<h2>{h}Step breakdown per rank</h2>")
    out.append(breakdown_html(tables.get("rank_breakdown"), charts))
    out.append(f"<h2>{h}Communication matrix</h2>")
    out.append(comm_matrix_html(tables, charts))
    out.append(f"<h2>{h}Timeline of one step</h2>")
    out.append(timeline_html(tables.get("timeline"), charts))
    out.append(f"<h2>{h}Memory per rank</h2>")
    out.append(memory_html(tables.get("memory"), charts))
    out.append(f"<h2>{h}Top kernels (by total time, all ranks)</h2>")
    out.append(kernels_html(tables.get("top_kernels")))
    out.append(data_island(rec, tables))
    return out


def _plain(v: Any) -> Any:
    """JSON-safe: NaN and infinities become null (unknown is null, never 0), containers recursively."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return None if v is pd.NA else v


def data_island(rec: dict, tables: dict[str, pd.DataFrame]) -> str:
    """The numbers the run's sections show, as JSON in a script the browser does not run (class perfbench-data):
    the catalogue metrics with their unit and label, the input problems, each rank's breakdown (us) and the
    ranked advice, as `perfbench show --json` and `advise --json` give them."""
    metrics = {
        name: {"value": v, "unit": CATALOGUE[name].unit, "label": CATALOGUE[name].label}
        for name, v in (rec.get("metrics") or {}).items()
        if name in CATALOGUE and not _missing(v)
    }
    bd = tables.get("rank_breakdown")
    doc = {
        "run_id": rec.get("run_id"),
        "metrics": metrics,
        "input_problems": list(rec.get("input_problems") or []),
        "rank_breakdown": json.loads(bd.to_json(orient="records")) if bd is not None else [],
        "advice": ordered_advice(tables.get("advice")),
    }
    text = json.dumps(_plain(doc), default=str).replace("</", "<\\/")
    return f'<script type="application/json" class="perfbench-data" data-run="{esc(rec.get("run_id"))}">{text}</script>'


#: the stored tables a report reads (the rest stay on disk)
REPORT_TABLES = ("advice", "rank_breakdown", "link_totals", "links", "timeline", "memory", "top_kernels")


def run_tables(store, run_id: str) -> dict[str, pd.DataFrame]:
    names = set(store.table_names(run_id))
    return {n: store.read_table(run_id, n) for n in REPORT_TABLES if n in names}


def run_report(store, rec: dict) -> str:
    """The HTML page of one run."""
    charts = Charts()
    row = summarize([rec], context=store.list_runs())[0]
    settings = ", ".join(f"{k}={v}" for k, v in (rec.get("settings") or {}).items())
    body = run_sections(rec, row, run_tables(store, rec["run_id"]), charts)
    return page(
        f"perfbench report: {short_id(rec)}",
        f"run {rec['run_id']} · {rec.get('status')} · {settings} · source: {rec.get('source')}",
        body,
    )


# ---- a sweep ----------------------------------------------------------------------------------------------------


def runs_table_html(rows: list[dict]) -> str:
    """The `perfbench ls` columns: run, status (⚠ when not steady), the swept settings, the key metrics."""
    keys = swept_keys(rows)
    heads = ["run", "status", *keys, *(CATALOGUE[k].label for k in KEY_METRICS)]
    body = []
    for r in rows:
        status = str(r["status"]) + (" ⚠ not steady" if r.get("unsteady") else "")
        body.append(
            [
                short_id(r),
                status,
                *(fmt(r["settings"].get(k)) for k in keys),
                *(fmt(r.get(k), k) for k in KEY_METRICS),
            ]
        )
    first = 2 + len(keys)
    return html_table(heads, body, numeric=set(range(first, first + len(KEY_METRICS))))


def _throughput_points(rows: list[dict], key: str) -> tuple[list, list, list]:
    xs, ys, names = [], [], []
    for r in rows:
        v, tp = r["settings"].get(key), r.get("throughput")
        if r.get("status") == "ok" and v is not None and not _missing(tp):
            xs.append(v)
            ys.append(float(tp))
            names.append(short_id(r))
    return xs, ys, names


def scaling_html(rows: list[dict], charts: Charts) -> str:
    """samples/s against world size: each ok run a point, the median per world size a line, and linear scaling
    from the 1-rank median where there is one."""
    import plotly.graph_objects as go

    xs, ys, names = _throughput_points(rows, "world_size")
    if not xs:
        return no_data("scaling (no finished run with a throughput)")
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="markers", name="runs", text=names, hovertemplate="%{text}: %{y:.1f} samples/s")
    med = pd.Series(ys).groupby(pd.Series(xs)).median()
    fig.add_scatter(x=list(med.index), y=list(med.values), mode="lines+markers", name="median")
    if 1 in med.index:
        fig.add_scatter(
            x=list(med.index),
            y=[med[1] * w for w in med.index],
            mode="lines",
            name="linear (1-rank x N)",
            line={"dash": "dot", "color": "#888"},
        )
    fig.update_layout(
        height=380, xaxis_title="world size (ranks)", yaxis_title="samples/s (measured steps)", title="Scaling"
    )
    return charts.div(fig)


def setting_charts_html(rows: list[dict], charts: Charts) -> str:
    """One chart per swept setting other than world size: samples/s of each ok run against the setting's value."""
    import plotly.graph_objects as go

    keys = [k for k in swept_keys(rows) if k not in ("world_size", "workload", "repeat")]
    if not keys:
        return "<p class=dim>the sweep varies no setting but the world size.</p>"
    out = []
    for k in keys:
        xs, ys, names = _throughput_points(rows, k)
        if not xs:
            out.append(no_data(f"samples/s by {k}"))
            continue
        fig = go.Figure(
            go.Scatter(
                x=[str(x) for x in xs],
                y=ys,
                mode="markers",
                text=names,
                marker={"size": 10},
                hovertemplate="%{text}: %{y:.1f} samples/s",
            )
        )
        fig.update_layout(
            height=320,
            xaxis_title=k,
            xaxis_type="category",
            yaxis_title="samples/s (measured steps)",
            title=f"samples/s by {k}",
        )
        out.append(f"<h3>samples/s by {esc(k)}</h3>" + charts.div(fig))
    return "".join(out)


def sweep_report(store, sweep_id: str, records: list[dict]) -> str:
    """The HTML page of a sweep: the runs table, scaling, one chart per swept setting, then its fastest ok run
    in full (or its first run when none finished)."""
    charts = Charts()
    rows = summarize(records, context=store.list_runs())
    body = [f"<h2>Runs ({len(rows)})</h2>", runs_table_html(rows)]
    body += ["<h2>Scaling</h2>", scaling_html(rows, charts)]
    body += ["<h2>By setting</h2>", setting_charts_html(rows, charts)]
    ok = [r for r in records if r.get("status") == "ok" and not _missing((r.get("metrics") or {}).get("throughput"))]
    best = max(ok, key=lambda r: r["metrics"]["throughput"]) if ok else (records[0] if records else None)
    if best is not None:
        why = "the fastest finished run" if ok else "no run has a throughput; its first run"
        body.append(f"<h2>Run {esc(short_id(best))} ({why})</h2>")
        row = next(r for r in rows if r["run_id"] == best["run_id"])
        body += run_sections(best, row, run_tables(store, best["run_id"]), charts, heading=f"{short_id(best)}: ")
    n_ok = sum(r.get("status") == "ok" for r in records)
    return page(f"perfbench report: sweep {sweep_id}", f"{len(records)} runs, {n_ok} ok", body)
