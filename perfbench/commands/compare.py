"""`perfbench compare RUN_A RUN_B`: throughput/step-time change with confidence intervals, breakdown,
kernel and collective deltas, settings that differ. A terminal report, verdict first; --markdown; --html FILE;
--json."""

from __future__ import annotations

import json
from pathlib import Path

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare two runs side by side (Markdown, --html, --json)", description=__doc__
    )
    p.add_argument(
        "run_a",
        metavar="RUN_A",
        help="reference run: its id, the short id `perfbench ls` shows (e.g. ws1-r0), or a unique prefix",
    )
    p.add_argument("run_b", metavar="RUN_B", help="run to compare, named the same way")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with the Plotly figures")
    p.add_argument("--top", type=int, default=10, help="kernel movers to list (default 10)")
    p.add_argument("--markdown", action="store_true", help="print the full report as Markdown instead")
    p.add_argument("--wide", action="store_true", help="every table column, even beyond the terminal's width")
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.regress.compare import compare_runs, to_html, to_markdown
    from perfbench.store import Store

    store = Store(args.results, create=False)
    cmp = compare_runs(store, args.run_a, args.run_b, top=args.top)
    if args.html:
        path = Path(args.html)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(to_html(cmp), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(cmp.to_dict(), indent=2, default=str))
    elif args.markdown:
        print(to_markdown(cmp))
    else:
        from perfbench.views.compare import render
        from perfbench.views.results import console

        render(console(wide=args.wide), cmp, wide=args.wide)
    if not args.json:
        if args.html:
            print(f"\nHTML report: {args.html}")
    return 0
