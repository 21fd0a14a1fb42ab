"""The analysis registry: every analysis perfbench runs, with what it reads and what it produces.

In the spirit of msprof-analyze's recipes, but each analysis is a pure function `analysis(ctx) -> Output`
over the normalized schema, in its own module under analyzers/analyses/ (imported when it first runs). An entry
declares

    name      the analysis
    needs     inputs it cannot do without. Each item is one of the profile tables ("ops", "steps",
              "comm_ops", "comm_bandwidth", "links", "reference_breakdown"), the workload's records
              ("workload_steps", "spans"), "config", or "table:NAME" (a table an earlier analysis wrote);
              "a|b" means either will do
    tables    the tables it writes (schemas: analyzers.schema.ANALYSIS_TABLES where declared)
    metrics   the run-level metrics it yields (names from analyzers.catalogue)

`analyzers.analyze()` runs the entries in order. An entry whose needs are missing is skipped and the
reason recorded (`Analysis.skipped`); an entry that returns a table or metric it did not declare, or a
metric not in the catalogue, is a bug and raises. Adding an analysis is one module with its `analysis`
function plus one `AnalysisSpec` entry in `REGISTRY` (or a `register()` call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from analyzers.catalogue import METRICS
from analyzers.context import PROFILE_TABLES, Context, Output  # noqa: F401  (re-exported: the registry's API)


@dataclass(frozen=True)
class AnalysisSpec:
    name: str
    run: Callable[[Context], Output]
    needs: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()

    def missing(self, ctx: Context) -> list[str]:
        return [n for n in self.needs if not ctx.has(n)]


def _lazy(module: str, func: str = "run") -> Callable[[Context], Output]:
    """Import the analysis module when the analysis runs (keeps `import analyzers` light)."""

    def call(ctx: Context) -> Output:
        import importlib

        return getattr(importlib.import_module(module), func)(ctx)

    call.__name__ = f"{module}.{func}"
    return call


REGISTRY: list[AnalysisSpec] = [
    AnalysisSpec(
        "step_breakdown",
        _lazy("analyzers.analyses.breakdown", "analysis"),
        needs=("steps|reference_breakdown",),
        tables=("step_breakdown", "reconciliation", "rank_breakdown", "rank_check"),
        metrics=("reconciliation_max_rel_diff",),
    ),
    AnalysisSpec(
        "kernels", _lazy("analyzers.analyses.kernels", "analysis"), needs=("ops",), tables=("kernels", "top_kernels")
    ),
    AnalysisSpec(
        "collectives",
        _lazy("analyzers.analyses.collectives", "analysis"),
        needs=("comm_ops",),
        tables=("comm_ops", "comm_types", "comm_rank_totals", "comm_classes"),
        metrics=("comm_wait_ratio",),
    ),
    AnalysisSpec(
        "parallel_groups",
        _lazy("analyzers.analyses.parallel_groups", "analysis"),
        needs=(),
        tables=("comm_bandwidth", "links", "link_totals", "rank_stages"),
    ),
    AnalysisSpec(
        "stages",
        _lazy("analyzers.analyses.stages", "analysis"),
        needs=("table:step_breakdown", "table:rank_stages"),
        tables=("stages",),
        metrics=("stage_compute_imbalance",),
    ),
    AnalysisSpec(
        "comm_exposure",
        _lazy("analyzers.analyses.comm_exposure", "analysis"),
        needs=("table:step_breakdown",),
        tables=("comm_exposure", "comm_exposure_classes"),
        metrics=("exposed_p2p_s", "exposed_collective_s"),
    ),
    AnalysisSpec(
        "rank_imbalance",
        _lazy("analyzers.analyses.imbalance", "analysis"),
        needs=("table:step_breakdown",),
        tables=("rank_imbalance",),
    ),
    AnalysisSpec(
        "slow_ranks",
        _lazy("analyzers.analyses.slow_ranks", "analysis"),
        needs=("table:comm_ops|links|comm_bandwidth",),
        tables=("slow_ranks", "slow_links"),
    ),
    AnalysisSpec(
        "pipeline",
        _lazy("analyzers.analyses.pipeline", "analysis"),
        needs=("spans|steps|reference_breakdown",),
        tables=("pipeline",),
        metrics=("bubble_fraction",),
    ),
    AnalysisSpec(
        "experts",
        _lazy("analyzers.analyses.experts", "analysis"),
        needs=("workload_steps",),
        tables=("experts",),
        metrics=("expert_load_cv",),
    ),
    AnalysisSpec(
        "step_metrics",
        _lazy("analyzers.analyses.step_metrics", "analysis"),
        needs=("workload_steps|table:step_breakdown",),
        tables=("step_metrics",),
        metrics=(
            "throughput",
            "step_time_s",
            "step_cpu_s",
            "computing_s",
            "breakdown_step_s",
            "communication_s",
            "communication_not_overlapped_s",
            "overlapped_s",
            "free_s",
            "preparing_s",
            "bubble_s",
            "comm_share",
            "kernel_utilization",
            "collectives_per_step",
            "comm_bytes_per_step",
            "measured_steps",
            "samples_per_step",
            "profiler_overhead",
            "profiler_overhead_low",
            "profiler_overhead_high",
            "profiled_step_time_s",
            "loss_first",
            "loss_last",
            "dropped_tokens_per_step",
            "skipped_steps",
            "ranks",
            "steps",
        ),
    ),
    AnalysisSpec(
        "grad_overlap",
        _lazy("analyzers.analyses.grad_overlap", "analysis"),
        needs=("spans",),
        metrics=("grad_comm_wait_s", "grad_buckets_early"),
    ),
    AnalysisSpec(
        "checkpoint_cost",
        _lazy("analyzers.analyses.checkpoint_cost", "analysis"),
        needs=("workload_steps",),
        metrics=("checkpoint_cost", "checkpoint_save_s"),
    ),
    AnalysisSpec(
        "capture_cost",
        _lazy("analyzers.analyses.capture_cost", "analysis"),
        needs=("workload_steps",),
        metrics=("capture_cost", "capture_cost_low", "capture_cost_high", "capture_calls_s"),
    ),
    AnalysisSpec(
        "steadiness",
        _lazy("analyzers.analyses.steadiness", "analysis"),
        needs=("workload_steps",),
        metrics=("step_time_cv", "step_cpu_cv", "warmup_drift", "warmup_drift_p", "rank_cpu_spread"),
    ),
    AnalysisSpec(
        "memory",
        _lazy("analyzers.analyses.memory", "analysis"),
        needs=(),
        tables=("memory", "memory_modules", "memory_timeline", "memory_live", "memory_attribution"),
        metrics=("peak_memory_bytes", "memory_headroom"),
    ),
    AnalysisSpec(
        "timeline", _lazy("analyzers.analyses.timeline", "analysis"), needs=("ops", "steps"), tables=("timeline",)
    ),
    AnalysisSpec(
        "cluster_check",
        _lazy("analyzers.analyses.cluster_check", "analysis"),
        needs=("table:step_breakdown|comm_ops",),
        tables=("cluster_check",),
    ),
    AnalysisSpec("advice", _lazy("analyzers.analyses.advice", "analysis"), needs=(), tables=("advice",)),
]


def writers(registry: list[AnalysisSpec]) -> dict[str, str]:
    """{table: the one analysis that writes it}; two entries declaring one table is a bug (the table would
    depend on registry order) and raises."""
    out: dict[str, str] = {}
    for spec in registry:
        for t in spec.tables:
            if t in out:
                raise ValueError(
                    f"table {t!r} is written by analyses {out[t]!r} and {spec.name!r}: one writer per table"
                )
            out[t] = spec.name
    return out


WRITERS = writers(REGISTRY)


def register(spec: AnalysisSpec, *, before: str | None = None) -> None:
    """Add (or replace) an analysis; `before` puts it ahead of an existing entry (default: before advice).
    A table another entry already writes raises (one writer per table)."""
    global REGISTRY, WRITERS
    new = [s for s in REGISTRY if s.name != spec.name]
    anchor = before or "advice"
    at = next((i for i, s in enumerate(new) if s.name == anchor), len(new))
    new.insert(at, spec)
    WRITERS = writers(new)
    REGISTRY = new


def run_all(ctx: Context, registry: list[AnalysisSpec] | None = None) -> dict[str, str]:
    """Run every analysis in order into ctx.tables / ctx.metrics; return {skipped analysis: reason}."""
    skipped: dict[str, str] = {}
    for spec in registry if registry is not None else REGISTRY:
        missing = spec.missing(ctx)
        if missing:
            skipped[spec.name] = "no " + ", no ".join(m.replace("table:", "").replace("|", " or ") for m in missing)
            continue
        out = spec.run(ctx)
        bad_t = set(out.tables) - set(spec.tables)
        bad_m = set(out.metrics) - set(spec.metrics)
        unknown = set(out.metrics) - set(METRICS)
        if bad_t or bad_m or unknown:
            raise RuntimeError(
                f"analysis {spec.name!r} returned undeclared tables {sorted(bad_t)} / metrics "
                f"{sorted(bad_m)} / metrics not in the catalogue {sorted(unknown)}"
            )
        ctx.tables.update(out.tables)
        ctx.metrics.update(out.metrics)
    return skipped
