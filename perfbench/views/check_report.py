"""Rendering of `perfbench check`'s results (baseline, --ab, --history): Markdown for people and CI summaries,
JUnit XML for CI test reports. The decisions are in perfbench.regress (check, ab, history, verdict)."""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr


ICON = {
    "regression": "❌ regression",
    "improvement": "✅ improvement",
    "unchanged": "✔ unchanged",
    "undecided": "⚠ undecided",
    "skipped": "– skipped",
    "no-baseline": "– no baseline",
    "no-history": "– too little history",
}


def settings_label(s: dict) -> str:
    """A settings group as `k=v, ...` (sorted by key)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items())) or "(no settings)"


def val(x):
    """A number to 4 significant digits; – when unknown."""
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
        label = settings_label(g["settings"])
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
                f"| {label} | {m['metric']} | {val(m.get('baseline'))} | {val(m.get('current'))} | {_chg(m)} | "
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
            + (": " + "; ".join(settings_label(s) for s in um[:3]) + ("; ..." if len(um) > 3 else ""))
        )
    if res.get("history"):
        lines += ["", history_markdown(res["history"])]
    lines.append(exit_line)
    return "\n".join(lines)


def to_junit(res: dict) -> str:
    cases = []
    n_fail = n_err = n_skip = 0
    for g in res["groups"]:
        cls = "perfbench.regress.check." + (settings_label(g["settings"]).replace(" ", ""))
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
                f"{m['metric']}: baseline {val(m.get('baseline'))} current {val(m.get('current'))} change {_chg(m)}"
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
            f"| {j['key']} | {j['metric']} | {j['points']} | {val(j.get('reference'))} | {val(j.get('current'))} | "
            f"{chg} | {conf} | {began} | {ICON.get(j['verdict'], j['verdict'])}"
            f"{' (' + j['reason'] + ')' if j['verdict'] == 'no-history' else ''} |"
        )
    cps = [(j, c) for j in h["results"] for c in j.get("change_points", [])]
    if cps:
        lines += ["", "Change points in the history:"]
        lines += [
            f"- {j['key']} · {j['metric']}: at `{c['began_at']}` ({c['run_id']}), "
            f"{val(c['before'])} → {val(c['after'])} ({(c['ratio'] - 1) * 100:+.1f}%), confidence {c['confidence']:.2f}"
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


def ab_markdown(res: dict) -> str:
    g = res["groups"][0]
    differ = {
        k: (g["baseline_settings"].get(k), g["settings"].get(k))
        for k in sorted(set(g["baseline_settings"]) | set(g["settings"]))
        if g["baseline_settings"].get(k) != g["settings"].get(k)
    }
    lines = [
        f"## perfbench check --ab: {ICON.get(res['verdict'], res['verdict'])}",
        "",
        f"Job `{res['job']}`: baseline (A) and candidate (B) run alternately, {len(g['current_runs'])} pairs "
        f"(order AB, BA, ...). Per pair the ratio B / A of each run's 10% fastest steps; paired t-test on the "
        f"log ratios, p < {res['alpha']}, threshold {res['threshold'] * 100:g}%.",
        "",
        "Candidate differs in: "
        + (", ".join(f"{k}: {a} → {b}" for k, (a, b) in differ.items()) or "nothing")
        + f" (baseline: {settings_label(g['baseline_settings'])}).",
        "",
        f"| metric | A (median of runs) | B (median of runs) | change (geo. mean of pair ratios) | "
        f"{int((1 - res['alpha']) * 100)}% interval | pairs | p (t / Wilcoxon) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in g["metrics"]:
        chg = "–" if m.get("change") is None else f"{m['change'] * 100:+.1f}%"
        ci = "–" if not m.get("change_ci") else f"{m['change_ci'][0] * 100:+.1f}% … {m['change_ci'][1] * 100:+.1f}%"
        p = (
            "–"
            if m.get("p_value") is None
            else f"{m['p_value']:.2g}" + ("" if m.get("p_wilcoxon") is None else f" / {m['p_wilcoxon']:.2g}")
        )
        lines.append(
            f"| {m['metric']} | {val(m.get('baseline'))} | {val(m.get('current'))} | {chg} | {ci} | "
            f"{m.get('n_pairs', 0)} | {p} | {ICON[m['verdict']]}"
            f"{' (' + m['reason'] + ')' if m['verdict'] == 'undecided' else ''} |"
        )
    lines += [
        "",
        "| pair | order | A run | B run | " + " | ".join(f"{m} A / B" for m in g_metrics(g)) + " | note |",
        "|---|---|---|---|" + "---|" * len(g_metrics(g)) + "---|",
    ]
    for r in res["pairs"]:
        vals = " | ".join(f"{val(r['values'][m][0])} / {val(r['values'][m][1])}" for m in g_metrics(g))
        note = "; ".join(f"{s}: {', '.join(w)}" for s, w in r["unsteady"].items())
        note = ("measured again: " if r.get("replaced") else "kept, unsteady: " if note else "") + note
        again = f" (again {r['attempt']})" if r["attempt"] else ""
        lines.append(
            f"| {r['pair']}{again} | {r['order']} | {r['baseline_run']} | {r['candidate_run']} | {vals} | "
            f"{note or '–'} |"
        )
    lines.append(f"\nExit code {res['exit_code']} (0 no regression, 1 regression, 2 could not decide).\n")
    return "\n".join(lines)


def g_metrics(g: dict) -> list[str]:
    return [m["metric"] for m in g["metrics"]]
