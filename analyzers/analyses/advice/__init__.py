"""Rule-based tuning advice over the analysis tables: what to fix first, with the step time each fix is expected to
gain, causes before their symptoms (docs/advice.md).

`advise(tables, summary)` runs every rule in `RULES` and returns one row per finding (analyzers.schema
ADVICE_COLUMNS: `id, rule, severity, message, evidence, ranks, stage, gain_ms, gain_share, basis, symptom_of, try,
predicted_step_ms, explains`), roots by gain, each root's symptoms after it. `evidence` names the table and the
rows/values the finding rests on, so a reader can check it. A rule whose input table is missing or empty says
nothing. Rules over the step breakdown leave out ranks marked `consistent = False` (their recomputation from the
kernels disagrees with the profiler's own numbers, analyzers.analyses.breakdown): no advice rests on them.

The package:

    rule.py       the record each rule declares itself with (Rule: id, needs, thresholds, folds, gain, knobs), Fold
    <rule id>.py  one module per rule, named for the finding id it emits: its thresholds, `find`, and `RULE`
    engine.py     runs the rules, folds symptoms under causes, explains each stretch of time once, severity, order
    budget.py     the time a step has to give per kind (the pools root gains are drawn from)
    common.py     helpers the rules share over the tables
    docs.py       docs/advice.md's and docs/analyzers.md's rule tables, generated from the records

Adding a rule is one new module (its record `RULE`) plus its tests, and its name in RULES below.
"""

from __future__ import annotations

from analyzers.analyses.advice import (
    aicpu_ops,
    bandwidth_reference,
    dropped_tokens,
    dynamic_shape,
    engine,
    expert_imbalance,
    exposed_communication,
    free_time,
    memory_fragmentation,
    memory_near_capacity,
    pipeline_bubble,
    rank_imbalance,
    slow_link,
    slow_rank,
    small_packets,
    stage_imbalance,
    step_time_spread,
    tensor_parallel_comm,
    wait_ratio,
)
import pandas as pd

from analyzers.analyses.advice.budget import LINKED, time_budget
from analyzers.analyses.advice.common import with_load_excess
from analyzers.analyses.advice.docs import records_markdown
from analyzers.analyses.advice.engine import GAIN_HIGH, GAIN_MEDIUM, MAX_ROOTS
from analyzers.analyses.advice.rule import CONFIG_KEY, LOAD_EXCESS_KEY, Fold, Rule
from analyzers.context import Output

#: every rule, in the order their findings are collected (the order kept among findings of equal gain)
RULES: list[Rule] = [
    m.RULE
    for m in (
        stage_imbalance,
        rank_imbalance,
        slow_rank,
        wait_ratio,
        slow_link,
        bandwidth_reference,
        small_packets,
        exposed_communication,
        free_time,
        pipeline_bubble,
        expert_imbalance,
        dropped_tokens,
        step_time_spread,
        aicpu_ops,
        dynamic_shape,
        tensor_parallel_comm,
        memory_near_capacity,
        memory_fragmentation,
    )
]

#: finding id -> the causes it folds under, in order (from the rules' records)
FOLDS: dict[str, tuple[Fold, ...]] = {rule.id: rule.folds for rule in RULES}

__all__ = [
    "CONFIG_KEY",
    "FOLDS",
    "GAIN_HIGH",
    "GAIN_MEDIUM",
    "LOAD_EXCESS_KEY",
    "MAX_ROOTS",
    "RULES",
    "Fold",
    "Rule",
    "advise",
    "analysis",
    "link",
    "rule_records_markdown",
    "time_budget",
]


def advise(tables: dict, summary: dict) -> pd.DataFrame:
    """Run every rule; one row per finding (ADVICE_COLUMNS), with its gain, ordered causes first by gain."""
    tables, summary = with_load_excess(tables), summary or {}
    return engine.rank(RULES, tables, summary, time_budget(tables, summary), LINKED)


def link(rows: list[dict]) -> None:
    """Set each row's `symptom_of` from the rules' folds (engine.link over FOLDS)."""
    engine.link(rows, FOLDS)


def rule_records_markdown() -> str:
    """docs/advice.md's table of rule records, generated from RULES."""
    return records_markdown(RULES)


def analysis(ctx):
    """Registry entry `advice` (runs last: reads every table and metric before it)."""
    return Output(
        tables={
            "advice": advise(
                dict(
                    ctx.tables,
                    workload_steps=ctx.table("workload_steps"),
                    ops_for_checks=ctx.table("ops"),
                    steps=ctx.table("steps"),
                    **{CONFIG_KEY: ctx.config},
                ),
                ctx.metrics,
            )
        }
    )
