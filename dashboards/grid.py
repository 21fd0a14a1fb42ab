"""The Sweeps page's runs grid, served page by page: filter, sort and slice happen here, on the server,
so the browser only ever receives one page of rows (first paint does not grow with the store).

Values are filtered and sorted in the units the grid shows (ms, %, ...: the catalogue's format), so a
filter `>150` on "step ms" means 150 ms and `<5` on a share means 5 %.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pandas as pd

from analyzers.analyses.steadiness import SELF_ESTIMATES, resolved, unsteady_reasons
from analyzers.catalogue import GRID_EXTRA, KEY_METRICS, METRICS, format_value
from dashboards import data
from dashboards.components import cell_text
from perfbench.views import results

ID_COLUMNS = ["run_id", "sweep_id", "status", "source"]
#: text columns of the grid besides the ids: is the run steady enough to compare (analyzers/analyses/steadiness.py,
#: the ⚠ of `perfbench ls`), and its top finding (the first root of its advice, with its gain)
FLAG_COLUMNS = ["steady", "finding"]
#: the grid's columns in this order, so that the key ones fit 1,280 px without scrolling: the run, its status,
#: steadiness and top finding, the swept settings, the key metrics (the results table's priority), the rest, and
#: the sweep and source last
LEAD_COLUMNS = ["run_id", "status", "steady", "finding"]
TAIL_COLUMNS = ["sweep_id", "source"]
#: fmt -> factor from the stored value to the shown number
DISPLAY_SCALE = {"ms": 1000.0, "pct": 100.0}

_lock = threading.Lock()
_cache: dict = {}


def _efficiency(df: pd.DataFrame) -> pd.Series:
    """Each run's scaling efficiency by the one definition (perfbench.views.results), against the whole store."""

    recs = data.get().runs()
    fn = getattr(results, "scaling_efficiency", None)
    base = results.baselines(recs)
    if fn is not None:
        eff = {r["run_id"]: fn(r, base) for r in recs}
    else:  # perfbench.views.results before it exposed the function: its summarize() row carries the same number
        eff = {row["run_id"]: row.get("scaling_efficiency") for row in results.summarize(recs)}
    return df["run_id"].map(eff).astype(float)


def frame(sweep: str | None = None) -> pd.DataFrame:
    """All runs (of one sweep) with the grid's columns, raw values; cached until a run record changes."""
    full = data.get().runs_frame()
    key = (id(full), sweep or "")
    with _lock:
        hit = _cache.get("frame")
        if hit and hit[0] == key:
            return hit[1]
    df = full
    if sweep and "sweep_id" in df.columns:
        df = df[df["sweep_id"] == sweep]
    df = df.copy()
    if len(df) and "metrics.throughput" in df.columns and "settings.world_size" in df.columns:
        df["metrics.scaling_efficiency"] = _efficiency(df)
    settings = [c for c in df.columns if c.startswith("settings.")]
    varying = [
        c for c in settings if c in ("settings.world_size", "settings.workload") or df[c].astype(str).nunique() > 1
    ]
    key = sorted(
        KEY_METRICS,
        key=lambda k: results.LS_PRIORITY.index(k) if k in results.LS_PRIORITY else len(results.LS_PRIORITY),
    )
    names = key + [m for m in GRID_EXTRA if m not in KEY_METRICS]
    metrics = [f"metrics.{m}" for m in names if f"metrics.{m}" in df.columns and df[f"metrics.{m}"].notna().any()]
    if "run_id" in df.columns:
        df["steady"] = df["run_id"].map(_steadiness())
        df["finding"] = None  # filled per shown page (rows): it reads each run's advice table
    lead = [c for c in LEAD_COLUMNS if c in df.columns]
    cols = lead + varying + metrics + [c for c in TAIL_COLUMNS if c in df.columns]
    out = df[cols].reset_index(drop=True)
    for c in varying:  # settings can be lists/dicts; the grid shows them as text
        if out[c].dtype == object:
            out[c] = out[c].map(lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else str(v))
    with _lock:
        _cache["frame"] = (key, out)
    return out


def _steadiness() -> dict:
    """run id -> "yes", "⚠ " and why not (the reasons `perfbench show` prints), or None when the run has no
    steadiness figures (imports, failed runs)."""
    out = {}
    for rec in data.get().runs():
        m = rec.get("metrics") or {}
        why = unsteady_reasons(m)
        out[rec["run_id"]] = ("⚠ " + "; ".join(why)) if why else ("yes" if m.get("step_time_cv") is not None else None)
    return out


def top_finding(run_id: str) -> str | None:
    """The run's top finding as the grid shows it: the first root of its stored advice (ranked by gain) and its
    gain per step, e.g. "exposed communication ~90 ms/step"; None without advice."""
    adv = data.get().table(run_id, "advice")
    if adv is None or adv.empty or "rule" not in adv.columns:
        return None
    roots = adv[adv["symptom_of"].isna()] if "symptom_of" in adv.columns else adv
    top = (roots if len(roots) else adv).iloc[0]
    text = str(top["rule"]).replace("_", " ")
    gain = top.get("gain_ms")
    if gain is not None and not pd.isna(gain):
        text += f" ~{format_value('ms', gain / 1000)} ms/step"
    return text


def shown_number(col: str, s: pd.Series) -> pd.Series:
    """A column as the number the grid shows (seconds -> ms, shares -> %), NaN where not a number."""
    n = pd.to_numeric(s, errors="coerce")
    name = col[8:] if col.startswith("metrics.") else None
    if name in METRICS:
        n = n * DISPLAY_SCALE.get(METRICS[name].fmt, 1.0)
    return n


_PART = re.compile(r"^\s*\{(?P<col>[^}]+)\}\s*(?P<op>[a-z]*\s*(?:<=|>=|!=|<|>|=)|[a-z]+)\s*(?P<val>.*?)\s*$")
_WORDS = {
    "eq": "=",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "contains": "contains",
    "icontains": "contains",
    "scontains": "contains",
    "datestartswith": "contains",
}


def parse_filter(query: str | None) -> list[tuple[str, str, str]]:
    """DataTable's filter_query (`{col} > 2 && {status} contains ok`) -> [(column, op, value)]."""
    out = []
    for part in (query or "").split(" && "):
        if not part.strip():
            continue
        m = _PART.match(part)
        if not m:
            raise ValueError(f"cannot read the filter {part!r}")
        op = m.group("op").strip()
        op = _WORDS.get(op, op.lstrip("si").strip())  # s=, i= ... (case modifiers) compare the same here
        val = m.group("val")
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"`":
            val = val[1:-1]
        out.append((m.group("col"), op, val))
    return out


def apply_filter(df: pd.DataFrame, query: str | None) -> pd.DataFrame:
    keep = np.ones(len(df), dtype=bool)
    for col, op, val in parse_filter(query):
        if col not in df.columns:
            continue
        text = df[col].map(lambda v, c=col: str(cell_text(c, v))).str.lower()
        try:
            x = float(val.rstrip("%").replace("ms", "").strip())
        except ValueError:
            x = None
        n = shown_number(col, df[col])
        if op == "contains" or (x is None and op == "="):
            hit = text.str.contains(val.lower(), regex=False) if op == "contains" else text == val.lower()
            if op == "contains" and x is not None and n.notna().any():  # "2" in a number column: equal to 2
                hit = (n == x) | (text == val.lower())
        elif x is None:
            hit = text != val.lower() if op == "!=" else pd.Series(False, index=df.index)
        else:
            hit = {"=": n == x, "!=": n != x, "<": n < x, "<=": n <= x, ">": n > x, ">=": n >= x}[op]
        keep &= hit.fillna(False).to_numpy(dtype=bool)
    return df[keep]


def apply_sort(df: pd.DataFrame, sort_by: list[dict] | None) -> pd.DataFrame:
    sort_by = [s for s in (sort_by or []) if s.get("column_id") in df.columns]
    if not sort_by:
        return df
    keys = []
    for s in sort_by:
        n = pd.to_numeric(df[s["column_id"]], errors="coerce")
        keys.append(n if n.notna().any() else df[s["column_id"]].astype(str))
    order = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)}, index=df.index)
    order = order.sort_values(
        list(order.columns),
        ascending=[s.get("direction") != "desc" for s in sort_by],
        kind="stable",
        na_position="last",
    )
    return df.loc[order.index]


def _interval_ends(run_ids: pd.Series, cols: list[str]) -> dict:
    """{(run id, estimate column): (low, high)} of the given runs, from the run records (None when unknown)."""
    full = data.get().runs_frame()
    if "run_id" not in full.columns:
        return {}
    full = full[full["run_id"].isin(set(run_ids))]

    def num(v):
        return None if v is None or pd.isna(v) else float(v)

    return {
        (r["run_id"], c): (num(r.get(f"{c}_low")), num(r.get(f"{c}_high")))
        for r in full.to_dict("records")
        for c in cols
    }


def rows(df: pd.DataFrame) -> list[dict]:
    """Rows as the grid shows them: formatted text, a link to the run, `id` = run id (for ticking). A run's
    estimates of its own cost (SELF_ESTIMATES) are shown as `show` prints them: with their interval, or "below what
    this run can resolve", never as a bare negative cost (their raw values still sort and filter)."""
    out = []
    cols = list(df.columns)
    estimates = [f"metrics.{n}" for n in SELF_ESTIMATES if f"metrics.{n}" in cols]
    ends = _interval_ends(df["run_id"], estimates) if estimates and "run_id" in cols else {}
    for rec in df.itertuples(index=False, name=None):
        raw = dict(zip(cols, rec))
        row = {c: cell_text(c, v) for c, v in raw.items()}
        rid = row.get("run_id")
        for col in estimates:
            v = raw[col]
            if v is not None and not pd.isna(v):
                row[col] = resolved(float(v), *ends.get((rid, col), (None, None)))
        row["id"] = rid
        row["open"] = f"[open](/run/{rid})"
        if "finding" in cols:
            row["finding"] = top_finding(rid) or "-"
        out.append(row)
    return out


def query(sweep: str | None, filter_query: str | None, sort_by, page: int, page_size: int):
    """(rows of the page, number of pages, matching runs, all runs, the filtered frame)."""
    df = frame(sweep)
    f = apply_sort(apply_filter(df, filter_query), sort_by)
    pages = max(1, -(-len(f) // page_size))
    page = min(max(int(page or 0), 0), pages - 1)
    return rows(f.iloc[page * page_size : (page + 1) * page_size]), pages, len(f), len(df), f
