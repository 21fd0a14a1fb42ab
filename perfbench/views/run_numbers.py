"""The numbers of one run's report, shaped for reading: a cell formatted by its column's unit, the key numbers with
the steps each is over, the step's story, and the analysis tables cut down to what `show`, `perfbench report` and
the dashboard's run page print (per-rank breakdown shares, top collectives, traffic classes, pipeline stages, expert
load, flagged rows, what holds the memory peak). No rendering here: perfbench/views/run_report.py prints them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analyzers.analyses.experts import EXPERT_COLUMNS
from analyzers.analyses.steadiness import SELF_ESTIMATES, resolved
from analyzers.catalogue import ADDING_PARTS, BREAKDOWN_TOTAL, KEY_METRICS, METRICS, format_value, unit_label
from analyzers.schema import BREAKDOWN_PARTS, STEP_SHARE_PARTS

#: the share of the step each part of the breakdown takes, shown next to its time
_PART_LABELS = {"computing": "compute", "communication_not_overlapped": "exposed comm"}
BREAKDOWN = tuple((f"{p}_us", _PART_LABELS.get(p, p)) for p in STEP_SHARE_PARTS)
#: text columns whose cells are values that must not wrap ("8.87 ms (6.5%)")
NO_WRAP = tuple(col for col, _ in BREAKDOWN)


#: run-level times that are parts of the step, shown with their share of it
STEP_PARTS = tuple(f"{p}_s" for p in BREAKDOWN_PARTS) + ("exposed_p2p_s", "exposed_collective_s")


def missing(v) -> bool:
    """None, NaN or pandas' missing markers."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def cell(column: str, v: Any) -> str:
    """One table cell, by its column's unit suffix: *_us and *_ms as ms, *_gbps as GB/s, ratios as %."""
    if missing(v):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if column.endswith("_us"):
        return f"{f / 1000:.2f} ms"
    if column.endswith("_ms"):
        return f"{f:.2f} ms"
    if column.endswith("_gbps"):
        return f"{f:.2f} GB/s"
    if column.endswith("bytes"):
        return format_value("bytes", f)
    if column.endswith("_mb"):
        return f"{f:.1f} MB"
    if column.endswith(("ratio", "share", "_fraction")):
        return format_value("pct", f)
    if f.is_integer() and abs(f) < 1e12:
        return str(int(f))
    return f"{f:.3g}"


INTERVAL_ENDS = tuple(f"{n}_{end}" for n in SELF_ESTIMATES for end in ("low", "high"))


#: how the Key numbers name a metric's basis (analyzers.catalogue.BASES)
BASIS_SHORT = {"measured": "measured steps", "profiled": "profiled steps", "run": "run"}


def breakdown_step(m: dict) -> float | None:
    """The step the breakdown parts are shares of (catalogue breakdown_step_s); for runs stored before it
    existed, the sum of the parts that add up to it (computing + exposed comm + free)."""
    v = m.get(BREAKDOWN_TOTAL)
    if not missing(v) and v:
        return float(v)
    parts = [m.get(p) for p in ADDING_PARTS]
    if any(missing(p) for p in parts):
        return None
    total = float(sum(parts))
    return total or None


def step_story(m: dict) -> str | None:
    """One line: the unprofiled step, the profiler's cost, the profiled step the breakdown splits."""
    step, prof = m.get("step_time_s"), breakdown_step(m)
    if missing(step) or prof is None:
        return None
    over = m.get("profiler_overhead")
    if not missing(over) and m.get("measured_steps"):
        return (
            f"step {format_value('ms', step)} ms (unprofiled, slowest rank) -> profiler cost "
            f"{format_value('pct', over)} -> the breakdown splits the profiled step: "
            f"{format_value('ms', prof)} ms (mean over ranks)"
        )
    return (
        f"step {format_value('ms', step)} ms (slowest rank); the breakdown splits the ranks' mean step: "
        f"{format_value('ms', prof)} ms (profiled steps)"
    )


def input_problem_lines(rec: dict) -> list[str]:
    """One line per rank and input it had but could not use (the record's input_problems, written by `perfbench
    analyze`), with what was recomputed instead; else the record's warnings about files."""
    probs = rec.get("input_problems") or []
    if probs:
        return [
            f"rank {p.get('rank')}: {p.get('file')} {p.get('problem')}"
            + (f" ({p['detail']})" if p.get("detail") else "")
            + (f"; {p['recomputed']}" if p.get("recomputed") else "; the numbers use the rank's other files")
            for p in probs
        ]
    return [str(w) for w in rec.get("warnings") or []]


def key_numbers(rec: dict, row: dict) -> list[tuple[str, str, str, str]]:
    """(label, value with unit, which steps it is over, definition) for the lead metrics, then every other known
    metric of the run. A breakdown part's share is of the profiled step it splits (catalogue breakdown_step_s)."""
    m = dict(rec.get("metrics") or {})
    m["scaling_efficiency"] = row.get("scaling_efficiency")
    step = breakdown_step(m)
    if step is not None and missing(m.get(BREAKDOWN_TOTAL)):
        m[BREAKDOWN_TOTAL] = step
    out = []
    lead = [*KEY_METRICS[:2], BREAKDOWN_TOTAL, *KEY_METRICS[2:]]
    names = lead + [k for k in m if k not in lead]
    for name in names:
        v = m.get(name)
        if name not in METRICS or missing(v) or name in INTERVAL_ENDS:
            continue
        meta = METRICS[name]
        unit = unit_label(name)
        text = format_value(name, v) + ("" if unit in ("", "%") else f" {unit}")
        if name in SELF_ESTIMATES:  # never a bare negative cost: with its interval, or "below what ... resolve"
            text = resolved(v, m.get(f"{name}_low"), m.get(f"{name}_high"))
        if name in STEP_PARTS and step:
            inside = ", within compute" if name == "overlapped_s" else ""
            text += f"  ({format_value('pct', v / step)} of profiled step{inside})"
        out.append((meta.label, text, BASIS_SHORT.get(meta.basis, meta.basis), meta.definition))
    return out


def rank_breakdown(df: pd.DataFrame) -> pd.DataFrame:
    """Per rank: each part in ms and as a share of the rank's step."""
    out = pd.DataFrame({"rank": df["rank"]})
    if "stage" in df and df["stage"].notna().any():
        out["stage"] = df["stage"]
    out["step_us"] = df["step_us"]
    if "source" in df and df["source"].nunique(dropna=False) > 1:
        out["source"] = df["source"].map({"profiler": "profiler's own", "recomputed": "recomputed"}).fillna("-")
    for col, _label in BREAKDOWN:
        if col in df:
            share = df[col] / df["step_us"].where(df["step_us"] > 0)
            out[col] = [
                f"{cell(col, v)} ({format_value('pct', s)})" if not missing(v) else "-" for v, s in zip(df[col], share)
            ]
    return out


def top_collectives(comm: pd.DataFrame, top: int) -> pd.DataFrame:
    """The collectives that took the most time, summed over ranks and steps."""
    g = comm.assign(name=comm["op_name"].astype(str).str.rsplit("/", n=1).str[-1]).groupby(
        ["op_type", "name"], dropna=False
    )
    agg = {"calls": ("rank", "size"), "total_elapse_ms": ("elapse_ms", "sum"), "mean_elapse_ms": ("elapse_ms", "mean")}
    for col, how in (("size_bytes", "mean"), ("busbw_gbps", "median"), ("wait_ratio", "mean"), ("group_size", "max")):
        if col in comm:
            agg[col] = (col, how)
    return g.agg(**agg).reset_index().sort_values("total_elapse_ms", ascending=False).head(top)


def traffic_classes(classes: pd.DataFrame | None, exposure: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per traffic class (analyzers.analyses.parallel_groups.COMM_CLASSES; "unclassified" where nothing says), the mean
    over ranks and steps of the collectives per rank-step: count, bytes, time, and the part no compute overlaps."""
    if classes is None or classes.empty or "comm_class" not in classes:
        return None
    name = classes["comm_class"].astype(object).where(classes["comm_class"].notna(), "unclassified")
    per = (
        classes.assign(comm_class=name)
        .groupby("comm_class")
        .agg(ops=("ops", "mean"), size_bytes=("size_bytes", "mean"), elapse_ms=("elapse_ms", "mean"))
    )
    if exposure is not None and not exposure.empty and "exposed_us" in exposure:
        ename = exposure["comm_class"].astype(object).where(exposure["comm_class"].notna(), "unclassified")
        per["exposed_us"] = exposure.assign(comm_class=ename).groupby("comm_class")["exposed_us"].mean()
    return per.reset_index().sort_values("elapse_ms", ascending=False)


def pipeline_stages(pipe: pd.DataFrame) -> pd.DataFrame:
    """Per stage, medians over steps: window, busy, bubble (and its share) next to the ideal (S-1)/(M+S-1)."""
    cols = [
        c
        for c in (
            "ranks",
            "window_us",
            "busy_us",
            "bubble_us",
            "bubble_fraction",
            "ideal_fraction",
            "excess_fraction",
            "micro_batches",
        )
        if c in pipe
    ]
    return pipe.groupby("stage")[cols].median(numeric_only=True).reset_index()


def experts(exp: pd.DataFrame) -> pd.DataFrame:
    """Expert load, medians over steps."""
    cols = [c for c in EXPERT_COLUMNS if c not in ("step", "ranks", "busiest_expert") and c in exp]
    return exp[cols].median(numeric_only=True).to_frame().T


def flagged(df: pd.DataFrame | None, col: str = "slow") -> tuple[pd.DataFrame, int]:
    if df is None or df.empty or col not in df:
        return pd.DataFrame(), 0 if df is None else len(df)
    return df[df[col].fillna(False).astype(bool)], len(df)


def peak_holders(attr: pd.DataFrame | None, mem: pd.DataFrame | None) -> tuple[int | None, pd.DataFrame]:
    """The rank with the largest peak and what holds it (analyzers/analyses/memory.py memory_attribution), largest
    first."""
    if attr is None or attr.empty or mem is None or mem.empty:
        return None, pd.DataFrame()
    peaks = pd.to_numeric(mem["peak_bytes"], errors="coerce")
    rank = int(mem.loc[peaks.idxmax(), "rank"]) if peaks.notna().any() else int(attr["rank"].iloc[0])
    rows = attr[attr["rank"] == rank].sort_values("bytes", ascending=False)
    return rank, rows
