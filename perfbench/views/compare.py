"""What `perfbench compare A B` prints on a terminal: the verdict first, then the per-step metrics (the catalogue's
value, unit and change kind: a ratio in %, a share in points), the breakdown, the findings and the settings that
differ, each table fitted to the screen (perfbench.views.results.fit_columns). Markdown: `--markdown`."""

from __future__ import annotations

from analyzers.analyses.steadiness import unsteady_reasons
from analyzers.catalogue import METRICS, format_value, unit_label
from perfbench.views.results import dropped_note, fit_columns

#: significance level of the verdict
ALPHA = 0.05


def change_text(name: str, m: dict) -> str:
    """The change of a per-step metric's medians (compare's rows: `a`/`b`), as `change`."""
    return change(name, m.get("a"), m.get("b"))


def change(name: str, a, b) -> str:
    """A change as the catalogue says to show it: points for shares (kind "share"), % for ratios; none for a
    p-value or a metric outside the catalogue (a relative change of those means nothing)."""
    meta = METRICS.get(name)
    if a is None or b is None or meta is None or name.endswith("_p"):
        return "-"
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return "-"
    if meta.kind == "share":
        return f"{(b - a) * 100:+.1f}pt"
    return f"{(b - a) / a * 100:+.1f}%" if a else "-"


def value(name: str, v) -> str:
    """A value in its catalogue format with its unit (ms, %, MiB, ...)."""
    if name not in METRICS:
        return "-" if v is None else str(v)
    unit = unit_label(name)
    text = format_value(name, v)
    return text if text == "-" or unit in ("", "%") else f"{text} {unit}"


def verdict(cmp) -> str:
    """One line: is B faster or slower than A, by how much, and is it significant."""
    by = {m["metric"]: m for m in cmp.metrics}
    m = by.get("throughput") or by.get("step_time_s")
    if m is None or m.get("a") is None or m.get("b") is None:
        return "no per-step samples in both runs: no verdict (the tables below compare what the runs have)"
    name = m["metric"]
    a, b = m.get("a"), m.get("b")
    faster = (b > a) if name == "throughput" else (b < a)
    word = "as fast as" if a == b else ("faster than" if faster else "slower than")
    if m.get("p_value") is None:
        return (
            f"B is {word} A: {METRICS[name].label} {format_value(name, a)} -> "
            f"{format_value(name, b)} ({change_text(name, m)}; too few steps for a significance test)"
        )
    sig = m["p_value"] < ALPHA
    label = METRICS[name].label
    return (
        f"B is {word} A: {label} {format_value(name, a)} -> {format_value(name, b)} ({change_text(name, m)}, "
        f"medians over measured steps; p={m['p_value']:.2g}, "
        + ("significant" if sig else f"not significant at {ALPHA}")
        + ")"
    )


def render(console, cmp, wide: bool = False) -> None:
    from rich.table import Table

    width = None if wide else console.width
    console.print(f"[bold]Compare[/bold] A {cmp.a['run_id']}  ->  B {cmp.b['run_id']}", highlight=False)
    console.print(f"[bold]Verdict:[/bold] {verdict(cmp)}", highlight=False)
    from perfbench.views.run_numbers import input_problem_lines

    for side, rec in (("A", cmp.a), ("B", cmp.b)):
        for line in input_problem_lines(rec):
            console.print(f"[yellow]Missing or damaged input in {side}:[/yellow] {line}", highlight=False)
        why = unsteady_reasons(rec.get("metrics") or {})
        if why:
            console.print(f"[yellow]⚠ {side} not steady enough to compare:[/yellow] {'; '.join(why)}", highlight=False)

    def fitted(title, heads, rows):
        def build(cols):
            t = Table(title=title, title_justify="left", title_style="bold")
            for c in cols:
                t.add_column(heads[c], justify="left" if c == 0 else "right", no_wrap=c != 0)
            for r in rows:
                t.add_row(*[r[c] for c in cols])
            return t

        t, dropped = fit_columns(build, list(range(len(heads))), width, keep=2)
        if dropped:
            t.caption = dropped_note([heads[c] for c in dropped], "--wide, --markdown or --json")
        console.print(t)

    rows = []
    for m in cmp.metrics:
        name = m["metric"]
        if name not in METRICS:
            continue
        unit = unit_label(name)
        rows.append(
            [
                METRICS[name].label + ("" if unit in ("", "%") or unit in METRICS[name].label else f" ({unit})"),
                format_value(name, m.get("a")),
                format_value(name, m.get("b")),
                change_text(name, m),
                "-" if m.get("p_value") is None else f"{m['p_value']:.2g}",
                f"{m['n_a']}/{m['n_b']}",
            ]
        )
    if rows:
        fitted(
            "Per-step metrics (medians over each metric's steps: `perfbench metrics`)",
            ["metric", "A", "B", "change", "p", "steps A/B"],
            rows,
        )
    if cmp.breakdown:
        fitted(
            "Step breakdown (ms per step, profiled steps)",
            ["part", "A", "B", "change ms"],
            [
                [
                    r["part"],
                    format_value("ms", None if r["a_ms"] is None else r["a_ms"] / 1000),
                    format_value("ms", None if r["b_ms"] is None else r["b_ms"] / 1000),
                    "-" if r["delta_ms"] is None else f"{r['delta_ms']:+.1f}",
                ]
                for r in cmp.breakdown
            ],
        )
    moved = [r for r in cmp.advice if r.get("change") != "both"]
    if moved:
        fitted(
            "Findings that appeared or vanished",
            ["finding", "change", "gain A ms", "gain B ms"],
            [
                [
                    str(r["id"]),
                    str(r["change"]),
                    "-" if r.get("gain_a_ms") is None else f"{r['gain_a_ms']:.1f}",
                    "-" if r.get("gain_b_ms") is None else f"{r['gain_b_ms']:.1f}",
                ]
                for r in moved
            ],
        )
    if cmp.settings_diff:
        fitted(
            "Settings that differ",
            ["key", "A", "B"],
            [[str(r["key"]), str(r["a"]), str(r["b"])] for r in cmp.settings_diff],
        )
    console.print(
        "[dim]kernels, collectives and every run metric: --markdown, --html FILE or --json[/dim]", highlight=False
    )
