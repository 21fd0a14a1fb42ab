"""What `perfbench show RUN` prints: the verdict first, then the numbers behind it, as formatted tables.

Views only look: every number comes from the run record or a stored analysis table, every run-level
metric is labelled and formatted by the metric catalogue (analyzers/catalogue.py). Nothing is cut:
long text wraps; `--json` (perfbench/commands/show.py) has every row of every table.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.views.advice import gain_text, ordered_advice, print_advice, try_text
from perfbench.views.results import dropped_note, fit_columns
from perfbench.views.run_numbers import (
    BREAKDOWN,
    NO_WRAP,
    cell,
    experts,
    flagged,
    input_problem_lines,
    key_numbers,
    missing,
    peak_holders,
    pipeline_stages,
    rank_breakdown,
    step_story,
    top_collectives,
    traffic_classes,
)


def table(df: pd.DataFrame, columns: dict[str, str], title: str, max_rows: int | None = None, width: int | None = None):
    """A rich Table of `df`'s `columns` (name -> heading, in priority order), all-empty columns left out, cells
    formatted. `width`: the last columns are left out until it fits (said in its caption); numbers never wrap."""

    cols = {c: h for c, h in columns.items() if c in df.columns and not df[c].map(missing).all()}
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


#: what flagged_section lists: (table, its flag column, heading, what was tested, why when any is flagged, columns)
FLAGGED = (
    (
        "slow_ranks",
        "slow",
        "\n[bold]Slow ranks[/bold]",
        "rank tests",
        " (a rank that arrives last at collectives significantly often)",
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
    ),
    (
        "slow_links",
        "slow",
        "[bold]Slow links[/bold]",
        "links",
        "",
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
    ),
    (
        "rank_imbalance",
        "flagged",
        "[bold]Rank imbalance[/bold]",
        "group checks",
        "",
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
    ),
)


def flagged_section(console, tables: dict, width: int | None = None) -> None:
    """Slow ranks, slow links and rank imbalance: what the tests flagged."""
    for name, col, heading, tested_what, why, heads in FLAGGED:
        rows, tested = flagged(tables.get(name), col)
        if tested:
            console.print(f"{heading}: {len(rows)} of {tested} {tested_what} flagged" + (why if len(rows) else ""))
            if len(rows):
                console.print(table(rows, heads, "", width=width))


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
