"""The advice engine: runs the rules it is given, folds symptoms under their causes, explains each stretch of time
once, sets severity from the gain and orders the findings. It knows no rule by name: everything it knows about a
rule is in its record (rule.py), and the rules come from the package (analyzers/analyses/advice/__init__.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

import pandas as pd

from analyzers.analyses.advice.common import step_ms
from analyzers.analyses.advice.rule import Fold, Rule
from analyzers.schema import ADVICE_COLUMNS

#: severity from the gain's share of the step: >= GAIN_HIGH high, >= GAIN_MEDIUM medium, else low
#: (a finding whose gain is unknown keeps its rule's threshold label)
GAIN_HIGH = 0.10
GAIN_MEDIUM = 0.03
#: at most this many roots are shown by default (show, advise, dashboard; --all shows all)
MAX_ROOTS = 5


def _defaults() -> dict:
    return {
        "ranks": [],
        "stage": None,
        "gain_ms": None,
        "basis": None,
        "explains": None,
        "try": None,
        "predicted_step_ms": None,
    }


def collect(rules: Iterable[Rule], tables: dict, summary: dict) -> list[dict]:
    """Every rule's findings, each rule given only the tables it declares (`needs`); each row gets its `rule`, a
    unique `id` (rule id + its `key`, default `all`) and a finite gain or None."""
    rows: list[dict] = []
    seen: set[str] = set()
    for rule in rules:
        view = {k: tables[k] for k in rule.needs if k in tables}
        for row in rule.find(view, summary):
            row = {**_defaults(), **row, "rule": rule.id}
            if row["try"] and not set(row["try"]) <= set(rule.knobs):
                raise ValueError(f"advice rule {rule.id} tries {sorted(row['try'])}, not among its knobs {rule.knobs}")
            rid = f"{rule.id}:{row.get('key', 'all')}"
            while rid in seen:
                rid += "+"
            seen.add(rid)
            row["id"] = rid
            g = row["gain_ms"]
            row["gain_ms"] = float(g) if g is not None and pd.notna(g) and math.isfinite(g) else None
            rows.append(row)
    return rows


def fold_order(rules: set[str], folds: Mapping[str, tuple[Fold, ...]]) -> list[str]:
    """The rules in an order where every cause a rule folds under comes before it (sorted names otherwise)."""
    out: list[str] = []

    def visit(rule: str, path: tuple[str, ...]) -> None:
        if rule in out:
            return
        if rule in path:
            raise ValueError(f"advice rules fold under each other in a cycle: {' -> '.join(path + (rule,))}")
        for f in folds.get(rule, ()):
            if f.cause != rule:
                visit(f.cause, path + (rule,))
        out.append(rule)

    for rule in sorted(rules):
        visit(rule, ())
    return [r for r in out if r in rules]


def _best(rows: list[dict], by_id: dict, rule: str, to_root: bool) -> dict | None:
    """The finding of `rule` with the largest gain (a root unless `to_root`, which then follows it to its root)."""
    c = [r for r in rows if r["rule"] == rule and (to_root or r["symptom_of"] is None)]
    if not c:
        return None
    top = max(c, key=lambda r: r.get("gain_ms") or 0.0)
    while to_root and top["symptom_of"] is not None:
        top = by_id[top["symptom_of"]]
    return top


def _cause(r: dict, own: tuple[Fold, ...], rows: list[dict], by_id: dict) -> str | None:
    """The id of the first cause among `own` folds that is present and whose condition holds for `r`."""
    for f in own:
        c = _best(rows, by_id, f.cause, f.to_root) if f.cause != r["rule"] else None
        if c is not None and (f.when is None or f.when(r, c)):
            return c["id"]
    return None


def _under_largest(left: list[dict]) -> None:
    """Fold the roots of one rule under the largest of them (a rule that folds under itself)."""
    if len(left) > 1:
        top = max(left, key=lambda r: r.get("gain_ms") or 0.0)
        for r in left:
            if r is not top:
                r["symptom_of"] = top["id"]


def link(rows: list[dict], folds: Mapping[str, tuple[Fold, ...]]) -> None:
    """Causes before symptoms: set `symptom_of` (the id of the explaining root) in place, from the rules' folds
    (rule id -> its Folds, declared on each Rule record). A rule's causes are settled before its own findings (a
    finding folds under a root, never under a symptom); each finding takes the first of its folds whose cause is
    present and whose condition holds."""
    by_id = {r["id"]: r for r in rows}
    for r in rows:
        r["symptom_of"] = None
    for rule in fold_order({r["rule"] for r in rows}, folds):
        mine = [r for r in rows if r["rule"] == rule]
        own = folds.get(rule, ())
        for r in mine:
            r["symptom_of"] = _cause(r, own, rows, by_id)
        if any(f.cause == rule for f in own):
            _under_largest([r for r in mine if r["symptom_of"] is None])


#: the pools every root draws on (budget.time_budget), with the words a gain cut to them says
_WHOLES = {"step": "step", "rank_step": "non-compute"}


def account(rows: list[dict], budget: dict) -> None:
    """Each stretch of time explained once: root gains are drawn from their pool (`explains`: exposed,
    idle, imbalance; budget.time_budget), then from the further pools a row names (`also_explains`, e.g. the
    communication overlapped with compute, for collectives whose threads share the host's cores), and from the step,
    specific causes first (largest raw gain first), then the generic findings (rows marked `generic`), which get
    what is left. A gain cut down says so in its basis."""
    left = {k: v for k, v in budget.items() if v is not None}
    roots = [r for r in rows if r["symptom_of"] is None and r.get("gain_ms") is not None]
    roots.sort(key=lambda r: (bool(r.get("generic")), -r["gain_ms"]))
    for r in roots:
        raw, caps = max(float(r["gain_ms"]), 0.0), []
        pools = [p for p in dict.fromkeys((r.get("explains"), *r.get("also_explains", ()))) if p in left]
        if pools and raw > sum(left[p] for p in pools):
            raw = sum(left[p] for p in pools)
            caps.append(" + ".join(pools))
        for whole in _WHOLES:  # every root draws on the step and on one rank's step less its computing
            if whole in left and raw > left[whole]:
                raw = left[whole]
                caps.append(_WHOLES[whole])
        rest = raw
        for pool in pools:  # drawn from its own pool first, then from the others it names
            take = min(rest, left[pool])
            left[pool] -= take
            rest -= take
        for whole in _WHOLES:
            if whole in left and whole not in pools:
                left[whole] -= raw
        if caps:
            r["basis"] = (
                f"{r['basis']}; cut to the {caps[-1]} time no larger finding explains "
                f"({raw:.3g} ms of {float(r['gain_ms']):.3g})"
            )
        r["gain_ms"] = raw


def order(rows: list[dict]) -> list[dict]:
    """Roots by gain_ms descending (unknown gains last, rule order kept), each root's symptoms after it."""

    def k(r):
        g = r.get("gain_ms")
        return (g is None, -(g or 0.0))

    roots = sorted([r for r in rows if r["symptom_of"] is None], key=k)
    out = []
    for root in roots:
        out.append(root)
        out.extend(sorted([r for r in rows if r["symptom_of"] == root["id"]], key=k))
    return out


def severity(row: dict) -> str:
    share = row.get("gain_share")
    if share is None:
        return row.get("severity") or "medium"
    return "high" if share >= GAIN_HIGH else "medium" if share >= GAIN_MEDIUM else "low"


def _finish(r: dict, step: float | None) -> None:
    """Gain share, severity, basis, and the knob as JSON with its predicted step (roots only)."""
    r["gain_share"] = r["gain_ms"] / step if r["gain_ms"] is not None and step else None
    r["severity"] = severity(r)
    if r["basis"] is None:
        r["basis"] = "not estimated"
    if r["try"] is not None:
        if r["predicted_step_ms"] is None and step is not None and r["gain_ms"] is not None and r["symptom_of"] is None:
            r["predicted_step_ms"] = step - r["gain_ms"]
        r["try"] = json.dumps(r["try"], sort_keys=True)


def rank(rules: Iterable[Rule], tables: dict, summary: dict, budget: dict) -> pd.DataFrame:
    """Run `rules`; one row per finding (ADVICE_COLUMNS), with its gain drawn from `budget`, ordered causes first by
    gain, each root's symptoms after it."""
    rules = list(rules)
    rows = collect(rules, tables or {}, summary or {})
    if not rows:
        return pd.DataFrame(columns=ADVICE_COLUMNS)
    link(rows, {rule.id: rule.folds for rule in rules})
    account(rows, budget)
    step = step_ms(summary)
    for r in rows:
        _finish(r, step)
    df = pd.DataFrame(order(rows), columns=ADVICE_COLUMNS)
    df["stage"] = pd.array([None if s is None or pd.isna(s) else int(s) for s in df["stage"]], dtype="Int64")
    for c in ("gain_ms", "gain_share", "predicted_step_ms"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df.reset_index(drop=True)
