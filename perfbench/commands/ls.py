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
    p.add_argument("--sweeps", action="store_true", help="list the sweep ids (with their runs and dates) instead")
    p.add_argument("--wide", action="store_true", help="every column, even where the table is wider than the terminal")
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
    if args.sweeps:
        return _sweeps(records, args.json)
    rows = summarize(records, context=everything)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        console().print(f"no runs in {store.root}" + (f" for sweep {args.sweep}" if args.sweep else ""))
        return 0
    out = console(wide=args.wide)
    out.print(render_table(rows, title=f"{len(rows)} runs in {store.root}", wide=args.wide, width=out.width))
    return 0


def _sweeps(records: list[dict], as_json: bool) -> int:
    """One row per sweep id: its runs, how many finished ok, when it started."""
    import time

    from perfbench.views.results import console

    by: dict[str, list[dict]] = {}
    for r in records:
        if r.get("sweep_id"):
            by.setdefault(r["sweep_id"], []).append(r)
    rows = []
    for sid, runs in sorted(by.items()):
        started = min(((r.get("timings") or {}).get("started") or 0 for r in runs), default=0)
        rows.append(
            {
                "sweep_id": sid,
                "runs": len(runs),
                "ok": sum(r.get("status") == "ok" for r in runs),
                "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else None,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table

    t = Table(title=f"{len(rows)} sweeps")
    for col in ("sweep id", "runs", "ok", "started"):
        t.add_column(col, justify="right" if col in ("runs", "ok") else "left", no_wrap=col != "sweep id")
    for r in rows:
        t.add_row(r["sweep_id"], str(r["runs"]), str(r["ok"]), r["started"] or "-")
    console().print(t)
    return 0
