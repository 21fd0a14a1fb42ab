"""`perfbench check --baseline N --current RUN|SWEEP [--threshold 5%]`: per metric, did the current
result regress, improve or stay unchanged against the baseline, taking noise into account (Mann-Whitney U
on per-step samples plus an effect-size threshold raised to the repeat-to-repeat noise; see docs/check.md).
Exit 0 no regression, 1 regression, 2 could not decide / bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="CI regression check against a saved baseline (exit 0/1/2)",
                              description=__doc__)
    p.add_argument("--baseline", required=True, metavar="NAME", help="baseline saved with `perfbench baseline save`")
    p.add_argument("--current", required=True, metavar="RUN|SWEEP", help="sweep id, or a run (its id, the short id `perfbench ls` shows, or a unique prefix) to check")
    p.add_argument("--threshold", default="5%", help="smallest change that counts (default 5%%; shares: points)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the Mann-Whitney test (default 0.05)")
    p.add_argument("--metric", action="append", dest="metrics", metavar="NAME",
                   help="metric to check (repeatable; default: throughput, step_time_s, comm_share, "
                        "communication_not_overlapped_s)")
    p.add_argument("--ignore-setting", action="append", default=[], metavar="KEY",
                   help="setting to leave out when matching runs (repeat is always left out)")
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one test case per settings group x metric)")
    p.add_argument("--summary", metavar="FILE",
                   help="also append the Markdown summary to FILE (default: $GITHUB_STEP_SUMMARY when set)")
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.check import DEFAULT_METRICS, IGNORED_SETTINGS, parse_threshold, run_check, to_junit, to_markdown
    from perfbench.store import Store

    if not (0 < args.alpha < 1):
        raise UserError(f"bad --alpha {args.alpha}: must be between 0 and 1")
    store = Store(args.results, create=False)
    res = run_check(store, args.baseline, args.current, threshold=parse_threshold(args.threshold), alpha=args.alpha,
                    metrics=tuple(args.metrics or DEFAULT_METRICS),
                    ignore=tuple(IGNORED_SETTINGS) + tuple(args.ignore_setting))
    md = to_markdown(res)
    for target, text in ((args.junit, to_junit(res)), (args.summary or os.environ.get("GITHUB_STEP_SUMMARY"), md)):
        if target:
            try:
                path = Path(target)
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a" if target != args.junit else "w", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError as exc:
                raise UserError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(json.dumps(res, indent=2, default=str) if args.json else md)
    return res["exit_code"]
