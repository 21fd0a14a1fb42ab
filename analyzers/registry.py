"""The analysis registry: every analysis perfbench runs, with what it reads and what it produces.

In the spirit of msprof-analyze's recipes, but each analysis is a pure function `run(ctx) -> Output`
over the normalized schema. An entry declares

    name      the analysis
    needs     inputs it cannot do without. Each item is one of the profile tables ("ops", "steps",
              "comm_ops", "comm_bandwidth", "links", "reference_breakdown"), the workload's records
              ("workload_steps", "spans"), "config", or "table:NAME" (a table an earlier analysis wrote);
              "a|b" means either will do
    tables    the tables it writes (schemas: analyzers.schema.ANALYSIS_TABLES where declared)
    metrics   the run-level metrics it yields (names from analyzers.catalogue)

`analyzers.analyze()` runs the entries in order. An entry whose needs are missing is skipped and the
reason recorded (`Analysis.skipped`); an entry that returns a table or metric it did not declare, or a
metric not in the catalogue, is a bug and raises. Adding an analysis is one module with its `run`
function plus one `AnalysisSpec` line in `REGISTRY`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from analyzers.catalogue import METRICS
from analyzers.schema import Profile

PROFILE_TABLES = ("ops", "steps", "comm_ops", "comm_bandwidth", "links")


@dataclass
class Context:
    """What an analysis may read: the parsed profile (or None), the workload's own records, the run
    config, and the tables and metrics of the analyses that ran before it."""

    profile: Profile | None = None
    workload_steps: pd.DataFrame | None = None
    spans: pd.DataFrame | None = None
    config: dict | None = None
    tables: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        """A profile table, a workload table or an earlier analysis's table; None when missing or empty."""
        if name in self.tables:
            df = self.tables[name]
        elif name in PROFILE_TABLES or name == "reference_breakdown":
            df = getattr(self.profile, name, None) if self.profile is not None else None
        elif name in ("workload_steps", "spans"):
            df = getattr(self, name)
        else:
            df = None
        return df if df is not None and len(df) else None

    def warmup_steps(self) -> int:
        try:
            return int(((self.config or {}).get("train") or {}).get("warmup_steps") or 0)
        except (TypeError, ValueError):
            return 0

    def has(self, need: str) -> bool:
        if "|" in need:
            return any(self.has(n) for n in need.split("|"))
        if need == "config":
            return bool(self.config)
        if need.startswith("table:"):
            return self.table(need[6:]) is not None
        return self.table(need) is not None


@dataclass
class Output:
    tables: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


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
    AnalysisSpec("step_breakdown", _lazy("analyzers.breakdown", "analysis"), needs=("steps|reference_breakdown",),
                 tables=("step_breakdown", "reconciliation", "rank_breakdown", "rank_check"),
                 metrics=("reconciliation_max_rel_diff",)),
    AnalysisSpec("kernels", _lazy("analyzers.kernels", "analysis"), needs=("ops",), tables=("kernels", "top_kernels")),
    AnalysisSpec("collectives", _lazy("analyzers.collectives", "analysis"), needs=("comm_ops",),
                 tables=("comm_ops", "comm_types", "comm_rank_totals", "comm_bandwidth", "links"),
                 metrics=("comm_wait_ratio",)),
    AnalysisSpec("links", _lazy("analyzers.collectives", "links_analysis"), needs=("links|comm_bandwidth",),
                 tables=("comm_bandwidth", "links")),
    AnalysisSpec("parallel_groups", _lazy("analyzers.parallel_groups", "analysis"), needs=(),
                 tables=("links", "link_totals", "rank_stages")),
    AnalysisSpec("stages", _lazy("analyzers.stages", "analysis"), needs=("table:step_breakdown", "table:rank_stages"),
                 tables=("stages",), metrics=("stage_compute_imbalance",)),
    AnalysisSpec("comm_exposure", _lazy("analyzers.comm_exposure", "analysis"), needs=("table:step_breakdown",),
                 tables=("comm_exposure",), metrics=("exposed_p2p_s", "exposed_collective_s")),
    AnalysisSpec("rank_imbalance", _lazy("analyzers.imbalance", "analysis"), needs=("table:step_breakdown",),
                 tables=("rank_imbalance",)),
    AnalysisSpec("slow_ranks", _lazy("analyzers.slow_ranks", "analysis"), needs=("table:comm_ops|links|comm_bandwidth",),
                 tables=("slow_ranks", "slow_links")),
    AnalysisSpec("pipeline", _lazy("analyzers.pipeline", "analysis"), needs=("spans|steps|reference_breakdown",),
                 tables=("pipeline",), metrics=("bubble_fraction",)),
    AnalysisSpec("experts", _lazy("analyzers.experts", "analysis"), needs=("workload_steps",), tables=("experts",),
                 metrics=("expert_load_cv",)),
    AnalysisSpec("step_metrics", _lazy("analyzers.step_metrics", "analysis"),
                 needs=("workload_steps|table:step_breakdown",), tables=("step_metrics",),
                 metrics=("throughput", "step_time_s", "step_cpu_s", "computing_s", "communication_s", "communication_not_overlapped_s",
                          "overlapped_s", "free_s", "preparing_s", "bubble_s", "comm_share", "kernel_utilization",
                          "collectives_per_step", "comm_bytes_per_step", "measured_steps", "samples_per_step",
                          "profiler_overhead", "profiled_step_time_s", "loss_first", "loss_last",
                          "dropped_tokens_per_step", "skipped_steps", "ranks", "steps")),
    AnalysisSpec("grad_overlap", _lazy("analyzers.grad_overlap", "analysis"), needs=("spans",),
                 metrics=("grad_comm_wait_s", "grad_buckets_early")),
    AnalysisSpec("checkpoint_cost", _lazy("analyzers.checkpoint_cost", "analysis"), needs=("workload_steps",),
                 metrics=("checkpoint_cost", "checkpoint_save_s")),
    AnalysisSpec("capture_cost", _lazy("analyzers.capture_cost", "analysis"), needs=("workload_steps",),
                 metrics=("capture_cost", "capture_calls_s")),
    AnalysisSpec("timeline", _lazy("analyzers.timeline", "analysis"), needs=("ops", "steps"), tables=("timeline",)),
    AnalysisSpec("cluster_check", _lazy("analyzers.cluster_check", "analysis"), needs=("table:step_breakdown|comm_ops",),
                 tables=("cluster_check",)),
    AnalysisSpec("advice", _lazy("analyzers.advice", "analysis"), needs=(), tables=("advice",)),
]


def register(spec: AnalysisSpec, *, before: str | None = None) -> None:
    """Add (or replace) an analysis; `before` puts it ahead of an existing entry (default: before advice)."""
    global REGISTRY
    REGISTRY = [s for s in REGISTRY if s.name != spec.name]
    anchor = before or "advice"
    for i, s in enumerate(REGISTRY):
        if s.name == anchor:
            REGISTRY.insert(i, spec)
            return
    REGISTRY.append(spec)


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
            raise RuntimeError(f"analysis {spec.name!r} returned undeclared tables {sorted(bad_t)} / metrics "
                               f"{sorted(bad_m)} / metrics not in the catalogue {sorted(unknown)}")
        ctx.tables.update(out.tables)
        ctx.metrics.update(out.metrics)
    return skipped
