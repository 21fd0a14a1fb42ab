"""The record every advice rule declares itself with (`Rule`), the causes a finding folds under (`Fold`), and the key
under which the run config reaches the rules that need it.

A rule module (one per finding id, named for it) defines its threshold constants, a function
`find(tables, summary) -> list[dict]` and `RULE = Rule(...)`. The engine (engine.py) reads nothing but these records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: where `analysis()` hands the run config to the rules that need it (memory, tensor parallel, the pipeline split)
CONFIG_KEY = "_config"
#: where `advise()` hands the collectives' load excess (common.load_excess_ms, ms per step) to the time budget and to
#: the rules that need it: computed once per advice
LOAD_EXCESS_KEY = "_load_excess_ms"


@dataclass(frozen=True)
class Fold:
    """One cause a finding folds under: the root finding of rule `cause` (the one with the largest gain) when `when`
    (symptom row, cause row) holds; with `to_root`, the cause's own root when that finding is itself a symptom. A
    rule's folds are tried in order, the first that holds wins; a fold whose cause is the rule itself folds every
    finding of it that is left a root under the largest one (one wait seen from several ranks)."""

    cause: str
    doc: str
    when: Callable[[dict, dict], bool] | None = None
    to_root: bool = False


@dataclass(frozen=True)
class Rule:
    """One rule, declared once in its own module.

    `id`: the finding id it emits (the module's name); `find(tables, summary) -> rows`: the findings, each a dict with
    `message`, `evidence`, `severity` and for the ranking `key`, `gain_ms`, `basis`, `explains`, `also_explains`,
    `generic`, `try`, `predicted_step_ms`, `ranks`, `stage` (docs/advice.md, "Adding a rule"); `needs`: the tables it
    reads (the engine hands it only these); `thresholds`: its threshold constants by name; `folds`: the causes it
    folds under, in order;
    `fires`: when it fires (docs/analyzers.md); `gain`: how its gain is estimated and what it folds (docs/advice.md);
    `knobs`: the config keys its `try` may change (none: it has no knob; a test checks every `try` against them);
    `tries`: what the knob is set to and the step it predicts."""

    id: str
    find: Callable[[dict, dict], list[dict]]
    needs: tuple[str, ...]
    fires: str
    gain: str
    thresholds: Mapping[str, object] = field(default_factory=dict)
    folds: tuple[Fold, ...] = ()
    knobs: tuple[str, ...] = ()
    tries: str = "–"
