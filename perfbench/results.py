"""The results table: one row per run, with scaling efficiency against the matching 1-rank run.

Scaling efficiency E(N) = throughput(N) / (N x throughput(1)), where throughput(1) is the median
throughput over the ok world_size=1 runs whose configuration is identical apart from world size and
repeat (same `config_key`). E is null when no such baseline run exists.
"""

from __future__ import annotations

import statistics

from perfbench.store import short_id

#: swept keys shown in tables, in this order when present
SETTING_ORDER = ("workload", "world_size", "grad_compression", "compression_ratio", "comm_fusion", "fusion_impl",
                 "pipeline_stages", "micro_batches", "pipeline_schedule", "batch_size", "repeat")


def baselines(records: list[dict]) -> dict[str, float]:
    one: dict[str, list[float]] = {}
    for r in records:
        tp = (r.get("metrics") or {}).get("throughput")
        if r.get("status") == "ok" and r.get("settings", {}).get("world_size") == 1 and tp and r.get("config_key"):
            one.setdefault(r["config_key"], []).append(tp)
    return {k: statistics.median(v) for k, v in one.items()}


def summarize(records: list[dict], context: list[dict] | None = None) -> list[dict]:
    """Rows for `perfbench ls --json` (documented in docs/cli.md). `context` are the runs searched
    for scaling baselines (default: `records`)."""
    base = baselines(context if context is not None else records)
    rows = []
    for r in records:
        m = r.get("metrics") or {}
        ws = (r.get("settings") or {}).get("world_size")
        tp = m.get("throughput")
        b = base.get(r.get("config_key"))
        eff = tp / (ws * b) if (tp and b and ws and r.get("status") == "ok") else None
        rows.append({
            "run_id": r["run_id"],
            "sweep_id": r.get("sweep_id"),
            "source": r.get("source"),
            "status": r.get("status"),
            "error": r.get("error"),
            "settings": r.get("settings") or {},
            "throughput": tp,
            "step_time_s": m.get("step_time_s"),
            "computing_s": m.get("computing_s"),
            "communication_not_overlapped_s": m.get("communication_not_overlapped_s"),
            "overlapped_s": m.get("overlapped_s"),
            "free_s": m.get("free_s"),
            "comm_share": m.get("comm_share"),
            "kernel_utilization": m.get("kernel_utilization"),
            "scaling_efficiency": eff,
            "collectives_per_step": m.get("collectives_per_step"),
            "comm_bytes_per_step": m.get("comm_bytes_per_step"),
            "bubble_fraction": m.get("bubble_fraction"),
            "expert_load_cv": m.get("expert_load_cv"),
            "dropped_tokens_per_step": m.get("dropped_tokens_per_step"),
            "loss_first": m.get("loss_first"),
            "loss_last": m.get("loss_last"),
        })
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
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "ms":
        return f"{1000 * v:.1f}"
    if kind == "bytes":
        for unit in ("B", "KB", "MB", "GB"):
            if abs(v) < 1024 or unit == "GB":
                return f"{v:.0f}{unit}" if unit == "B" else f"{v:.1f}{unit}"
            v /= 1024
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


OPTIONAL_COLUMNS = [
    ("collectives_per_step", "coll/step", ""),
    ("comm_bytes_per_step", "bytes/step", "bytes"),
    ("bubble_fraction", "bubble", "pct"),
    ("expert_load_cv", "expert cv", ""),
    ("dropped_tokens_per_step", "dropped/step", ""),
]


def breakdown_fractions(row: dict) -> dict:
    """The step breakdown as shares of the profiled step: computing + exposed communication + free = 1."""
    parts = [row.get(k) for k in ("computing_s", "communication_not_overlapped_s", "free_s")]
    if any(p is None for p in parts) or sum(parts) <= 0:
        return {}
    total = sum(parts)
    keys = ("computing_s", "communication_not_overlapped_s", "overlapped_s", "free_s")
    return {k: (row.get(k) or 0.0) / total for k in keys}


def render_table(rows: list[dict], title: str | None = None, wide: bool = False):
    """A rich Table of runs (settings, throughput, step time, split, shares, efficiency)."""
    from rich.table import Table

    keys = swept_keys(rows)
    sweeps = {r.get("sweep_id") for r in rows}
    t = Table(title=title, show_lines=False)
    t.add_column("run" if len(sweeps) == 1 else "run id", no_wrap=True)
    t.add_column("status", no_wrap=True)
    for k in keys:
        t.add_column(_ABBREV.get(k, k.replace("_", " ")), no_wrap=True)
    cols = ["samples/s", "step ms", "compute%", "exposed comm%", "overlap%", "free%", "comm share", "scaling"]
    # the measured effect of the parallel settings, shown when any run has it
    optional = [(key, label, kind) for key, label, kind in OPTIONAL_COLUMNS
                if wide or any(r.get(key) not in (None, 0, 0.0) for r in rows)]
    cols += [label for _, label, _ in optional]
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        status = {"failed": "[red]failed[/red]", "pruned": "[yellow]pruned[/yellow]"}.get(r["status"], r["status"])
        split = breakdown_fractions(r)
        cells = [
            fmt(r["throughput"]), fmt(r["step_time_s"], "ms"),
            *[fmt(split.get(k), "pct") for k in ("computing_s", "communication_not_overlapped_s", "overlapped_s", "free_s")],
            fmt(r["comm_share"], "pct"), fmt(r["scaling_efficiency"], "pct"),
        ]
        cells += [fmt(r.get(key), kind) for key, _, kind in optional]
        t.add_row(short_id(r) if len(sweeps) == 1 else r["run_id"], status,
                  *[fmt(r["settings"].get(k)) for k in keys], *cells)
    t.caption = ("samples/s, step ms: medians over measured steps. compute/exposed comm/free: shares of the profiled "
                 "step (they add up to 100%; compute% is the kernel utilization); overlap%: communication hidden "
                 "behind compute; comm share: all communication / step; scaling: throughput(N) / (N x throughput(1))")
    return t


def console(stderr: bool = False):
    """A rich Console that does not squeeze tables to 80 columns when output is not a terminal."""
    from rich.console import Console

    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=220)
    return c


_ABBREV = {"world_size": "ranks", "grad_compression": "compression", "compression_ratio": "ratio",
           "comm_fusion": "fusion MB", "fusion_impl": "fusion impl", "pipeline_stages": "stages",
           "micro_batches": "micro-b", "pipeline_schedule": "schedule", "batch_size": "batch"}
