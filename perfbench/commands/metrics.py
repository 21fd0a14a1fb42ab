"""`perfbench metrics`: the metric catalogue (analyzers/catalogue.py) — every metric's unit, direction and
definition."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg


def register(sub) -> None:
    p = sub.add_parser(
        "metrics",
        help="list every metric perfbench reports, with unit, direction and definition",
        description="Print the metric catalogue: the one definition of every run-level metric that "
        "ls, show, compare, check and the dashboard report (name, unit, whether higher or "
        "lower is better, exact definition, how ranks and steps are aggregated).",
    )
    add_json_arg(p)
    p.add_argument(
        "--markdown", action="store_true", help="print the catalogue as the Markdown table of docs/concepts.md"
    )
    p.set_defaults(func=run)


def markdown() -> str:
    from analyzers.catalogue import catalogue_json

    lines = ["| metric | unit | better | definition | aggregation | steps |", "|---|---|---|---|---|---|"]
    for m in catalogue_json():
        lines.append(
            f"| `{m['name']}` | {m['unit']} | {m['better'] or '-'} | {m['definition']} | {m['aggregation']} "
            f"| {m['basis']} |"
        )
    return "\n".join(lines)


def run(args) -> int:
    from analyzers.catalogue import BASES, catalogue_json

    if args.json:
        print(json.dumps(catalogue_json(), indent=2))
        return 0
    if args.markdown:
        print(markdown())
        return 0
    from rich.table import Table

    from perfbench.views.results import console

    t = Table(title="perfbench metrics (analyzers/catalogue.py)", show_lines=True)
    for col in ("metric", "unit", "better", "definition"):
        t.add_column(col, overflow="fold")
    for m in catalogue_json():
        t.add_row(
            m["name"],
            m["unit"],
            m["better"] or "-",
            f"{m['definition']} [dim]({m['aggregation']}; over: {BASES[m['basis']]})[/dim]",
        )
    console().print(t)
    return 0
