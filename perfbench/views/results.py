"""The results table: one row per run, with scaling efficiency against the matching 1-rank run.

Scaling efficiency E(N) = throughput(N) / (N x throughput(1)), where throughput(1) is the median
throughput over the ok world_size=1 runs whose configuration is identical apart from world size and
repeat (same `config_key`). E is null when no such baseline run exists.
"""

from __future__ import annotations

import statistics

from analyzers.catalogue import KEY_METRICS, METRICS as CATALOGUE, format_value
from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.records import short_id
from perfbench.views.table import FastTable

#: swept keys shown in tables, in this order when present
SETTING_ORDER = (
    "workload",
    "world_size",
    "grad_compression",
    "compression_ratio",
    "comm_fusion",
    "fusion_impl",
    "pipeline_stages",
    "micro_batches",
    "pipeline_schedule",
    "batch_size",
    "repeat",
)


def baselines(records: list[dict]) -> dict[str, float]:
    """config_key -> median throughput of its ok 1-rank runs (the scaling baseline)."""
    one: dict[str, list[float]] = {}
    for r in records:
        tp = (r.get("metrics") or {}).get("throughput")
        if r.get("status") == "ok" and r.get("settings", {}).get("world_size") == 1 and tp and r.get("config_key"):
            one.setdefault(r["config_key"], []).append(tp)
    return {k: statistics.median(v) for k, v in one.items()}


def threads_of(record: dict) -> int | None:
    """CPU threads each rank of the run had (the launcher's `threads_per_rank`: a core of its own when pinned);
    None when the record does not say (imports, older runs)."""
    t = (record.get("env") or {}).get("threads_per_rank")
    return int(t) if isinstance(t, (int, float)) and t > 0 else None


def baseline_threads(records: list[dict]) -> dict[str, set]:
    """config_key -> the threads per rank of its ok 1-rank runs (the scaling baseline's), None among them
    when a run does not say."""
    out: dict[str, set] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("settings", {}).get("world_size") == 1 and r.get("config_key"):
            out.setdefault(r["config_key"], set()).add(threads_of(r))
    return out


def scaling_like_with_like(record: dict, base_threads: dict[str, set]) -> str | None:
    """Why the run's scaling efficiency does not compare like with like (its ranks had a different number of
    threads than the 1-rank baseline's rank), or None when it does or nobody can tell."""
    mine = threads_of(record)
    theirs = base_threads.get(record.get("config_key")) or set()
    known = {t for t in theirs if t is not None}
    if mine is None or not known or known == {mine}:
        return None
    base = "/".join(str(t) for t in sorted(known))
    return f"its ranks had {mine} thread(s) each, the 1-rank baseline {base}"


def scaling_efficiency(record: dict, base: dict[str, float]) -> float | None:
    """E(N) = throughput(N) / (N x throughput(1)) against `baselines(...)`; None when it cannot be known."""
    tp = (record.get("metrics") or {}).get("throughput")
    ws = (record.get("settings") or {}).get("world_size")
    b = base.get(record.get("config_key"))
    return tp / (ws * b) if (tp and b and ws and record.get("status") == "ok") else None


def summarize(records: list[dict], context: list[dict] | None = None) -> list[dict]:
    """Rows for `perfbench ls --json` (documented in docs/cli.md): the run's identity and every catalogue
    metric of its record (null when unknown), plus scaling efficiency against `context` (default: `records`)."""
    base = baselines(context if context is not None else records)
    base_threads = baseline_threads(context if context is not None else records)
    rows = []
    for r in records:
        m = r.get("metrics") or {}
        row = {k: r.get(k) for k in ("run_id", "sweep_id", "source", "status", "error")}
        row["settings"] = r.get("settings") or {}
        for name in CATALOGUE:
            row[name] = m.get(name)
        row["scaling_efficiency"] = scaling_efficiency(r, base)
        row["threads_per_rank"] = threads_of(r)
        row["scaling_not_comparable"] = (
            scaling_like_with_like(r, base_threads) if row["scaling_efficiency"] is not None else None
        )
        row["unsteady"] = unsteady_reasons(m)  # [] when steady or unknown (analyzers.analyses.steadiness)
        row["input_problems"] = list(r.get("input_problems") or [])  # per rank: a missing, empty or unreadable input
        rows.append(row)
    return rows


def swept_keys(rows: list[dict]) -> list[str]:
    """Settings that vary across rows (plus workload and world_size), in a stable order."""
    keys: list[str] = []
    for r in rows:
        for k in r["settings"]:
            if k not in keys:
                keys.append(k)
    varying = [k for k in keys if len({repr(r["settings"].get(k)) for r in rows}) > 1]
    order = {k: i for i, k in enumerate(SETTING_ORDER)}
    shown = [k for k in keys if k in ("workload", "world_size") or k in varying]
    return sorted(shown, key=lambda k: order.get(k, 50))


def fmt(v, kind: str = "") -> str:
    """A value as tables print it: `kind` is a catalogue metric name or format ("pct", "ms", "bytes", ...)."""
    if v is None:
        return "-"
    if kind:
        return format_value(kind, v)
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


#: the key metrics in the order the results table keeps them when it must leave columns out (the last goes first)
LS_PRIORITY = (
    "throughput",
    "step_time_s",
    "scaling_efficiency",
    "comm_share",
    "communication_not_overlapped_s",
    "computing_s",
    "kernel_utilization",
    "free_s",
    "overlapped_s",
)

#: catalogue metrics shown in the table when any run has them
OPTIONAL_COLUMNS = (
    "collectives_per_step",
    "comm_bytes_per_step",
    "bubble_fraction",
    "expert_load_cv",
    "dropped_tokens_per_step",
    "skipped_steps",
    "grad_comm_wait_s",
)


def render_table(rows: list[dict], title: str | None = None, wide: bool = False, width: int | None = None):
    """A rich Table of runs (settings, throughput, step time, split, shares, efficiency). `width`: leave out the
    lowest-priority columns (the last metrics first) until it fits, and say which under it."""
    keys = swept_keys(rows)
    sweeps = {r.get("sweep_id") for r in rows}
    key = sorted(KEY_METRICS, key=lambda k: LS_PRIORITY.index(k) if k in LS_PRIORITY else len(LS_PRIORITY))
    shown = key + [k for k in OPTIONAL_COLUMNS if wide or any(r.get(k) not in (None, 0, 0.0) for r in rows)]
    columns = ["run", "status", *(("setting", k) for k in keys), *shown]
    t, dropped = fit_columns(lambda cols: _runs_table(rows, cols, title, len(sweeps) == 1), columns, width, keep=3)
    left_out = [CATALOGUE[c].label if isinstance(c, str) and c in CATALOGUE else c[1] for c in dropped]
    if left_out:
        t.caption = (t.caption or "") + "\n" + dropped_note(left_out, "--wide, or --json")
    return t


def basis_caption(names: list[str]) -> str:
    """Which steps the shown metrics are over, from the catalogue (Metric.basis), one clause per basis."""
    by: dict[str, list[str]] = {}
    for n in names:
        by.setdefault(CATALOGUE[n].basis, []).append(CATALOGUE[n].label)
    words = {
        "measured": "over the measured (unprofiled) steps",
        "profiled": "over the profiled steps",
        "run": "per run",
    }
    return "; ".join(f"{', '.join(v)}: {words[b]}" for b, v in by.items())


def _runs_table(rows: list[dict], cols: list, title: str | None, one_sweep: bool):
    t = FastTable(title=title)
    for c in cols:
        if c == "run":
            t.add_column("run" if one_sweep else "run id", no_wrap=True)
        elif c == "status":
            t.add_column("status", no_wrap=True)
        elif isinstance(c, tuple):
            t.add_column(_ABBREV.get(c[1], c[1].replace("_", " ")), no_wrap=True)
        else:
            t.add_column(CATALOGUE[c].label, justify="right", no_wrap=True)
    for r in rows:
        status = {"failed": "[red]failed[/red]", "pruned": "[yellow]pruned[/yellow]"}.get(r["status"], r["status"])
        if r.get("unsteady"):
            status += " [yellow]⚠[/yellow]"
        if r.get("input_problems"):
            status += " [red]![/red]"
        cells = []
        for c in cols:
            if c == "run":
                cells.append(short_id(r) if one_sweep else r["run_id"])
            elif c == "status":
                cells.append(status)
            elif isinstance(c, tuple):
                cells.append(fmt(r["settings"].get(c[1])))
            elif c == "scaling_efficiency" and r.get("scaling_not_comparable"):
                cells.append(fmt(r.get(c), c) + " ≠")
            else:
                cells.append(fmt(r.get(c), c))
        t.add_row(*cells)
    metrics = [c for c in cols if isinstance(c, str) and c in CATALOGUE]
    t.caption = basis_caption(metrics) + "; `perfbench metrics` defines every column"
    if "scaling_efficiency" in cols and any(r.get("scaling_efficiency") is not None for r in rows):
        t.caption += "\n" + threads_note(rows)
    damaged = [r for r in rows if r.get("input_problems")]
    if damaged:
        t.caption += (
            "\n! missing or damaged inputs: "
            + "; ".join(
                f"{short_id(r) if one_sweep else r['run_id']} rank "
                + ", ".join(sorted({str(p.get("rank")) for p in r["input_problems"]}))
                for r in damaged
            )
            + " (`perfbench show RUN` says which files)"
        )
    n_bad = sum(1 for r in rows if r.get("unsteady"))
    if n_bad:
        t.caption += (
            f"\n⚠ {n_bad} run(s) not steady enough to compare (step-time CV, warm-up drift or ranks at two "
            "speeds: `perfbench show RUN` says which)"
        )
    return t


def threads_note(rows: list[dict]) -> str:
    """How many threads each rank had, for the scaling column: one figure when every run agrees, else per run;
    the runs whose scaling is against a baseline with other threads are marked ≠ and named."""
    ok = [r for r in rows if r.get("status") == "ok"]
    threads = {r.get("threads_per_rank") for r in ok}
    if threads == {None} or not ok:
        note = "scaling: threads per rank unknown (the records do not say)"
    elif len(threads) == 1:
        n = threads.pop()
        note = f"scaling: {n} thread{'s' if n != 1 else ''} per rank in every run"
    else:
        per = ", ".join(f"{short_id(r)} {fmt(r.get('threads_per_rank'))}" for r in ok)
        note = f"scaling: threads per rank {per}"
    bad = [r for r in ok if r.get("scaling_not_comparable")]
    if bad:
        note += "; ≠ not like with like: " + "; ".join(f"{short_id(r)}: {r['scaling_not_comparable']}" for r in bad)
    return note


#: the width of output that is not a terminal, when COLUMNS does not say
PIPE_WIDTH = 100


def console(stderr: bool = False, wide: bool = False):
    """A rich Console as wide as the terminal: `COLUMNS` when set, else the terminal's width, else PIPE_WIDTH
    when output is piped. `wide=True`: no limit (tables show every column; lines may exceed the screen)."""
    import os

    from rich.console import Console

    cols = os.environ.get("COLUMNS", "")
    if wide:
        return Console(stderr=stderr, width=1000)
    if cols.isdigit() and int(cols) > 0:
        return Console(stderr=stderr, width=int(cols))
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=PIPE_WIDTH)
    return c


def fits(table, width: int) -> bool:
    """True when `table` can be drawn in `width` columns without cutting a value (text columns may wrap)."""
    from rich.console import Console

    if hasattr(table, "natural_width"):  # a FastTable: its columns never wrap
        return table.natural_width() <= width
    probe = Console(width=max(width, 1000), file=_Null())
    need = 0
    for col in table.columns:  # a no-wrap column needs its widest cell, a wrapping one its longest word
        m = table._measure_column(probe, probe.options, col)
        need += m.maximum if col.no_wrap else m.minimum
    need += table._extra_width
    return need <= width  # (a title wraps)


class _Null:
    def write(self, _s) -> int:
        return 0

    def flush(self) -> None:
        pass


def fit_columns(build, columns: list, width: int | None, keep: int = 1):
    """(table, dropped): `build(columns)` with the fewest trailing (lowest-priority) columns left out that makes it
    fit `width`; never fewer than `keep` columns. `width=None` keeps every column."""
    cols = list(columns)
    dropped: list = []
    t = build(cols)
    while width is not None and len(cols) > keep and not fits(t, width):
        dropped.insert(0, cols.pop())
        t = build(cols)
    return t, dropped


def grid(
    title: str | None, heads: list[str], rows: list[list[str]], width: int | None, *, left: int = 1, keep: int = 2
):
    """A plain table of text cells (the first `left` columns left-aligned, the rest right-aligned, none wrapping)
    fitted to `width`: the last columns are left out and named in its caption."""
    from rich.table import Table

    def build(cols):
        t = Table(title=title)
        for c in cols:
            t.add_column(heads[c], justify="left" if c < left else "right", no_wrap=True)
        for r in rows:
            t.add_row(*[r[c] for c in cols])
        return t

    t, dropped = fit_columns(build, list(range(len(heads))), width, keep=keep)
    if dropped:
        t.caption = dropped_note([heads[c] for c in dropped])
    return t


def dropped_note(names: list[str], how: str = "--wide") -> str:
    """The line under a table that had to leave columns out to fit the screen."""
    return f"columns left out to fit the screen: {', '.join(names)} ({how} shows them)"


_ABBREV = {
    "world_size": "ranks",
    "grad_compression": "compression",
    "compression_ratio": "ratio",
    "comm_fusion": "fusion MB",
    "fusion_impl": "fusion impl",
    "pipeline_stages": "stages",
    "micro_batches": "micro-b",
    "pipeline_schedule": "schedule",
    "batch_size": "batch",
}
