"""`perfbench history [--config KEY] [--metric M]`: a metric's series per configuration, one point per
run of every checked (`check --history`) or baselined sweep/run, with its commit or label, time and
machine, and the change points E-Divisive finds in it. `--add RUN|SWEEP [--label L]` records a point
without checking it (e.g. to back-fill the history from earlier sweeps)."""

from __future__ import annotations

import json
import time

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "history", help="a metric's history per configuration, with its change points", description=__doc__
    )
    p.add_argument(
        "--config",
        metavar="KEY",
        help="only configurations whose config key starts with KEY or whose settings contain it (e.g. world_size=2)",
    )
    p.add_argument("--metric", default="throughput", metavar="M", help="metric (default throughput)")
    p.add_argument("--add", metavar="RUN|SWEEP", help="record this run or sweep as a new point (no check)")
    p.add_argument("--label", metavar="TEXT", help="with --add: name of the point (default: the git commit)")
    p.add_argument(
        "--ignore-setting",
        action="append",
        default=[],
        metavar="KEY",
        help="setting to leave out of the configuration (repeat is always left out), e.g. inject.delay_ms",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the change points (default 0.05)")
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.regress import history
    from analyzers.catalogue import METRICS
    from perfbench.store import Store

    if args.metric not in METRICS:
        raise UserError(f"unknown --metric {args.metric!r}; known: {', '.join(METRICS)}")
    if args.label and not args.add:
        raise UserError("--label only applies with --add")
    if not (0 < args.alpha < 1):
        raise UserError(f"bad --alpha {args.alpha}: must be between 0 and 1")
    store = Store(args.results, create=False)
    if args.add:
        e = history.record(store, args.add, via="history add", label=args.label)
        if not args.json:
            print(f"recorded {e['source']['kind']} {e['source']['id']} as {e['ref']} ({len(e['runs'])} run(s))")
    out = history.series_with_change_points(
        store, args.metric, config=args.config, ignore=("repeat", *args.ignore_setting), alpha=args.alpha
    )
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    if not out:
        print(
            f"no history in {store.root} yet: `perfbench check --history`, `perfbench baseline save` or "
            "`perfbench history --add SWEEP` record points"
        )
        return 0
    for d in out:
        starts = {c["index"]: c for c in d["change_points"]}
        print(
            f"{d['key']}  ({args.metric}, {len(d['points'])} points; value = run median, gate = 10% fastest "
            "steps, what change points and check --history judge)"
        )
        print(f"  {'time':<16}  {'ref':<14} {'run':<44} {'value':>10} {'gate':>10}")
        i = 0
        for p in d["points"]:
            mark = ""
            if p.get("gate") is not None:
                if i in starts:
                    c = starts[i]
                    mark = f"  <- change {(c['ratio'] - 1) * 100:+.1f}% (confidence {c['confidence']:.2f})"
                i += 1
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(p["time"]))
            val = "–" if p["value"] is None else f"{p['value']:.4g}"
            gate = "–" if p.get("gate") is None else f"{p['gate']:.4g}"
            print(f"  {when}  {p['ref']:<14} {p['run_id']:<44} {val:>10} {gate:>10}{mark}")
    return 0
