"""Facade: run every registered analysis (analyzers/registry.py) over one profile and/or a run's
workload records -> `Analysis(tables, summary, skipped)`.

`summary` holds the run-level metrics (names and definitions in analyzers/catalogue.py) that the store
keeps in run.json["metrics"]; `tables` the analysis tables the store keeps; `skipped` says which
analyses did not run and why (a missing input, never a hidden error).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analyzers.registry import REGISTRY, Context, run_all
from analyzers.schema import Profile


@dataclass
class Analysis:
    tables: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    #: problems the parsers found (a missing or damaged file on some rank), each naming the file
    warnings: list = field(default_factory=list)


def analyze(
    profile: Profile | None,
    workload_steps: pd.DataFrame | None = None,
    spans: pd.DataFrame | None = None,
    config: dict | None = None,
    meta: dict | None = None,
    only: tuple[str, ...] | None = None,
) -> Analysis:
    """Every analysis whose inputs are there. `profile` may be None (a run captured without the profiler:
    the workload's own records still give throughput, step time, pipeline bubbles and expert load). `meta`: the
    ranks' meta files of a launched run ({rank: dict}: machine memory, parameter count, framework peak).
    `only`: the names of the analyses to run (registry order kept), for a caller that needs a few tables."""
    ctx = Context(profile=profile, workload_steps=workload_steps, spans=spans, config=config, meta=meta)
    skipped = run_all(ctx, None if only is None else [s for s in REGISTRY if s.name in only])
    return Analysis(
        tables=ctx.tables, summary=ctx.metrics, skipped=skipped, warnings=list(getattr(profile, "warnings", None) or [])
    )
