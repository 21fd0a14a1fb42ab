"""The metric catalogue: every run-level metric perfbench reports, defined once (analyzers/metric_definitions.py),
with the lookups and per-view lists built from the definitions.

`ls`, `show`, `compare`, `check`, the dashboard and docs/concepts.md read their names, units, directions,
definitions and formats from here; nothing else defines a metric. `perfbench metrics [--json]` prints it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

from analyzers.metric import BASES, Metric
from analyzers.metric_definitions import DEFINITIONS

#: the per-view lists (Metric.compare, .ab: positions in these orders; .grid, .without_profiler: members)
_COMPARE = (
    "throughput",
    "step_time_s",
    "step_cpu_s",
    "comm_share",
    "communication_not_overlapped_s",
    "computing_s",
    "free_s",
    "kernel_utilization",
    "collectives_per_step",
    "comm_bytes_per_step",
)
_AB = ("step_time_s", "step_cpu_s")
_GRID = (
    "collectives_per_step",
    "comm_bytes_per_step",
    "bubble_fraction",
    "expert_load_cv",
    "profiler_overhead",
    "capture_cost",
)
_WITHOUT_PROFILER = ("collectives_per_step", "comm_bytes_per_step", "loss_first", "loss_last", "peak_memory_bytes")
_ALL = [
    replace(
        m,
        compare=_COMPARE.index(m.name) + 1 if m.name in _COMPARE else 0,
        ab=_AB.index(m.name) + 1 if m.name in _AB else 0,
        grid=m.name in _GRID,
        without_profiler=m.without_profiler or m.name in _WITHOUT_PROFILER,
    )
    for m in DEFINITIONS
]

METRICS: dict[str, Metric] = {m.name: m for m in _ALL}
#: the parts of the step breakdown that add up to breakdown_step_s (overlapped_s lies within computing_s)
BREAKDOWN_TOTAL = "breakdown_step_s"
ADDING_PARTS = ("computing_s", "communication_not_overlapped_s", "free_s")

#: the metrics the results table and `show` lead with, in this order
KEY_METRICS = tuple(m.name for m in _ALL if m.key)
#: run-level metric -> column of the step series it is the median of
SERIES_COLUMN = {m.name: m.series for m in _ALL if m.series}
#: what `perfbench check` tests by default
CHECK_DEFAULT = tuple(m.name for m in sorted((m for m in _ALL if m.check), key=lambda m: m.check))
#: the per-step metrics compare and check --baseline test, in their order
STEP_METRICS = tuple(m.name for m in sorted((m for m in _ALL if m.compare), key=lambda m: m.compare))
#: what `check --ab` measures by default
AB_DEFAULT = tuple(m.name for m in sorted((m for m in _ALL if m.ab), key=lambda m: m.ab))
#: the runs grid's columns besides KEY_METRICS
GRID_EXTRA = tuple(m.name for m in _ALL if m.grid)
#: metrics a run has without the profiler, besides the per-step series the workload records
WITHOUT_PROFILER = tuple(m.name for m in _ALL if m.without_profiler)


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in the metric catalogue (analyzers/catalogue.py)") from None


def format_value(name_or_fmt: str, v) -> str:
    """A metric's value as views print it ('-' for unknown). Takes a metric name or a fmt string."""
    fmt = METRICS[name_or_fmt].fmt if name_or_fmt in METRICS else name_or_fmt
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-"
    try:
        v = float(v)
    except (TypeError, ValueError):
        return str(v)
    if fmt == "pct":
        return f"{100 * v:.1f}%"
    if fmt == "ms":
        return f"{1000 * v:.1f}" if abs(v) < 100 else f"{1000 * v:.0f}"
    if fmt == "bytes":
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):  # binary units, named as such (the charts' axes too)
            if abs(v) < 1024 or unit == "TiB":
                return f"{v:.0f}{unit}" if unit == "B" else f"{v:.1f}{unit}"
            v /= 1024
    if fmt == "gbps":
        return f"{v:.2f}"
    if fmt == "int":
        return f"{int(round(v))}"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def unit_label(name: str) -> str:
    """The unit as views show it next to a formatted value."""
    m = METRICS[name]
    return {"ms": "ms", "pct": "%", "bytes": "", "gbps": "GB/s"}.get(
        m.fmt, "" if m.unit in ("count", "ratio") else m.unit
    )


def basis_text(name: str) -> str:
    """Which steps a metric is computed over, in words (BASES)."""
    return BASES[METRICS[name].basis]


def catalogue_json() -> list[dict]:
    return [asdict(m) for m in _ALL]
