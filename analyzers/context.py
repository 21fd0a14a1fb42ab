"""What an analysis reads and returns (the contract between the registry and every analysis).

`Context`: the parsed profile, the workload's own records, the run config and the tables and metrics of the
analyses that ran before; `Output`: the tables and metrics one analysis yields. The registry
(analyzers/registry.py) runs the analyses over a Context; each analysis module imports these two names from
here, so no analysis imports the registry that imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analyzers.schema import Profile, warmup_steps

PROFILE_TABLES = ("ops", "steps", "comm_ops", "comm_bandwidth", "links", "memory_records", "op_memory", "module_memory")


@dataclass
class Context:
    """What an analysis may read: the parsed profile (or None), the workload's own records, the run
    config, and the tables and metrics of the analyses that ran before it."""

    profile: Profile | None = None
    workload_steps: pd.DataFrame | None = None
    spans: pd.DataFrame | None = None
    config: dict | None = None
    #: the ranks' own meta files ({rank: metrics/rank{R}.meta.json}) of a launched run, else None
    meta: dict | None = None
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
        return warmup_steps(self.config)

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
