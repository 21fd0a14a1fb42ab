"""What a metric is: the `Metric` record every entry of the catalogue is (analyzers/metric_definitions.py holds the
entries, analyzers/catalogue.py the lookups and per-view lists built from them).

Fields:
    name         the key in run.json["metrics"] and every JSON output
    label        short column heading
    unit         "samples/s", "s", "share" (0..1), "bytes", "count", "ratio", "GB/s"
    better       "higher" | "lower" | None (no direction: a fact, not a goal)
    definition   the exact formula, with its source data
    fmt          how views print it: "ms" (seconds shown in ms), "pct", "bytes", "gbps", "num", "int"
    aggregation  how ranks and steps are combined into the run's value
    kind         "ratio" (a change is a ratio of values) | "share" (a change is a difference in points)
    basis        which steps the value is computed over (BASES): "measured" (the unprofiled measured steps),
                 "profiled" (the profiled steps the step breakdown splits), "run" (not per step)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    better: str | None
    definition: str
    fmt: str = "num"
    aggregation: str = "median over measured steps"
    kind: str = "ratio"
    #: column of the per-step series (analyzers.analyses.step_metrics) the run-level value is the median of, if any
    series: str | None = None
    #: a key metric: the results table, `show` and the dashboard lead with it (catalogue order)
    key: bool = False
    #: position in what `perfbench check` tests when no --metric is given (0: not tested by default)
    check: int = 0
    #: which steps the value is computed over: a key of BASES
    basis: str = "run"
    #: position in what `compare` and `check --baseline` test per step (0: not tested)
    compare: int = 0
    #: position in what `check --ab` measures when no --metric is given (0: not measured by default)
    ab: int = 0
    #: a column the dashboard's runs grid offers besides the key metrics (when some run has it)
    grid: bool = False
    #: a run has it without the profiler (from the workload's own records): tune needs no profiled trials for it
    without_profiler: bool = False

    def worse(self, before: float, after: float) -> bool:
        """True when `after` is worse than `before` by this metric's direction."""
        if self.better == "higher":
            return after < before
        if self.better == "lower":
            return after > before
        return False


#: which steps a metric is computed over (`Metric.basis`), as views name it
BASES = {
    "measured": "the measured steps: after warm-up, every rank finished, unprofiled when the run has unprofiled "
    "steps (the profiler's cost stays out)",
    "profiled": "the profiled steps after warm-up (an imported profile: all its steps): the steps the step "
    "breakdown splits",
    "run": "the run as a whole (not a per-step value)",
}
