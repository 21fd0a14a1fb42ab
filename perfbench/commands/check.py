"""`perfbench check --baseline N --current RUN|SWEEP [--threshold 5%]`: per metric, did the current
result regress, improve or stay unchanged against the baseline, taking noise into account (Mann-Whitney U
on per-step samples plus an effect-size threshold raised to the repeat-to-repeat noise; see docs/check.md).
With `--history` the current result is also recorded in the results' history (its commit, time and
machine) and judged against the metric's series per configuration: E-Divisive change points plus a
prediction test of the newest runs (docs/check.md); `--baseline` is then optional.
With `--ab CONFIG` (no saved baseline) the baseline (the config's one point) and the candidate (the same with
`--set KEY=VALUE` overrides), or two commands (`--baseline-cmd`, `--candidate-cmd`, e.g. two checkouts), run
alternately in this job, pair after pair (AB, BA, AB, ...), and the verdict comes from the per-pair ratios
(paired t-test on their logs plus the threshold): load that changes during the job cancels (docs/check.md).
Exit 0 no regression, 1 regression, 2 could not decide / bad input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from analyzers.catalogue import AB_DEFAULT, CHECK_DEFAULT
from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="CI regression check against a saved baseline (exit 0/1/2)", description=__doc__
    )
    p.add_argument(
        "--baseline", metavar="NAME", help="baseline saved with `perfbench baseline save` (required unless --history)"
    )
    p.add_argument(
        "--current",
        metavar="RUN|SWEEP",
        help="sweep id, or a run (its id, the short id `perfbench ls` shows, or a unique prefix) to check",
    )
    p.add_argument("--threshold", default="5%", help="smallest change that counts (default 5%%; shares: points)")
    p.add_argument(
        "--alpha", type=float, default=0.05, help="significance level of the Mann-Whitney test (default 0.05)"
    )
    p.add_argument(
        "--metric",
        action="append",
        dest="metrics",
        metavar="NAME",
        help=f"metric to check (repeatable; default: {', '.join(CHECK_DEFAULT)}; with --ab: {', '.join(AB_DEFAULT)})",
    )
    p.add_argument(
        "--ignore-setting",
        action="append",
        default=[],
        metavar="KEY",
        help="setting to leave out when matching runs (repeat is always left out)",
    )
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one test case per settings group x metric)")
    p.add_argument(
        "--summary",
        metavar="FILE",
        help="also append the Markdown summary to FILE (default: $GITHUB_STEP_SUMMARY when set)",
    )
    _add_history_args(p)
    _add_ab_args(p.add_argument_group("interleaved A/B (--ab)"))
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def _add_history_args(p) -> None:
    p.add_argument(
        "--history",
        action="store_true",
        help="record the current result in the history and judge it against the series per configuration "
        "(change points; see `perfbench history`)",
    )
    p.add_argument(
        "--history-metric",
        action="append",
        dest="history_metrics",
        metavar="NAME",
        help="with --history: metric to judge against the history (repeatable; default: the --metric "
        "list). E.g. step_cpu_s on a shared runner, where CPU time per step is far steadier than "
        "wall time (docs/check.md)",
    )
    p.add_argument(
        "--label",
        metavar="TEXT",
        help="with --history: name of this point (default: the git commit, "
        "from $PERFBENCH_COMMIT, $GITHUB_SHA or `git rev-parse HEAD`)",
    )
    p.add_argument(
        "--permutations",
        type=int,
        default=200,
        help="with --history: permutations of E-Divisive's significance test (default 200)",
    )


def _add_ab_args(ab) -> None:
    ab.add_argument(
        "--ab",
        nargs="?",
        const="",
        default=None,
        metavar="CONFIG",
        help="run baseline and candidate alternately in this job and decide on the paired differences; "
        "CONFIG is a sweep config with one point (the baseline); omit it with --baseline-cmd/"
        "--candidate-cmd",
    )
    ab.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --ab CONFIG: the candidate's difference (repeatable), e.g. inject.busy_ms=4, "
        "world_size=2, comm_fusion=all; none: an A/A job (what the gate does with no change)",
    )
    ab.add_argument(
        "--baseline-cmd",
        metavar="CMD",
        help="with --ab: a shell command that adds one baseline run to "
        "--results (it gets $PERFBENCH_RESULTS, $PERFBENCH_AB_SIDE, "
        "$PERFBENCH_AB_PAIR)",
    )
    ab.add_argument(
        "--candidate-cmd", metavar="CMD", help="with --ab: the same for the candidate (e.g. from another checkout)"
    )
    ab.add_argument("--pairs", type=int, default=5, help="with --ab: pairs of runs (default 5; at least 3)")
    ab.add_argument(
        "--remeasure",
        type=int,
        default=2,
        help="with --ab: pairs measured again because a run failed or was unsteady, at most (default 2)",
    )


def run(args) -> int:
    from perfbench.regress.check import DEFAULT_METRICS, IGNORED_SETTINGS, parse_threshold, run_check
    from perfbench.regress.history import run_history_check
    from perfbench.views.check_report import to_junit, to_markdown
    from perfbench.store import Store

    if not (0 < args.alpha < 1):
        raise UserError(f"bad --alpha {args.alpha}: must be between 0 and 1")
    if args.ab is not None:
        return run_ab_cli(args)
    if args.sets or args.baseline_cmd or args.candidate_cmd:
        raise UserError("--set, --baseline-cmd and --candidate-cmd only apply with --ab")
    if not args.current:
        raise UserError("give --current RUN|SWEEP (or --ab CONFIG to measure both sides in this job)")
    if not args.history and not args.baseline:
        raise UserError("give --baseline NAME, or --history to judge against the recorded history")
    if (args.label or args.permutations != 200 or args.history_metrics) and not args.history:
        raise UserError("--label, --permutations and --history-metric only apply with --history")
    if not (10 <= args.permutations <= 10000):
        raise UserError(f"bad --permutations {args.permutations}: must be between 10 and 10000")
    store = Store(args.results, create=False)
    common = dict(
        threshold=parse_threshold(args.threshold),
        alpha=args.alpha,
        metrics=tuple(args.metrics or DEFAULT_METRICS),
        ignore=tuple(IGNORED_SETTINGS) + tuple(args.ignore_setting),
    )
    if args.history:
        res = run_history_check(
            store,
            args.current,
            baseline_name=args.baseline,
            label=args.label,
            permutations=args.permutations,
            history_metrics=tuple(args.history_metrics) if args.history_metrics else None,
            **common,
        )
    else:
        res = run_check(store, args.baseline, args.current, **common)
    return emit(args, res, to_markdown(res), to_junit(res))


def emit(args, res: dict, md: str, junit: str) -> int:
    for target, text in ((args.junit, junit), (args.summary or os.environ.get("GITHUB_STEP_SUMMARY"), md)):
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


def run_ab_cli(args) -> int:
    from perfbench.regress.ab import CommandSides, SettingsSides, run_ab
    from perfbench.regress.check import parse_threshold
    from perfbench.views.check_report import ab_markdown, to_junit
    from perfbench.run.config import load_config
    from perfbench.store import Store

    if args.baseline or args.current or args.history:
        raise UserError("--ab measures both sides itself: leave out --baseline, --current and --history")
    if args.pairs < 3 or args.pairs > 100:
        raise UserError(f"bad --pairs {args.pairs}: between 3 and 100")
    if args.remeasure < 0:
        raise UserError(f"bad --remeasure {args.remeasure}: 0 or more")
    if bool(args.baseline_cmd) != bool(args.candidate_cmd):
        raise UserError("give both --baseline-cmd and --candidate-cmd, or neither")
    if args.baseline_cmd:
        if args.ab or args.sets:
            raise UserError("--baseline-cmd/--candidate-cmd replace CONFIG and --set: give one or the other")
        sides, name = CommandSides(args.baseline_cmd, args.candidate_cmd), "cmd"
    else:
        if not args.ab:
            raise UserError(
                "--ab needs a CONFIG (a sweep config with one point), or --baseline-cmd and --candidate-cmd"
            )
        cfg = load_config(args.ab)
        sides, name = SettingsSides(cfg, args.sets), cfg.name
    store = Store(args.results)
    from analyzers.catalogue import METRICS as CATALOGUE

    metrics = tuple(args.metrics or AB_DEFAULT)
    bad = [m for m in metrics if m not in CATALOGUE or CATALOGUE[m].better is None]
    if bad:
        raise UserError(f"cannot judge metric(s) {', '.join(bad)} in an A/B job: need a metric with a direction")

    def progress(pair, side, rec):
        print(f"pair {pair} {side}: {rec.get('run_id')} {rec.get('status')}", file=sys.stderr, flush=True)

    res = run_ab(
        store,
        sides,
        pairs=args.pairs,
        remeasure=args.remeasure,
        threshold=parse_threshold(args.threshold),
        alpha=args.alpha,
        metrics=metrics,
        name=name,
        on_run=progress,
    )
    return emit(args, res, ab_markdown(res), to_junit(res))
