"""`perfbench tune`'s terminal output: the best settings and gain, the trials, axis importance, the
explanation of the best against the default, and where the wall time went. Reads the answer only."""

from __future__ import annotations

from analyzers.catalogue import format_value, metric, unit_label


def _settings(s: dict, keys: list[str]) -> list[str]:
    return [str(s.get(k, "")) for k in keys]


def render(out, ans: dict, results) -> None:
    from rich.table import Table

    obj = ans["objective"]
    m = metric(obj)
    unit = unit_label(obj)
    keys = [k for k in (ans["trials"][0]["settings"] if ans["trials"] else {}) if k not in ("workload", "repeat")]
    varied = [k for k in keys if len({str(t["settings"].get(k)) for t in ans["trials"]}) > 1] or keys
    best_id = (ans["best"] or {}).get("run_id")

    t = Table(title=f"tune {ans['study']}: {len(ans['trials'])} trials, {m.label} ({ans['direction']})")
    for col in ["#", "status", *varied, f"{m.label}", "steps", "run"]:
        t.add_column(col, justify="right" if col in ("#", "steps", m.label) else "left", no_wrap=True)
    for tr in ans["trials"]:
        status = {"failed": "[red]failed[/red]", "pruned": "[yellow]pruned[/yellow]"}.get(tr["status"], tr["status"])
        mark = (
            " [bold green]best[/bold green]" if tr["run_id"] == best_id else (" default" if tr["number"] == 0 else "")
        )
        t.add_row(
            str(tr["number"]),
            status + mark,
            *_settings(tr["settings"], varied),
            format_value(obj, tr["value"]),
            str(tr["steps"]),
            tr["run_id"],
        )
    out.print(t)

    if ans["best"] is None:
        out.print("[red]no trial finished[/red]: see the failed trials' errors with `perfbench show RUN`")
        return
    best = ans["best"]
    gain = ans.get("gain")
    dflt = ans.get("default") or {}
    chosen = ", ".join(f"{k}={best['settings'].get(k)}" for k in varied)
    out.print(
        f"[bold]best[/bold]: {chosen} → "
        f"{format_value(obj, best['value'])} {unit}"
        + (
            f", {gain * 100:+.1f}% vs the default ({format_value(obj, dflt.get('value'))} {unit})"
            if gain is not None
            else ""
        )
    )
    conf = ans.get("confirmation") or {}
    if conf.get("candidates"):
        out.print(
            f"confirmed: the best {len(conf['candidates'])} trials re-measured {conf['rounds']} times each, "
            "interleaved; the best has the best median of its trial and these runs:"
        )
        for c in conf["candidates"]:
            vals = ", ".join(format_value(obj, v) for v in c["values"]) or (
                "unsteady, not counted: the trial's value alone" if c.get("unconfirmed") else "no value"
            )
            mark = " [bold green]← best[/bold green]" if c["number"] == conf.get("pick") else ""
            point = ", ".join(f"{k}={c['settings'].get(k)}" for k in varied)
            out.print(  # \\[: a bracket, not rich markup (which would swallow "[unsteady, ...]")
                f"  trial {c['number']} ({point}): "
                f"trial {format_value(obj, c['trial_value'])}, re-measured \\[{vals}], median "
                f"{format_value(obj, c['median'])} {unit}{mark}"
            )
    else:
        if ans.get("confirmation_skipped"):
            out.print(f"not confirmed ({ans['confirmation_skipped']}): the best is the best single trial")
        if ans.get("finalist_value") is not None:
            out.print(
                f"the best re-measured (its profiled re-run {ans['finalist']}): "
                f"{format_value(obj, ans['finalist_value'])} {unit}"
            )
    if ans["importance"]:
        imp = ", ".join(f"{k} {v:.2f}" for k, v in sorted(ans["importance"].items(), key=lambda kv: -kv[1]))
        out.print(f"importance (PED-ANOVA): {imp}")
    elif ans.get("importance_note"):
        out.print(f"importance: not computed ({ans['importance_note']})")

    _explanation(out, ans.get("explanation"))
    w = ans.get("wall_split") or {}
    if w.get("wall_s"):
        share = w.get("training_share")
        out.print(
            f"wall time {w['wall_s']:.0f} s: runs {w['runs_wall_s']:.0f} s (start-up {w['startup_s']:.0f} s, "
            f"training steps {w['training_s']:.0f} s, after {w['after_s']:.0f} s); training steps are "
            f"{format_value('pct', share)} of the search's wall time"
        )
    out.print(
        f"results stored in {results}; `perfbench ls --sweep {ans['study']} --results {results}`, "
        f"the dashboard's Tuning page"
    )


def _explanation(out, ex: dict | None) -> None:
    """Why the best beats the default: the settings that differ, the breakdown's and the collectives' changes."""
    if ex:
        out.print(f"why the best beats the default (perfbench compare {ex['a']} {ex['b']}):")
        diff = [
            f"{d['key'].split('.')[-1]} {d['a']} → {d['b']}"
            for d in ex.get("settings_diff") or []
            if d["key"].startswith("settings.")
        ]
        if diff:
            per_step = any(d.startswith("batch_size ") for d in diff)
            out.print(
                f"  settings: {', '.join(diff)}"
                + (" (the breakdown below is per step: the batch differs)" if per_step else "")
            )
        for r in ex.get("breakdown") or []:
            if r.get("delta_ms") is not None:
                out.print(
                    f"  {r['part']:<32} {r['a_ms']:8.1f} → {r['b_ms']:8.1f} ms per rank-step ({r['delta_ms']:+.1f})"
                )
        for r in ex.get("collectives") or []:
            out.print(
                f"  {r['op']:<32} count {format_value('num', r.get('count_a'))} → "
                f"{format_value('num', r.get('count_b'))}, "
                f"bytes {format_value('bytes', r.get('bytes_a'))} → {format_value('bytes', r.get('bytes_b'))}, "
                f"time {format_value('num', r.get('time_ms_a'))} → {format_value('num', r.get('time_ms_b'))} ms per "
                "rank-step"
            )
