"""The `perfbench analyze --json` document (schema in docs/analyzers.md, "The --json document").

    {
      "schema": "perfbench.analyze/1",
      "source": {"path", "format", "ranks" (ranks analyzed), "producer", "reference" (what the profiler's
                 own breakdown was read from, e.g. ["step_trace_time.csv"])},
      "warnings": ["<file>: <problem>", ...] (a missing or damaged file on some rank; the rank is analyzed
                  with what it has),
      "summary": {...run metrics...},
      "ranks": [{"rank", "stage" (pipeline stage, null when unknown), "inputs" (files read), "input_problems"
                 ([{"file", "problem": "empty" | "unreadable", "detail"}]: files the rank has but could not use),
                 "recomputed" (what was recomputed instead, null when nothing), "steps": [{"step",
      "step_us", "computing_us", "communication_us",
                 "communication_not_overlapped_us", "overlapped_us", "free_us", "preparing_us",
                 "bubble_us", "stage_us"}],
                 "peak_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes",
                 "peak_process_bytes", "peak_rss_bytes", "allocator", "peak_at_us" (memory; null when unknown),
                 "module_peak_bytes": {"HCCL": bytes, ...}, "live_at_peak": [{"name", "size_bytes", "alloc_us",
                 "release_us"}] (largest 50)}],
      "memory": [... the memory table, one row per rank ...], "memory_attribution": [{"rank", "part", "bytes",
                 "share", "source"}],
      "communication": [{"rank", "step", "op_name", "op_type", "group", "group_size", "elapse_ms",
                         "transit_ms", "wait_ms", "synchronization_ms", "idle_ms", "wait_ratio",
                         "size_bytes", "algbw_gbps", "busbw_gbps", "bandwidth": {"HCCS": GB/s, ...},
                         "transit_mb": {"HCCS": MB, ...}}],
      "links": [{"step", "op_name", "group", "src", "dst" (global ranks; null when unknown), "src_local",
                 "dst_local" (the group-local numbers the profiler wrote), "transport", "size_mb", "time_ms",
                 "bandwidth_gbps"}],
      "link_totals": [... msprof-analyze's "Total Op Info" per step, group and global src->dst ...],
      "stages": [{"stage", "ranks", "computing_ms", "computing_ratio", ...}], "comm_exposure": [...],
      "rank_imbalance": [...],
      "kernels": [... top 20 rows of the kernels table ...],
      "reconciliation": [{"rank", "step", "metric", "computed_us", "reference_us", "diff_us", "rel_diff"}],
      "cluster_check": [{"kind", "rank", "step", "item", "perfbench", "msprof_analyze", "diff", "rel_diff",
                         "source"}] (only when msprof-analyze's output sat beside the rank folders),
      "slow_ranks": [...], "slow_links": [...], "advice": [{"rule", "severity", "message", "evidence",
                                                            "ranks": [global ranks], "stage"}]
    }

NaN becomes null.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analyzers.analyze import Analysis
from analyzers.schema import COMM_OPS, LINKS, STEP_BREAKDOWN, Profile

SCHEMA = "perfbench.analyze/1"
#: a step's breakdown fields: the schema's step_breakdown columns
STEP_FIELDS = [c for c in STEP_BREAKDOWN if c not in ("rank", "step")]
#: a collective's fields: the schema's comm_ops columns, with the collectives analysis's wait_ratio before the
#: payload and its bandwidths after it
COMM_FIELDS = [
    *(c for c in COMM_OPS if c != "size_bytes"),
    "wait_ratio",
    "size_bytes",
    "algbw_gbps",
    "busbw_gbps",
]


def clean(v):
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def values(s: pd.Series) -> list:
    """A column as JSON-ready Python values (what `clean` gives for each), converted a column at a time."""
    kind = s.dtype.kind if isinstance(s.dtype, np.dtype) else None
    if kind in ("i", "u", "b"):
        return s.to_numpy().tolist()
    if kind == "f":
        a = s.to_numpy()
        out = a.tolist()
        for i in np.flatnonzero(~np.isfinite(a)):
            out[i] = None
        return out
    if kind is None:  # extension arrays (Int64, boolean, str): Python scalars or a missing marker
        out = s.tolist()
        for i in np.flatnonzero(s.isna().to_numpy()):
            out[i] = None
        if not (
            pd.api.types.is_string_dtype(s.dtype)
            or pd.api.types.is_integer_dtype(s.dtype)
            or pd.api.types.is_bool_dtype(s.dtype)
        ):
            out = [clean(v) for v in out]
        return out
    return [v if type(v) is str else clean(v) for v in s.tolist()]


def records(df: pd.DataFrame | None, cols: list[str] | None = None, limit: int | None = None) -> list[dict]:
    if df is None or not len(df):
        return []
    if cols is not None:
        df = df[[c for c in cols if c in df.columns]]
    if limit is not None:
        df = df.head(limit)
    keys = list(df.columns)
    return [dict(zip(keys, row)) for row in zip(*(values(df.iloc[:, i]) for i in range(df.shape[1])))]


def rank_inputs(profile: Profile) -> dict[int, list[str]]:
    """{rank: [files it was read from]} for every rank of the profile (`ranks.inputs`, comma-separated)."""
    rk = profile.ranks
    if rk is None or not len(rk):
        return {}
    col = rk["inputs"] if "inputs" in rk.columns else [None] * len(rk)
    return {
        int(r): [x.strip() for x in str(i).split(",") if x.strip()] if isinstance(i, str) else []
        for r, i in zip(rk["rank"], col)
    }


#: memory fields on each `ranks[]` entry (analyzers/analyses/memory.py; null where the rank's files lack memory data)
MEMORY_FIELDS = [
    "peak_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_active_bytes",
    "peak_process_bytes",
    "peak_rss_bytes",
    "allocator",
    "peak_at_us",
]
LIVE_LIMIT = 50  # allocations live at the peak listed per rank (largest first; the `memory_live` table has all)


def rank_input_problems(profile: Profile) -> dict[int, list[dict]]:
    """{rank: [{"file", "problem": "empty" | "unreadable", "detail"}]}: the inputs a rank had but could not use
    (the parsers' meta["input_problems"]); ranks without problems are left out."""
    per = (profile.meta or {}).get("rank_meta") or {}
    if not per and len(profile.ranks):  # one part: its meta is the profile's
        per = {int(r): profile.meta for r in profile.ranks["rank"]}
    return {int(r): list(m.get("input_problems")) for r, m in per.items() if m and m.get("input_problems")}


def recomputed_note(rank: dict) -> str | None:
    """What was recomputed for a rank because an input was missing or damaged, or None."""
    bad = {p["file"] for p in rank.get("input_problems") or []}
    if rank.get("breakdown_source") == "recomputed" and "step_trace_time.csv" in bad:
        return "step breakdown recomputed from the kernels (the profiler's own step trace unusable)"
    if "kernel_details.csv" in bad:
        return "kernels from trace_view.json where read, else unknown"
    return None


def communication(profile: Profile, co: pd.DataFrame | None) -> list[dict]:
    """`communication[]`: each collective (COMM_FIELDS) with its bandwidth and transit MB per transport."""
    comm: list[dict] = []
    if co is not None and len(co):
        bw = profile.comm_bandwidth
        bw_map: dict = {}
        if bw is not None and len(bw):
            for row in bw.itertuples(index=False):
                k = (int(row.rank), None if pd.isna(row.step) else int(row.step), row.op_name)
                d = bw_map.setdefault(k, ({}, {}))
                d[0][row.transport] = clean(row.bandwidth_gbps)
                d[1][row.transport] = clean(row.size_mb)
        for rec in records(co, COMM_FIELDS):
            k = (rec["rank"], rec["step"], rec["op_name"])
            b, s = bw_map.get(k, ({}, {}))
            rec["bandwidth"] = b
            rec["transit_mb"] = s
            comm.append(rec)
    return comm


def build_document(profile: Profile, analysis: Analysis) -> dict:
    t = analysis.tables
    sb = t.get("step_breakdown")
    ranks = []
    check = {int(r["rank"]): r for r in records(t.get("rank_check"))}
    stage_of = {int(r["rank"]): r.get("stage") for r in records(t.get("rank_stages"))}
    by_rank: dict[int, list] = {}
    if sb is not None and len(sb):  # column by column, one dict per step (a cluster has ranks x steps of them)
        sb = sb.sort_values(["rank", "step"], kind="stable")
        cols = [values(sb[f]) if f in sb.columns else [None] * len(sb) for f in STEP_FIELDS]
        for r, st, *vals in zip(values(sb["rank"]), values(sb["step"]), *cols):
            by_rank.setdefault(int(r), []).append({"step": int(st), **dict(zip(STEP_FIELDS, vals))})
    inputs = rank_inputs(profile)
    problems = rank_input_problems(profile)
    mem = {int(m["rank"]): m for m in records(t.get("memory"))}
    mods: dict[int, dict] = {}
    for m in records(t.get("memory_modules")):
        mods.setdefault(int(m["rank"]), {})[m["module"]] = m["peak_bytes"]
    live: dict[int, list] = {}
    for m in records(t.get("memory_live")):
        live.setdefault(int(m.pop("rank")), []).append(m)
    for r in sorted(set(by_rank) | set(inputs)):  # every rank analyzed, also one whose breakdown is unknown
        c = check.get(r, {})
        ranks.append(
            {
                "rank": r,
                "stage": stage_of.get(r),
                "inputs": inputs.get(r, []),
                "input_problems": problems.get(r, []),
                "breakdown_source": c.get("breakdown_source"),
                "consistent": c.get("consistent"),
                "cross_check_max_rel_diff": c.get("max_rel_diff"),
                "cross_check_note": c.get("reason"),
                "steps": by_rank.get(r, []),
                **{f: mem.get(r, {}).get(f) for f in MEMORY_FIELDS},
                "module_peak_bytes": mods.get(r),
                "live_at_peak": live.get(r, [])[:LIVE_LIMIT] if r in live else None,
            }
        )
        ranks[-1]["recomputed"] = recomputed_note(ranks[-1])
    doc = {
        "schema": SCHEMA,
        "source": {
            "path": profile.path,
            "format": profile.source,
            "ranks": len(ranks),
            "producer": profile.meta.get("producer"),
            "reference": list(profile.meta.get("reference_sources") or []),
        },
        "summary": clean(analysis.summary),
        "ranks": ranks,
        "communication": communication(profile, t.get("comm_ops")),
        "links": records(
            t.get("links"),
            [*LINKS, "rank", "src_local", "dst_local"],
        ),
        "link_totals": records(t.get("link_totals")),
        "stages": records(t.get("stages")),
        "comm_exposure": records(t.get("comm_exposure")),
        "rank_imbalance": records(t.get("rank_imbalance")),
        "kernels": records(t.get("kernels"), limit=20),
        "memory": records(t.get("memory")),
        "memory_attribution": records(t.get("memory_attribution")),
        "reconciliation": records(t.get("reconciliation")),
        "cluster_check": records(t.get("cluster_check")),
        "slow_ranks": records(t.get("slow_ranks")),
        "slow_links": records(t.get("slow_links")),
        "advice": records(t.get("advice")),
        "warnings": list(getattr(analysis, "warnings", []) or []),
        "skipped_analyses": dict(getattr(analysis, "skipped", {}) or {}),
    }
    return doc


def dumps(doc: dict) -> str:
    """The document as indented JSON (orjson: ~10x faster than json on a many-rank document)."""
    return dumps_bytes(doc).decode()


def write_document(doc: dict, out) -> None:
    """`dumps_bytes(doc, newline=True)` written to the binary stream `out` one top-level key at a time: the same
    bytes, with one key's text in memory at once instead of the whole document's (~520 MB at 4,096 ranks)."""
    if not doc:
        out.write(dumps_bytes(doc, newline=True))
        return
    out.write(b"{\n")
    last = len(doc) - 1
    for i, (k, v) in enumerate(doc.items()):
        chunk = dumps_bytes({k: v})  # b'{\n  "k": ...\n}': the key at the document's indentation
        out.write(memoryview(chunk)[2:-2])
        out.write(b",\n" if i < last else b"\n")
        del chunk
    out.write(b"}\n")


def dumps_bytes(doc: dict, newline: bool = False) -> bytes:
    """`dumps` as UTF-8 bytes (`newline`: with a trailing newline), the form written out: a 1,024-rank document is
    ~130 MB, and its text made into a str, extended by a newline and encoded again held four copies at once."""
    import orjson

    def default(o):
        if isinstance(o, set):
            return sorted(o)
        v = clean(o)
        if v is o:
            return str(o)
        return v

    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | (orjson.OPT_APPEND_NEWLINE if newline else 0)
    try:
        return orjson.dumps(doc, default=default, option=option)
    except TypeError:  # e.g. a NaN float that escaped clean(): orjson writes it as null, json as NaN
        text = json.dumps(doc, indent=2, default=lambda o: clean(o) if not isinstance(o, (set,)) else sorted(o))
        return (text + "\n" if newline else text).encode()
