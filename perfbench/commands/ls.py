"""`perfbench ls`: the runs in the store, one row each, with their key metrics."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.records import STATUSES, Records


def register(sub) -> None:
    p = sub.add_parser(
        "ls",
        help="list stored runs with settings and key metrics",
        description="List the runs in the store: settings, throughput, step time, time split, "
        "communication share, kernel utilization and scaling efficiency.",
    )
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--sweep", help="only runs of this sweep id")
    p.add_argument("--status", choices=STATUSES, help="only runs with this status")
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.views.results import console, render_table, summarize

    store = Records(args.results, create=False)  # run records only: no tables, no pandas
    everything = store.list_runs()
    records = [
        r
        for r in everything
        if (not args.sweep or r.get("sweep_id") == args.sweep) and (not args.status or r.get("status") == args.status)
    ]
    rows = summarize(records, context=everything)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        console().print(f"no runs in {store.root}" + (f" for sweep {args.sweep}" if args.sweep else ""))
        return 0
    console().print(render_table(rows, title=f"{len(rows)} runs in {store.root}"))
    return 0
