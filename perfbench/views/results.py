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
    rows = []
    for r in records:
        m = r.get("metrics") or {}
        row = {k: r.get(k) for k in ("run_id", "sweep_id", "source", "status", "error")}
        row["settings"] = r.get("settings") or {}
        for name in CATALOGUE:
            row[name] = m.get(name)
        row["scaling_efficiency"] = scaling_efficiency(r, base)
        row["unsteady"] = unsteady_reasons(m)  # [] when steady or unknown (analyzers.analyses.steadiness)
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


def render_table(rows: list[dict], title: str | None = None, wide: bool = False):
    """A table of runs (settings, throughput, step time, split, shares, efficiency), printed like a rich Table."""
    keys = swept_keys(rows)
    sweeps = {r.get("sweep_id") for r in rows}
    t = FastTable(title=title)
    t.add_column("run" if len(sweeps) == 1 else "run id", no_wrap=True)
    t.add_column("status", no_wrap=True)
    for k in keys:
        t.add_column(_ABBREV.get(k, k.replace("_", " ")), no_wrap=True)
    shown = list(KEY_METRICS) + [
        k for k in OPTIONAL_COLUMNS if wide or any(r.get(k) not in (None, 0, 0.0) for r in rows)
    ]
    for name in shown:
        t.add_column(CATALOGUE[name].label, justify="right", no_wrap=True)
    for r in rows:
        status = {"failed": "[red]failed[/red]", "pruned": "[yellow]pruned[/yellow]"}.get(r["status"], r["status"])
        if r.get("unsteady"):
            status += " [yellow]⚠[/yellow]"
        t.add_row(
            short_id(r) if len(sweeps) == 1 else r["run_id"],
            status,
            *[fmt(r["settings"].get(k)) for k in keys],
            *[fmt(r.get(name), name) for name in shown],
        )
    t.caption = (
        "samples/s, step ms: medians over measured steps; compute/exposed comm/overlap/free ms: the profiled "
        "steps' breakdown (mean over ranks, median over steps); `perfbench metrics` defines every column"
    )
    n_bad = sum(1 for r in rows if r.get("unsteady"))
    if n_bad:
        t.caption += (
            f"\n⚠ {n_bad} run(s) not steady enough to compare (step-time CV, warm-up drift or ranks at two "
            "speeds: `perfbench show RUN` says which)"
        )
    return t


def console(stderr: bool = False):
    """A rich Console that does not squeeze tables to 80 columns when output is not a terminal."""
    from rich.console import Console

    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=220)
    return c


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
