"""`perfbench check`: did the current run/sweep regress against a saved baseline?

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
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from analyzers.catalogue import CHECK_DEFAULT
from perfbench.regress.baseline import load_baseline, resolve_target, run_entry
from analyzers.stats import mann_whitney_p, welch_ci
from perfbench.regress.compare import METRICS, findings, top_findings
from perfbench.errors import UserError
from perfbench.store import FINISHED, Store

DEFAULT_METRICS = CHECK_DEFAULT  # the catalogue's `check` field
REQUIRED = ("throughput", "step_time_s")
IGNORED_SETTINGS = ("repeat",)
MIN_SAMPLES = 3

VERDICTS = ("regression", "improvement", "unchanged", "undecided", "skipped")


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


def _median(v):
    return float(np.median(v)) if len(v) else None


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


def decide_metric(metric: str, base: list[dict], cur: list[dict], threshold: float, alpha: float) -> dict:
    higher, unit, kind = METRICS.get(metric, (False, "", "ratio"))
    res = {"metric": metric, "unit": unit, "higher_is_better": higher, "threshold": threshold}

    def side(entries):
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

    bp, bm, bs = side(base)
    cp, cm, cs = side(cur)
    if len(bp) < MIN_SAMPLES or len(cp) < MIN_SAMPLES:  # fall back to one value per repeat
        if len(bs) >= MIN_SAMPLES and len(cs) >= MIN_SAMPLES:
            bp, cp, bm, cm = bs, cs, bs, cs
            res["basis"] = "repeats"
        else:
            if not (bp or bs) and not (cp or cs):
                res.update(verdict="skipped", reason="measured by neither side")
            elif not (bp or bs) or not (cp or cs):
                which = "baseline" if not (bp or bs) else "current"
                res.update(
                    verdict="undecided" if metric in REQUIRED else "skipped", reason=f"not measured in the {which}"
                )
            else:
                res.update(
                    verdict="undecided",
                    reason=f"too few samples (baseline {max(len(bp), len(bs))}, current {max(len(cp), len(cs))}; "
                    f"need {MIN_SAMPLES})",
                )
            res.update(baseline=_median(bp or bs), current=_median(cp or cs), change=None, p_value=None)
            return res
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
    if significant and worse > used:
        verdict = "regression"
    elif significant and worse < -used:
        verdict = "improvement"
    else:
        verdict = "unchanged"
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
    reason = []
    if not significant:
        reason.append(f"p={p:.3g} ≥ {alpha}" if p is not None else "no test")
    if abs(worse) <= used:
        reason.append(f"|change| ≤ {used * 100:.1f}{'pt' if kind == 'share' else '%'}")
    res["reason"] = (
        "; ".join(reason)
        if verdict == "unchanged"
        else (
            f"p={p:.3g} < {alpha}, {'worse' if worse > 0 else 'better'} by {abs(worse) * 100:.1f}"
            f"{'pt' if kind == 'share' else '%'} > {used * 100:.1f}{'pt' if kind == 'share' else '%'}"
        )
    )
    return res


AB_METRICS = ("step_time_s", "step_cpu_s")
MIN_PAIRS = 3


def decide_paired(metric: str, pairs: list[tuple[float | None, float | None]], threshold: float, alpha: float) -> dict:
    """`check --ab`: the verdict for one metric from the (baseline, candidate) values of interleaved run pairs.

    d_i = ln(candidate_i / baseline_i), turned so that > 0 = worse (throughput: ln(baseline_i / candidate_i));
    pairs missing a side or with a value <= 0 are left out. With n >= MIN_PAIRS pairs: mean d, its standard
    error s / sqrt(n), a two-sided one-sample t-test of mean d = 0 (df = n - 1), the effect exp(mean d) (the
    geometric mean of the per-pair ratios) with its (1 - alpha) interval exp(mean d +- t_{1-alpha/2} s/sqrt(n)),
    and the Wilcoxon signed-rank p (reported; with n <= 5 it cannot go below 0.0625). Verdict: regression =
    p < alpha and exp(mean d) - 1 > threshold; improvement = p < alpha and exp(-mean d) - 1 > threshold;
    otherwise unchanged; fewer than MIN_PAIRS usable pairs: undecided. Load that drifts over the job moves both
    runs of a pair alike and cancels in d_i; load that changes within a pair is noise the t-test sees."""
    from scipy import stats

    higher, unit, _ = METRICS.get(metric, (False, "", "ratio"))
    res = {
        "metric": metric,
        "unit": unit,
        "higher_is_better": higher,
        "threshold": threshold,
        "alpha": alpha,
        "change_kind": "relative",
        "basis": "pairs",
    }
    ok = [(b, c) for b, c in pairs if b is not None and c is not None and b > 0 and c > 0]
    res.update(
        n_pairs=len(ok),
        pairs_left_out=len(pairs) - len(ok),
        baseline=float(np.median([b for b, _ in ok])) if ok else None,
        current=float(np.median([c for _, c in ok])) if ok else None,
    )
    if len(ok) < MIN_PAIRS:
        return dict(
            res, verdict="undecided", change=None, p_value=None, reason=f"{len(ok)} complete pair(s); need {MIN_PAIRS}"
        )
    d = np.array([math.log(b / c) if higher else math.log(c / b) for b, c in ok])
    n, mean = len(d), float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    tq = float(stats.t.ppf(1 - alpha / 2, n - 1))
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    try:
        p_w = float(stats.wilcoxon(d).pvalue) if np.any(d != 0) else 1.0
    except ValueError:
        p_w = None
    worse = math.exp(mean) - 1.0 if mean >= 0 else -(math.exp(-mean) - 1.0)
    lo, hi = math.exp(mean - tq * se), math.exp(mean + tq * se)
    # change of the metric itself (candidate / baseline - 1), as in `check`; worse_by is turned by direction
    ratio = math.exp(-mean) if higher else math.exp(mean)
    ci = (1 / hi - 1, 1 / lo - 1) if higher else (lo - 1, hi - 1)
    significant = p < alpha
    if significant and worse > threshold:
        verdict = "regression"
    elif significant and worse < -threshold:
        verdict = "improvement"
    else:
        verdict = "unchanged"
    res.update(
        verdict=verdict,
        change=ratio - 1.0,
        change_ci=list(ci),
        worse_by=worse,
        mean_log_ratio=mean,
        sd_log_ratio=sd,
        t=None if se == 0 else mean / se,
        p_value=p,
        p_wilcoxon=p_w,
        threshold_used=threshold,
    )
    why = []
    if not significant:
        why.append(f"paired t p={p:.3g} ≥ {alpha}")
    if abs(worse) <= threshold:
        why.append(f"|change| {abs(worse) * 100:.1f}% ≤ {threshold * 100:g}%")
    res["reason"] = (
        "; ".join(why)
        if verdict == "unchanged"
        else (
            f"paired t p={p:.3g} < {alpha}, {'worse' if worse > 0 else 'better'} by {abs(worse) * 100:.1f}% > "
            f"{threshold * 100:g}% over {n} pairs"
        )
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
            vs = [m["verdict"] for m in grp["metrics"]]
            grp["status"] = (
                "regression"
                if "regression" in vs
                else "undecided"
                if "undecided" in vs
                else "improvement"
                if "improvement" in vs
                else "unchanged"
            )
            # what to fix first in the current run: the same ranked advice as show / advise
            grp["advice"] = {
                "run_id": ok[0]["run_id"],
                "top": top_findings(findings(store, store.get_run(ok[0]["run_id"]))),
            }
        results.append(grp)
    statuses = [g["status"] for g in results]
    compared = [s for s in statuses if s != "no-baseline"]
    if "regression" in statuses:
        verdict, code = "regression", 1
    elif not compared:
        verdict, code = "undecided", 2
    elif "undecided" in statuses:
        verdict, code = "undecided", 2
    else:
        verdict, code = ("improvement" if "improvement" in statuses else "unchanged"), 0
    return {
        "verdict": verdict,
        "exit_code": code,
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


# ---- output --------------------------------------------------------------------------------

ICON = {
    "regression": "❌ regression",
    "improvement": "✅ improvement",
    "unchanged": "✔ unchanged",
    "undecided": "⚠ undecided",
    "skipped": "– skipped",
    "no-baseline": "– no baseline",
    "no-history": "– too little history",
}


def _settings_label(s: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items())) or "(no settings)"


def _v(x):
    if x is None:
        return "–"
    return f"{x:.4g}"


def _chg(m):
    if m.get("change") is None:
        return "–"
    if m.get("change_kind") == "points":
        return f"{m['change'] * 100:+.1f}pt"
    return f"{m['change'] * 100:+.1f}%"


def to_markdown(res: dict) -> str:
    exit_line = f"\nExit code {res['exit_code']} (0 no regression, 1 regression, 2 could not decide).\n"
    if res.get("baseline") is None and res.get("history"):  # --history without --baseline
        return (
            f"## perfbench check: {ICON.get(res['verdict'], res['verdict'])}\n\n"
            + history_markdown(res["history"])
            + exit_line
        )
    b = res["baseline"]
    lines = [
        f"## perfbench check: {ICON.get(res['verdict'], res['verdict'])}",
        "",
        f"Baseline `{b['name']}` ({(b.get('source') or {}).get('kind')} `{(b.get('source') or {}).get('id')}`) vs "
        f"current {res['current']['kind']} `{res['current']['id']}`; threshold {res['threshold'] * 100:g}% "
        f"(raised to the repeat-to-repeat noise when larger), Mann–Whitney p < {res['alpha']}.",
        "",
    ]
    lines += [
        "| settings | metric | baseline (median) | current (median) | change | threshold used | p | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in res["groups"]:
        label = _settings_label(g["settings"])
        if not g["metrics"]:
            lines.append(
                f"| {label} | – | – | – | – | – | – | {ICON.get(g['status'], g['status'])}"
                f"{': ' + g['reason'] if g.get('reason') else ''} |"
            )
            continue
        for m in g["metrics"]:
            if m["verdict"] == "skipped":
                continue
            thr = m.get("threshold_used")
            thr_s = "–" if thr is None else f"{thr * 100:.1f}{'pt' if m.get('change_kind') == 'points' else '%'}"
            p = m.get("p_value")
            lines.append(
                f"| {label} | {m['metric']} | {_v(m.get('baseline'))} | {_v(m.get('current'))} | {_chg(m)} | "
                f"{thr_s} | {'–' if p is None else f'{p:.2g}'} | {ICON[m['verdict']]}"
                f"{' (' + m['reason'] + ')' if m['verdict'] in ('undecided',) and m.get('reason') else ''} |"
            )
    lines.append("")
    for g in res["groups"]:
        if g.get("settings_differ"):
            lines.append(
                "Note: compared runs differ in settings: "
                + ", ".join(f"{k}: {a} → {c}" for k, (a, c) in g["settings_differ"].items())
            )
        if g.get("failed_runs"):
            lines.append(f"Note: failed current runs left out: {', '.join(g['failed_runs'])}")
        top = (g.get("advice") or {}).get("top")
        if top and g.get("status") in ("regression", "undecided"):
            t = top[0]
            gain = "gain unknown" if t.get("gain_ms") is None else f"saves ~{t['gain_ms']:.3g} ms/step"
            lines.append(f"Top finding in {g['advice']['run_id']} ({gain}): {t['message']}")
    if res["current"]["unfinished_runs"]:
        lines.append(f"Note: unfinished current runs left out: {', '.join(res['current']['unfinished_runs'])}")
    if res["unmatched_baseline_groups"]:
        um = res["unmatched_baseline_groups"]
        lines.append(
            f"{len(um)} baseline settings group(s) not in the current results"
            + (": " + "; ".join(_settings_label(s) for s in um[:3]) + ("; ..." if len(um) > 3 else ""))
        )
    if res.get("history"):
        lines += ["", history_markdown(res["history"])]
    lines.append(exit_line)
    return "\n".join(lines)


def to_junit(res: dict) -> str:
    cases = []
    n_fail = n_err = n_skip = 0
    for g in res["groups"]:
        cls = "perfbench.regress.check." + (_settings_label(g["settings"]).replace(" ", ""))
        if not g["metrics"]:
            body = ""
            if g["status"] == "undecided":
                n_err += 1
                body = f"<error message={quoteattr(g.get('reason', 'undecided'))}/>"
            else:
                n_skip += 1
                body = f"<skipped message={quoteattr(g['status'])}/>"
            cases.append(f'<testcase classname={quoteattr(cls)} name="all">{body}</testcase>')
            continue
        for m in g["metrics"]:
            msg = (
                f"{m['metric']}: baseline {_v(m.get('baseline'))} current {_v(m.get('current'))} change {_chg(m)}"
                f" ({m.get('reason', '')})"
            )
            if m["verdict"] == "regression":
                n_fail += 1
                body = (
                    f"<failure message={quoteattr(msg)} "
                    f'type="regression">{escape(json.dumps(m, default=str))}</failure>'
                )
            elif m["verdict"] == "undecided":
                n_err += 1
                body = f'<error message={quoteattr(msg)} type="undecided"/>'
            elif m["verdict"] == "skipped":
                n_skip += 1
                body = f"<skipped message={quoteattr(m.get('reason', 'skipped'))}/>"
            else:
                body = f"<system-out>{escape(msg)}</system-out>"
            cases.append(f"<testcase classname={quoteattr(cls)} name={quoteattr(m['metric'])}>{body}</testcase>")
    if res.get("history"):
        hc, hf, hs = history_junit_cases(res["history"])
        cases, n_fail, n_skip = cases + hc, n_fail + hf, n_skip + hs
    head = (
        f'<testsuite name="perfbench-check" tests="{len(cases)}" failures="{n_fail}" errors="{n_err}" '
        f'skipped="{n_skip}">'
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>' + head + "".join(cases) + "</testsuite></testsuites>\n"
    )


# ---- --history: the current results against the metric's history (perfbench.regress.history) ----------------

MIN_HISTORY = 3  # reference points the prediction test needs
GATE_STATISTIC = (
    "per run: 10th percentile of the per-step samples on the good side (perfbench.regress.history.gate_value)"
)


def judge_series(
    ser, current_entry: str, metric: str, *, threshold: float, alpha: float, permutations: int = 200
) -> dict:
    """Verdict for the current entry's points at the end of one series (perfbench.regress.history.Series).

    Each run is one point, valued by its gate value (perfbench.regress.history.gate_value: the 10% fastest steps),
    so a run that neighbours slowed in bursts still shows its own speed.

    1. E-Divisive over every point with a value; each change point is reported (where it began, size,
       confidence). If the segment holding the current points began at a change point that made the
       metric worse (better) by more than `threshold` (E-Divisive keeps a change point only when its permutation
       test gives p <= alpha): regression (improvement), began at that point's commit/run.
    2. Otherwise the current points against the history part of their own segment: regression when the
       Student-t prediction test (changepoint.prediction_p) AND the per-pair Mann–Whitney test on the
       per-step samples both give p < alpha and the current median is worse by more than `threshold`.
    """
    from perfbench.regress.changepoints import e_divisive, prediction_p, segments

    from analyzers.catalogue import metric as catalogued

    m = catalogued(metric)  # direction and unit: the metric catalogue
    higher, unit = m.better == "higher", m.unit
    from perfbench.regress.history import gate_value

    gates = {id(p): gate_value(p.value, p.samples, m.better) for p in ser.points}
    pts = [p for p in ser.points if gates[id(p)] is not None and gates[id(p)] > 0]
    cur = [p for p in pts if p.entry_id == current_entry]
    res = {
        "settings": ser.settings,
        "key": ser.key,
        "metric": metric,
        "unit": unit,
        "higher_is_better": higher,
        "points": len(pts),
        "current_points": len(cur),
        "change_points": [],
        "statistic": GATE_STATISTIC,
    }
    if not cur:
        return dict(res, verdict="skipped", reason="not measured in the current results")
    vals = [gates[id(p)] for p in pts]

    def worse_by(ratio: float) -> float:  # > 0 worse, < 0 better, as in decide_metric
        f = 1.0 / ratio if higher else ratio
        return f - 1.0 if f >= 1 else -(1.0 / f - 1.0)

    cps = e_divisive(vals, alpha=alpha, permutations=permutations)
    for c in cps:
        p = pts[c.index]
        res["change_points"].append(
            {
                "index": c.index,
                "began_at": p.ref,
                "commit": p.commit,
                "entry_id": p.entry_id,
                "run_id": p.run_id,
                "before": c.before,
                "after": c.after,
                "ratio": c.ratio,
                "worse_by": worse_by(c.ratio),
                "confidence": c.confidence,
            }
        )
    start, _ = segments(len(vals), cps)[-1]
    first_cur = len(pts) - len(cur)
    cur_vals = vals[first_cur:]
    res["current"] = float(np.median(cur_vals))
    if start > 0:
        cp = res["change_points"][-1]
        if abs(cp["worse_by"]) > threshold:  # E-Divisive kept it: its permutation test gave p <= alpha
            verdict = "regression" if cp["worse_by"] > 0 else "improvement"
            return dict(
                res,
                verdict=verdict,
                reference=cp["before"],
                change=cp["ratio"] - 1.0,
                worse_by=cp["worse_by"],
                began_at=cp["began_at"],
                began_commit=cp["commit"],
                began_run=cp["run_id"],
                confidence=cp["confidence"],
                method="e-divisive",
                reason=f"change point at {cp['began_at']}: {'worse' if cp['worse_by'] > 0 else 'better'} by "
                f"{abs(cp['worse_by']) * 100:.1f}% > {threshold * 100:g}%, confidence {cp['confidence']:.2f}",
            )
    # reference: the history part of the segment holding the last earlier point
    ref_start = max([a for a, _ in segments(len(vals), cps) if a < first_cur] or [0])
    ref_pts = pts[ref_start:first_cur]
    if len(ref_pts) < MIN_HISTORY:
        return dict(
            res,
            verdict="no-history",
            reason=f"{len(ref_pts)} earlier point(s) in the current segment; need {MIN_HISTORY}",
        )
    ref_vals = [gates[id(p)] for p in ref_pts]
    reference = float(np.median(ref_vals))
    ratio = res["current"] / reference
    p_pred = prediction_p(ref_vals, cur_vals, higher_is_better=higher)
    p_mw = mann_whitney_p([x for p in ref_pts for x in p.samples], [x for p in cur for x in p.samples])
    w = worse_by(ratio)
    p_better = prediction_p(ref_vals, cur_vals, higher_is_better=not higher)
    res.update(
        reference=reference,
        reference_points=len(ref_pts),
        change=ratio - 1.0,
        worse_by=w,
        p_value=p_pred,
        p_mann_whitney=p_mw,
        method="prediction",
        began_at=cur[0].ref,
        began_commit=cur[0].commit,
        began_run=cur[0].run_id,
    )
    # metrics without per-step samples in the store (perfbench.regress.compare.step_samples) are judged by the
    # prediction test alone
    no_samples = not any(p.samples for p in ref_pts) or not any(p.samples for p in cur)
    sig_mw = no_samples or (p_mw is not None and p_mw < alpha)
    if w > threshold and p_pred is not None and p_pred < alpha and sig_mw:
        res.update(verdict="regression", confidence=1 - p_pred)
    elif w < -threshold and p_better is not None and p_better < alpha and sig_mw:
        res.update(verdict="improvement", confidence=1 - p_better)
    else:
        res["verdict"] = "unchanged"
    why = []
    if abs(w) <= threshold:
        why.append(f"|change| {abs(w) * 100:.1f}% ≤ {threshold * 100:g}%")
    pp = p_pred if w >= 0 else p_better
    if pp is None or pp >= alpha:
        why.append(f"prediction p={'–' if pp is None else f'{pp:.3g}'} ≥ {alpha}")
    if not sig_mw:
        why.append(f"Mann–Whitney p={'–' if p_mw is None else f'{p_mw:.3g}'} ≥ {alpha}")
    res["reason"] = (
        "; ".join(why)
        if res["verdict"] == "unchanged"
        else (
            f"{'worse' if w > 0 else 'better'} by {abs(w) * 100:.1f}% than the {len(ref_pts)} points since "
            f"{ref_pts[0].ref}; prediction p={pp:.3g}" + ("" if p_mw is None else f", Mann–Whitney p={p_mw:.3g}")
        )
    )
    return res


def run_history_check(
    store: Store,
    current: str,
    *,
    baseline_name: str | None = None,
    label: str | None = None,
    commit: str | None = None,
    threshold: float = 0.05,
    alpha: float = 0.05,
    metrics=DEFAULT_METRICS,
    ignore=IGNORED_SETTINGS,
    permutations: int = 200,
    history_metrics=None,
) -> dict:
    """`perfbench check --history`: record the current results in the history, judge them against it
    (judge_series per configuration x metric) and, with a baseline, also run the per-pair check.
    Exit code: 1 if either judged a regression; else the per-pair check's code when a baseline was given;
    else 2 if no configuration had enough history, else 0. `history_metrics` (default: `metrics`) are the
    metrics judged against the history, `metrics` those of the per-pair check."""
    from analyzers.catalogue import METRICS as CATALOGUE
    from perfbench.regress import history

    history_metrics = tuple(history_metrics or metrics)
    unknown = [m for m in history_metrics if m not in CATALOGUE or CATALOGUE[m].better is None]
    if unknown:
        raise UserError(
            f"cannot judge metric(s) {', '.join(unknown)} against the history; known metrics with a "
            f"direction: {', '.join(k for k, v in CATALOGUE.items() if v.better)}"
        )
    pair = (
        run_check(store, baseline_name, current, threshold=threshold, alpha=alpha, metrics=metrics, ignore=ignore)
        if baseline_name
        else None
    )
    entry = history.record(store, current, via="check", label=label, commit=commit)
    past = [e for e in history.entries(store) if e["entry_id"] != entry["entry_id"]]
    judged = []
    for m in history_metrics:
        for ser in history.series(past + [entry], m, ignore=ignore):
            if any(p.entry_id == entry["entry_id"] for p in ser.points):
                judged.append(
                    judge_series(ser, entry["entry_id"], m, threshold=threshold, alpha=alpha, permutations=permutations)
                )
    vs = [j["verdict"] for j in judged]
    compared = [v for v in vs if v in ("regression", "improvement", "unchanged")]
    hist_verdict = (
        "regression"
        if "regression" in vs
        else "no-history"
        if not compared
        else "improvement"
        if "improvement" in vs
        else "unchanged"
    )
    out = {
        "entry": {k: entry[k] for k in ("entry_id", "ref", "commit", "label", "time", "machine", "source")},
        "entries": len(past) + 1,
        "verdict": hist_verdict,
        "threshold": threshold,
        "alpha": alpha,
        "permutations": permutations,
        "results": judged,
    }
    if pair is not None:
        res = dict(pair, history=out)
        if hist_verdict == "regression" and res["verdict"] != "regression":
            res.update(verdict="regression", exit_code=1)
        return res
    code = 1 if hist_verdict == "regression" else 2 if hist_verdict == "no-history" else 0
    return {
        "verdict": hist_verdict,
        "exit_code": code,
        "baseline": None,
        "current": {"kind": entry["source"]["kind"], "id": current, "unfinished_runs": []},
        "threshold": threshold,
        "alpha": alpha,
        "groups": [],
        "unmatched_baseline_groups": [],
        "history": out,
        "checked_at": time.time(),
    }


def history_markdown(h: dict) -> str:
    e = h["entry"]
    lines = [
        f"### History: {ICON.get(h['verdict'], h['verdict'])}",
        "",
        f"Current `{e['ref']}` against {h['entries'] - 1} earlier entr{'y' if h['entries'] == 2 else 'ies'}: "
        f"E-Divisive change points (permutation test, alpha {h['alpha']}) and, within the current segment, "
        f"a Student-t prediction test with the per-step Mann–Whitney test; threshold {h['threshold'] * 100:g}%.",
        "",
        "| settings | metric | points | reference (median) | current (median) | change | p / confidence | began at | "
        "verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for j in h["results"]:
        if j["verdict"] == "skipped":
            continue
        chg = "–" if j.get("change") is None else f"{j['change'] * 100:+.1f}%"
        conf = (
            f"conf {j['confidence']:.2f}"
            if j.get("confidence") is not None
            else f"p={j['p_value']:.2g}"
            if j.get("p_value") is not None
            else "–"
        )
        began = j.get("began_at") if j["verdict"] in ("regression", "improvement") else "–"
        lines.append(
            f"| {j['key']} | {j['metric']} | {j['points']} | {_v(j.get('reference'))} | {_v(j.get('current'))} | "
            f"{chg} | {conf} | {began} | {ICON.get(j['verdict'], j['verdict'])}"
            f"{' (' + j['reason'] + ')' if j['verdict'] == 'no-history' else ''} |"
        )
    cps = [(j, c) for j in h["results"] for c in j.get("change_points", [])]
    if cps:
        lines += ["", "Change points in the history:"]
        lines += [
            f"- {j['key']} · {j['metric']}: at `{c['began_at']}` ({c['run_id']}), {_v(c['before'])} → {_v(c['after'])} "
            f"({(c['ratio'] - 1) * 100:+.1f}%), confidence {c['confidence']:.2f}"
            for j, c in cps
        ]
    return "\n".join(lines) + "\n"


def history_junit_cases(h: dict) -> tuple[list[str], int, int]:
    cases, n_fail, n_skip = [], 0, 0
    for j in h["results"]:
        cls = "perfbench.regress.history." + j["key"].replace(" ", "")
        msg = f"{j['metric']}: {j.get('reason', j['verdict'])}"
        if j["verdict"] == "regression":
            n_fail += 1
            body = f'<failure message={quoteattr(msg)} type="regression">{escape(json.dumps(j, default=str))}</failure>'
        elif j["verdict"] in ("skipped", "no-history"):
            n_skip += 1
            body = f"<skipped message={quoteattr(msg)}/>"
        else:
            body = f"<system-out>{escape(msg)}</system-out>"
        cases.append(f"<testcase classname={quoteattr(cls)} name={quoteattr(j['metric'])}>{body}</testcase>")
    return cases, n_fail, n_skip
