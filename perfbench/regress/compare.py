"""Compare two runs: throughput and step time with confidence intervals, breakdown, kernel and
collective deltas, and the settings that differ.

Everything here reads the store only (run.json and the tables); nothing parses raw profiler files.

Per-step samples (the basis of every interval here and of `perfbench check`):

the stored `step_metrics` table (analyzers/analyses/step_metrics.py): per step, each metric as the catalogue
(analyzers/catalogue.py) defines it; the run's stored metric is the median of the same samples, so
compare, check and the run record agree by construction.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzers.analyses.step_metrics import run_metrics, samples, step_series
from analyzers.catalogue import ADDING_PARTS, STEP_METRICS
from analyzers.catalogue import METRICS as CATALOGUE
from analyzers.schema import STEP_SHARE_PARTS, warmup_steps
from analyzers.stats import mann_whitney_p, median_diff_ci
from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.errors import UserError
from perfbench.store import Store
from perfbench.views.compare import change, change_text, value
from perfbench.views.advice import ordered_advice

#: the per-step metrics compare and check test (analyzers/catalogue.py: STEP_METRICS, Metric.compare); per metric
#: (higher is better, unit, kind), kind "ratio": relative change, "share": change in points.
METRICS: dict[str, tuple[bool, str, str]] = {
    n: (CATALOGUE[n].better == "higher", CATALOGUE[n].unit, CATALOGUE[n].kind) for n in STEP_METRICS
}

_PART_LABELS = {"communication_not_overlapped": "communication (not overlapped)"}
BREAKDOWN_PARTS = [(f"{p}_us", _PART_LABELS.get(p, p)) for p in STEP_SHARE_PARTS]


# ---- per-step samples ------------------------------------------------------------------------


def run_series(store: Store, record: dict) -> pd.DataFrame:
    """The run's per-step metric series: the stored `step_metrics` table (written by the analysis), or for
    runs stored before it existed, the same analyzers.analyses.step_metrics function over the stored tables."""
    run_id = record["run_id"]
    series = store.read_table(run_id, "step_metrics")
    if series is not None:
        return series
    return step_series(
        store.read_table(run_id, "workload_steps"),
        store.read_table(run_id, "step_breakdown"),
        store.read_table(run_id, "comm_ops"),
        warmup_steps(record.get("config")),
    )


def step_samples(store: Store, record: dict) -> dict[str, list[float]]:
    """Per-step values of each METRICS entry for one run: exactly the samples the run's stored metric is
    the median of (analyzers.analyses.step_metrics.samples)."""
    series = run_series(store, record)
    out = {m: samples(series, m) for m in METRICS}
    return {m: v for m, v in out.items() if v}


# ---- statistics ----------------------------------------------------------------------------

# ---- comparison ----------------------------------------------------------------------------


@dataclass
class Comparison:
    a: dict
    b: dict
    metrics: list[dict] = field(default_factory=list)
    breakdown: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    collectives: list[dict] = field(default_factory=list)
    settings_diff: list[dict] = field(default_factory=list)
    summary_metrics: list[dict] = field(default_factory=list)
    samples: dict = field(default_factory=dict)
    advice: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "a": _brief(self.a),
            "b": _brief(self.b),
            "metrics": self.metrics,
            "breakdown": self.breakdown,
            "kernels": self.kernels,
            "collectives": self.collectives,
            "settings_diff": self.settings_diff,
            "summary_metrics": self.summary_metrics,
            "advice": self.advice,
        }


def findings(store: Store, rec: dict) -> list[dict]:
    """The run's advice in its ranked order (analyzers.analyses.advice; perfbench.views.advice.ordered_advice)."""

    rid = rec["run_id"]
    return ordered_advice(store.read_table(rid, "advice") if "advice" in store.table_names(rid) else None)


def top_findings(recs: list[dict], n: int = 3) -> list[dict]:
    """The first n causes (roots) of a ranked advice list, in brief."""
    return [
        {k: r.get(k) for k in ("id", "rule", "severity", "gain_ms", "gain_share", "message")}
        for r in recs
        if not r.get("symptom_of")
    ][:n]


def advice_changes(a: list[dict], b: list[dict]) -> list[dict]:
    """Findings (by id: rule + what it concerns) that appeared in B, vanished from A, or are in both, with
    their gains on each side and whether each is a cause (root) there; B's rank order first, then the
    vanished ones in A's order."""
    ia = {r.get("id") or r["rule"]: r for r in a}
    ib = {r.get("id") or r["rule"]: r for r in b}
    out = []
    for key, r in list(ib.items()) + [(k, r) for k, r in ia.items() if k not in ib]:
        ra, rb = ia.get(key), ib.get(key)
        out.append(
            {
                "id": key,
                "rule": r["rule"],
                "change": "appeared" if ra is None else "vanished" if rb is None else "both",
                "gain_a_ms": ra.get("gain_ms") if ra else None,
                "gain_b_ms": rb.get("gain_ms") if rb else None,
                "cause_a": (ra.get("symptom_of") or "root") if ra else None,
                "cause_b": (rb.get("symptom_of") or "root") if rb else None,
                "message": r["message"],
            }
        )
    return out


def _brief(rec: dict) -> dict:
    out = {k: rec.get(k) for k in ("run_id", "sweep_id", "status", "source", "settings")}
    out["input_problems"] = list(rec.get("input_problems") or [])  # per rank: an input missing, empty or unreadable
    out["unsteady"] = unsteady_reasons(rec.get("metrics") or {})  # why it is not steady enough to compare
    return out


def _flat(d: Any, prefix: str = "") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


def settings_diff(a: dict, b: dict) -> list[dict]:
    """Settings (and resolved config keys) whose values differ between two run records."""
    fa = {f"settings.{k}": v for k, v in (a.get("settings") or {}).items()}
    fb = {f"settings.{k}": v for k, v in (b.get("settings") or {}).items()}
    fa.update(_flat(a.get("config") or {}, "config."))
    fb.update(_flat(b.get("config") or {}, "config."))
    skip = {"config.run_id", "config.output_dir", "config.repeat"}
    rows = []
    for k in sorted(set(fa) | set(fb)):
        if k in skip:
            continue
        va, vb = fa.get(k), fb.get(k)
        if va != vb:
            rows.append({"key": k, "a": va, "b": vb})
    return rows


def metric_delta(name: str, a: list[float], b: list[float], level: float = 0.95) -> dict:
    """A per-step metric of two runs: `a` and `b` are the medians over each run's steps (the catalogue's basis for
    every per-step metric), `delta`/`rel` their change, `ci_*` the bootstrap interval of the change of the medians
    (absolute in `ci_abs`, relative to `a` in `ci_low`/`ci_high`), `p_value` the Mann-Whitney test's."""
    higher, unit, kind = METRICS.get(name, (False, "", "ratio"))
    row: dict[str, Any] = {"metric": name, "unit": unit, "higher_is_better": higher, "n_a": len(a), "n_b": len(b)}
    ma, mb = (float(np.median(a)) if a else None), (float(np.median(b)) if b else None)
    row.update(a=ma, b=mb, delta=None, rel=None, ci_low=None, ci_high=None, p_value=None)
    if ma is None or mb is None:
        return row
    row.update(delta=mb - ma, rel=(mb - ma) / ma if ma else None, p_value=mann_whitney_p(a, b))
    ci = median_diff_ci(a, b, level)
    if ci is not None:
        row["ci_abs"] = [ci[0], ci[1]]
        if ma:
            row.update(ci_low=ci[0] / ma, ci_high=ci[1] / ma)
    return row


def _breakdown_means(store: Store, rec: dict) -> dict[str, float] | None:
    """The run's breakdown in ms per step: its record's catalogue metrics (computing_s, ...), or where the
    record lacks one, the same definition over its step series (analyzers.analyses.step_metrics.run_metrics)."""
    m = {
        **run_metrics(run_series(store, rec)),
        **{k: v for k, v in (rec.get("metrics") or {}).items() if v is not None},
    }
    out = {}
    for col, _ in [("step_us", "step")] + BREAKDOWN_PARTS:
        # the step the parts split (catalogue breakdown_step_s), not the unprofiled step time
        v = m.get("breakdown_step_s" if col == "step_us" else col.replace("_us", "_s"))
        if v is None and col == "step_us" and all(m.get(p) is not None for p in ADDING_PARTS):
            v = sum(m[p] for p in ADDING_PARTS)
        if v is not None:
            out[col] = float(v) * 1000.0
    return out or None


def _rank_steps(store: Store, rec: dict) -> int:
    bd = store.read_table(rec["run_id"], "step_breakdown")
    if bd is not None and not bd.empty and {"rank", "step"} <= set(bd.columns):
        return max(1, len(bd[["rank", "step"]].drop_duplicates()))
    return 1


def _first(cols, *cands):
    for c in cands:
        if c in cols:
            return c
    return None


def kernel_totals(store: Store, rec: dict) -> pd.Series | None:
    """Kernel time in ms per rank-step, by kernel name (normalised so runs with different profiled windows compare)."""
    k = store.read_table(rec["run_id"], "kernels")
    if k is None or k.empty:
        return None
    name = _first(k.columns, "name", "kernel", "op_name", "type", "op_type")
    tcol = _first(k.columns, "total_us", "total_time_us", "time_us", "dur_us", "total_ms", "duration_us")
    if name is None or tcol is None:
        return None
    scale = 1000.0 if tcol.endswith("_us") else 1.0
    if "rank" in k.columns and "total" not in tcol and tcol != "time_us":
        pass
    s = k.groupby(name)[tcol].sum() / scale
    return s / _rank_steps(store, rec)


def collective_totals(store: Store, rec: dict) -> pd.DataFrame | None:
    c = store.read_table(rec["run_id"], "comm_ops")
    if c is None or c.empty:
        return None
    key = _first(c.columns, "op_type", "op_name")
    n = _rank_steps(store, rec)
    g = c.groupby(key)
    df = pd.DataFrame({"count": g.size() / n})
    if "elapse_ms" in c.columns:
        df["time_ms"] = g["elapse_ms"].sum() / n
    if "size_bytes" in c.columns:
        df["bytes"] = g["size_bytes"].sum() / n
    for bw in ("algbw_gbps", "busbw_gbps"):
        if bw in c.columns:
            df[bw] = g[bw].mean()
    return df


def _clean(v):
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return None if math.isnan(f) else f


def compare_runs(store: Store, run_a: str, run_b: str, *, top: int = 10, level: float = 0.95) -> Comparison:
    a, b = store.get_run(run_a), store.get_run(run_b)
    for rec in (a, b):
        if rec.get("status") != "ok":
            raise UserError(
                f"run {rec['run_id']} has status {rec.get('status')!r}; only finished runs can be compared"
                + (f" ({str(rec.get('error'))[:200]})" if rec.get("error") else "")
            )
    cmp = Comparison(a=a, b=b)
    sa, sb = step_samples(store, a), step_samples(store, b)
    cmp.samples = {"a": sa, "b": sb}
    for m in METRICS:
        if m in sa or m in sb:
            cmp.metrics.append(metric_delta(m, sa.get(m, []), sb.get(m, []), level))
    # run-level summary metrics side by side
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    for k in sorted(set(ma) | set(mb)):
        va, vb = _clean(ma.get(k)), _clean(mb.get(k))
        if va is None and vb is None:
            continue
        rel = (vb - va) / va if isinstance(va, float) and isinstance(vb, float) and va else None
        cmp.summary_metrics.append({"metric": k, "a": va, "b": vb, "rel": rel})
    ba, bb = _breakdown_means(store, a), _breakdown_means(store, b)
    if ba or bb:
        for col, label in [("step_us", "step")] + BREAKDOWN_PARTS:
            va, vb = (ba or {}).get(col), (bb or {}).get(col)
            if va is None and vb is None:
                continue
            cmp.breakdown.append(
                {
                    "part": label,
                    "a_ms": va,
                    "b_ms": vb,
                    "delta_ms": (vb - va) if va is not None and vb is not None else None,
                }
            )
    ka, kb = kernel_totals(store, a), kernel_totals(store, b)
    if ka is not None or kb is not None:
        kdf = pd.DataFrame(
            {
                "a_ms": ka if ka is not None else pd.Series(dtype=float),
                "b_ms": kb if kb is not None else pd.Series(dtype=float),
            }
        ).fillna(0.0)
        kdf["delta_ms"] = kdf["b_ms"] - kdf["a_ms"]
        kdf = kdf.reindex(kdf["delta_ms"].abs().sort_values(ascending=False).index).head(top)
        cmp.kernels = [{"kernel": str(i), **{c: float(v) for c, v in r.items()}} for i, r in kdf.iterrows()]
    ca, cb = collective_totals(store, a), collective_totals(store, b)
    if ca is not None or cb is not None:
        ca = ca if ca is not None else pd.DataFrame()
        cb = cb if cb is not None else pd.DataFrame()
        for op in sorted(set(ca.index) | set(cb.index)):
            row = {"op": str(op)}
            for col in ("count", "time_ms", "bytes", "algbw_gbps", "busbw_gbps"):
                va = _clean(ca.at[op, col]) if op in ca.index and col in ca.columns else None
                vb = _clean(cb.at[op, col]) if op in cb.index and col in cb.columns else None
                row[f"{col}_a"], row[f"{col}_b"] = va, vb
            cmp.collectives.append(row)
    cmp.settings_diff = settings_diff(a, b)
    cmp.advice = advice_changes(findings(store, a), findings(store, b))
    return cmp


# ---- rendering -----------------------------------------------------------------------------


def fmt(v, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.{digits}g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def pct(v) -> str:
    return "–" if v is None else f"{v * 100:+.1f}%"


def _md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(lines)


def _md_section(title: str, header: list[str], rows: list[list]) -> list[str]:
    """A Markdown section: its `## title`, then the table."""
    return [f"## {title}", "", _md_table(header, rows), ""]


def _md_deltas(rows: list[dict], key: str, width: int | None = None) -> list[list]:
    """Rows of (name, A, B, delta) in ms, the name cut to `width` characters."""
    cut = (lambda v: v) if width is None else (lambda v: v[:width])
    return [[cut(r[key]), fmt(r["a_ms"]), fmt(r["b_ms"]), fmt(r["delta_ms"])] for r in rows]


def to_markdown(cmp: Comparison) -> str:
    a, b = cmp.a["run_id"], cmp.b["run_id"]
    out = [f"# Compare `{a}` (A) → `{b}` (B)", ""]

    if cmp.metrics:
        out += _md_section(
            "Per-step metrics (medians over each metric's steps, as the catalogue says: `perfbench metrics`)",
            ["metric", "A", "B", "change", "p (Mann-Whitney)", "steps A/B"],
            [
                [
                    m["metric"],
                    value(m["metric"], m["a"]),
                    value(m["metric"], m["b"]),
                    change_text(m["metric"], m),
                    fmt(m.get("p_value"), 2),
                    f"{m['n_a']}/{m['n_b']}",
                ]
                for m in cmp.metrics
            ],
        )
    else:
        out += ["No per-step samples in either run.", ""]
    if cmp.breakdown:
        out += _md_section(
            "Step breakdown (ms per rank-step, profiled steps; step = the profiled step the parts add up to)",
            ["part", "A", "B", "Δ"],
            _md_deltas(cmp.breakdown, "part"),
        )
    if cmp.kernels:
        out += _md_section(
            "Kernels: top movers (ms per rank-step)", ["kernel", "A", "B", "Δ"], _md_deltas(cmp.kernels, "kernel", 80)
        )
    if cmp.collectives:
        pairs = ("count", "time_ms", "bytes", "algbw_gbps", "busbw_gbps")
        out += _md_section(
            "Collectives (per rank-step)",
            ["op", "count A/B", "time ms A/B", "bytes A/B", "algbw GB/s A/B", "busbw GB/s A/B"],
            [[r["op"]] + [f"{fmt(r[c + '_a'])} / {fmt(r[c + '_b'])}" for c in pairs] for r in cmp.collectives],
        )
    out += _md_findings(cmp)
    out += ["## Settings that differ", ""]
    if cmp.settings_diff:
        out += [_md_table(["key", "A", "B"], [[r["key"], fmt(r["a"]), fmt(r["b"])] for r in cmp.settings_diff]), ""]
    else:
        out += ["none", ""]
    if cmp.summary_metrics:
        out += _md_section(
            "Run metrics (run.json: each metric's catalogue aggregation, e.g. median over measured steps)",
            ["metric", "A", "B", "change"],
            [
                [r["metric"], *(value(r["metric"], r[s]) for s in "ab"), change(r["metric"], r["a"], r["b"])]
                for r in cmp.summary_metrics
            ],
        )
    return "\n".join(out)


def _md_findings(cmp: Comparison) -> list[str]:
    """The advice that appeared, vanished or is a root in either run, as Markdown lines."""
    out: list[str] = []
    if cmp.advice:
        moved = [r for r in cmp.advice if r["change"] != "both" or r["cause_a"] == "root" or r["cause_b"] == "root"]
        out += [
            "## Findings (advice; appeared / vanished / in both; gain = expected saving, ms per step)",
            "",
            _md_table(
                ["finding", "change", "gain A", "gain B", "A", "B", "message"],
                [
                    [
                        r["id"],
                        r["change"],
                        fmt(r["gain_a_ms"]),
                        fmt(r["gain_b_ms"]),
                        r["cause_a"] or "–",
                        r["cause_b"] or "–",
                        r["message"][:120],
                    ]
                    for r in moved
                ],
            ),
            "",
        ]
    return out


def figures(cmp: Comparison) -> list:
    """Plotly figures of a comparison (used by the HTML report and the dashboard's compare page)."""
    import plotly.graph_objects as go

    a, b = cmp.a["run_id"], cmp.b["run_id"]
    figs = []
    sa, sb = cmp.samples.get("a", {}), cmp.samples.get("b", {})
    for m in ("step_time_s", "throughput"):
        if m in sa or m in sb:
            fig = go.Figure()
            for label, s in (("A " + a, sa), ("B " + b, sb)):
                if m in s:
                    fig.add_trace(go.Box(y=s[m], name=label, boxpoints="all"))
            fig.update_layout(title=f"{m} per step", yaxis_title=METRICS[m][1], height=380)
            figs.append(fig)
    if cmp.breakdown:
        fig = go.Figure()
        for r in cmp.breakdown:
            if r["part"] == "step":
                continue
            fig.add_trace(go.Bar(name=r["part"], x=["A " + a, "B " + b], y=[r["a_ms"] or 0, r["b_ms"] or 0]))
        fig.update_layout(barmode="stack", title="step breakdown (ms per rank-step)", height=380)
        figs.append(fig)
    if cmp.kernels:
        ks = list(reversed(cmp.kernels))
        fig = go.Figure(go.Bar(x=[k["delta_ms"] for k in ks], y=[k["kernel"][:60] for k in ks], orientation="h"))
        fig.update_layout(title="kernel time change B − A (ms per rank-step)", height=max(300, 28 * len(ks) + 120))
        figs.append(fig)
    return figs


def to_html(cmp: Comparison) -> str:
    """One self-contained HTML file: the Markdown tables plus the Plotly figures with plotly.js inlined."""
    import html as _html

    import plotly.io as pio

    parts = []
    for i, fig in enumerate(figures(cmp)):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0)))
    body = _md_to_html(to_markdown(cmp))
    if not parts:  # keep the file self-contained but still loadable
        parts.append("<p>No figures: neither run has per-step samples.</p>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>perfbench compare "
        f"{_html.escape(cmp.a['run_id'])} vs {_html.escape(cmp.b['run_id'])}</title>"
        "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f3f3f3}</style></head><body>"
        + body
        + "<h2>Figures</h2>"
        + "\n".join(parts)
        + "</body></html>"
    )


def _md_to_html(md: str) -> str:
    """Just enough Markdown (headings, tables, paragraphs) for our own report."""
    import html as _html

    out, table = [], []

    def flush():
        if table:
            rows = [r for r in table if not set(r.replace("|", "").strip()) <= {"-"}]
            cells = [
                [_html.escape(c.strip().replace("\\|", "|")) for c in r.strip().strip("|").split(" | ")] for r in rows
            ]
            h = "".join(f"<th>{c}</th>" for c in cells[0])
            body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[1:])
            out.append(f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("## "):
            out.append(f"<h2>{_html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            out.append(f"<h1>{_html.escape(line[2:])}</h1>")
        elif line.strip():
            out.append(f"<p>{_html.escape(line)}</p>")
    flush()
    return "\n".join(out)
