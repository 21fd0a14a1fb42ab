"""`perfbench check --baseline N --current RUN|SWEEP [--threshold 5%]`: per metric, did the current
result regress, improve or stay unchanged against the baseline, taking noise into account (Mann-Whitney U
on per-step samples plus an effect-size threshold raised to the repeat-to-repeat noise; see docs/check.md).
With `--history` the current result is also recorded in the results' history (its commit, time and
machine) and judged against the metric's series per configuration: E-Divisive change points plus a
prediction test of the newest runs (docs/check.md); `--baseline` is then optional.
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
    p.add_argument("--baseline", metavar="NAME",
                   help="baseline saved with `perfbench baseline save` (required unless --history)")
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
    p.add_argument("--history", action="store_true",
                   help="record the current result in the history and judge it against the series per configuration "
                        "(change points; see `perfbench history`)")
    p.add_argument("--history-metric", action="append", dest="history_metrics", metavar="NAME",
                   help="with --history: metric to judge against the history (repeatable; default: the --metric "
                        "list). E.g. step_cpu_s on a shared runner, where CPU time per step is far steadier than "
                        "wall time (docs/check.md)")
    p.add_argument("--label", metavar="TEXT", help="with --history: name of this point (default: the git commit, "
                                                   "from $PERFBENCH_COMMIT, $GITHUB_SHA or `git rev-parse HEAD`)")
    p.add_argument("--permutations", type=int, default=200,
                   help="with --history: permutations of E-Divisive's significance test (default 200)")
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.check import (DEFAULT_METRICS, IGNORED_SETTINGS, parse_threshold, run_check, run_history_check,
                                 to_junit, to_markdown)
    from perfbench.store import Store

    if not (0 < args.alpha < 1):
        raise UserError(f"bad --alpha {args.alpha}: must be between 0 and 1")
    if not args.history and not args.baseline:
        raise UserError("give --baseline NAME, or --history to judge against the recorded history")
    if (args.label or args.permutations != 200 or args.history_metrics) and not args.history:
        raise UserError("--label, --permutations and --history-metric only apply with --history")
    if not (10 <= args.permutations <= 10000):
        raise UserError(f"bad --permutations {args.permutations}: must be between 10 and 10000")
    store = Store(args.results, create=False)
    common = dict(threshold=parse_threshold(args.threshold), alpha=args.alpha, metrics=tuple(args.metrics or DEFAULT_METRICS),
                  ignore=tuple(IGNORED_SETTINGS) + tuple(args.ignore_setting))
    if args.history:
        res = run_history_check(store, args.current, baseline_name=args.baseline, label=args.label,
                                permutations=args.permutations,
                                history_metrics=tuple(args.history_metrics) if args.history_metrics else None, **common)
    else:
        res = run_check(store, args.baseline, args.current, **common)
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
