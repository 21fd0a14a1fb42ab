"""`perfbench check --baseline`: did the current run/sweep regress against a saved baseline?

The paired A/B decision is perfbench.regress.ab, the history gate perfbench.regress.history, the fold of verdicts
into one and its exit code perfbench.regress.verdict, the Markdown/JUnit output perfbench.views.check_report.

The rule (also in docs/check.md), per matched settings group and metric:

1. Samples: per-step values of the steady-state steps (perfbench.regress.compare.step_samples) of every run in the
   group, all repeats pooled; each repeat also gives its own median.
2. Effect: ratio of the pooled medians, turned so that > 1 = worse (throughput: baseline / current;
   step time, communication: current / baseline), so 2x slower steps and half the throughput weigh the
   same. Shares (comm_share) use the change in absolute points instead (5% threshold = 5 points).
3. Noise floor: when a side has ≥ 2 repeats, the ratio of its largest to smallest repeat median; when both
   sides have ≥ 2 repeats, also the factor by which run-to-run variation alone moves the mean of the log
   repeat medians (two-sided t bound at alpha, pooled over both sides: between_run_margin). The factor used
   is max(1 + --threshold, those). So repeat-to-repeat noise that was already visible never counts as a change.
4. Test: two-sided Mann–Whitney U on the pooled per-step samples, significant when p < alpha (0.05).
5. Verdict: regression = significant and effect > factor used; improvement = significant and
   1 / effect > factor used; otherwise unchanged. Fewer than 3 samples on a side (and fewer than 3
   repeats to fall back on), a metric that only one side measured when it is required (throughput,
   step_time_s), or a group whose current runs all failed: undecided.

Exit code: 1 if any metric regressed, else 2 if anything was undecided or nothing matched, else 0.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

from analyzers.catalogue import CHECK_DEFAULT
from perfbench.regress.baseline import load_baseline, resolve_target, run_entry
from analyzers.stats import mann_whitney_p, welch_ci
from analyzers.stats import median
from perfbench.regress.compare import METRICS, findings, top_findings
from perfbench.regress.verdict import decide, exit_code, fold, reason
from perfbench.errors import UserError
from perfbench.store import FINISHED, Store

DEFAULT_METRICS = CHECK_DEFAULT  # the catalogue's `check` field
REQUIRED = ("throughput", "step_time_s")
IGNORED_SETTINGS = ("repeat",)
MIN_SAMPLES = 3


def parse_threshold(text: str | float) -> float:
    """'5%', '5', '0.05' → 0.05. Values ≥ 1 without % are read as percent."""
    s = str(text).strip()
    try:
        if s.endswith("%"):
            v = float(s[:-1]) / 100
        else:
            v = float(s)
            if v >= 1:
                v /= 100
    except ValueError:
        raise UserError(f"bad --threshold {text!r}: give a percentage such as 5% or 0.05") from None
    if not (0 < v < 10) or math.isnan(v):
        raise UserError(f"bad --threshold {text!r}: must be a positive percentage")
    return v


def group_key(settings: dict, ignore=IGNORED_SETTINGS) -> tuple:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in settings.items() if k not in ignore))


@dataclass
class Group:
    settings: dict
    entries: list = field(default_factory=list)


def groups_of(entries: list[dict], ignore=IGNORED_SETTINGS) -> list[Group]:
    out: dict[tuple, Group] = {}
    for e in entries:
        k = group_key(e["settings"], ignore)
        out.setdefault(k, Group({kk: vv for kk, vv in e["settings"].items() if kk not in ignore})).entries.append(e)
    return list(out.values())


def _agree(a: dict, b: dict) -> bool:
    common = set(a) & set(b)
    return all(a[k] == b[k] for k in common)


def match_groups(base: list[Group], cur: list[Group], direct: bool) -> list[tuple[Group | None, Group]]:
    """Pair each current group with the baseline group whose settings agree on every common key."""
    if direct and len(base) == 1 and len(cur) == 1:
        return [(base[0], cur[0])]
    pairs = []
    for c in cur:
        cands = [b for b in base if _agree(b.settings, c.settings)]
        exact = [b for b in cands if b.settings == c.settings]
        if len(exact) == 1:
            pairs.append((exact[0], c))
        elif len(cands) == 1:
            pairs.append((cands[0], c))
        else:
            pairs.append((None, c) if not cands else ("ambiguous", c))
    return pairs


def between_run_margin(base_medians: list[float], cur_medians: list[float], alpha: float, *, log: bool) -> float:
    """How far apart the two sides' mean repeat medians may lie from run-to-run variation alone (on the log
    scale for ratio metrics, in points for shares): t_{1-alpha/2, df} * s * sqrt(1/n_b + 1/n_c), s = the pooled
    standard deviation of the repeat medians around their own side's mean, df = n_b + n_c - 2. The steps of
    one run are not independent samples of the configuration (a run shares its machine state), so the
    per-step test alone cannot know this spread. 0 unless both sides have >= 2 repeats (df >= 2)."""
    from scipy import stats

    b, c = ([math.log(v) for v in m if v > 0] if log else list(m) for m in (base_medians, cur_medians))
    if len(b) < 2 or len(c) < 2:
        return 0.0
    df = len(b) + len(c) - 2
    ss = sum((x - float(np.mean(m))) ** 2 for m in (b, c) for x in m)
    return float(stats.t.ppf(1 - alpha / 2, df)) * math.sqrt(ss / df) * math.sqrt(1 / len(b) + 1 / len(c))


def _side(entries: list[dict], metric: str) -> tuple[list[float], list[float], list[float]]:
    """One side's per-step samples pooled over its repeats, each repeat's median, each repeat's stored value."""
    pooled, rep_meds, summary = [], [], []
    for e in entries:
        s = (e.get("samples") or {}).get(metric) or []
        s = [float(x) for x in s if x is not None and not (isinstance(x, float) and math.isnan(x))]
        if s:
            pooled += s
            rep_meds.append(float(np.median(s)))
        v = (e.get("metrics") or {}).get(metric)
        if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
            summary.append(float(v))
    return pooled, rep_meds, summary


def _unmeasured(res: dict, metric: str, base: tuple[list, list], cur: tuple[list, list]) -> dict:
    """The result when a side has too few samples and too few repeats: skipped or undecided, with the reason."""
    (bp, bs), (cp, cs) = base, cur
    if not (bp or bs) and not (cp or cs):
        res.update(verdict="skipped", reason="measured by neither side")
    elif not (bp or bs) or not (cp or cs):
        which = "baseline" if not (bp or bs) else "current"
        res.update(verdict="undecided" if metric in REQUIRED else "skipped", reason=f"not measured in the {which}")
    else:
        res.update(
            verdict="undecided",
            reason=f"too few samples (baseline {max(len(bp), len(bs))}, current {max(len(cp), len(cs))}; "
            f"need {MIN_SAMPLES})",
        )
    res.update(baseline=median(bp or bs), current=median(cp or cs), change=None, p_value=None)
    return res


def decide_metric(metric: str, base: list[dict], cur: list[dict], threshold: float, alpha: float) -> dict:
    higher, unit, kind = METRICS.get(metric, (False, "", "ratio"))
    res = {"metric": metric, "unit": unit, "higher_is_better": higher, "threshold": threshold}

    bp, bm, bs = _side(base, metric)
    cp, cm, cs = _side(cur, metric)
    if len(bp) < MIN_SAMPLES or len(cp) < MIN_SAMPLES:  # fall back to one value per repeat
        if len(bs) >= MIN_SAMPLES and len(cs) >= MIN_SAMPLES:
            bp, cp, bm, cm = bs, cs, bs, cs
            res["basis"] = "repeats"
        else:
            return _unmeasured(res, metric, (bp, bs), (cp, cs))
    else:
        res["basis"] = "steps"
    mb, mc = float(np.median(bp)), float(np.median(cp))
    if kind == "share":
        change = mc - mb
        noise = max([(max(m) - min(m)) for m in (bm, cm) if len(m) >= 2] or [0.0])
        noise = max(noise, between_run_margin(bm, cm, alpha, log=False))
    else:
        if mb == 0:  # e.g. no communication on one rank: a relative change is undefined
            if mc == 0:
                res.update(
                    verdict="unchanged",
                    reason="0 on both sides",
                    baseline=mb,
                    current=mc,
                    change=0.0,
                    change_kind="relative",
                    p_value=None,
                    threshold_used=threshold,
                    n_baseline=len(bp),
                    n_current=len(cp),
                )
            else:
                res.update(
                    verdict="undecided" if metric in REQUIRED else "skipped",
                    reason="baseline median is 0: relative change undefined",
                    baseline=mb,
                    current=mc,
                    change=None,
                    p_value=None,
                )
            return res
        change = (mc - mb) / abs(mb)
    if kind == "share":
        worse = -change if higher else change
        used = max(threshold, noise)
    else:
        # ratios, so that "2x slower step" and "half the throughput" weigh the same (a relative change of a
        # higher-is-better metric cannot go below -100%, its inverse can grow without bound)
        ratio = mc / mb if mb > 0 and mc >= 0 else 1.0 + change
        worse_factor = (1.0 / ratio if ratio > 0 else math.inf) if higher else ratio
        noise_factor = max([max(m) / min(m) for m in (bm, cm) if len(m) >= 2 and min(m) > 0] or [1.0])
        noise_factor = max(noise_factor, math.exp(between_run_margin(bm, cm, alpha, log=True)))
        used_factor = max(1.0 + threshold, noise_factor)
        worse = (worse_factor - 1.0) if worse_factor >= 1 else -(1.0 / worse_factor - 1.0)
        used = used_factor - 1.0
        noise = noise_factor - 1.0
    p = mann_whitney_p(bp, cp)
    ci = welch_ci(bp, cp)
    significant = p is not None and p < alpha
    verdict = decide(significant, worse, used)
    res.update(
        verdict=verdict,
        baseline=mb,
        current=mc,
        change=change,
        change_kind="points" if kind == "share" else "relative",
        worse_by=worse,
        noise_floor=noise,
        threshold_used=used,
        p_value=p,
        alpha=alpha,
        n_baseline=len(bp),
        n_current=len(cp),
        repeats_baseline=len(bm),
        repeats_current=len(cm),
        ci_mean_diff=list(ci) if ci else None,
    )
    unit = "pt" if kind == "share" else "%"
    res["reason"] = reason(
        verdict,
        None if significant else (f"p={p:.3g} ≥ {alpha}" if p is not None else "no test"),
        f"|change| ≤ {used * 100:.1f}{unit}" if abs(worse) <= used else None,
        lambda: (
            f"p={p:.3g} < {alpha}, {'worse' if worse > 0 else 'better'} by {abs(worse) * 100:.1f}{unit} > "
            f"{used * 100:.1f}{unit}"
        ),
    )
    return res


def run_check(
    store: Store,
    baseline_name: str,
    current: str,
    *,
    threshold: float = 0.05,
    alpha: float = 0.05,
    metrics=DEFAULT_METRICS,
    ignore=IGNORED_SETTINGS,
) -> dict:
    baseline = load_baseline(store, baseline_name)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise UserError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    kind, recs = resolve_target(store, current)
    cur_entries = [run_entry(store, r) for r in recs if r.get("status") in FINISHED]
    unfinished = [r["run_id"] for r in recs if r.get("status") not in FINISHED]
    base_groups = groups_of(baseline["runs"], ignore)
    cur_groups = groups_of(cur_entries, ignore)
    direct = baseline.get("source", {}).get("kind") == "run" and kind == "run"
    results = []
    for b, c in match_groups(base_groups, cur_groups, direct):
        grp = {"settings": c.settings, "current_runs": [e["run_id"] for e in c.entries], "metrics": []}
        ok = [e for e in c.entries if e["status"] == "ok"]
        failed = [e for e in c.entries if e["status"] != "ok"]
        if b is None:
            grp.update(status="no-baseline", baseline_runs=[])
        elif b == "ambiguous":
            grp.update(
                status="undecided",
                reason="settings match several baseline groups (use --ignore-setting)",
                baseline_runs=[],
            )
        elif not ok:
            grp.update(
                status="undecided",
                baseline_runs=[e["run_id"] for e in b.entries],
                reason="every current run failed: "
                + "; ".join(f"{e['run_id']}: {str(e.get('error'))[:160]}" for e in failed),
            )
        else:
            grp.update(baseline_runs=[e["run_id"] for e in b.entries], baseline_settings=b.settings)
            if direct and b.settings != c.settings:
                grp["settings_differ"] = {
                    k: [b.settings.get(k), c.settings.get(k)]
                    for k in sorted(set(b.settings) | set(c.settings))
                    if b.settings.get(k) != c.settings.get(k)
                }
            if failed:
                grp["failed_runs"] = [e["run_id"] for e in failed]
            grp["metrics"] = [decide_metric(m, b.entries, ok, threshold, alpha) for m in metrics]
            grp["status"] = fold(m["verdict"] for m in grp["metrics"])
            # what to fix first in the current run: the same ranked advice as show / advise
            grp["advice"] = {
                "run_id": ok[0]["run_id"],
                "top": top_findings(findings(store, store.get_run(ok[0]["run_id"]))),
            }
        results.append(grp)
    verdict = fold((g["status"] for g in results if g["status"] != "no-baseline"), empty="undecided")
    return {
        "verdict": verdict,
        "exit_code": exit_code(verdict),
        "baseline": {"name": baseline["name"], "source": baseline.get("source"), "created": baseline.get("created")},
        "current": {"kind": kind, "id": current, "unfinished_runs": unfinished},
        "threshold": threshold,
        "alpha": alpha,
        "groups": results,
        "unmatched_baseline_groups": [
            g.settings for g in base_groups if not any(g is b for b, _ in match_groups(base_groups, cur_groups, direct))
        ],
        "checked_at": time.time(),
    }
