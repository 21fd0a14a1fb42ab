"""What `perfbench show RUN` prints: the verdict first, then the numbers behind it, as formatted tables.

Views only look: every number comes from the run record or a stored analysis table, every run-level
metric is labelled and formatted by the metric catalogue (analyzers/catalogue.py). Nothing is cut:
long text wraps; `--json` (perfbench/commands/show.py) has every row of every table.
"""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from analyzers.analyses.experts import EXPERT_COLUMNS
from analyzers.analyses.steadiness import SELF_ESTIMATES, resolved, unsteady_reasons
from analyzers.catalogue import ADDING_PARTS, BREAKDOWN_TOTAL, KEY_METRICS, METRICS, format_value, unit_label
from analyzers.schema import BREAKDOWN_PARTS, STEP_SHARE_PARTS
from perfbench.views.results import dropped_note, fit_columns

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
#: the share of the step each part of the breakdown takes, shown next to its time
_PART_LABELS = {"computing": "compute", "communication_not_overlapped": "exposed comm"}
BREAKDOWN = tuple((f"{p}_us", _PART_LABELS.get(p, p)) for p in STEP_SHARE_PARTS)
#: text columns whose cells are values that must not wrap ("8.87 ms (6.5%)")
NO_WRAP = tuple(col for col, _ in BREAKDOWN)


#: run-level times that are parts of the step, shown with their share of it
STEP_PARTS = tuple(f"{p}_s" for p in BREAKDOWN_PARTS) + ("exposed_p2p_s", "exposed_collective_s")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def cell(column: str, v: Any) -> str:
    """One table cell, by its column's unit suffix: *_us and *_ms as ms, *_gbps as GB/s, ratios as %."""
    if _missing(v):
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


def table(df: pd.DataFrame, columns: dict[str, str], title: str, max_rows: int | None = None, width: int | None = None):
    """A rich Table of `df`'s `columns` (name -> heading, in priority order), all-empty columns left out, cells
    formatted. `width`: the last columns are left out until it fits (said in its caption); numbers never wrap."""

    cols = {c: h for c, h in columns.items() if c in df.columns and not df[c].map(_missing).all()}
    rows = df if max_rows is None else df.head(max_rows)
    recs = rows.to_dict("records")

    def build(keep: list[str]):
        t = Table(title=title, title_justify="left", title_style="bold")
        for c in keep:
            numeric = pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
            whole = numeric or c in NO_WRAP
            t.add_column(cols[c], justify="right" if numeric else "left", overflow="fold", no_wrap=whole)
        for rec in recs:
            t.add_row(*[cell(c, rec.get(c)) for c in keep])
        return t

    t, dropped = fit_columns(build, list(cols), width, keep=2)
    if dropped:
        t.caption = dropped_note([cols[c] for c in dropped], "--wide, or --json")
        t.caption_justify = "left"
    return t


def ordered_advice(advice: pd.DataFrame | None) -> list[dict]:
    """The advice table as records in its ranked order (analyzers.analyses.advice: roots by gain, each root's
    symptoms after it). Runs stored before gains existed have no `symptom_of`: most severe first, all roots."""
    if advice is None or advice.empty:
        return []

    def plain(v):
        if hasattr(v, "tolist"):  # a list column read back from parquet is a numpy array
            return v.tolist()
        return None if _missing(v) else v

    recs = [{k: plain(v) for k, v in r.items()} for r in advice.to_dict("records")]
    for r in recs:  # the store keeps a list column as its JSON text
        if isinstance(r.get("ranks"), str) and r["ranks"].startswith("["):
            r["ranks"] = json.loads(r["ranks"])
    if "symptom_of" in advice.columns:
        return recs
    return [
        dict(r, symptom_of=None, gain_ms=None, gain_share=None)
        for r in sorted(recs, key=lambda r: SEVERITY_ORDER.get(str(r.get("severity")), 9))
    ]


def advice_tree(recs: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(root, its symptoms) in rank order."""
    roots = [(r, []) for r in recs if not r.get("symptom_of")]
    by_id = {r.get("id"): kids for r, kids in roots}
    for r in recs:
        if r.get("symptom_of") and r["symptom_of"] in by_id:
            by_id[r["symptom_of"]].append(r)
    return roots


def gain_text(rec: dict) -> str:
    """'saves ~12.3 ms/step (7% of the step)' or 'gain unknown'."""
    g = rec.get("gain_ms")
    if g is None:
        return "gain unknown"
    share = rec.get("gain_share")
    return f"saves ~{g:.3g} ms/step" + (f" ({format_value('pct', share)} of the step)" if share is not None else "")


def try_text(rec: dict) -> str:
    t = rec.get("try")
    if not t:
        return ""
    knobs = ", ".join(f"{k}={v}" for k, v in json.loads(t).items())
    pred = rec.get("predicted_step_ms")
    return f"try {knobs}" + (f" (predicted step {pred:.4g} ms)" if pred is not None else "")


def print_advice(
    console, recs: list[dict], show_all: bool = False, max_roots: int = 5, skip_first: bool = False
) -> None:
    """The ranked advice: each root with its gain, basis, knob and evidence, its symptoms indented under it;
    at most `max_roots` roots unless show_all."""
    tree = advice_tree(recs)
    shown = tree if show_all else tree[:max_roots]
    for i, (root, kids) in enumerate(shown):
        if skip_first and i == 0:
            continue
        acc = (root.get("accuracy") or {}).get("text")  # perfbench advise: the rule's measured accuracy
        head = f"{i + 1}. [{root.get('severity')}] {gain_text(root)}{f' ({acc})' if acc else ''}: {root['message']}"
        console.print(Padding(escape(head), (0, 0, 0, 2), expand=False), highlight=False)
        extra = [f"gain basis: {root['basis']}"] if root.get("basis") else []
        extra += [try_text(root)] if root.get("try") else []
        extra += [f"evidence: {root['evidence']}"] if root.get("evidence") else []
        for line in extra:
            console.print(Padding(f"[dim]{escape(line)}[/dim]", (0, 0, 0, 5), expand=False), highlight=False)
        for k in kids:
            console.print(
                Padding(
                    escape(f"- symptom ({k['rule']}, explained by the cause above): {k['message']}"),
                    (0, 0, 0, 5),
                    expand=False,
                ),
                highlight=False,
            )
    if len(tree) > len(shown):
        console.print(f"  [dim]{len(tree) - len(shown)} more finding(s) with smaller gains: --all shows them[/dim]")


INTERVAL_ENDS = tuple(f"{n}_{end}" for n in SELF_ESTIMATES for end in ("low", "high"))


#: how the Key numbers name a metric's basis (analyzers.catalogue.BASES)
BASIS_SHORT = {"measured": "measured steps", "profiled": "profiled steps", "run": "run"}


def breakdown_step(m: dict) -> float | None:
    """The step the breakdown parts are shares of (catalogue breakdown_step_s); for runs stored before it
    existed, the sum of the parts that add up to it (computing + exposed comm + free)."""
    v = m.get(BREAKDOWN_TOTAL)
    if not _missing(v) and v:
        return float(v)
    parts = [m.get(p) for p in ADDING_PARTS]
    if any(_missing(p) for p in parts):
        return None
    total = float(sum(parts))
    return total or None


def step_story(m: dict) -> str | None:
    """One line: the unprofiled step, the profiler's cost, the profiled step the breakdown splits."""
    step, prof = m.get("step_time_s"), breakdown_step(m)
    if _missing(step) or prof is None:
        return None
    over = m.get("profiler_overhead")
    if not _missing(over) and m.get("measured_steps"):
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
    if step is not None and _missing(m.get(BREAKDOWN_TOTAL)):
        m[BREAKDOWN_TOTAL] = step
    out = []
    lead = [*KEY_METRICS[:2], BREAKDOWN_TOTAL, *KEY_METRICS[2:]]
    names = lead + [k for k in m if k not in lead]
    for name in names:
        v = m.get(name)
        if name not in METRICS or _missing(v) or name in INTERVAL_ENDS:
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
                f"{cell(col, v)} ({format_value('pct', s)})" if not _missing(v) else "-" for v, s in zip(df[col], share)
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


def memory_section(console, tables: dict, width: int | None = None) -> None:
    """Per-rank memory peaks, then what holds the largest rank's peak (bytes and share)."""
    mem = tables.get("memory")
    if mem is None or mem.empty:
        return
    console.print()
    console.print(
        table(
            mem,
            {
                "rank": "rank",
                "peak_bytes": "peak",
                "peak_allocated_bytes": "allocated",
                "peak_reserved_bytes": "reserved",
                "peak_process_bytes": "process (device)",
                "peak_rss_bytes": "process RSS",
                "live_bytes": "live at peak",
                "capacity_bytes": "capacity",
            },
            "Memory per rank (peaks; - = unknown: the rank's files lack the data)",
            width=width,
        )
    )
    rank, rows = peak_holders(tables.get("memory_attribution"), mem)
    if rank is not None and len(rows):
        console.print(
            table(
                rows,
                {"part": "part", "bytes": "bytes", "share": "share", "source": "from"},
                f"What holds the peak (rank {rank}, the largest)",
                width=width,
            )
        )
    elif tables.get("memory_timeline") is None and mem["peak_bytes"].notna().any():  # imported in summary mode
        top = int(mem.loc[mem["peak_bytes"].idxmax(), "rank"])
        console.print(
            f"Per-rank memory detail (timeline, live allocations, what holds the peak): "
            f"perfbench show RUN --rank R (the largest peak: rank {top})"
        )


def header_section(console, rec: dict, short: str) -> None:
    """The run's name, status, settings, Slurm job, error, damaged inputs and steadiness."""
    status = rec.get("status")
    colour = {"ok": "green", "failed": "red"}.get(status, "yellow")
    console.print(
        f"[bold]{short}[/bold]  [{colour}]{status}[/{colour}]"
        + (f"  ({rec['run_id']})" if short != rec["run_id"] else "")
    )
    settings = rec.get("settings") or {}
    console.print(
        "  "
        + ", ".join(f"{k}={v}" for k, v in settings.items() if k != "repeat")
        + f", repeat {settings.get('repeat', 0)}; source: {rec.get('source')}",
        highlight=False,
    )
    job = rec.get("slurm")
    if job:  # launch.backend slurm: which job, on which nodes (perfbench.run.slurm)
        nodes = ", ".join(
            f"{n.get('slurm_node')} (node {n.get('node_rank')}, {n.get('status')})" for n in job.get("nodes") or []
        )
        console.print(
            f"  Slurm job {job.get('job_id')} {job.get('state', '')} on {job.get('nodelist') or '?'}"
            + (f": {nodes}" if nodes else ""),
            highlight=False,
            markup=False,
        )
    if rec.get("error"):
        console.print(f"\n[bold red]Failed:[/bold red] {escape(str(rec['error']))}", highlight=False)
        if rec.get("log_tail"):
            console.print("[dim]--- tail of the failing rank's log ---[/dim]")
            console.print(rec["log_tail"], markup=False, highlight=False)

    for line in input_problem_lines(rec):
        console.print(f"[bold yellow]Missing or damaged input:[/bold yellow] {escape(line)}", highlight=False)

    why = unsteady_reasons(rec.get("metrics") or {})
    if why:
        console.print(
            f"\n[bold yellow]Not steady enough to compare:[/bold yellow] {escape('; '.join(why))} "
            "(analyzers/analyses/steadiness.py; measure it again before comparing it with another run)",
            highlight=False,
        )


def verdict_section(console, advice: list[dict], status) -> None:
    """The first advice (the largest expected gain), or why there is none."""
    console.print("\n[bold]Verdict[/bold]")
    if advice:
        first = advice[0]
        console.print(
            Padding(f"[bold]{escape(str(first['message']))}[/bold]", (0, 0, 0, 2), expand=False), highlight=False
        )
        console.print(
            Padding(
                escape(
                    f"{gain_text(first)}"
                    + (f"; {try_text(first)}" if first.get("try") else "")
                    + (f" (basis: {first['basis']})" if first.get("basis") else "")
                ),
                (0, 0, 0, 2),
                expand=False,
            ),
            highlight=False,
        )
        if first.get("evidence"):
            console.print(
                Padding(f"[dim]evidence:[/dim] {escape(str(first['evidence']))}", (0, 0, 0, 2), expand=False),
                highlight=False,
            )
    elif status == "ok":
        console.print("  no advice rule fired: nothing stands out in this run's breakdown, collectives or ranks")
    else:
        console.print("  no analysis (the run did not finish)")


def key_numbers_section(console, rec: dict, row: dict) -> None:
    """The key numbers with the steps each is over, and the step's story."""
    numbers = key_numbers(rec, row)
    console.print()
    if numbers:
        t = Table(
            title="Key numbers", title_justify="left", title_style="bold", show_header=False, box=None, padding=(0, 2)
        )
        t.add_column("metric")
        t.add_column("value", justify="right")
        t.add_column("over", style="dim")
        for label, text, basis, _definition in numbers:
            t.add_row(label, text, basis)
        console.print(t)
        story = step_story(dict(rec.get("metrics") or {}))
        if story:
            console.print(Padding(escape(story), (0, 0, 0, 2), expand=False), highlight=False)
        console.print("  [dim]definitions and which steps each is over: perfbench metrics[/dim]")


def breakdown_section(console, tables: dict, width: int | None = None) -> None:
    """The per-rank step breakdown."""
    tbl = partial(table, width=width)

    bd = tables.get("rank_breakdown")
    if bd is not None and not bd.empty and "step_us" in bd:
        heads = {"rank": "rank", "stage": "stage", "source": "from", "step_us": "step"} | {c: h for c, h in BREAKDOWN}
        console.print()
        title = "Per-rank step breakdown (each part's median over profiled steps; step = their sum)"
        console.print(tbl(rank_breakdown(bd), heads, title))


def hot_ops_section(console, tables: dict, top: int, width: int | None = None) -> None:
    """Top kernels, top collectives and the collectives by traffic class."""
    tbl = partial(table, width=width)

    kern = tables.get("top_kernels")
    if kern is not None and not kern.empty:
        kern = kern.assign(name=kern["name"].astype(str).str.rsplit("/", n=1).str[-1])
        console.print(
            tbl(
                kern,
                {"name": "kernel", "total_us": "total", "mean_us": "mean", "count": "calls", "type": "type"},
                f"Top kernels (by total time, all ranks, top {top})",
                top,
            )
        )

    comm = tables.get("comm_ops")
    if comm is not None and not comm.empty and "elapse_ms" in comm:
        console.print(
            tbl(
                top_collectives(comm, top),
                {
                    "name": "collective",
                    "total_elapse_ms": "total",
                    "mean_elapse_ms": "mean",
                    "calls": "calls",
                    "size_bytes": "size",
                    "busbw_gbps": "bus bw",
                    "wait_ratio": "wait",
                    "op_type": "type",
                    "group_size": "ranks",
                },
                f"Top collectives (by total time, all ranks and steps, top {top})",
            )
        )

    title = "Collectives by traffic class (per rank and step, mean; profiled steps)"
    traffic_class_section(console, tables, title, width)


def traffic_class_section(console, tables: dict, title: str, width: int | None = None) -> None:
    """The collectives by traffic class (dp gradients, tensor parallel, pipeline p2p, expert dispatch), when known."""
    tc = traffic_classes(tables.get("comm_classes"), tables.get("comm_exposure_classes"))
    if tc is not None:
        heads = {
            "comm_class": "traffic class",
            "ops": "collectives",
            "size_bytes": "bytes",
            "elapse_ms": "time",
            "exposed_us": "not overlapped",
        }
        console.print(table(tc, heads, title, width=width))


def pipeline_section(console, tables: dict, width: int | None = None) -> None:
    """Pipeline stages and expert load."""
    tbl = partial(table, width=width)

    pipe = tables.get("pipeline")
    if pipe is not None and not pipe.empty and "stage" in pipe:
        console.print(
            tbl(
                pipeline_stages(pipe),
                {
                    "stage": "stage",
                    "ranks": "ranks",
                    "micro_batches": "M",
                    "window_us": "window",
                    "busy_us": "busy",
                    "bubble_us": "bubble",
                    "bubble_fraction": "bubble %",
                    "ideal_fraction": "ideal (S-1)/(M+S-1)",
                    "excess_fraction": "excess",
                },
                "Pipeline stages (median over steps; bubble = idle share of the stage's window)",
            )
        )
    exp = tables.get("experts")
    if exp is not None and not exp.empty:
        console.print(
            tbl(
                experts(exp),
                {
                    "experts": "experts",
                    "total_tokens": "tokens",
                    "min_load": "min load",
                    "max_load": "max load",
                    "mean_load": "mean load",
                    "max_mean_ratio": "max/mean",
                    "cv": "cv",
                    "dropped_tokens": "dropped",
                    "dropped_fraction": "dropped share",
                },
                "Expert load (median over steps)",
            )
        )


def flagged_section(console, tables: dict, width: int | None = None) -> None:
    """Slow ranks, slow links and rank imbalance: what the tests flagged."""
    tbl = partial(table, width=width)

    slow, tested = flagged(tables.get("slow_ranks"))
    if tested:
        console.print(
            f"\n[bold]Slow ranks[/bold]: {len(slow)} of {tested} rank tests flagged"
            + (" (a rank that arrives last at collectives significantly often)" if len(slow) else "")
        )
        if len(slow):
            console.print(
                tbl(
                    slow,
                    {
                        "group": "group",
                        "scope": "scope",
                        "op_name": "collective",
                        "rank": "rank",
                        "last_arrivals": "last arrivals",
                        "n_ops": "collectives",
                        "mean_lateness_ms": "mean lateness",
                        "test": "test",
                        "statistic": "statistic",
                        "critical": "critical",
                    },
                    "",
                )
            )
    links, tested = flagged(tables.get("slow_links"))
    if tested:
        console.print(f"[bold]Slow links[/bold]: {len(links)} of {tested} links flagged")
        if len(links):
            console.print(
                tbl(
                    links,
                    {
                        "kind": "kind",
                        "group": "group",
                        "transport": "transport",
                        "src": "src",
                        "dst": "dst",
                        "bandwidth_gbps": "bandwidth",
                        "group_mean_gbps": "group mean",
                        "ratio": "ratio",
                    },
                    "",
                )
            )
    imb, tested = flagged(tables.get("rank_imbalance"), "flagged")
    if tested:
        console.print(f"[bold]Rank imbalance[/bold]: {len(imb)} of {tested} group checks flagged")
        if len(imb):
            console.print(
                tbl(
                    imb,
                    {
                        "group": "group",
                        "kind": "kind",
                        "dimension": "dimension",
                        "max_rank": "slowest rank",
                        "max_ms": "its time",
                        "min_rank": "fastest rank",
                        "min_ms": "its time ",
                        "spread_ms": "spread",
                        "ratio": "spread/mean",
                    },
                    "",
                )
            )


def render(
    console,
    rec: dict,
    row: dict,
    tables: dict[str, pd.DataFrame],
    *,
    short: str,
    top: int,
    artifacts: str,
    show_all: bool = False,
    wide: bool = False,
) -> None:
    """`show`'s report of one run, verdict first: the sections below in order."""
    width = None if wide else console.width
    header_section(console, rec, short)
    advice = ordered_advice(tables.get("advice"))
    verdict_section(console, advice, rec.get("status"))
    key_numbers_section(console, rec, row)
    breakdown_section(console, tables, width)
    memory_section(console, tables, width)
    hot_ops_section(console, tables, top, width)
    pipeline_section(console, tables, width)
    flagged_section(console, tables, width)

    if len(advice) > 1:
        console.print("\n[bold]Advice, largest expected gain first[/bold] (symptoms under their cause)")
        print_advice(console, advice, show_all=show_all)

    console.print(
        f"\n[dim]artifacts: {artifacts}\nall tables: perfbench show {short} --json; "
        f"timeline: perfbench trace {short} -o {short}.json.gz[/dim]",
        highlight=False,
    )
